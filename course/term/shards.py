"""A class graded in slices: `grade --shard K/N` grades the K-th of N deterministic slices of the submissions
(warm pool and all) into a folder of its own, and `merge OUT...` writes the shards' results into the course as
one unsharded run would have: the same writers (recording.py: record_results, the integrity report, the class
summary, nbgrader's gradebook), fed with the shards' results instead of the pool's.

A shard leaves, beside its feedback and CSV, shard-<assignment>.json: every result as plain data (the feedback
the student sees, the scores per gradebook cell, the submission's path in the course and its time), which is all
the writers need. Shards are cut by student: every submission carrying one student id (a duplicate, which `grade`
refuses beside the first) lands in the same shard.

What merge reads back is input, checked as a submission is before anything is written: the shard's record must
be exactly its slice of the course's submissions as they are at merge time (the same student ids, by the same
rule, and paths inside the course, found again under the folders the shards graded), and each result must be one
grading could give: a known status, each question's score within its points, the totals their sum. Anything
else is refused with a sentence naming the shard's file and the field.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from course.core.config import AssignmentSettings, CourseConfig
from course.core.errors import CourseError
from course.core.files import atomic_write_json
from course.core.status import GRADING_GIVES, Status
from course.core.text import safe_text
from course.pipeline.assignment import Assignment
from course.pipeline.discovery import SubmissionRef, discover
from course.pipeline.feedback_model import Feedback, FeedbackError, finite_number
from course.pipeline.grading import Graded
from course.pipeline.judge import QuestionResult
from course.pipeline.run_context import RunContext, run_of
from course.pipeline.submission import student_id_problem
from course.term.gradebook import write_course_totals
from course.term.item_analysis import item_settings
from course.term.nbgrader_term import records_in_gradebook
from course.term.recording import BatchSummary, open_records, record_results, start_summary, write_reports
from course.term.roster import Student

SHARD_FORMAT = 3  # 2: each shard names the whole class it was cut from; 3: and the folders it was cut from,
# every path relative to the course folder, the class cut by student
SAME = 1e-6  # scores equal to within this (they are rounded to 6 places) are the same


@dataclass(frozen=True)
class Shard:
    """The K-th (from 1) of N slices."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """'K/N' -> Shard, or a CourseError saying what is wrong."""
    parts = text.split("/")
    if len(parts) == 2 and all(part.strip().isdigit() for part in parts):
        index, count = int(parts[0]), int(parts[1])
        if 1 <= index <= count:
            return Shard(index, count)
    raise CourseError(f"--shard {text!r}: expected K/N with 1 <= K <= N, as in --shard 2/3 (the second of three)")


def shard_of(refs: list[SubmissionRef], shard: Shard) -> list[SubmissionRef]:
    """The shard's slice: every N-th student in order of student id, from the K-th, with every submission that
    carries their id (a duplicate is refused beside the first, as in an unsharded run: both must be in one
    shard). The same submissions give the same slices on every machine; round robin keeps the slices within
    one student of each other's size."""
    students = sorted({ref.student_id for ref in refs})
    ours = set(students[shard.index - 1 :: shard.count])
    return sorted((ref for ref in refs if ref.student_id in ours), key=lambda ref: (ref.student_id, str(ref.path)))


def class_digest(refs: list[SubmissionRef], root: Path) -> str:
    """What every shard of one grading must have seen: the whole class's submissions (ids and paths in the
    course), before the slicing. Shards that started on either side of a `nbgrader collect` would otherwise slice
    different classes, and a student would fall in no shard, or in two."""
    listed = "\n".join(
        f"{ref.student_id}\t{_in_course(ref.path, root)}"
        for ref in sorted(refs, key=lambda r: (r.student_id, str(r.path)))
    )
    return hashlib.sha256(listed.encode("utf-8")).hexdigest()[:16]


def shard_sources(root: Path, paths: list[Path]) -> list[Path]:
    """The folders (or notebooks) a sharded grading reads, resolved, each inside the course folder: merge finds
    the same submissions again there, and a shard's record names them relative to it. Else a CourseError."""
    inside = []
    for path in paths:
        resolved = path.resolve()
        if not resolved.is_relative_to(root):
            raise CourseError(
                f"{path}: a sharded grading reads submissions inside the course folder {root} (where "
                "merge finds them again); copy them there, e.g. into submitted/"
            )
        inside.append(resolved)
    return inside


def _in_course(path: Path, root: Path) -> str:
    """A submission's path relative to the course folder, as a shard's record names it."""
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def shard_path(out_dir: Path, assignment_name: str) -> Path:
    return out_dir / f"shard-{assignment_name}.json"


def _plain(graded: Graded, path: Path | None, root: Path) -> dict[str, Any]:
    return {
        "student_id": graded.student_id,
        "status": graded.status,
        "feedback": graded.feedback.to_json(),
        "seconds": graded.seconds,
        "internal_error": graded.internal_error,
        "sandbox": graded.sandbox,
        "late_penalty": graded.late_penalty,
        "integrity": list(graded.integrity),
        "submitted": graded.submitted.isoformat() if graded.submitted else None,
        "path": _in_course(path, root) if path else None,
        # The judged values are in the feedback already: the writers need only each question's score.
        "questions": [
            {
                "id": q.id,
                "title": q.title,
                "grade_id": q.grade_id,
                "points": q.points,
                "earned": q.earned,
                "error": q.error,
            }
            for q in graded.questions
        ],
    }


def _graded(data: dict[str, Any], feedback: Feedback) -> Graded:
    """A checked result (_check_result, which read its `feedback`) as the writers take it."""
    questions = tuple(
        QuestionResult(q["id"], q["title"], q["grade_id"], q["points"], q["earned"], (), q["error"])
        for q in data["questions"]
    )
    submitted = datetime.fromisoformat(data["submitted"]) if data["submitted"] else None
    return Graded(
        data["student_id"],
        Status(data["status"]),
        questions,
        feedback,
        data["seconds"],
        data["internal_error"],
        data["sandbox"],
        data["late_penalty"],
        submitted,
        tuple(data["integrity"]),
    )


def write_shard(
    out_dir: Path,
    assignment_name: str,
    shard: Shard,
    graded: list[Graded],
    refused: list[SubmissionRef],
    paths_by_id: dict[str, Path],
    whole_class: str,
    root: Path,
    sources: list[Path],
) -> Path:
    path = shard_path(out_dir, assignment_name)
    atomic_write_json(
        path,
        {
            "format": SHARD_FORMAT,
            "assignment": assignment_name,
            "shard": shard.index,
            "of": shard.count,
            "class": whole_class,
            "sources": [_in_course(source, root) for source in sources],
            "graded": [_plain(one, paths_by_id.get(one.student_id), root) for one in graded],
            "refused": [
                {"student_id": ref.student_id, "path": _in_course(ref.path, root), "problem": ref.problem}
                for ref in refused
            ],
        },
    )
    return path


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CourseError(f"{path}: not a shard's record ({error}); grade the shard again") from None
    except RecursionError:  # nested deeper than the parser goes
        raise CourseError(f"{path}: not a shard's record (nested too deep); grade the shard again") from None
    if not isinstance(data, dict) or data.get("format") != SHARD_FORMAT:
        raise CourseError(f"{path}: not a shard's record of this version of autograd-course; grade the shard again")
    for key, kind in (
        ("assignment", str),
        ("shard", int),
        ("of", int),
        ("class", str),
        ("sources", list),
        ("graded", list),
        ("refused", list),
    ):
        if type(data.get(key)) is not kind:
            raise CourseError(f"{path}: `{key}` is not a {kind.__name__}; grade the shard again")
    if not 1 <= data["shard"] <= data["of"]:
        raise CourseError(f"{path}: `shard` {data['shard']} of {data['of']} is no slice; grade the shard again")
    for key in ("graded", "refused"):
        for index, one in enumerate(data[key]):
            if not isinstance(one, dict) or type(one.get("student_id")) is not str:
                raise CourseError(f"{path}: `{key}[{index}].student_id` is not a string; grade the shard again")
    return data


def _shards(outs: list[Path]) -> dict[str, list[tuple[Path, dict[str, Any]]]]:
    """The shards' records by assignment, each assignment's complete (1..N, once each, cut from one class) or a
    CourseError."""
    found: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for out in outs:
        records = sorted(out.glob("shard-*.json")) if out.is_dir() else []
        if not records:
            raise CourseError(
                f"{out}: no shard-<assignment>.json here; give the --out folders of `autograd-course grade --shard K/N`"
            )
        for path in records:
            data = _read(path)
            found.setdefault(data["assignment"], []).append((path, data))
    complete: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for assignment, shards in sorted(found.items()):
        counts = {data["of"] for _, data in shards}
        if len(counts) != 1:
            cuts = ", ".join(f"{path}: {data['shard']}/{data['of']}" for path, data in shards)
            raise CourseError(
                f"assignment {assignment}: the shards were cut in different numbers of slices "
                f"({cuts}); merge the shards of one grading"
            )
        count = counts.pop()
        seen: dict[int, Path] = {}
        for path, data in shards:
            if data["shard"] in seen:
                raise CourseError(
                    f"assignment {assignment}: shard {data['shard']}/{count} is given twice ("
                    f"{seen[data['shard']]} and {path})"
                )
            seen[data["shard"]] = path
        missing = [f"{k}/{count}" for k in range(1, count + 1) if k not in seen]
        if missing:
            raise CourseError(
                f"assignment {assignment}: shard {', '.join(missing)} missing; give every shard's "
                "--out folder (a merge of part of a class would mark the rest as missing)"
            )
        if len({(data["class"], json.dumps(data["sources"])) for _, data in shards}) != 1:
            raise CourseError(
                f"assignment {assignment}: the shards saw different submissions (one started before a "
                "collect or an upload, another after); grade every shard again from the same "
                "submitted/ folder"
            )
        ids: dict[str, int] = {}
        for _, data in shards:
            for student in {one["student_id"] for one in [*data["graded"], *data["refused"]]}:
                if student in ids:
                    raise CourseError(
                        f"assignment {assignment}: {student} is in shard {ids[student]} and in shard "
                        f"{data['shard']}; grade every shard again"
                    )
                ids[student] = data["shard"]
        complete[assignment] = sorted(shards, key=lambda pair: pair[1]["shard"])
    return complete


def _settings_of(config: CourseConfig, name: str, shards: list[tuple[Path, dict[str, Any]]]) -> AssignmentSettings:
    """The settings of the assignment the shards' records name, or a CourseError naming the first record."""
    try:
        return config.assignment(name)
    except CourseError as problem:
        raise CourseError(f"{shards[0][0]}: `assignment` {_shown(name)}: {problem}") from None


def _class_now(
    config: CourseConfig, settings: AssignmentSettings, shards: list[tuple[Path, dict[str, Any]]]
) -> list[SubmissionRef]:
    """The class the shards were cut from, found again in the course now: the same folders (inside the course),
    the same submissions (the class digest), or a CourseError."""
    path, data = shards[0]
    name = settings.name
    sources = []
    for index, source in enumerate(data["sources"]):
        where = _inside(config.root, source)
        if where is None:
            raise CourseError(
                f"{path}: `sources[{index}]` {_shown(source)} is not a path inside the course folder "
                f"{config.root}; grade the shard again"
            )
        sources.append(where)
    refs = discover(sources, settings.name, settings.notebook)
    if not refs or class_digest(refs, config.root) != data["class"]:
        raise CourseError(
            f"assignment {name}: the submissions in {', '.join(map(str, sources))} are not the ones "
            f"the shards were graded from (`class` of {path}: a collect or an upload since, or another "
            "course); grade every shard again"
        )
    return refs


def _inside(root: Path, text: Any) -> Path | None:
    """root/text when text is a relative path with no `..` that stays inside root once links are followed."""
    if type(text) is not str or not text or "\0" in text:
        return None
    relative = Path(text)
    if relative.is_absolute() or ".." in relative.parts:
        return None
    path = root / relative
    return path if path.resolve().is_relative_to(root) else None


def _shown(value: Any) -> str:
    return repr(safe_text(value, 120, one_line=True)) if isinstance(value, str) else repr(value)[:120]


def _checked(
    path: Path, data: dict[str, Any], expected: list[SubmissionRef], assignment: Assignment, root: Path
) -> tuple[list[tuple[Graded, Path]], list[SubmissionRef]]:
    """The shard's results and refusals, each checked against the slice of the course it must hold (`expected`)
    and against the assignment; the course's own paths and refusals, never the record's."""
    graded = {(ref.student_id, _in_course(ref.path, root)): ref for ref in expected if not ref.problem}
    refused = {(ref.student_id, _in_course(ref.path, root)): ref for ref in expected if ref.problem}
    slice_ = f"shard {data['shard']}/{data['of']}"
    results = []
    for index, one in enumerate(data["graded"]):
        where = f"{path}: `graded[{index}]"
        problem = student_id_problem(one["student_id"])
        if problem:
            raise CourseError(f"{where}.student_id` {problem}; grade the shard again")
        if _inside(root, one.get("path")) is None:
            raise CourseError(
                f"{where}.path` {_shown(one.get('path'))} is not a path inside the course folder "
                f"{root}; grade the shard again"
            )
        ref = graded.pop((one["student_id"], one["path"]), None)
        if ref is None:
            raise CourseError(
                f"{where}` ({one['student_id']}, {_shown(one['path'])}) is not a submission of "
                f"{slice_} in the course as it is now; grade the shard again"
            )
        feedback = _check_result(where, one, assignment)
        results.append((_graded(one, feedback), ref.path))  # the course's path, never the record's
    kept_out = []
    for index, one in enumerate(data["refused"]):
        ref = refused.pop((one["student_id"], one.get("path")), None)
        if ref is None:
            raise CourseError(
                f"{path}: `refused[{index}]` ({_shown(one['student_id'])}, {_shown(one.get('path'))}) "
                f"is not a refused submission of {slice_} in the course as it is now; grade the shard "
                "again"
            )
        kept_out.append(ref)
    left = sorted({student for student, _ in [*graded, *refused]})
    if left:
        raise CourseError(
            f"{path}: {', '.join(left[:5])}{' …' if len(left) > 5 else ''} in {slice_} of the course "
            "but not in the shard's record; grade the shard again"
        )
    return results, kept_out


def _number(value: Any) -> float | None:
    return float(value) if finite_number(value) else None


def _check_result(where: str, one: dict[str, Any], assignment: Assignment) -> Feedback:
    """One result as grading could have given it: a known status, a feedback document (`Feedback.from_json`, which
    is returned), each question of the assignment in order with its grade cell and points, a score within them,
    the totals their sum less the late penalty."""
    refuse = _Refusal(where)
    _check_fields(one, refuse)
    feedback = _read_feedback(one, refuse)
    earned = _check_questions(one["questions"], feedback, assignment, refuse)
    _check_totals(one, feedback, earned, assignment, refuse)
    return feedback


@dataclass(frozen=True)
class _Refusal:
    """The refusal of one field of a shard's result (`where`: the record's file and the result's index)."""

    where: str

    def __call__(self, field: str, what: str) -> CourseError:
        return CourseError(f"{self.where}.{field}` {what}; grade the shard again")


def _check_fields(one: dict[str, Any], refuse: _Refusal) -> None:
    """A status grading gives, and each field of the result of the type a shard writes: seconds a number, integrity
    sentences, the submission time a time."""
    try:
        given = Status.read(one.get("status")) in GRADING_GIVES  # `missing` is a grades row's, never grading's
    except ValueError:
        given = False
    if not given:
        raise refuse("status", f"{_shown(one.get('status'))} is not one of {', '.join(GRADING_GIVES)}")
    for field, kinds in (
        ("internal_error", (str,)),
        ("sandbox", (str,)),
        ("integrity", (list,)),
        ("submitted", (str, type(None))),
        ("questions", (list,)),
        ("feedback", (dict,)),
    ):
        if type(one.get(field)) not in kinds:
            raise refuse(field, "is not what a shard writes")
    seconds = _number(one.get("seconds"))
    if seconds is None or seconds < 0:
        raise refuse("seconds", f"{_shown(one.get('seconds'))} is not a number of seconds")
    if not all(type(item) is str for item in one["integrity"]):
        raise refuse("integrity", "holds something other than sentences")
    if one["submitted"] is not None:
        try:
            datetime.fromisoformat(one["submitted"])
        except ValueError:
            raise refuse("submitted", f"{_shown(one['submitted'])} is not a time") from None


def _read_feedback(one: dict[str, Any], refuse: _Refusal) -> Feedback:
    """The result's feedback document, read as any feedback is (`Feedback.from_json`), its first problem named."""
    try:
        return Feedback.from_json(one["feedback"])
    except FeedbackError as problem:
        raise refuse(f"feedback.{problem.field}" if problem.field else "feedback", problem.what) from None


def _check_questions(questions: list[Any], feedback: Feedback, assignment: Assignment, refuse: _Refusal) -> float:
    """Each of the assignment's questions in order, with its grade cell and points, a score within them, and the
    feedback saying the same score; returns the points earned in all."""
    shown = feedback.questions
    if len(questions) != len(assignment.questions) or len(shown) != len(questions):
        raise refuse("questions", f"are not the {len(assignment.questions)} questions of {assignment.name}")
    earned_total = 0.0
    for index, (question, want) in enumerate(zip(questions, assignment.questions, strict=True)):
        at = f"questions[{index}]"
        if (
            not isinstance(question, dict)
            or question.get("id") != want.id
            or question.get("grade_id") != want.test_cell_id
            or type(question.get("title")) is not str
            or type(question.get("error")) not in (str, type(None))
        ):
            raise refuse(at, f"is not question {want.id} (grade cell {want.test_cell_id})")
        if _number(question.get("points")) != want.points:
            raise refuse(f"{at}.points", f"{_shown(question.get('points'))} is not {want.id}'s {want.points:g}")
        earned = _number(question.get("earned"))
        if earned is None or not 0 <= earned <= want.points + SAME:
            raise refuse(
                f"{at}.earned",
                f"{_shown(question.get('earned'))} is not a score within {want.id}'s {want.points:g} points",
            )
        entry = shown[index]
        if entry.id != want.id or entry.points != want.points or abs(entry.earned - earned) > SAME:
            raise refuse(f"feedback.questions[{index}]", f"does not say {want.id}'s {earned:g} of {want.points:g}")
        earned_total += earned
    return earned_total


def _check_totals(
    one: dict[str, Any], feedback: Feedback, earned_total: float, assignment: Assignment, refuse: _Refusal
) -> None:
    """A late penalty within the points earned, the feedback's totals the questions' sum less it, and the feedback
    this result's (its student, status and assignment)."""
    penalty = _number(one.get("late_penalty"))
    if penalty is None or not 0 <= penalty <= earned_total + SAME:
        raise refuse(
            "late_penalty",
            f"{_shown(one.get('late_penalty'))} is not a penalty within the {earned_total:g} points earned",
        )
    checks = (
        ("feedback.max_score", feedback.max_score, assignment.max_score),
        ("feedback.raw_score", feedback.before_penalty, earned_total),
        ("feedback.score", feedback.score, earned_total - penalty),
        ("feedback.late_penalty", feedback.penalty, penalty),
    )
    for field, value, want_total in checks:
        number = _number(value)
        if number is None or abs(number - want_total) > SAME:
            raise refuse(field, f"{_shown(value)} is not {want_total:g}, the sum of the questions' scores")
    if (
        feedback.student_id != one["student_id"]
        or feedback.status != one["status"]
        or feedback.assignment != assignment.name
    ):
        raise refuse("feedback", "is not this result's (student, status or assignment differ)")


def merge_shards(
    config: CourseConfig,
    outs: list[Path],
    out_dir: Path,
    *,
    record_gradebook: bool | None = None,
    roster: list[Student] | None = None,
) -> list[BatchSummary]:
    """Write the shards' results into out_dir (the course root: also nbgrader's gradebook), as one unsharded
    `grade` would have: the grades CSVs, feedback folders, class summaries, integrity reports, the roster's
    missing students and course-totals.csv. Every shard's record is checked first, against the course as it is
    now (_class_now, _checked): nothing is written unless every shard of every assignment holds. Returns one
    BatchSummary per assignment."""
    checked = []
    for name, shards in _shards(outs).items():
        settings = _settings_of(config, name, shards)
        refs = _class_now(config, settings, shards)
        # The run's context, once per assignment (each shard checked the secret and proved the setup when it graded)
        context = run_of(config, settings, grades=False)
        results: list[tuple[Graded, Path]] = []
        refused: list[SubmissionRef] = []
        for path, data in shards:
            found, kept_out = _checked(
                path, data, shard_of(refs, Shard(data["shard"], data["of"])), context.assignment, config.root
            )
            results += found
            refused += kept_out
        checked.append((context, sorted(results, key=lambda pair: pair[0].student_id), refused))

    summaries = [
        _record_merged(context, out_dir, results, refused, record_gradebook, roster)
        for context, results, refused in checked
    ]
    write_course_totals(out_dir, tuple(a.name for a in config.assignments))
    return summaries


def _record_merged(
    context: RunContext,
    out_dir: Path,
    results: list[tuple[Graded, Path]],
    refused: list[SubmissionRef],
    record_gradebook: bool | None,
    roster: list[Student] | None,
) -> BatchSummary:
    """One assignment's checked results written as a batch writes them (recording.py)."""
    record = records_in_gradebook(context.config, out_dir, record_gradebook)
    summary = start_summary(context, out_dir, record)
    summary.refused = refused
    paths = {graded.student_id: path for graded, path in results}
    for graded, path in results:
        if not path.is_file():
            raise CourseError(
                f"{path}: {graded.student_id}'s submission, graded by a shard, is not here; merge "
                "where the submissions the shards graded can be read"
            )
    records = open_records(context, record, roster)  # each shard proved the setup on its own pool
    try:
        record_results(context, summary, (graded for graded, _ in results), lambda: records, paths)
    finally:
        records.gradebook.close()
    write_reports(context, summary, item_settings(context.config, context.assignment))
    return summary
