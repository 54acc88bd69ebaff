"""The class list: who should have submitted, and how the LMS knows each student.

A roster is a CSV with a `student_id` column (the nbgrader id: the folder name under submitted/) and,
for an LMS export, the LMS's own columns for the same person (see `course/lms.py`):
`name`, `lms_id`, `sis_user_id`, `sis_login_id`, `section`, `email`. A file without a header is read as
one student id per line.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

from course.errors import RosterError
from course.submission import student_id_problem

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
        lms = {name: row[header.index(name)].strip() for name in LMS_COLUMNS
               if name in header and header.index(name) < len(row)}
        students.append(Student(student_id, lms))
    if not students:
        raise RosterError(f"{path}: no student ids (expected a student_id column)")
    return students


def nbgrader_student(student: Student) -> dict[str, str]:
    """The roster's columns for nbgrader's student table (first_name, last_name, email, lms_user_id), only those
    the roster has: a name is split at its last space ("Ada Lovelace King" -> "Ada Lovelace", "King")."""
    fields: dict[str, str] = {}
    name = student.lms.get("name", "").strip()
    if name:
        first, _, last = name.rpartition(" ")
        fields.update(first_name=first or last, last_name=last if first else "")
    if student.lms.get("email"):
        fields["email"] = student.lms["email"]
    if student.lms.get("lms_id"):
        fields["lms_user_id"] = student.lms["lms_id"]
    return fields


def gradebook_students(db_url: str, gradebook_path: Path) -> list[Student]:
    """The students nbgrader's gradebook knows (`nbgrader db student add/import`, or earlier grading)."""
    if not gradebook_path.exists():
        return []
    from course.nbgrader_bridge import open_gradebook

    with open_gradebook(db_url) as gradebook:
        return [Student(s.id, {k: v for k, v in (("name", " ".join(filter(None, (s.first_name, s.last_name)))),
                                                 ("lms_id", s.lms_user_id or ""), ("email", s.email or "")) if v})
                for s in gradebook.students]
