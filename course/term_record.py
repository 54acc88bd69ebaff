"""The submission service's counted attempts entered into the term's one record: nbgrader's gradebook and the
files its tools read beside it, written as `autograd-course grade` writes them.

nbgrader keeps one submission per student and assignment. Recording makes a student's counted service attempt
that submission, exactly as if `nbgrader collect` had brought it in and `grade` had graded it:
`submitted/<student>/<assignment>/` (the notebook and its timestamp.txt, which formgrader compares with the
gradebook's), `autograded/` (what formgrader opens), `feedback/` (what `nbgrader release_feedback` sends),
the gradebook's scores, timestamp and late penalty (`nbgrader export`), our `grades-<assignment>.csv` (and so
`autograd-course export`'s LMS files) and the class summary. A later `grade --roster` grades that same
notebook again, so the term and the service never hold two versions of a student.

Every recording first keeps what it replaces under `gradebook-history/<assignment>/<n>/` (the three folders,
the gradebook's scores and times, the CSV row), so the last recording can be undone. A student whose record
already says what the service would write is left alone: recording twice with nothing new changes nothing.
A student the gradebook refuses (or whose files cannot be written) keeps their record as it was, files
included, and the recording says so; the others are recorded.

A recording also notes what it wrote (a fingerprint of each folder, the gradebook's row as read back), and
undo puts back only a student whose record is still exactly that: one whose record changed since (a later
`grade`, a hand grade in formgrader, a newer collected submission) is left as it is, and undo names them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from course import nbgrader_layout
from course.config import AssignmentSettings, CourseConfig
from course.errors import CourseError
from course.files import PUBLIC, atomic_write_json, atomic_write_text, compact_json
from course.gradebook import GradeRow, grades_csv_path, read_grades_csv, replace_grades_rows, write_grades_csv
from course.gradebook_writer import GradebookWriter
from course.nbgrader_bridge import Held, forget_submission, held_submissions
from course.render import render_html
from course.term import feedback_page, released_to

HISTORY = "gradebook-history"
FOLDERS = ("submitted", "autograded", "feedback")  # nbgrader's per-student folders a recording replaces
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
    feedback: dict[str, Any]


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

    @property
    def refused_text(self) -> str:
        return _reasons(self.refused)

    @property
    def label(self) -> str:
        return f"recording {self.number}"


def _history(config: CourseConfig, assignment: str) -> Path:
    return config.root / HISTORY / assignment


def _reasons(refused: dict[str, str]) -> str:
    """Students and why, for a sentence: "bob (why); carol (why)"."""
    return "; ".join(f"{student} ({why})" for student, why in sorted(refused.items()))


def recordings(config: CourseConfig, assignment: str) -> list[tuple[Recording, dict[str, Any]]]:
    """Every recording of the assignment, oldest first, with what it kept."""
    found = []
    folder = _history(config, assignment)
    for path in sorted(folder.glob("[0-9]*/recording.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as problem:
            raise CourseError(f"{path} cannot be read ({problem}); move it aside to record again") from None
        found.append((Recording(int(path.parent.name), data["recorded_at"], sorted(data["students"]),
                                bool(data.get("undone")), data.get("refused", {})), data))
    return found


def _written_by(config: CourseConfig, assignment: str) -> dict[str, tuple[str, str]]:
    """{student: (the timestamp the latest standing recording wrote, its label)}."""
    written: dict[str, tuple[str, str]] = {}
    for recording, data in recordings(config, assignment):
        if not recording.undone:
            for student, entry in data["students"].items():
                written[student] = (entry["written"], recording.label)
    return written


def plan(config: CourseConfig, settings: AssignmentSettings, counted: list[Counted]) -> list[Change]:
    """Who would change if the counted attempts were recorded now, from what to what, and why."""
    held = held_submissions(config.gradebook_url, config.root / "gradebook.db", settings.name,
                            Path(settings.notebook).stem)
    written = _written_by(config, settings.name)
    changes = []
    for one in sorted(counted, key=lambda c: c.student_id):
        before = held.get(one.student_id)
        if before is not None and _same(before, one):
            continue
        source = "term"
        if before is not None and one.student_id in written and written[one.student_id][0] == _stamp(
                before.timestamp):
            source = written[one.student_id][1]
        if before is None:
            why = f"nothing recorded yet; attempt {one.attempt} is the one that counts"
        elif source == "term":
            when = f"submitted {_shown(before.timestamp)}" if before.timestamp else "with no submission time"
            why = f"attempt {one.attempt} replaces the term's submission ({when})"
        else:
            why = f"attempt {one.attempt} now counts, in place of what {source} wrote"
        changes.append(Change(one.student_id, before, one, source, why))
    return changes


def _same(before: Held, after: Counted) -> bool:
    return (before.timestamp == after.submitted_at and abs(before.score - after.score) < SAME
            and abs(before.late_penalty - after.late_penalty) < SAME)


def _stamp(moment: datetime | None) -> str:
    """nbgrader's timestamp.txt format (naive UTC)."""
    return f"{moment:%Y-%m-%d %H:%M:%S.%f} UTC" if moment is not None else ""


def digest(changes: list[Change]) -> str:
    """A fingerprint of a plan: the confirmation of a preview is refused once the plan has changed."""
    text = json.dumps([[c.student_id, _stamp(c.before.timestamp) if c.before else None,
                        c.before.score if c.before else None, c.after.attempt_id] for c in changes])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def record(config: CourseConfig, settings: AssignmentSettings, question_ids: dict[str, str], max_score: float,
           changes: list[Change], notebook_of: Callable[[int], bytes], *, replace_term: bool) -> Recording | None:
    """Write the changes into the term's record (question_ids: question id -> its grade cell's name). What
    each replaces is kept first, for `undo`. None when there is nothing to change. A student the gradebook
    refuses, or whose files cannot be written, keeps their record as it was (files put back) and is named in
    the recording's `refused`; nobody recorded at all is a CourseError."""
    if not changes:
        return None
    replaced = [c.student_id for c in changes if c.replaces_term_grade]
    if replaced and not replace_term:
        raise CourseError(f"this would replace the term's grade of {', '.join(replaced)}: confirm it to record")
    assignment = settings.name
    folder = _new_folder(config, assignment)
    csv_path = grades_csv_path(config.root, assignment)
    rows = read_grades_csv(csv_path)
    kept: dict[str, Any] = {}
    for change in changes:
        student = change.student_id
        for name in FOLDERS:
            source = config.root / name / student / assignment
            if source.is_dir():
                shutil.copytree(source, folder / "files" / student / name, symlinks=True)
        kept[student] = {"held": _held_json(change.before), "csv_row": rows.get(student),
                         "written": _stamp(change.after.submitted_at), "attempt": change.after.attempt}
    recorded_at = _now()
    data: dict[str, Any] = {"recorded_at": recorded_at, "students": kept, "undone": False}
    atomic_write_json(folder / "recording.json", data)  # kept before anything is replaced

    refused: dict[str, str] = {}
    with GradebookWriter(config.root, config.gradebook_url, assignment, config.source_notebook(assignment),
                         settings.due) as gradebook:
        for change in changes:
            try:
                _write_files(config, settings, change, notebook_of(change.after.attempt_id))
            except (OSError, CourseError) as problem:
                refused[change.student_id] = f"its files could not be written: {problem}"
                continue
            gradebook.record(change.student_id, {question_ids[q["id"]]: q["earned"]
                                                 for q in change.after.feedback.get("questions", [])
                                                 if q["id"] in question_ids},
                             timestamp=change.after.submitted_at, late_penalty=change.after.late_penalty,
                             extension_hours=settings.extensions.get(change.student_id, 0.0))
        refused.update({student: f"the gradebook refused it: {why.splitlines()[0]}"  # not the SQL that follows
                        for student, why in gradebook.commit().items()})
    for student in refused:  # their record stays whole: the files as they were, as the gradebook still has them
        _put_back_files(config, assignment, folder, student)
        shutil.rmtree(folder / "files" / student, ignore_errors=True)
    recorded = [c for c in changes if c.student_id not in refused]
    if not recorded:
        shutil.rmtree(folder)
        raise CourseError(f"nobody could be recorded: {_reasons(refused)}; every record is as it was")
    write_grades_csv(csv_path, tuple(question_ids), [_grade_row(c.after, max_score) for c in recorded])
    _class_summary(config, settings, csv_path)
    # What was written, as undo will find it if nothing has changed it since.
    held = held_submissions(config.gradebook_url, config.root / "gradebook.db", assignment,
                            Path(settings.notebook).stem)
    data["students"] = {c.student_id: {**kept[c.student_id], "wrote": {
        "held": _held_json(held.get(c.student_id)), "files": _fingerprints(config, assignment, c.student_id)}}
        for c in recorded}
    data["refused"] = refused
    atomic_write_json(folder / "recording.json", data)
    return Recording(int(folder.name), recorded_at, sorted(data["students"]), False, refused)


def undo(config: CourseConfig, settings: AssignmentSettings, question_ids: tuple[str, ...], number: int) -> Recording:
    """Put back what recording `number`, the latest standing one, replaced: the folders, the gradebook, the CSV
    rows. Any other number is refused: the form was for a recording since undone (a second click, a reload).
    Only a student whose record is still exactly what the recording wrote is put back; one whose record changed
    since (a later `grade` or hand grade) is left as it is, named in the result's `refused` with what changed.
    The recording is closed either way, so the one before it can be undone next."""
    standing = [(r, data) for r, data in recordings(config, settings.name) if not r.undone]
    if not standing:
        raise CourseError("there is no recording to undo")
    recording, data = standing[-1]
    if recording.number != number:
        raise CourseError(f"the form was for recording {number}, and the one to undo now is {recording.label} "
                          "(reload this page to see what it holds)")
    assignment = settings.name
    folder = _history(config, assignment) / f"{recording.number:04d}"
    held_now = held_submissions(config.gradebook_url, config.root / "gradebook.db", assignment,
                                Path(settings.notebook).stem)
    changed = {student: why for student, entry in data["students"].items()
               if (why := _changed_since(config, assignment, student, entry, held_now.get(student)))}
    back = {student: entry for student, entry in data["students"].items() if student not in changed}
    absent = []
    with GradebookWriter(config.root, config.gradebook_url, assignment, config.source_notebook(assignment),
                         settings.due) as gradebook:
        for student, entry in back.items():
            _put_back_files(config, assignment, folder, student)
            held = entry["held"]
            if held is None:
                absent.append(student)
                continue
            gradebook.record(student, held["scores"],  # None too: a cell nobody had graded is ungraded again
                             timestamp=datetime.fromisoformat(held["timestamp"]) if held["timestamp"] else None,
                             late_penalty=held["late_penalty"], extension_hours=held["extension_hours"])
        refused = gradebook.commit()
    if refused:
        raise CourseError("the gradebook refused to take back " + ", ".join(sorted(refused)))
    for student in absent:
        forget_submission(config.gradebook_url, assignment, student)
    csv_path = grades_csv_path(config.root, assignment)
    if back:
        replace_grades_rows(csv_path, question_ids, {s: e["csv_row"] for s, e in back.items()})
        _class_summary(config, settings, csv_path)
    data["undone"] = _now()
    data["left_as_they_are"] = changed
    atomic_write_json(folder / "recording.json", data)
    return Recording(recording.number, recording.recorded_at, sorted(back), True, changed)


def _changed_since(config: CourseConfig, assignment: str, student: str, entry: dict[str, Any],
                   held: Held | None) -> str:
    """What of the student's record differs from what the recording wrote ("": nothing)."""
    wrote = entry.get("wrote")
    if wrote is None:  # a recording that stopped before it could note what it wrote: its timestamps tell
        stamp = config.root / "submitted" / student / assignment / nbgrader_layout.TIMESTAMP
        found = stamp.read_text(encoding="utf-8").strip() if stamp.is_file() else ""
        same = found == entry["written"] and held is not None and _stamp(held.timestamp) == entry["written"]
        return "" if same else "its submission time is no longer the one the recording wrote"
    differ = [f"{name}/" for name, digest in _fingerprints(config, assignment, student).items()
              if digest != wrote["files"].get(name)]
    if _held_json(held) != wrote["held"]:
        differ.append("the gradebook's scores and times")
    if not differ:
        return ""
    return f"{_and(differ)} changed since the recording (a later grade, hand grade or submission): kept as it is"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _fingerprints(config: CourseConfig, assignment: str, student: str) -> dict[str, str | None]:
    """{folder: a digest of every file's path and bytes} of the student's submitted/, autograded/, feedback/
    (None: no such folder)."""
    prints: dict[str, str | None] = {}
    for name in FOLDERS:
        top = config.root / name / student / assignment
        if not top.is_dir():
            prints[name] = None
            continue
        digest = hashlib.sha256()
        for path in sorted(top.rglob("*")):
            if path.is_symlink() or path.is_file():
                digest.update(str(path.relative_to(top)).encode("utf-8", "surrogateescape") + b"\0")
                digest.update(hashlib.sha256(
                    str(path.readlink()).encode() if path.is_symlink() else path.read_bytes()).digest())
        prints[name] = digest.hexdigest()
    return prints


def _put_back_files(config: CourseConfig, assignment: str, folder: Path, student: str) -> None:
    """The student's three folders as recording `folder` found them (absent ones removed again)."""
    for name in FOLDERS:
        target = config.root / name / student / assignment
        if target.exists():
            shutil.rmtree(target)
        saved = folder / "files" / student / name
        if saved.is_dir():
            shutil.copytree(saved, target, symlinks=True)
        elif target.parent.is_dir() and not any(target.parent.iterdir()):
            target.parent.rmdir()  # the student's folder the recording made, empty again


def _shown(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC"


def _now() -> str:
    return _shown(datetime.now(UTC).replace(tzinfo=None))


@contextmanager
def exclusive(config: CourseConfig, assignment: str) -> Iterator[None]:
    """One recording into (or undo of) the assignment's record at a time, across threads and every serve process
    on the course's folder: an flock on a file beside its history (a course folder shared between machines must
    be on a filesystem with working locks, as NFSv4 has)."""
    base = config.root / HISTORY
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(base / f"{assignment}.lock", "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _new_folder(config: CourseConfig, assignment: str) -> Path:
    base = _history(config, assignment)
    base.mkdir(parents=True, exist_ok=True, mode=0o700)  # students' notebooks: the instructor's only
    taken = [int(p.name) for p in base.iterdir() if p.name.isdigit()]
    folder = base / f"{max(taken, default=0) + 1:04d}"
    folder.mkdir(mode=0o700)
    return folder


def _held_json(held: Held | None) -> dict[str, Any] | None:
    if held is None:
        return None
    data = asdict(held)
    data["timestamp"] = held.timestamp.isoformat() if held.timestamp else None
    return data


def _grade_row(counted: Counted, max_score: float) -> GradeRow:
    questions = counted.feedback.get("questions", [])
    return GradeRow(counted.student_id, {q["id"]: q["earned"] for q in questions}, counted.score,
                    float(counted.feedback.get("max_score", max_score)), counted.status, counted.late_penalty)


def _write_files(config: CourseConfig, settings: AssignmentSettings, change: Change, notebook: bytes) -> None:
    """submitted/ (as nbgrader collect leaves it), autograded/ and feedback/ (as grade writes them)."""
    student, assignment = change.student_id, settings.name
    submitted = config.root / "submitted" / student / assignment / settings.notebook
    submitted.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(submitted.parent / nbgrader_layout.TIMESTAMP, _stamp(change.after.submitted_at))
    submitted.write_bytes(notebook)
    nbgrader_layout.write_autograded(config.root, assignment, settings.notebook, student, submitted,
                                     released_to(config, settings, student), change.after.feedback)
    feedback = config.root / "feedback" / student / assignment
    atomic_write_text(feedback / "feedback.json", compact_json(change.after.feedback))
    atomic_write_text(feedback / feedback_page(settings), render_html(change.after.feedback), mode=PUBLIC)
    nbgrader_layout.copy_submission_files(submitted, feedback)


def _class_summary(config: CourseConfig, settings: AssignmentSettings, csv_path: Path) -> None:
    from course.batch import write_class_summary

    write_class_summary(config.root, settings.name, csv_path, page=feedback_page(settings))
