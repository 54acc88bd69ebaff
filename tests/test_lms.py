"""Grades into an LMS: the Canvas and Moodle CSVs, matched through the roster."""

from __future__ import annotations

import pytest

from course.cli import main
from course.term.gradebook import GradeRow, write_grades_csv

ROSTER = (
    "student_id,name,lms_id,sis_user_id,sis_login_id,section,email\n"
    'alice,"Archer, Alice",1001,S-1,aa1,Autograd 101,alice@example.edu\n'
    'bob,"Baker, Bob",1002,S-2,bb2,Autograd 101,bob@example.edu\n'
    'carol,"Cole, Carol",1003,S-3,cc3,Autograd 101,carol@example.edu\n'
    'erin,=HYPERLINK("http://x"),1005,S-5,ee5,Autograd 101,erin@example.edu\n'
)


@pytest.fixture
def graded(course_root):
    write_grades_csv(
        course_root / "grades-autograd.csv",
        ("slopes",),
        [
            GradeRow("alice", {"slopes": 3}, 57, 57, "graded"),
            GradeRow("bob", {"slopes": 3}, 44.6, 57, "graded", late_penalty=11.4),
            GradeRow("carol", {}, 0, 57, "missing"),
        ],
    )
    (course_root / "roster.csv").write_text(ROSTER)
    return course_root


def test_canvas_csv_has_canvas_columns_points_possible_and_a_row_per_roster_student(graded, capsys):
    assert (
        main(
            [
                "--course",
                str(graded),
                "export",
                "--format",
                "canvas",
                "--roster",
                str(graded / "roster.csv"),
                "--column",
                "Autograd (4711)",
            ]
        )
        == 0
    )
    assert "canvas-autograd.csv" in capsys.readouterr().out
    assert (graded / "canvas-autograd.csv").read_text() == (
        '"Student","ID","SIS User ID","SIS Login ID","Section","Autograd (4711)"\n'
        '"Points Possible","","","","","57"\n'
        '"Archer, Alice","1001","S-1","aa1","Autograd 101","57"\n'
        '"Baker, Bob","1002","S-2","bb2","Autograd 101","44.6"\n'  # after the late penalty
        '"Cole, Carol","1003","S-3","cc3","Autograd 101","0"\n'  # missing work scores 0
        '"\'=HYPERLINK(""http://x"")","1005","S-5","ee5","Autograd 101",""\n'  # not graded: blank; no formula
    )


def test_moodle_csv_matches_by_email(graded):
    assert main(["--course", str(graded), "export", "--format", "moodle", "--roster", str(graded / "roster.csv")]) == 0
    lines = (graded / "moodle-autograd.csv").read_text().splitlines()
    assert lines[:2] == ['"Email address","Full name","autograd"', '"alice@example.edu","Archer, Alice","57"']


def test_a_student_the_lms_cannot_match_stops_the_export(graded, capsys):
    (graded / "roster.csv").write_text("student_id,name\nalice,Alice\nbob,Bob\ncarol,Carol\n")
    assert main(["--course", str(graded), "export", "--format", "canvas", "--roster", str(graded / "roster.csv")]) == 1
    err = capsys.readouterr().err
    assert "the roster has no LMS id for alice, bob, carol: canvas needs lms_id" in err
    assert not (graded / "canvas-autograd.csv").exists()


def test_a_graded_student_missing_from_the_roster_stops_the_export(graded, capsys):
    (graded / "roster.csv").write_text("student_id,lms_id\nalice,1001\n")
    assert main(["--course", str(graded), "export", "--format", "canvas", "--roster", str(graded / "roster.csv")]) == 1
    assert "bob, carol graded but not in the roster" in capsys.readouterr().err
    assert not (graded / "canvas-autograd.csv").exists()


@pytest.mark.parametrize(
    ("field", "forged", "words"),
    [
        ("score", '=HYPERLINK("http://x")', "alice's score '=HYPERLINK(\"http://x\")' is not a score within 0 and 57"),
        ("score", "58", "alice's score '58' is not a score within 0 and 57"),
        ("score", "nan", "alice's score 'nan' is not a score within 0 and 57"),
        ("score", "-1", "alice's score '-1' is not a score within 0 and 57"),
        ("max_score", "inf", "alice's max_score 'inf' is not a number of points"),
        ("status", "graded; DROP", "alice's status 'graded; DROP' is not one of graded, timed_out, failed, missing"),
        ("student_id", "../alice", "is not a usable student id"),
    ],
)
def test_a_grades_row_grading_could_not_have_written_stops_the_export(graded, capsys, field, forged, words):
    """grades-<assignment>.csv read back is input: the export names the file and the student, and writes nothing."""
    import csv

    path = graded / "grades-autograd.csv"
    with path.open(newline="", encoding="utf-8") as stream:
        rows = list(csv.DictReader(stream))
    rows[0][field] = forged
    with path.open("w", newline="", encoding="utf-8") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert main(["--course", str(graded), "export", "--format", "canvas", "--roster", str(graded / "roster.csv")]) == 1
    err = capsys.readouterr().err
    assert "grades-autograd.csv: " in err
    assert words in err
    assert not (graded / "canvas-autograd.csv").exists()
