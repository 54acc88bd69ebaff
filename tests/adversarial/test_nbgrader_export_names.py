"""A roster name with a comma or a quote broke `nbgrader export` for that student: nbgrader's CsvExportPlugin writes
every field unquoted, so "Liddell, Alice" (split at the last space into "Liddell," and "Alice") gave a row of 12
fields under a header of 11, and `csv.DictReader` read her email as her raw_score and her score as 0.0.

What we put in nbgrader's student table (`course.term.roster.nbgrader_student`), from the roster names LMSs and people
write, comes out of nbgrader's own exporter (run in-process here, the code `nbgrader export` runs) as rows that
parse into the right columns, student by student."""

from __future__ import annotations

import csv

from course.term.nbgrader_bridge import open_gradebook, record_students
from course.term.roster import Student, nbgrader_student

ROSTER = {  # student id: (the roster's name, its email)
    "alice": ("Liddell, Alice", "alice@example.edu"),
    "bob": ('O\'Brien, Robert "Bob"', "bob@example.edu"),
    "carol": ("Plato", "carol@example.edu"),
    "dave": ("Dvořák, Antonín", "dave@example.edu"),
    "erin": ('"Erin', "erin,east@example.edu"),  # an opening quote swallowed the fields after it
    "frank": ("King, Martin Luther, Jr.\nDrop", "frank@example.edu"),
    "grace": ('=HYPERLINK("http://x"), Grace', "grace@example.edu"),
}
EXPECTED = {  # (first_name, last_name, email) in nbgrader's export
    "alice": ("Alice", "Liddell", "alice@example.edu"),
    "bob": ("Robert 'Bob'", "O'Brien", "bob@example.edu"),
    "carol": ("", "Plato", "carol@example.edu"),
    "dave": ("Antonín", "Dvořák", "dave@example.edu"),
    "erin": ("", "'Erin", ""),
    "frank": ("Martin Luther Jr. Drop", "King", "frank@example.edu"),
    "grace": ("Grace", "'=HYPERLINK('http://x')", "grace@example.edu"),
}


def test_nbgrader_export_of_roster_names_parses_into_the_right_columns(tmp_path):
    from nbgrader.plugins.export import CsvExportPlugin

    db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    record_students(
        db_url,
        {sid: nbgrader_student(Student(sid, {"name": name, "email": email})) for sid, (name, email) in ROSTER.items()},
    )
    exported = tmp_path / "grades.csv"
    with open_gradebook(db_url) as gradebook:
        gradebook.update_or_create_assignment("autograd")
        CsvExportPlugin(to=str(exported)).export(gradebook)
    with exported.open(newline="", encoding="utf-8") as stream:
        rows = {row["student_id"]: row for row in csv.DictReader(stream)}
    assert set(rows) == set(ROSTER)
    for student, row in rows.items():
        assert None not in row, (student, row)  # no field too many...
        assert None not in row.values(), (student, row)  # ...and none too few
        assert (row["first_name"], row["last_name"], row["email"]) == EXPECTED[student], student
        assert (row["raw_score"], row["score"]) == ("0.0", "0.0"), student
