"""Grades into an LMS: our grades CSV + the roster's LMS ids -> the CSV an LMS's gradebook import accepts.

One small writer per LMS, registered in FORMATS with what it needs from the roster; adding Moodle's or
Blackboard's variant is one more entry. Scores are the `score` column of grades-<assignment>.csv (after
any late penalty); a student whose row says `missing` gets 0 (the CLI, at the end of a term; the service's
dashboard leaves them blank), a roster student with no row at all is left blank (the LMS keeps whatever it has).

The one logic of every LMS export: `autograd-course export` (the term's CSV) and the service's dashboard (the
term's CSV with the service's counted attempts, `course.platforms.service.results.lms_csv`) both go through
`export_rows` (or `rows_for`) and `lms_text`. Every row is read back as input: a student id, status and score
that grading could not have written stop the export, naming the file (or the service) and the student.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from course.core.config import CourseConfig
from course.core.errors import CourseError
from course.core.files import atomic_write_text
from course.core.status import SCORED, Status
from course.core.text import csv_text, safe_text
from course.pipeline.assignment import load_course_assignment
from course.pipeline.submission import student_id_problem
from course.term.gradebook import grades_csv_path, read_grades_csv
from course.term.roster import Student

MAX_GRADES_CSV_BYTES = 64 * 2**20  # a grades CSV read back: far above a class's, far below a machine's memory
SAME = 1e-6  # a score this far above its max_score is the same score (rounding of the CSV's %g)
_SCORE = re.compile(r"\d+(?:\.\d*)?(?:[eE][+-]?\d+)?")  # as our writers write a score: never nan, inf, -0 or 1_0


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
    table = [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", column],
        ["Points Possible", "", "", "", "", f"{points:g}"],
    ]
    for row in rows:
        lms = row.student.lms
        table.append(
            [
                lms.get("name", ""),
                lms.get("lms_id", ""),
                lms.get("sis_user_id", ""),
                lms.get("sis_login_id", ""),
                lms.get("section", ""),
                row.score,
            ]
        )
    return _csv(table)


def _moodle(rows: list[ExportRow], column: str, points: float) -> str:
    """Moodle's "Import grades from CSV": a column that identifies the user (email address here; map it to
    "Email address" in the import dialog) and one column per grade item (mapped to the item)."""
    table = [["Email address", "Full name", column]]
    table += [[row.student.lms.get("email", ""), row.student.lms.get("name", ""), row.score] for row in rows]
    return _csv(table)


FORMATS: dict[str, LmsFormat] = {
    "canvas": LmsFormat(
        "canvas",
        "lms_id (Canvas's user ID), sis_user_id or sis_login_id; name and section are shown in Canvas's import preview",
        lambda s: any(s.lms.get(k) for k in ("lms_id", "sis_user_id", "sis_login_id")),
        _canvas,
    ),
    "moodle": LmsFormat(
        "moodle", "email (the Moodle account's email address)", lambda s: bool(s.lms.get("email")), _moodle
    ),
}


def read_term_grades(grades_csv: Path) -> dict[str, dict[str, str]]:
    """{student_id: row} of a grades-<assignment>.csv, read back as input: bounded, and a CourseError (naming
    the file) rather than a traceback when it is not one. The rows' values are checked by `rows_for`."""
    try:
        size = grades_csv.stat().st_size
        if size > MAX_GRADES_CSV_BYTES:
            raise CourseError(
                f"{grades_csv}: {size} bytes, more than a grades CSV holds "
                f"({MAX_GRADES_CSV_BYTES // 2**20} MB); grade again to write it"
            )
        return read_grades_csv(grades_csv)
    except (OSError, UnicodeDecodeError, csv.Error, KeyError) as problem:
        raise CourseError(
            f"{grades_csv} cannot be read as a grades CSV ({safe_text(str(problem), 200)}); grade again to write it"
        ) from None


def export_rows(grades_csv: Path, roster: list[Student], *, missing: str = "0") -> list[ExportRow]:
    """One row per roster student, in roster order; every graded student must be on the roster."""
    if not grades_csv.exists():
        raise CourseError(f"{grades_csv}: not found; run autograd-course grade first (or pass --out where it wrote)")
    return rows_for(read_term_grades(grades_csv), roster, lambda student: str(grades_csv), missing=missing)


def rows_for(
    grades: dict[str, dict[str, str]],
    roster: list[Student],
    where: Callable[[str], str],
    *,
    missing: str = "0",
    left_out: list[str] | None = None,
) -> list[ExportRow]:
    """One row per roster student, in roster order, from grades rows as grades-<assignment>.csv holds them
    ({student_id: row}; `where(student)` names where a row came from, for an error). A row that says
    `missing` gets `missing` ("0", or "" to leave the LMS's cell as it is); an autograder error and a student
    with no row get "" (the LMS keeps what it has). Every row is checked: a student id, status or score grading
    could not have written stops the export (CourseError, naming where and whom).
    A graded student not on the roster has no LMS ids, so no row can match them in the LMS: the export stops,
    naming them; or, given `left_out`, they get no row (never one without ids) and those whose cell would have
    carried a grade are appended to it, for the caller to say so (the service's dashboard)."""
    for graded, row in grades.items():
        problem = student_id_problem(graded) if isinstance(graded, str) else f"{graded!r:.60} is not a student id"
        if problem:
            raise CourseError(f"{where(str(graded))}: the row of {problem}; grade again to write it")
        if not isinstance(row, dict):
            raise CourseError(f"{where(graded)}: {graded}'s row is not a grades row; grade again to write it")
    on_roster = {student.student_id for student in roster}
    strangers = sorted(set(grades) - on_roster)
    if strangers and left_out is not None:
        # Read back like every row (a forged one still stops the export); only a grade lost is worth saying.
        left_out += [
            student for student in strangers if _score_cell(grades[student], student, where(student), missing) != ""
        ]
    elif strangers:
        places = sorted({where(student) for student in strangers})
        raise CourseError(
            f"{', '.join(places)}: {', '.join(strangers)} graded but not in the roster, so the LMS "
            "could not match the row; add them to the roster with their LMS ids, then export again"
        )
    rows = []
    for student in roster:
        found = grades.get(student.student_id)
        rows.append(
            ExportRow(
                student,
                "" if found is None else _score_cell(found, student.student_id, where(student.student_id), missing),
            )
        )
    return rows


def _score_cell(row: dict[str, str], student: str, where: str, missing: str) -> str:
    """The LMS's cell of one grades row ("": none to send), once the row is shown to be one grading writes."""
    try:
        status = Status.read(row.get("status"))
    except ValueError:
        raise CourseError(
            f"{where}: {student}'s status {_shown(row.get('status'))} is not one of "
            f"{', '.join((*SCORED, Status.MISSING, Status.AUTOGRADER_ERROR))}; grade again to write it"
        ) from None
    if status == Status.AUTOGRADER_ERROR:  # our failure is no grade: the cell stays empty, the LMS keeps what it had
        return ""
    if status == Status.MISSING:
        return missing
    score, maximum = _number(row.get("score")), _number(row.get("max_score"))
    if maximum is None or maximum <= 0:
        raise CourseError(
            f"{where}: {student}'s max_score {_shown(row.get('max_score'))} is not a number of "
            "points; grade again to write it"
        )
    if score is None or score > maximum + SAME:
        raise CourseError(
            f"{where}: {student}'s score {_shown(row.get('score'))} is not a score within 0 and "
            f"{maximum:g}; grade again to write it"
        )
    return str(row["score"])


def _number(value: object) -> float | None:
    if not isinstance(value, str) or not _SCORE.fullmatch(value):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _shown(value: object) -> str:
    return repr(safe_text(value, 60, one_line=True)) if isinstance(value, str) else repr(value)[:60]


def lms_text(fmt: str, rows: list[ExportRow], column: str, points: float) -> str:
    """The LMS's import CSV of the rows; a CourseError (nothing made) when a student cannot be matched."""
    lms = lms_format(fmt)
    unmatched = [row.student.student_id for row in rows if not lms.has_id(row.student)]
    if unmatched:
        raise CourseError(f"the roster has no LMS id for {', '.join(unmatched)}: {fmt} needs {lms.needs}")
    return lms.render(rows, column, points)


def lms_format(fmt: str) -> LmsFormat:
    if fmt not in FORMATS:
        raise CourseError(f"unknown LMS format {_shown(fmt)}; known: {', '.join(FORMATS)}")
    return FORMATS[fmt]


def export(fmt: str, grades_csv: Path, roster: list[Student], target: Path, column: str, points: float) -> Path:
    """Write the LMS's import CSV to target; nothing is written when a student cannot be matched."""
    lms_format(fmt)
    atomic_write_text(target, lms_text(fmt, export_rows(grades_csv, roster), column, points))
    return target


def export_course(
    config: CourseConfig,
    fmt: str,
    roster: list[Student],
    out_dir: Path,
    assignment_name: str | None = None,
    column: str | None = None,
) -> Path:
    """<out_dir>/<format>-<assignment>.csv from <out_dir>/grades-<assignment>.csv and the roster."""
    settings = config.assignment(assignment_name)
    assignment = load_course_assignment(config, settings.name)
    return export(
        fmt,
        grades_csv_path(out_dir, settings.name),
        roster,
        out_dir / f"{fmt}-{settings.name}.csv",
        column or settings.name,
        assignment.max_score,
    )
