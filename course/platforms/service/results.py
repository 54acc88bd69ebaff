"""What the instructor reads from the service's attempts, through the engine's own writers: the class
summary (`summary.class_summary`), the integrity report, our grades CSV (`gradebook.write_grades_csv`),
an LMS's CSV (the term's, with the service's counted attempts: `lms.rows_for`, as `autograd-course export`) and
the counted attempts nbgrader's gradebook takes (`term_record`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course.core.config import AssignmentSettings, CourseConfig
from course.core.status import Status
from course.pipeline import integrity
from course.pipeline.assignment import Assignment
from course.pipeline.feedback_model import Feedback
from course.platforms.service.policy import ServicePolicy, attempt_numbers, counted, numbers_attempt
from course.platforms.service.store import Attempt
from course.term import term_record
from course.term.gradebook import GradeRow, csv_row, grades_csv_path, write_grades_csv
from course.term.item_analysis import Explainer, ItemAnalysis, analyse_items, item_settings
from course.term.lms import lms_format, lms_text, read_term_grades, rows_for
from course.term.roster import Student
from course.term.summary import class_summary
from course.term.term_record import Counted


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
        graded = [(a.id, a.score or 0.0) for a in attempts if a.done and a.status != Status.AUTOGRADER_ERROR]
        chosen = counted(policy, graded)
        records.append(StudentRecord(student, attempts, next((a for a in attempts if a.id == chosen), None)))
    return records


def counted_feedback(records: list[StudentRecord]) -> list[Feedback]:
    """The feedback of each student's counted attempt (records read with their feedback: `Service.records()`)."""
    return [r.counted.feedback for r in records if r.counted is not None and r.counted.feedback]


ANALYSIS_WAIT = 10.0  # seconds a request waits for the one analysis under way before it gives up (AnalysisBusy)
_analysing = threading.BoundedSemaphore(1)  # one item analysis at a time in this process: each reads the class
# and runs the slip search


class AnalysisBusy(Exception):
    """Another item analysis is under way and did not finish within ANALYSIS_WAIT."""


# The last analysis made, per assignment, with the store's version it was made at: the dashboard reloads at every
# graded attempt and draws the analysis each time, and an instructor's JSON, CSV and summary page ask for the same
# one; until the next attempt is recorded it is the same analysis, so it is made once.
_last: dict[int, tuple[Assignment, str, ItemAnalysis]] = {}  # id(assignment) -> it, its version, its analysis


def item_analysis_of(
    records: list[StudentRecord],
    assignment: Assignment,
    config: CourseConfig,
    explain: Explainer | None = None,
    *,
    version: str | None = None,
) -> ItemAnalysis:
    """The item analysis of the counted attempts, with the settings `grade` uses (`item_analysis.item_settings`,
    where the slip search is wired in); `item_exports.analysis_json` of it is the item-analysis-<assignment>.json
    `grade` writes. One at a time in this process (the JSON, the CSV, the summary page and the charts all make
    one): raises AnalysisBusy when another one holds the slot past ANALYSIS_WAIT. `version`: the store's version,
    read before `records` were: the analysis made at that version is reused, not made again."""
    if version is not None:  # which attempts count as well: a change of counted attempt moves no version
        version += "|" + ",".join(f"{r.student_id}:{r.counted.id if r.counted else ''}" for r in records)
    if version is not None and explain is None:
        kept = _last.get(id(assignment))
        if kept is not None and kept[0] is assignment and kept[1] == version:
            return kept[2]
    if not _analysing.acquire(timeout=ANALYSIS_WAIT):
        raise AnalysisBusy
    try:
        settings = item_settings(config, assignment, explain, numbers=attempts_numbers(records, assignment, config))
        analysis = analyse_items(counted_feedback(records), assignment.name, settings)
    finally:
        _analysing.release()
    if version is not None and explain is None:
        _last.clear()  # one service grades one assignment: the last analysis is the one worth keeping
        _last[id(assignment)] = (assignment, version, analysis)
    return analysis


def attempts_numbers(
    records: list[StudentRecord], assignment: Assignment, config: CourseConfig
) -> Callable[[str], dict[str, Any]]:
    """Each student's numbers as their counted attempt was graded with them (`policy.attempt_numbers`, as the
    worker asks): attempt 2 with fresh numbers is analysed with attempt 2's own, not the student's first."""
    number = {r.student_id: r.counted.number for r in records if r.counted is not None}
    content, defaults = assignment.content, assignment.default_params
    return lambda student: attempt_numbers(config, config.service, content, student, number.get(student, 1), defaults)


def analysis_if_free(
    records: list[StudentRecord], assignment: Assignment, config: CourseConfig, version: str | None = None
) -> ItemAnalysis | None:
    """item_analysis_of for a page that shows the analysis beside other things: None (the page without it) when
    another analysis holds the slot."""
    try:
        return item_analysis_of(records, assignment, config, version=version)
    except AnalysisBusy:
        return None


def summary_of(records: list[StudentRecord], item_analysis: dict[str, Any] | None = None) -> dict[str, Any]:
    """The class summary over each student's counted attempt, with the integrity report of every attempt (and
    the item analysis of the same attempts, `item_analysis_of`, when given: the page shows it)."""
    feedback = counted_feedback(records)
    summary = class_summary(feedback, missing=[r.student_id for r in records if not r.attempts])
    seen = {r.student_id: r.integrity for r in records if r.integrity}
    for student, findings in integrity.borrowed_numbers(feedback).items():
        seen[student] = [*seen.get(student, []), *findings]
    summary["integrity"] = dict(sorted(seen.items()))
    if item_analysis is not None:
        summary["item_analysis"] = item_analysis
    return summary


def grade_rows(records: list[StudentRecord], max_score: float) -> list[GradeRow]:
    rows = []
    for record in records:
        chosen = record.counted
        if chosen is None or chosen.feedback is None:
            rows.append(GradeRow(record.student_id, {}, 0.0, max_score, Status.MISSING))
            continue
        rows.append(
            GradeRow(
                record.student_id,
                chosen.feedback.earned_by_question(),
                chosen.score or 0.0,
                chosen.max_score or max_score,
                chosen.status,
                chosen.late_penalty or 0.0,
            )
        )
    return rows


def grades_csv(records: list[StudentRecord], assignment: Assignment, folder: Path) -> Path:
    path = folder / f"grades-{assignment.name}.csv"
    write_grades_csv(path, tuple(q.id for q in assignment.questions), grade_rows(records, assignment.max_score))
    return path


def lms_csv(
    fmt: str,
    records: list[StudentRecord],
    lms_ids: dict[str, dict[str, str]],
    assignment: Assignment,
    config: CourseConfig,
    settings: AssignmentSettings,
) -> str:
    """The dashboard's LMS import CSV: the whole term, never a grade for a student nobody graded. Per student,
    in this order: the service's counted attempt, unless it would replace a submission the term's `grade` put in
    nbgrader's gradebook (recording asks to confirm that: until it is recorded, the term's grade is exported);
    else the term's row (grades-<assignment>.csv in the course folder: `grade` and the recordings write it);
    else a blank cell (the LMS keeps what it has). A term row that says `missing` is blank too when the service
    has no attempt of theirs: no 0 for work that may still come. A student graded in the term who has no row
    here (no link) has no LMS ids to be matched by, so they get no row (`lms_left_out` names them for the
    dashboard): one such student never blocks the class's export. Raises CourseError, saying what, when a row is
    not one grading writes or a student here has no LMS id."""
    lms_format(fmt)
    term_csv, term = _term_grades(config, settings)
    waiting = {
        change.student_id
        for change in term_record.plan(config, settings, counted_attempts(records, config.service))
        if change.replaces_term_grade
    }
    ours = {
        row.student_id: csv_row(row, ())
        for row in grade_rows(records, assignment.max_score)
        if row.status != Status.MISSING and row.student_id not in waiting
    }
    roster = [Student(r.student_id, lms_ids.get(r.student_id, {})) for r in records]
    rows = rows_for(
        {**term, **ours},
        roster,
        lambda student: "the service's counted attempt" if student in ours else str(term_csv),
        missing="",
        left_out=[],
    )
    return lms_text(fmt, rows, assignment.name, assignment.max_score)


def lms_left_out(config: CourseConfig, settings: AssignmentSettings, records: list[StudentRecord]) -> list[str]:
    """The students the dashboard's Canvas and Moodle CSVs leave out although the term's record grades them:
    graded in grades-<assignment>.csv but with no row in the service (a submission dropped in by hand, a section
    that never got links), so the service has none of their LMS ids. Their ids could come from nbgrader's student
    table only, which anyone's `nbgrader db student add` writes, unchecked against the LMS and without Canvas's
    SIS ids: a row matched on it could put a grade on someone else's. Raises CourseError as `lms_csv` does."""
    term_csv, term = _term_grades(config, settings)
    served = {record.student_id for record in records}
    left_out: list[str] = []
    rows_for(
        {student: row for student, row in term.items() if student not in served},
        [],
        lambda student: str(term_csv),
        missing="",
        left_out=left_out,
    )
    return left_out


def _term_grades(config: CourseConfig, settings: AssignmentSettings) -> tuple[Path, dict[str, dict[str, str]]]:
    term_csv = grades_csv_path(config.root, settings.name)
    return term_csv, read_term_grades(term_csv) if term_csv.exists() else {}


def counted_attempts(records: list[StudentRecord], policy: ServicePolicy) -> list[Counted]:
    """Each student's counted attempt (with its feedback and whose numbers it was graded with, by the `policy`
    it was graded under, as the worker asks `attempt_numbers`), as the term's record takes it."""
    return [
        Counted(
            r.student_id,
            r.counted.number,
            r.counted.id,
            r.counted.submitted_at,
            r.counted.status,
            r.counted.score or 0.0,
            r.counted.late_penalty or 0.0,
            r.counted.feedback,
            numbers_attempt(policy, r.counted.number),
        )
        for r in records
        if r.counted is not None and r.counted.feedback is not None
    ]
