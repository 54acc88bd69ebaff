"""The submission service's counted attempts entered into the term's one record: nbgrader's gradebook and the
files its tools read beside it, written as `autograd-course grade` writes them.

nbgrader keeps one submission per student and assignment. Recording makes a student's counted service attempt
that submission, exactly as if `nbgrader collect` had brought it in and `grade` had graded it:
`submitted/<student>/<assignment>/` (the notebook and its timestamp.txt, which formgrader compares with the
gradebook's), `autograded/` (what formgrader opens), `feedback/` (what `nbgrader release_feedback` sends),
the gradebook's scores, timestamp and late penalty (`nbgrader export`), our `grades-<assignment>.csv` (and so
`autograd-course export`'s LMS files) and the class summary. A later `grade --roster` grades that same
notebook again, with the numbers the attempt was issued (written beside it: course/pipeline/numbers_label.py), so
the term and the service never hold two versions of a student.

The instructor chooses whom: `plan` lists who would change (and `differences` how each counted attempt differs
from the submission the term holds), and `record` writes only the changes it is given (the dashboard's ticked
students): nobody else's gradebook row or folders are touched, and their CSV row is written back as it was.

Every recording first keeps what it replaces under `gradebook-history/<assignment>/<n>/` (the three folders,
whatever is in their place, the gradebook's scores and times, the CSV row), so the last recording can be
undone. A student whose record already says what the service would write is left alone: recording twice with
nothing new changes nothing.

Each student is recorded on their own, so that one student's fault never stops or bends another's record: their
record kept, then their files written, then (only once the files are in place) their gradebook row. Any failure
for one student - a folder that cannot be kept or written, a notebook our writers cannot take, the gradebook
refusing the row - puts that student's files back and names them, with why; the others are recorded. A failure
of what every student shares (the gradebook's database, the CSV) puts everyone back.

A recording notes what it wrote as it goes (a fingerprint of each student's folders once they are in place, the
gradebook's rows as read back), and undo puts back only a student whose record is still what the recording
wrote, or what it found: one whose record changed since (a later `grade`, a hand grade in formgrader, a newer
collected submission) is left as it is, and undo names them. A recording that stopped half-way (its process
ended) is undone the same way, from its notes: what it had written is put back.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from course.core.config import AssignmentSettings, CourseConfig
from course.core.errors import CourseError
from course.core.files import (
    PRIVATE_FOLDER,
    PUBLIC,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    compact_json,
    locked,
    private_folders,
)
from course.core.text import safe_text, whole_number
from course.pipeline.assignment import load_course_assignment
from course.pipeline.feedback_model import Feedback
from course.pipeline.numbers_label import labelled_attempt, write_label
from course.pipeline.render import render_html
from course.pipeline.variants import course_secret
from course.term import nbgrader_layout, term_files
from course.term.gradebook import GradeRow, grades_csv_path, read_grades_csv, replace_grades_rows, write_grades_csv
from course.term.gradebook_writer import GradebookWriter
from course.term.item_analysis import item_settings
from course.term.nbgrader_bridge import Held, forget_submission, held_submissions
from course.term.nbgrader_term import feedback_page, released_to
from course.term.recording import write_class_summary

LOG = logging.getLogger(__name__)  # the instructor's: the traceback behind a student named as not recorded
HISTORY = "gradebook-history"
WROTE = "written.json"  # beside a student's kept folders: a fingerprint of what the recording put in their place
SAID = 300  # characters of a failure's own words in a sentence (the log has the rest)
SAME = 1e-9  # scores equal to within this are the same record


@dataclass(frozen=True)
class Counted:
    """A student's counted service attempt, as plain data."""

    student_id: str
    attempt: int  # the student's attempt number (1, 2, ...), as their page shows it
    attempt_id: int  # the service's id, to fetch the notebook
    submitted_at: datetime  # naive UTC
    status: str
    score: float
    late_penalty: float
    feedback: Feedback
    # Whose numbers it was graded with (variants.numbers_for(attempt=)): 1 the student's own, n > 1 attempt n's own
    # (fresh numbers). Recorded beside the notebook (numbers_label.py), so `grade` grades it with the same.
    numbers_attempt: int = 1


@dataclass(frozen=True)
class Change:
    """One student's record: what the term's record holds now, what recording writes, and why."""

    student_id: str
    before: Held | None
    after: Counted
    before_source: str  # "term", or the recording that wrote it ("recording 2")
    why: str

    @property
    def replaces_term_grade(self) -> bool:
        return self.before is not None and self.before_source == "term"


@dataclass(frozen=True)
class Recording:
    number: int
    recorded_at: str
    students: list[str]  # recorded; after an undo, the ones put back
    undone: bool
    refused: dict[str, str] = field(default_factory=dict)  # student -> why: not recorded, or left by the undo
    stopped: bool = False  # it never finished (its process ended): undo puts back what it had written

    @property
    def refused_text(self) -> str:
        return _reasons(self.refused)

    @property
    def label(self) -> str:
        return f"recording {self.number}"


def _history(config: CourseConfig, assignment_name: str) -> Path:
    return config.root / HISTORY / assignment_name


def _reasons(refused: dict[str, str]) -> str:
    """Students and why, for a sentence: "bob (why); carol (why)"."""
    return "; ".join(f"{student} ({why})" for student, why in sorted(refused.items()))


def recordings(config: CourseConfig, assignment_name: str) -> list[tuple[Recording, dict[str, Any]]]:
    """Every recording of the assignment, oldest first, with what it kept."""
    found = []
    folder = _history(config, assignment_name)
    for path in sorted(folder.glob("[0-9]*/recording.json")) if folder.is_dir() else []:
        number = whole_number(path.parent.name)
        if number is None:  # "1²" matches the pattern: a folder we never made, left as it is
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as problem:
            raise CourseError(
                f"{path} cannot be read ({problem or 'nested too deep'}); move it aside to record again"
            ) from None
        wrong = _recording_problem(data)
        if wrong:
            raise CourseError(f"{path} is not a recording this program wrote ({wrong}); move it aside to record again")
        found.append(
            (
                Recording(
                    number,
                    data["recorded_at"],
                    sorted(data["students"]),
                    bool(data.get("undone")),
                    data.get("refused", {}),
                    _stopped(data),
                ),
                data,
            )
        )
    return found


def _recording_problem(data: Any) -> str:
    """What makes `data` (a recording.json, read back: input like any other) not one `record` writes; "" if none."""
    if not isinstance(data, dict):
        return "not an object"
    if not isinstance(data.get("recorded_at"), str):
        return "no recorded_at time"
    students = data.get("students")
    if not isinstance(students, dict):
        return "no students"
    for student, entry in students.items():
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("written"), str)
            or "held" not in entry
            or "csv_row" not in entry
            or ("wrote" in entry and not isinstance(entry["wrote"], dict))
        ):
            return f"student {safe_text(str(student), 80)!r} has no entry of ours"
    for key in ("refused", "left_as_they_are"):
        if not isinstance(data.get(key, {}), dict):
            return f"{key} is not an object"
    return ""


def _stopped(data: dict[str, Any]) -> bool:
    """A standing recording that never finished. One of an earlier version (no "finished") finished when it had
    noted what it wrote for every student."""
    if data.get("undone"):
        return False
    return not data.get("finished", all("wrote" in entry for entry in data["students"].values()))


def _written_by(config: CourseConfig, assignment_name: str) -> dict[str, tuple[str, str]]:
    """{student: (the timestamp the latest standing recording wrote, its label)}."""
    written: dict[str, tuple[str, str]] = {}
    for recording, data in recordings(config, assignment_name):
        if not recording.undone:
            for student, entry in data["students"].items():
                written[student] = (entry["written"], recording.label)
    return written


def plan(config: CourseConfig, settings: AssignmentSettings, counted: list[Counted]) -> list[Change]:
    """Who would change if the counted attempts were recorded now, from what to what, and why."""
    held = held_submissions(
        config.gradebook_url, config.root / "gradebook.db", settings.name, Path(settings.notebook).stem
    )
    written = _written_by(config, settings.name)
    changes = []
    for one in sorted(counted, key=lambda c: c.student_id):
        before = held.get(one.student_id)
        unlabelled = _unlabelled(config, settings, one)
        if before is not None and _same(before, one) and not unlabelled:
            continue
        source = "term"
        if before is not None and one.student_id in written and written[one.student_id][0] == _stamp(before.timestamp):
            source = written[one.student_id][1]
        if before is not None and _same(before, one):
            why = f"attempt {one.attempt} is recorded, but not the numbers it was issued ({unlabelled})"
        elif before is None:
            why = f"nothing recorded yet; attempt {one.attempt} is the one that counts"
        elif source == "term":
            when = f"submitted {_shown(before.timestamp)}" if before.timestamp else "with no submission time"
            why = f"attempt {one.attempt} replaces the term's submission ({when})"
        else:
            why = f"attempt {one.attempt} now counts, in place of what {source} wrote"
        changes.append(Change(one.student_id, before, one, source, why))
    return changes


def _unlabelled(config: CourseConfig, settings: AssignmentSettings, counted: Counted) -> str:
    """Why the label beside the student's submitted notebook does not name the numbers the counted attempt was
    issued ("": it does): a recording of an earlier version wrote none, or it was changed since. Read unchecked,
    only to record again (grading checks it)."""
    found = labelled_attempt(config.root / "submitted" / counted.student_id / settings.name)
    if found == counted.numbers_attempt:
        return ""
    if found == 1:
        return "a recording of an earlier version left them out"
    return "the label there names others" if found is not None else "the label there cannot be read"


def differences(
    config: CourseConfig, settings: AssignmentSettings, changes: list[Change], notebook_of: Callable[[int], bytes]
) -> dict[str, str]:
    """{student: how their counted attempt differs from the submission the term's record holds}, in words: its
    score, and its notebook (the same file, or the same cells' sources with other outputs, is the same
    notebook), so the preview says who would really change. The notebook in submitted/ is read back as input:
    a link, a folder or a file past the notebook limit is not compared."""
    limit = config.limits.notebook_mb * 2**20
    said = {}
    for change in changes:
        before, after = change.before, change.after
        if before is None:
            said[change.student_id] = "no submission in the term's record yet"
            continue
        held = _bounded(config.root / "submitted" / change.student_id / settings.name / settings.notebook, limit)
        try:
            ours: bytes | None = notebook_of(after.attempt_id)
        except Exception:  # the service's copy cannot be read: said, and recording will name it
            LOG.warning("the notebook of attempt %s cannot be read", after.attempt_id, exc_info=True)
            ours = None
        score = (
            f"the same score ({after.score:g})"
            if abs(before.score - after.score) < SAME
            else f"another score ({before.score:g} in the term, {after.score:g} here)"
        )
        if held is None or ours is None:
            notebook = "no notebook in submitted/ to compare" if held is None else "the service's notebook unreadable"
        else:
            notebook = "the same notebook" if same_notebook(held, ours) else "another notebook"
        only_time = notebook == "the same notebook" and score.startswith("the same")
        said[change.student_id] = f"{score}, {notebook}{': only the submission time changes' if only_time else ''}"
    return said


def same_notebook(one: bytes, other: bytes) -> bool:
    """The same file, or the same cells (type and source) with other outputs or metadata: the same answers."""
    if one == other:
        return True
    cells = [_cells(one), _cells(other)]
    return cells[0] is not None and cells[0] == cells[1]


def _cells(notebook: bytes) -> list[tuple[str, str]] | None:
    try:
        data = json.loads(notebook)
    except (ValueError, RecursionError):
        return None
    found = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(found, list):
        return None
    cells = []
    for cell in found:
        source = cell.get("source") if isinstance(cell, dict) else None
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            source = "".join(source)
        if not isinstance(source, str):
            return None
        cells.append((str(cell.get("cell_type")), source))
    return cells


def _bounded(path: Path, limit: int) -> bytes | None:
    """A regular file's bytes, up to `limit` (None: a link, a pipe or anything else, too large, or unreadable).
    Opened without following a link and without waiting on a pipe, then checked to be a file."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(handle, "rb") as stream:
        try:
            if not stat.S_ISREG(os.fstat(handle).st_mode):
                return None
            data = stream.read(limit + 1)
        except OSError:
            return None
    return data if len(data) <= limit else None


def _same(before: Held, after: Counted) -> bool:
    return (
        before.timestamp == after.submitted_at
        and abs(before.score - after.score) < SAME
        and abs(before.late_penalty - after.late_penalty) < SAME
    )


def _stamp(moment: datetime | None) -> str:
    """nbgrader's timestamp.txt format (naive UTC)."""
    return f"{moment:%Y-%m-%d %H:%M:%S.%f} UTC" if moment is not None else ""


def digest(changes: list[Change]) -> str:
    """A fingerprint of a plan: the confirmation of a preview is refused once the plan has changed."""
    text = json.dumps(
        [
            [
                c.student_id,
                _stamp(c.before.timestamp) if c.before else None,
                c.before.score if c.before else None,
                c.after.attempt_id,
            ]
            for c in changes
        ]
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def record(
    config: CourseConfig,
    settings: AssignmentSettings,
    question_ids: dict[str, str],
    max_score: float,
    changes: list[Change],
    notebook_of: Callable[[int], bytes],
    *,
    replace_term: bool,
) -> Recording | None:
    """Write the changes into the term's record (question_ids: question id -> its grade cell's name), student by
    student: what each replaces is kept first, for `undo`. None when there is nothing to change. A student whose
    record cannot be kept or written, or whom the gradebook refuses, keeps their record as it was (files put
    back) and is named in the recording's `refused`; the others are recorded. Nobody recorded at all, or a
    failure of what all share (everyone put back), is a CourseError."""
    if not changes:
        return None
    replaced = [c.student_id for c in changes if c.replaces_term_grade]
    if replaced and not replace_term:
        raise CourseError(f"this would replace the term's grade of {', '.join(replaced)}: confirm it to record")
    assignment = settings.name
    rows = _csv_rows(config, assignment)
    folder = _new_folder(config, assignment)
    refused: dict[str, str] = {}
    kept = _keep_each(config, assignment, changes, rows, folder, refused)
    if not kept:
        shutil.rmtree(folder)
        raise CourseError(f"nobody could be recorded: {_reasons(refused)}; every record is as it was")
    recorded_at = _now()
    data: dict[str, Any] = {
        "recorded_at": recorded_at,
        "students": kept,
        "undone": False,
        "finished": False,
        "refused": refused,
    }
    atomic_write_json(folder / "recording.json", data)  # kept before anything is replaced
    try:
        recorded = _write_records(
            config,
            settings,
            question_ids,
            max_score,
            [c for c in changes if c.student_id in kept],
            notebook_of,
            folder,
            data,
        )
    except Exception as problem:  # the gradebook's database, the CSV, a disk: everyone's, so everyone goes back
        LOG.exception("the recording of %s into the term stopped; putting back what it wrote", assignment)
        raise _rolled_back(config, settings, tuple(question_ids), folder, data, problem) from None
    return _outcome(folder, recorded_at, recorded, refused, data)


def _csv_rows(config: CourseConfig, assignment: str) -> dict[str, Any]:
    """The assignment's CSV rows, read before anything is kept or written: unreadable, nobody is recorded."""
    try:
        return read_grades_csv(grades_csv_path(config.root, assignment))
    except (OSError, ValueError, KeyError) as problem:
        raise CourseError(f"grades-{assignment}.csv cannot be read ({_said(problem)}); nobody was recorded") from None


def _keep_each(
    config: CourseConfig,
    assignment: str,
    changes: list[Change],
    rows: dict[str, Any],
    folder: Path,
    refused: dict[str, str],
) -> dict[str, Any]:
    """Keep each student's record under `folder`, student by student: {student: their notes}; a student whose
    record cannot be kept goes into `refused`."""
    kept: dict[str, Any] = {}
    for change in changes:
        student = change.student_id
        try:
            term_files.keep(config.root, assignment, student, folder / "files" / student)
        except Exception as problem:  # nothing of theirs is touched: they are simply not recorded
            shutil.rmtree(folder / "files" / student, ignore_errors=True)
            refused[student] = _failed(student, "what their record holds could not be kept", problem)
            continue
        kept[student] = {
            "held": _held_json(change.before),
            "csv_row": rows.get(student),
            "written": _stamp(change.after.submitted_at),
            "attempt": change.after.attempt,
        }
    return kept


def _outcome(
    folder: Path, recorded_at: str, recorded: list[Change], refused: dict[str, str], data: dict[str, Any]
) -> Recording:
    """The recording, or the CourseError when nobody was recorded (its folder gone when nothing is left to undo)."""
    if not recorded and data["finished"]:
        shutil.rmtree(folder)
        raise CourseError(f"nobody could be recorded: {_reasons(refused)}; every record is as it was")
    if not recorded:
        raise CourseError(
            f"nobody could be recorded: {_reasons(refused)}; undo {_label(folder)} to put back the "
            "files that could not be"
        )
    return Recording(
        int(folder.name), recorded_at, sorted(c.student_id for c in recorded), False, refused, not data["finished"]
    )


def _write_records(
    config: CourseConfig,
    settings: AssignmentSettings,
    question_ids: dict[str, str],
    max_score: float,
    changes: list[Change],
    notebook_of: Callable[[int], bytes],
    folder: Path,
    data: dict[str, Any],
) -> list[Change]:
    """Each student's files, then their gradebook row; then the CSV and the class summary of those recorded.
    The students refused go into data["refused"]; data (the recording's notes) is written as it goes."""
    assignment, refused, kept = settings.name, data["refused"], data["students"]
    restored: set[str] = set()
    unrestored: set[str] = set()

    def refuse(student: str, why: str) -> None:
        problem = _put_back_safely(config, assignment, folder, student)
        refused[student] = why + problem
        (unrestored if problem else restored).add(student)

    rejected = _write_each(config, settings, question_ids, changes, notebook_of, folder, refuse)
    for student, why in rejected.items():
        refuse(student, f"the gradebook refused it: {why.splitlines()[0][:SAID]}")  # not the SQL that follows
    recorded = [c for c in changes if c.student_id not in refused]
    _note_written(config, settings, recorded, kept)
    for student in restored:  # as they were: nothing of this recording to undo (one not put back stays noted)
        del kept[student]
        shutil.rmtree(folder / "files" / student, ignore_errors=True)
    atomic_write_json(folder / "recording.json", data)
    if recorded:
        csv_path = grades_csv_path(config.root, assignment)
        write_grades_csv(csv_path, tuple(question_ids), [_grade_row(c.after, max_score) for c in recorded])
        _class_summary(config, settings, csv_path)
    data["finished"] = not unrestored  # else undo is offered, to put back what could not be
    atomic_write_json(folder / "recording.json", data)
    return recorded


def _write_each(
    config: CourseConfig,
    settings: AssignmentSettings,
    question_ids: dict[str, str],
    changes: list[Change],
    notebook_of: Callable[[int], bytes],
    folder: Path,
    refuse: Callable[[str, str], None],
) -> dict[str, str]:
    """Each student's files, then their gradebook row, in one gradebook session: {student: why} it refused."""
    assignment = settings.name
    with GradebookWriter(
        config.root, config.gradebook_url, assignment, config.source_notebook(assignment), settings.due
    ) as gradebook:
        for change in changes:
            student = change.student_id
            try:
                scores: dict[str, float | None] = {
                    question_ids[q.id]: q.earned for q in change.after.feedback.questions if q.id in question_ids
                }
                _write_files(config, settings, change, notebook_of(change.after.attempt_id))
                atomic_write_json(
                    folder / "files" / student / WROTE,  # in place: what undo may find
                    term_files.fingerprints(config.root, assignment, student),
                )
            except Exception as problem:  # theirs alone: their record goes back, the others go on
                refuse(student, _failed(student, "their files could not be written", problem))
                continue
            # Their gradebook row only once the files it describes are in place (formgrader compares the two).
            gradebook.record(
                student,
                scores,
                timestamp=change.after.submitted_at,
                late_penalty=change.after.late_penalty,
                extension_hours=settings.extensions.get(change.student_id, 0.0),
            )
        return gradebook.commit()


def _note_written(
    config: CourseConfig, settings: AssignmentSettings, recorded: list[Change], kept: dict[str, Any]
) -> None:
    """Note in `kept` what was written for each student recorded, as undo will find it if nothing has changed it."""
    assignment = settings.name
    held = held_submissions(
        config.gradebook_url, config.root / "gradebook.db", assignment, Path(settings.notebook).stem
    )
    for change in recorded:
        student = change.student_id
        kept[student]["wrote"] = {
            "held": _held_json(held.get(student)),
            "files": term_files.fingerprints(config.root, assignment, student),
        }


def _failed(student: str, what: str, problem: Exception) -> str:
    """A sentence for the student's line, the traceback for the instructor's log."""
    LOG.warning("recording %s into the term: %s", student, what, exc_info=problem)
    return f"{what}: {_said(problem)}"


def _said(problem: Exception) -> str:
    words = str(problem).strip().splitlines()
    said = words[0] if words else ""
    if not isinstance(problem, (CourseError, OSError)):
        said = f"{type(problem).__name__}: {said}" if said else type(problem).__name__
    return said[:SAID]


def _put_back_safely(config: CourseConfig, assignment_name: str, folder: Path, student: str) -> str:
    """Put the student's files back; "" when done, else the end of their sentence."""
    try:
        term_files.put_back(config.root, assignment_name, student, folder / "files" / student)
    except Exception as problem:
        LOG.warning("recording %s into the term: their files could not be put back", student, exc_info=problem)
        return (
            f", and their files could not be put back ({_said(problem)}): they are kept in "
            f"{folder / 'files' / student}; undo this recording once that is fixed"
        )
    return ""


def _rolled_back(
    config: CourseConfig,
    settings: AssignmentSettings,
    question_ids: tuple[str, ...],
    folder: Path,
    data: dict[str, Any],
    problem: Exception,
) -> CourseError:
    """Everyone put back after a failure of what they all share: the error to raise."""
    try:
        _, left = _take_back(config, settings, question_ids, folder, data)
    except Exception as second:
        LOG.exception("the stopped recording of %s could not be put back", settings.name)
        left = {"everyone": _said(second)}
    if left:
        data["refused"] = {**data["refused"], **left}
        atomic_write_json(folder / "recording.json", data)
        return CourseError(
            f"the recording stopped ({_said(problem)}) and not everything it wrote could be put "
            f"back ({_reasons(left)}): undo {_label(folder)} once that is fixed"
        )
    shutil.rmtree(folder)  # everything as it was: nothing to undo
    return CourseError(f"nobody was recorded: {_said(problem)}; every record is as it was")


def _label(folder: Path) -> str:
    return f"recording {int(folder.name)}"


def undo(config: CourseConfig, settings: AssignmentSettings, question_ids: tuple[str, ...], number: int) -> Recording:
    """Put back what recording `number`, the latest standing one, replaced: the folders, the gradebook, the CSV
    rows; for a recording that stopped half-way, what it had written. Any other number is refused: the form was
    for a recording since undone (a second click, a reload). Only a student whose record is still what the
    recording wrote (or what it found) is put back; one whose record changed since (a later `grade` or hand
    grade) is left as it is, named in the result's `refused` with what changed. The recording is closed, so the
    one before it can be undone next, unless a student could not be put back (named too: undo again once fixed)."""
    standing = [(r, data) for r, data in recordings(config, settings.name) if not r.undone]
    if not standing:
        raise CourseError("there is no recording to undo")
    recording, data = standing[-1]
    if recording.number != number:
        raise CourseError(
            f"the form was for recording {number}, and the one to undo now is {recording.label} "
            "(reload this page to see what it holds)"
        )
    folder = _history(config, settings.name) / f"{recording.number:04d}"
    try:
        back, left = _take_back(config, settings, question_ids, folder, data)
    except Exception as problem:  # the gradebook's database, a disk: what is back stays back, the rest can follow
        LOG.exception("undo of %s of %s stopped", recording.label, settings.name)
        raise CourseError(
            f"{recording.label} could not be undone ({_said(problem)}); it stays open: undo it again once that is fixed"
        ) from None
    if all(entry.get("undone") or student in data["left_as_they_are"] for student, entry in data["students"].items()):
        data["undone"] = _now()  # closed: the one before it can be undone next
    atomic_write_json(folder / "recording.json", data)
    return Recording(
        recording.number, recording.recorded_at, sorted(back), bool(data["undone"]), left, recording.stopped
    )


def _take_back(
    config: CourseConfig,
    settings: AssignmentSettings,
    question_ids: tuple[str, ...],
    folder: Path,
    data: dict[str, Any],
) -> tuple[list[str], dict[str, str]]:
    """Put back every student of the recording whose record is still what it wrote or found, student by
    student: their files, then their gradebook row, then their CSV row; each put back is marked in `data`
    ("undone"). Returns (those put back, {student: why not} for the others)."""
    assignment = settings.name
    held_now = held_submissions(
        config.gradebook_url, config.root / "gradebook.db", assignment, Path(settings.notebook).stem
    )
    todo = {student: entry for student, entry in data["students"].items() if not entry.get("undone")}
    changed = {
        student: why
        for student, entry in todo.items()
        if (why := _changed_since(config, assignment, folder, student, entry, held_now.get(student)))
    }
    data["left_as_they_are"] = {**data.get("left_as_they_are", {}), **changed}
    left: dict[str, str] = dict(changed)
    files_back, absent, rejected = _put_back_each(config, settings, folder, todo, changed, held_now, left)
    for student in absent:
        try:
            forget_submission(config.gradebook_url, assignment, student)
        except Exception as problem:
            rejected[student] = _said(problem)
    for student, why in rejected.items():  # their files are back, their row is not: undo again once fixed
        left[student] = f"the gradebook refused to take back their row ({why.splitlines()[0][:SAID]}): undo again"
    back = [student for student in files_back if student not in rejected]
    if back:
        csv_path = grades_csv_path(config.root, assignment)
        replace_grades_rows(csv_path, question_ids, {s: data["students"][s]["csv_row"] for s in back})
        _class_summary(config, settings, csv_path)
    for student in back:
        data["students"][student]["undone"] = True
    return back, left


def _put_back_each(
    config: CourseConfig,
    settings: AssignmentSettings,
    folder: Path,
    todo: dict[str, Any],
    changed: dict[str, str],
    held_now: dict[str, Held],
    left: dict[str, str],
) -> tuple[list[str], list[str], dict[str, str]]:
    """Each student not changed since: their files, then their gradebook row, in one gradebook session; a student
    whose files cannot be put back goes into `left`. Returns (files put back, students the recording found with no
    row, {student: why} the gradebook refused)."""
    assignment = settings.name
    files_back: list[str] = []
    absent: list[str] = []
    with GradebookWriter(
        config.root, config.gradebook_url, assignment, config.source_notebook(assignment), settings.due
    ) as gradebook:
        for student, entry in todo.items():
            if student in changed:
                continue
            try:
                term_files.put_back(config.root, assignment, student, folder / "files" / student)
            except Exception as problem:
                LOG.warning("undo: %s's files could not be put back", student, exc_info=problem)
                left[student] = f"their files could not be put back ({_said(problem)}): undo again once fixed"
                continue
            files_back.append(student)
            held, now = entry["held"], held_now.get(student)
            if _held_json(now) == held:
                continue  # the gradebook's row is the one the recording found (it stopped before writing it)
            if held is None:
                absent.append(student)
                continue
            gradebook.record(
                student,
                held["scores"],  # None too: a cell nobody had graded is ungraded again
                timestamp=datetime.fromisoformat(held["timestamp"]) if held["timestamp"] else None,
                late_penalty=held["late_penalty"],
                extension_hours=held["extension_hours"],
            )
        return files_back, absent, gradebook.commit()


def _changed_since(
    config: CourseConfig, assignment_name: str, folder: Path, student: str, entry: dict[str, Any], held: Held | None
) -> str:
    """What of the student's record is neither what the recording wrote nor what it found ("": nothing), folder
    by folder and the gradebook's row. A recording that stopped before it noted what it wrote for the student
    is judged by the times: the submission time in submitted/, and the gradebook's, are the ones it wrote or
    found, or someone has handed in or graded since."""
    wrote = entry.get("wrote")
    kept = folder / "files" / student
    now, found = term_files.fingerprints(config.root, assignment_name, student), term_files.kept_fingerprints(kept)
    noted = wrote["files"] if wrote is not None else term_files.noted(kept / WROTE)
    if noted is not None:
        differ = [f"{name}/" for name in term_files.FOLDERS if now[name] not in (found[name], noted.get(name))]
    else:  # it stopped while writing them
        stamp = term_files.stamp_in(config.root / "submitted" / student / assignment_name)
        same = now == found or stamp in (entry["written"], term_files.stamp_in(kept / "submitted"))
        differ = [] if same else ["submitted/"]
    if not _as_recorded(held, entry):
        differ.append("the gradebook's scores and times")
    if not differ:
        return ""
    return f"{_and(differ)} changed since the recording (a later grade, hand grade or submission): kept as it is"


def _as_recorded(held: Held | None, entry: dict[str, Any]) -> bool:
    """The gradebook's row is the one the recording found, or the one it wrote (noted, or by its time when it
    stopped before it could note it)."""
    now = _held_json(held)
    if now == entry["held"]:
        return True
    if "wrote" in entry:
        return bool(now == entry["wrote"]["held"])
    return held is not None and _stamp(held.timestamp) == entry["written"]


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _shown(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC"


def _now() -> str:
    return _shown(datetime.now(UTC).replace(tzinfo=None))


@contextmanager
def exclusive(config: CourseConfig, assignment_name: str) -> Iterator[None]:
    """One recording into (or undo of) the assignment's record at a time, across threads and every serve process
    on the course's folder: an flock on a file beside its history (a course folder shared between machines must
    be on a filesystem with working locks, as NFSv4 has)."""
    base = private_folders(config.root, HISTORY)
    with locked(base / f"{assignment_name}.lock"):
        yield


def _new_folder(config: CourseConfig, assignment_name: str) -> Path:
    base = private_folders(config.root, HISTORY, assignment_name)  # students' notebooks: the instructor's only
    taken = [number for p in base.iterdir() if (number := whole_number(p.name)) is not None]  # "²": not ours
    folder = base / f"{max(taken, default=0) + 1:04d}"
    folder.mkdir(mode=PRIVATE_FOLDER)  # (a folder made meanwhile by another recording fails here)
    os.chmod(folder, PRIVATE_FOLDER)  # mkdir's mode passes through the umask, chmod's does not
    return folder


def _held_json(held: Held | None) -> dict[str, Any] | None:
    if held is None:
        return None
    data = asdict(held)
    data["timestamp"] = held.timestamp.isoformat() if held.timestamp else None
    return data


def _grade_row(counted: Counted, max_score: float) -> GradeRow:
    return GradeRow(
        counted.student_id,
        counted.feedback.earned_by_question(),
        counted.score,
        float(counted.feedback.max_score),
        counted.status,
        counted.late_penalty,
    )


def _write_files(config: CourseConfig, settings: AssignmentSettings, change: Change, notebook: bytes) -> None:
    """submitted/ (as nbgrader collect leaves it, with the label of the numbers the attempt was issued when they are
    not the student's own: numbers_label.py), autograded/ and feedback/ (as grade writes them)."""
    student, assignment = change.student_id, settings.name
    # the student's notebook, as nbgrader collect leaves it but the grader's user's alone (0700 folders, 0600 files)
    submitted = private_folders(config.root, "submitted", student, assignment) / settings.notebook
    atomic_write_text(submitted.parent / nbgrader_layout.TIMESTAMP, _stamp(change.after.submitted_at))
    attempt = change.after.numbers_attempt
    secret = course_secret(config) if attempt > 1 else None
    # In the order that leaves, should the recording stop between the two, a label that names another notebook (an
    # autograder error with a sentence at the next grade), never a notebook graded silently with other numbers: a
    # label is written before its notebook, and removed after the notebook that needs none.
    if attempt > 1:
        write_label(submitted.parent, secret, assignment, student, attempt, notebook)
    atomic_write_bytes(submitted, notebook)
    if attempt <= 1:
        write_label(submitted.parent, secret, assignment, student, attempt, notebook)
    nbgrader_layout.write_autograded(
        config.root,
        assignment,
        settings.notebook,
        student,
        submitted,
        released_to(config, settings, student),
        change.after.feedback,
        max_bytes=config.limits.notebook_mb * 2**20,
    )
    feedback = config.root / "feedback" / student / assignment
    atomic_write_text(feedback / "feedback.json", compact_json(change.after.feedback.to_json()))
    atomic_write_text(feedback / feedback_page(settings), render_html(change.after.feedback), mode=PUBLIC)
    nbgrader_layout.write_feedback_files(submitted, feedback)


def _class_summary(config: CourseConfig, settings: AssignmentSettings, csv_path: Path) -> None:
    """The class summary made again from the CSV. It is a view of the records, not one of them: a failure to
    refresh it is logged, and never undoes (or stops undoing) what the records hold."""
    try:
        items = item_settings(config, load_course_assignment(config, settings.name))  # for each student's numbers
        write_class_summary(config.root, settings.name, csv_path, page=feedback_page(settings), items=items)
    except Exception:
        LOG.exception("the class summary of %s could not be made again from %s", settings.name, csv_path)
