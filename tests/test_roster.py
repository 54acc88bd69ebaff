"""Names as rosters write them reach nbgrader's student table as a person would expect, and as nbgrader's own
unquoting `export` can carry them (the end-to-end check, with `nbgrader export` itself:
test_term_nbgrader_commands.py)."""

from __future__ import annotations

import pytest

from course.term.roster import Student, nbgrader_names, nbgrader_student, read_roster


@pytest.mark.parametrize(
    ("name", "first", "last"),
    [
        ("Liddell, Alice", "Alice", "Liddell"),  # Canvas's sortable name
        ("Alice Liddell", "Alice", "Liddell"),
        ("Ada Lovelace King", "Ada Lovelace", "King"),  # "First Last": the last word is the last name
        ("Lovelace King, Ada", "Ada", "Lovelace King"),  # "Last, First" says where the last name ends
        ("King, Martin Luther, Jr.", "Martin Luther Jr.", "King"),
        ("Plato", "", "Plato"),  # one word: the last name, as formgrader sorts
        ("Liddell,", "", "Liddell"),
        ("Dvořák, Antonín", "Antonín", "Dvořák"),
        ("山田, 太郎", "太郎", "山田"),
        ('O\'Brien, Robert "Bob"', "Robert 'Bob'", "O'Brien"),  # a double quote would swallow nbgrader's fields
        ("  Liddell ,\n Alice\t", "Alice", "Liddell"),  # line breaks and tabs are spaces
        ("Lid\x00dell, Al\x1bice", "Alice", "Liddell"),  # control characters go
        ('=HYPERLINK("http://x"), Eve', "Eve", "'=HYPERLINK('http://x')"),  # never a formula in a spreadsheet
        ("x" * 300, "", "x" * 128),  # nbgrader's column holds 128 characters
    ],
)
def test_a_roster_name_becomes_first_and_last_name_without_a_comma_or_double_quote(name, first, last):
    assert nbgrader_names(name) == (first, last)
    for part in (first, last):
        assert not set(part) & set(',"\n\r'), part


def test_an_email_or_lms_id_nbgrader_could_not_carry_whole_is_left_out_not_changed():
    def fields(**lms):
        return nbgrader_student(Student("alice", lms))

    assert fields(name="Liddell, Alice", email="alice@example.edu", lms_id="1001") == {
        "first_name": "Alice",
        "last_name": "Liddell",
        "email": "alice@example.edu",
        "lms_user_id": "1001",
    }
    assert fields(email="o'neil@example.edu") == {"email": "o'neil@example.edu"}
    for email in (
        "alice,bob@example.edu",
        '"alice"@example.edu',
        "alice @example.edu",
        "a\n@x.edu",
        "=1+1@example.edu",
        "a" * 120 + "@example.edu",
    ):
        assert fields(email=email) == {}, email
    assert fields(lms_id="10,01") == {}
    assert fields() == {}  # a roster without names leaves nbgrader's table as it is


def test_a_canvas_style_roster_reads_with_its_quoted_names(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text(
        'student_id,name,email\nalice,"Liddell, Alice",alice@example.edu\ncarol,Plato,\n', encoding="utf-8"
    )
    students = read_roster(roster)
    assert [nbgrader_student(student) for student in students] == [
        {"first_name": "Alice", "last_name": "Liddell", "email": "alice@example.edu"},
        {"first_name": "", "last_name": "Plato"},
    ]


def test_the_example_roster_names_the_sample_class_with_the_columns_the_docs_describe():
    from tests.support.helpers import ROOT

    students = read_roster(ROOT / "docs" / "example-roster.csv")
    samples = ROOT / "tests" / "samples" / "submitted"
    assert [s.student_id for s in students] == sorted(path.name for path in samples.iterdir())
    assert all(set(s.lms) == {"name", "lms_id", "sis_user_id", "sis_login_id", "section", "email"} for s in students)
    assert nbgrader_student(students[0])["last_name"] == "Liddell"  # a "Last, First" name, as Canvas writes it
