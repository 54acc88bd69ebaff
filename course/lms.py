"""Grades into an LMS: our grades CSV + the roster's LMS ids -> the CSV an LMS's gradebook import accepts.

One small writer per LMS, registered in FORMATS with what it needs from the roster; adding Moodle's or
Blackboard's variant is one more entry. Scores are the `score` column of grades-<assignment>.csv (after
any late penalty); a student whose row says `missing` gets 0, a roster student with no row at all is left
blank (the LMS keeps whatever it has).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from course.assignment import load_course_assignment
from course.config import CourseConfig
from course.errors import CourseError
from course.files import atomic_write_text
from course.gradebook import grades_csv_path, read_grades_csv
from course.grading import ERROR as AUTOGRADER_ERROR
from course.roster import Student
from course.text import csv_text

MISSING_WORK = "missing"


@dataclass(frozen=True)
class ExportRow:
    student: Student
    score: str  # "" when there is no grade to send


@dataclass(frozen=True)
class LmsFormat:
    name: str
    needs: str  # what the roster must give for every student, in words (shown in errors and --help)
    has_id: Callable[[Student], bool]
    render: Callable[[list[ExportRow], str, float], str]  # rows, column title, points possible -> CSV text


def _csv(rows: list[list[str]]) -> str:
    return csv_text(rows)  # a roster name is text from outside: no cell of it may become a formula


def _canvas(rows: list[ExportRow], column: str, points: float) -> str:
    """Canvas's gradebook export layout, which its import reads back: Student, ID, SIS User ID, SIS Login ID,
    Section, then one column per assignment; a "Points Possible" row sets a new assignment's points.
    Canvas matches each row by ID (its user id), else SIS User ID, else SIS Login ID."""
    table = [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", column],
             ["Points Possible", "", "", "", "", f"{points:g}"]]
    for row in rows:
        lms = row.student.lms
        table.append([lms.get("name", ""), lms.get("lms_id", ""), lms.get("sis_user_id", ""),
                      lms.get("sis_login_id", ""), lms.get("section", ""), row.score])
    return _csv(table)


def _moodle(rows: list[ExportRow], column: str, points: float) -> str:
    """Moodle's "Import grades from CSV": a column that identifies the user (email address here; map it to
    "Email address" in the import dialog) and one column per grade item (mapped to the item)."""
    table = [["Email address", "Full name", column]]
    table += [[row.student.lms.get("email", ""), row.student.lms.get("name", ""), row.score] for row in rows]
    return _csv(table)


FORMATS: dict[str, LmsFormat] = {
    "canvas": LmsFormat("canvas", "lms_id (Canvas's user ID), sis_user_id or sis_login_id; name and section "
                        "are shown in Canvas's import preview",
                        lambda s: any(s.lms.get(k) for k in ("lms_id", "sis_user_id", "sis_login_id")), _canvas),
    "moodle": LmsFormat("moodle", "email (the Moodle account's email address)", lambda s: bool(s.lms.get("email")),
                        _moodle),
}


def export_rows(grades_csv: Path, roster: list[Student]) -> list[ExportRow]:
    """One row per roster student, in roster order; every graded student must be on the roster."""
    if not grades_csv.exists():
        raise CourseError(f"{grades_csv}: not found; run autograd-course grade first (or pass --out where it wrote)")
    grades = read_grades_csv(grades_csv)
    on_roster = {student.student_id for student in roster}
    strangers = sorted(set(grades) - on_roster)
    if strangers:
        raise CourseError(f"{grades_csv}: {', '.join(strangers)} graded but not in the roster, so the LMS could not "
                          "match the row; add them to the roster with their LMS ids, then export again")
    rows = []
    for student in roster:
        row = grades.get(student.student_id)
        # An autograder error is no grade: its cell stays empty, so the LMS keeps what it had.
        score = "" if row is None or row.get("status") == AUTOGRADER_ERROR else \
            "0" if row.get("status") == MISSING_WORK else row["score"]
        rows.append(ExportRow(student, score))
    return rows


def export(fmt: str, grades_csv: Path, roster: list[Student], target: Path, column: str, points: float) -> Path:
    """Write the LMS's import CSV to target; nothing is written when a student cannot be matched."""
    if fmt not in FORMATS:
        raise CourseError(f"unknown LMS format {fmt!r}; known: {', '.join(FORMATS)}")
    lms = FORMATS[fmt]
    rows = export_rows(grades_csv, roster)
    unmatched = [row.student.student_id for row in rows if not lms.has_id(row.student)]
    if unmatched:
        raise CourseError(f"the roster has no LMS id for {', '.join(unmatched)}: {fmt} needs {lms.needs}")
    atomic_write_text(target, lms.render(rows, column, points))
    return target


def export_course(config: CourseConfig, fmt: str, roster: list[Student], out_dir: Path,
                  assignment_name: str | None = None, column: str | None = None) -> Path:
    """<out_dir>/<format>-<assignment>.csv from <out_dir>/grades-<assignment>.csv and the roster."""
    settings = config.assignment(assignment_name)
    assignment = load_course_assignment(config, settings.name)
    return export(fmt, grades_csv_path(out_dir, settings.name), roster, out_dir / f"{fmt}-{settings.name}.csv",
                  column or settings.name, assignment.max_score)
