"""The class list: who should have submitted, and how the LMS knows each student.

A roster is a CSV with a `student_id` column (the nbgrader id: the folder name under submitted/) and,
for an LMS export, the LMS's own columns for the same person (see `course/term/lms.py`):
`name`, `lms_id`, `sis_user_id`, `sis_login_id`, `section`, `email`. A file without a header is read as
one student id per line.
"""

from __future__ import annotations

import csv
import io
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from course.core.errors import RosterError
from course.core.text import csv_cell
from course.pipeline.submission import student_id_problem

LMS_COLUMNS = ("name", "lms_id", "sis_user_id", "sis_login_id", "section", "email")


@dataclass(frozen=True)
class Student:
    student_id: str
    lms: dict[str, str] = field(default_factory=dict)  # the LMS_COLUMNS the roster has for this student


def read_roster(path: Path) -> list[Student]:
    """Every student of the roster CSV, in file order; an id that cannot be a folder name stops here."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as error:
        raise RosterError(f"{path}: cannot read the roster ({error.strerror})") from None
    except UnicodeDecodeError:
        raise RosterError(f"{path}: the roster is not UTF-8 text; save it as CSV (UTF-8)") from None
    rows = list(csv.reader(io.StringIO(text)))
    header = [cell.strip() for cell in rows[0]] if rows else []
    if "student_id" in header:
        column, body = header.index("student_id"), rows[1:]
    else:
        column, body, header = 0, rows, []
    students: list[Student] = []
    seen: set[str] = set()
    for number, row in enumerate(body, start=2 if header else 1):
        if not row or not row[column].strip():
            continue
        student_id = row[column].strip()
        problem = student_id_problem(student_id)
        if problem:
            raise RosterError(f"{path}: line {number}: {problem}")
        if student_id in seen:
            raise RosterError(f"{path}: line {number}: student id {student_id!r} is listed twice")
        seen.add(student_id)
        lms = {
            name: row[header.index(name)].strip()
            for name in LMS_COLUMNS
            if name in header and header.index(name) < len(row)
        }
        students.append(Student(student_id, lms))
    if not students:
        raise RosterError(f"{path}: no student ids (expected a student_id column)")
    return students


NBGRADER_TEXT_MAX = 128  # nbgrader's student table: first_name, last_name, email, lms_user_id are String(128)


def nbgrader_text(text: str) -> str:
    """A roster value as nbgrader's `export` can carry it: its CsvExportPlugin writes every field unquoted, so a
    comma would split the row and a double quote could swallow the fields after it. Line breaks, tabs and other
    whitespace become one space, other control characters go, `"` becomes `'`, `,` a space; a value a
    spreadsheet would read as a formula gets an apostrophe first (`csv_cell`); at most 128 characters (nbgrader's
    column, which PostgreSQL enforces)."""
    text = " ".join(text.replace('"', "'").replace(",", " ").split())  # (line breaks and tabs are whitespace)
    text = "".join(character for character in text if unicodedata.category(character) not in ("Cc", "Cs"))
    return csv_cell(text)[:NBGRADER_TEXT_MAX].strip()


def nbgrader_names(name: str) -> tuple[str, str]:
    """(first_name, last_name) for nbgrader's student table from a roster name as rosters write it.

    "Last, First" (Canvas's sortable name) splits at the first comma: "Liddell, Alice" -> "Alice", "Liddell";
    what follows a later comma stays in the first name: "King, Martin Luther, Jr." -> "Martin Luther Jr.", "King".
    "First Last" splits at the last space: "Ada Lovelace King" -> "Ada Lovelace", "King". One word is the last
    name ("Plato" -> "", "Plato"): formgrader lists and sorts students by "last, first". Each part goes through
    `nbgrader_text`."""
    name = " ".join(name.split())
    if "," in name:
        last, _, first = name.partition(",")
    else:
        first, _, last = name.rpartition(" ")
    first, last = nbgrader_text(first), nbgrader_text(last)
    return (first, last) if last else ("", first)


def nbgrader_student(student: Student) -> dict[str, str]:
    """The roster's columns for nbgrader's student table (first_name, last_name, email, lms_user_id), only those
    the roster has, as `nbgrader export` can write them (`nbgrader_names`, `nbgrader_text`). An email or LMS id
    that nbgrader could not carry whole (a comma, a quote, a space, a control character, more than 128
    characters) is left out rather than changed: a changed address would reach someone else."""
    fields: dict[str, str] = {}
    name = student.lms.get("name", "").strip()
    if name:
        fields["first_name"], fields["last_name"] = nbgrader_names(name)
    for ours, theirs in (("email", "email"), ("lms_id", "lms_user_id")):
        value = student.lms.get(ours, "").strip()
        if value and value == nbgrader_text(value) and " " not in value:
            fields[theirs] = value
    return fields


def gradebook_students(db_url: str, gradebook_path: Path) -> list[Student]:
    """The students nbgrader's gradebook knows (`nbgrader db student add/import`, or earlier grading), by id
    only: their names, emails and LMS ids are the gradebook's already, and are left as it has them (a name
    joined and split again could come back split elsewhere)."""
    if not gradebook_path.exists():
        return []
    from course.term.nbgrader_bridge import open_gradebook

    with open_gradebook(db_url) as gradebook:
        return [Student(s.id) for s in gradebook.students]
