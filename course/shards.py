"""A class graded in slices: `grade --shard K/N` grades the K-th of N deterministic slices of the submissions
(warm pool and all) into a folder of its own, and `merge OUT...` writes the shards' results into the course as
one unsharded run would have: the same writers (batch.record_results, write_integrity, write_class_summary,
nbgrader's gradebook), fed with the shards' results instead of the pool's.

A shard leaves, beside its feedback and CSV, shard-<assignment>.json: every result as plain data (the feedback
the student sees, the scores per gradebook cell, the submission's path and time), which is all the writers need.
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from course.assignment import load_course_assignment
from course.config import CourseConfig
from course.discovery import SubmissionRef
from course.errors import CourseError
from course.files import atomic_write_json
from course.gradebook import grades_csv_path, write_course_totals
from course.grading import Graded
from course.judge import QuestionResult
from course.roster import Student
from course.term import feedback_page, gradebook_note, records_in_gradebook, write_integrity

SHARD_FORMAT = 2  # 2: each shard names the whole class it was cut from


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
    """The shard's slice: every N-th submission in order of student id (then path), from the K-th. The same
    submissions give the same slices on every machine; round robin keeps them within one of each other's size."""
    ordered = sorted(refs, key=lambda ref: (ref.student_id, str(ref.path)))
    return ordered[shard.index - 1::shard.count]


def class_digest(refs: list[SubmissionRef]) -> str:
    """What every shard of one grading must have seen: the whole class's submissions (ids and paths), before the
    slicing. Shards that started on either side of a `nbgrader collect` would otherwise slice different
    classes, and a student would fall in no shard, or in two."""
    listed = "\n".join(f"{ref.student_id}\t{ref.path}" for ref in sorted(refs, key=lambda r: (r.student_id,
                                                                                             str(r.path))))
    return hashlib.sha256(listed.encode("utf-8")).hexdigest()[:16]


def shard_path(out_dir: Path, assignment: str) -> Path:
    return out_dir / f"shard-{assignment}.json"


def _plain(graded: Graded, path: Path | None) -> dict[str, Any]:
    return {"student_id": graded.student_id, "status": graded.status, "feedback": graded.feedback,
            "seconds": graded.seconds, "internal_error": graded.internal_error, "sandbox": graded.sandbox,
            "late_penalty": graded.late_penalty, "integrity": list(graded.integrity),
            "submitted": graded.submitted.isoformat() if graded.submitted else None,
            "path": str(path) if path else None,
            # The judged values are in the feedback already: the writers need only each question's score.
            "questions": [{"id": q.id, "title": q.title, "grade_id": q.grade_id, "points": q.points,
                           "earned": q.earned, "error": q.error} for q in graded.questions]}


def _graded(data: dict[str, Any]) -> tuple[Graded, Path | None]:
    questions = tuple(QuestionResult(q["id"], q["title"], q["grade_id"], q["points"], q["earned"], (), q["error"])
                      for q in data["questions"])
    submitted = datetime.fromisoformat(data["submitted"]) if data["submitted"] else None
    graded = Graded(data["student_id"], data["status"], questions, data["feedback"], data["seconds"],
                    data["internal_error"], data["sandbox"], data["late_penalty"], submitted,
                    tuple(data["integrity"]))
    return graded, Path(data["path"]) if data["path"] else None


def write_shard(out_dir: Path, assignment: str, shard: Shard, graded: list[Graded], refused: list[SubmissionRef],
                paths_by_id: dict[str, Path], whole_class: str) -> Path:
    path = shard_path(out_dir, assignment)
    atomic_write_json(path, {
        "format": SHARD_FORMAT, "assignment": assignment, "shard": shard.index, "of": shard.count,
        "class": whole_class,
        "graded": [_plain(one, paths_by_id.get(one.student_id)) for one in graded],
        "refused": [{"student_id": ref.student_id, "path": str(ref.path), "problem": ref.problem} for ref in refused]})
    return path


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CourseError(f"{path}: not a shard's record ({error}); grade the shard again") from None
    if not isinstance(data, dict) or data.get("format") != SHARD_FORMAT:
        raise CourseError(f"{path}: not a shard's record of this version of autograd-course; grade the shard again")
    return data


def _shards(outs: list[Path]) -> dict[str, list[dict[str, Any]]]:
    """The shards' records by assignment, each assignment's complete (1..N, once each) or a CourseError."""
    found: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for out in outs:
        records = sorted(out.glob("shard-*.json")) if out.is_dir() else []
        if not records:
            raise CourseError(f"{out}: no shard-<assignment>.json here; give the --out folders of "
                              f"`autograd-course grade --shard K/N`")
        for path in records:
            data = _read(path)
            found.setdefault(data["assignment"], []).append((path, data))
    complete: dict[str, list[dict[str, Any]]] = {}
    for assignment, shards in sorted(found.items()):
        counts = {data["of"] for _, data in shards}
        if len(counts) != 1:
            cuts = ", ".join(f"{path}: {data['shard']}/{data['of']}" for path, data in shards)
            raise CourseError(f"assignment {assignment}: the shards were cut in different numbers of slices "
                              f"({cuts}); merge the shards of one grading")
        count = counts.pop()
        seen: dict[int, Path] = {}
        for path, data in shards:
            if data["shard"] in seen:
                raise CourseError(f"assignment {assignment}: shard {data['shard']}/{count} is given twice ("
                                  f"{seen[data['shard']]} and {path})")
            seen[data["shard"]] = path
        missing = [f"{k}/{count}" for k in range(1, count + 1) if k not in seen]
        if missing:
            raise CourseError(f"assignment {assignment}: shard {', '.join(missing)} missing; give every shard's "
                              "--out folder (a merge of part of a class would mark the rest as missing)")
        if len({data.get("class") for _, data in shards}) != 1:
            raise CourseError(f"assignment {assignment}: the shards saw different submissions (one started before a "
                              "collect or an upload, another after); grade every shard again from the same "
                              "submitted/ folder")
        ids: dict[str, int] = {}
        for _, data in shards:
            for one in [*data["graded"], *data["refused"]]:
                student = one["student_id"]
                if student in ids:
                    raise CourseError(f"assignment {assignment}: {student} is in shard {ids[student]} and in shard "
                                      f"{data['shard']}; grade every shard again")
                ids[student] = data["shard"]
        complete[assignment] = [data for _, data in sorted(shards, key=lambda pair: pair[1]["shard"])]
    return complete


def _same(records: Any) -> Any:
    return records


def merge_shards(config: CourseConfig, outs: list[Path], out_dir: Path, *, record_gradebook: bool | None = None,
                 roster: list[Student] | None = None) -> list[Any]:
    """Write the shards' results into out_dir (the course root: also nbgrader's gradebook), as one unsharded
    `grade` would have: the grades CSVs, feedback folders, class summaries, integrity reports, the roster's
    missing students and course-totals.csv. Returns one BatchSummary per assignment."""
    from course.batch import BatchSummary, _open_records, record_results, write_class_summary

    summaries = []
    for name, shards in _shards(outs).items():
        settings = config.assignment(name)
        assignment = load_course_assignment(config, name)
        record = records_in_gradebook(config, out_dir, record_gradebook)
        summary = BatchSummary(assignment=name, out_dir=out_dir, csv_path=grades_csv_path(out_dir, name),
                               gradebook_note=gradebook_note(config, record))
        summary.refused = [SubmissionRef(ref["student_id"], Path(ref["path"]), ref["problem"])
                           for shard in shards for ref in shard["refused"]]
        results = sorted((_graded(one) for shard in shards for one in shard["graded"]),
                         key=lambda pair: pair[0].student_id)
        paths = {graded.student_id: path for graded, path in results if path is not None}
        for graded, path in results:
            if path is not None and not path.is_file():
                raise CourseError(f"{path}: {graded.student_id}'s submission, graded by a shard, is not here; merge "
                                  "where the submissions the shards graded can be read")
        proven: Future[bool] = Future()
        proven.set_result(True)  # each shard proved the setup on its own pool before grading
        records = _open_records(config, settings, record, roster, proven)
        try:
            record_results((graded for graded, _ in results), summary, config, settings, assignment,
                           partial(_same, records), paths)
        finally:
            records.gradebook.close()
        write_integrity(out_dir, name, summary.graded)
        write_class_summary(out_dir, name, summary.csv_path, page=feedback_page(settings))
        summaries.append(summary)
    write_course_totals(out_dir, tuple(a.name for a in config.assignments))
    return summaries
