"""What the instructor reads from the service's attempts, through the engine's own writers: the class
summary (`summary.class_summary`), the integrity report, our grades CSV (`gradebook.write_grades_csv`),
an LMS's CSV (`lms.export`) and the counted attempts nbgrader's gradebook takes (`term_record`)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course import integrity
from course.assignment import Assignment
from course.gradebook import GradeRow, write_grades_csv
from course.grading import ERROR as AUTOGRADER_ERROR
from course.lms import export
from course.roster import Student
from course.service.policy import ServicePolicy, counted
from course.service.store import Attempt
from course.summary import class_summary
from course.term import MISSING_WORK
from course.term_record import Counted


@dataclass(frozen=True)
class StudentRecord:
    student_id: str
    attempts: list[Attempt]
    counted: Attempt | None  # the attempt whose score is the grade (best or last, by the policy)

    @property
    def integrity(self) -> list[str]:
        seen: list[str] = []
        for attempt in self.attempts:
            seen += [finding for finding in attempt.integrity if finding not in seen]
        return seen


def student_records(policy: ServicePolicy, roster: list[str], all_attempts: list[Attempt]) -> list[StudentRecord]:
    by_student: dict[str, list[Attempt]] = {student: [] for student in roster}
    for attempt in all_attempts:
        by_student.setdefault(attempt.student_id, []).append(attempt)
    records = []
    for student, attempts in sorted(by_student.items()):
        # An autograder error is no grade: it never counts, as best or as last.
        graded = [(a.id, a.score or 0.0) for a in attempts if a.done and a.status != AUTOGRADER_ERROR]
        chosen = counted(policy, graded)
        records.append(StudentRecord(student, attempts, next((a for a in attempts if a.id == chosen), None)))
    return records


def summary_of(records: list[StudentRecord]) -> dict[str, Any]:
    """The class summary over each student's counted attempt, with the integrity report of every attempt."""
    feedback = [r.counted.feedback for r in records if r.counted is not None and r.counted.feedback]
    summary = class_summary(feedback, missing=[r.student_id for r in records if not r.attempts])
    seen = {r.student_id: r.integrity for r in records if r.integrity}
    for student, findings in integrity.borrowed_numbers(feedback).items():
        seen[student] = [*seen.get(student, []), *findings]
    summary["integrity"] = dict(sorted(seen.items()))
    return summary


def grade_rows(records: list[StudentRecord], max_score: float) -> list[GradeRow]:
    rows = []
    for record in records:
        chosen = record.counted
        if chosen is None or chosen.feedback is None:
            rows.append(GradeRow(record.student_id, {}, 0.0, max_score, MISSING_WORK))
            continue
        rows.append(GradeRow(record.student_id, {q["id"]: q["earned"] for q in chosen.feedback["questions"]},
                             chosen.score or 0.0, chosen.max_score or max_score, chosen.status,
                             chosen.late_penalty or 0.0))
    return rows


def grades_csv(records: list[StudentRecord], assignment: Assignment, folder: Path) -> Path:
    path = folder / f"grades-{assignment.name}.csv"
    write_grades_csv(path, tuple(q.id for q in assignment.questions), grade_rows(records, assignment.max_score))
    return path


def lms_csv(fmt: str, records: list[StudentRecord], lms_ids: dict[str, dict[str, str]], assignment: Assignment,
            scratch: Path) -> str:
    """The LMS's import CSV (raises CourseError, with what is missing, when a student cannot be matched),
    made in a folder of its own under `scratch`."""
    with tempfile.TemporaryDirectory(prefix="export-", dir=scratch) as folder:
        grades = grades_csv(records, assignment, Path(folder))
        roster = [Student(r.student_id, lms_ids.get(r.student_id, {})) for r in records]
        target = export(fmt, grades, roster, Path(folder) / f"{fmt}.csv", assignment.name, assignment.max_score)
        return target.read_text(encoding="utf-8")


def counted_attempts(records: list[StudentRecord]) -> list[Counted]:
    """Each student's counted attempt (with its feedback), as the term's record takes it."""
    return [Counted(r.student_id, r.counted.number, r.counted.id, r.counted.submitted_at, r.counted.status,
                    r.counted.score or 0.0, r.counted.late_penalty or 0.0, r.counted.feedback)
            for r in records if r.counted is not None and r.counted.feedback is not None]
