"""The bulk gradebook writer against nbgrader's own API: the same records, written both ways, read back
through nbgrader's API (and formgrader's, `nbgrader export`'s view of them), must be identical."""

from __future__ import annotations

import re
import shutil
from datetime import datetime, timedelta

import pytest

from course.term.gradebook_writer import GradebookWriter
from course.term.nbgrader_bridge import ensure_assignment_in_gradebook, open_gradebook
from tests.support.helpers import ROOT

pytestmark = pytest.mark.slow

SOURCE = ROOT / "source" / "autograd" / "autograd.ipynb"
UUID = re.compile(r"^[0-9a-f]{32}$")


@pytest.fixture(scope="module")
def empty_gradebook(tmp_path_factory):
    """A gradebook that knows the assignment, as `autograd-course release` leaves it."""
    root = tmp_path_factory.mktemp("gradebook")
    shutil.copytree(ROOT / "source", root / "source")
    db = root / "gradebook.db"
    ensure_assignment_in_gradebook(root, f"sqlite:///{db}", "autograd", SOURCE)
    return root, db


def nbgrader_record(gradebook, student, scores, timestamp=None, late_penalty=0.0, extension_hours=0.0):
    """What nbgrader's API does for one autograded student (add_submission, then SaveAutoGrades' values)."""
    from nbgrader.api import MissingEntry

    try:
        gradebook.find_student(student)
    except MissingEntry:
        gradebook.add_student(student)
    try:
        submission = gradebook.find_submission("autograd", student)
    except MissingEntry:
        submission = gradebook.add_submission("autograd", student)
    submission.timestamp = timestamp
    submission.extension = timedelta(hours=extension_hours) if extension_hours else None
    notebook = gradebook.find_submission_notebook("autograd", "autograd", student)
    notebook.late_submission_penalty = late_penalty or None
    for grade in notebook.grades:
        if grade.name in scores:
            grade.auto_score = scores[grade.name]
            grade.needs_manual_grade = grade.manual_score is not None
    gradebook.db.commit()


def normalised(value):
    if isinstance(value, dict):
        return {key: normalised(item) for key, item in value.items()}
    if isinstance(value, list):
        return [normalised(item) for item in value]
    if isinstance(value, str) and UUID.match(value):
        return "<uuid>"
    return value


def read_back(db) -> dict:
    """Everything nbgrader's API says about the assignment's submissions, ids aside."""
    with open_gradebook(f"sqlite:///{db}") as gradebook:
        seen = {
            "students": sorted((s.to_dict() for s in gradebook.students), key=lambda s: s["id"]),
            "submissions": sorted(gradebook.submission_dicts("autograd"), key=lambda s: s["student"]),
            "notebooks": sorted(
                gradebook.notebook_submission_dicts("autograd", "autograd"), key=lambda s: s["student"]
            ),
            "per_student": {},
        }
        for submission in gradebook.assignment_submissions("autograd"):
            notebooks = []
            for notebook in submission.notebooks:
                notebooks.append(
                    {
                        "notebook": notebook.to_dict(),
                        "grades": sorted((g.to_dict() for g in notebook.grades), key=lambda g: (g["name"], str(g))),
                        "comments": sorted((c.to_dict() for c in notebook.comments), key=lambda c: (c["name"], str(c))),
                        "late_submission_penalty": notebook.late_submission_penalty,
                    }
                )
            seen["per_student"][submission.student_id] = {
                "submission": submission.to_dict(),
                "timestamp": submission.timestamp,
                "extension": submission.extension,
                "total_seconds_late": submission.total_seconds_late,
                "notebooks": notebooks,
            }
    return normalised(seen)


def test_bulk_records_read_back_through_nbgrader_exactly_as_nbgrader_s_own(empty_gradebook, tmp_path):
    root, empty = empty_gradebook
    ours, theirs = tmp_path / "ours.db", tmp_path / "theirs.db"
    shutil.copy(empty, ours)
    shutil.copy(empty, theirs)
    with open_gradebook(f"sqlite:///{theirs}") as gradebook:
        cells = sorted(c.name for c in gradebook.find_notebook("autograd", "autograd").grade_cells)
    assert len(cells) >= 3
    full = {name: 2.0 for name in cells}
    some = {cells[0]: 1.5, cells[1]: 0.0}
    when = datetime(2026, 11, 20, 9, 30, 15, 250000)
    first = [("alice", full, when, 2.5, 24.0), ("bob", some, None, 0.0, 0.0), ("carol", {}, when, 0.0, 0.0)]
    second = [
        ("alice", some, when + timedelta(hours=1), 0.0, 0.0),
        ("dave", full, None, 1.0, 0.0),
        ("bob", full, when, 0.0, 0.0),
        ("bob", some, when, 0.0, 0.0),
    ]

    due = datetime(2026, 11, 20, 0, 0)
    with open_gradebook(f"sqlite:///{theirs}") as gradebook:
        gradebook.update_or_create_assignment("autograd", duedate=due)
    for db in (ours, theirs):  # before grading: one student on the roster with a name, one human grade later
        with open_gradebook(f"sqlite:///{db}") as gradebook:
            gradebook.add_student("carol", first_name="Carol", last_name="Q", email="carol@example.org")

    with open_gradebook(f"sqlite:///{theirs}") as gradebook:
        for entry in first:
            nbgrader_record(gradebook, *entry)
    writer = GradebookWriter(root, f"sqlite:///{ours}", "autograd", SOURCE, due)
    try:
        for student, scores, timestamp, penalty, hours in first:
            writer.record(student, scores, timestamp=timestamp, late_penalty=penalty, extension_hours=hours)
        assert writer.commit() == {}
        assert read_back(ours) == read_back(theirs)

        for db in (ours, theirs):  # a human grades one of alice's cells by hand in formgrader
            with open_gradebook(f"sqlite:///{db}") as gradebook:
                grade = gradebook.find_grade(cells[0], "autograd", "autograd", "alice")
                grade.manual_score = 0.5
                gradebook.db.commit()

        with open_gradebook(f"sqlite:///{theirs}") as gradebook:
            for entry in second:
                nbgrader_record(gradebook, *entry)
            for student in ("erin", "alice"):
                gradebook.update_or_create_student(student)
        for student, scores, timestamp, penalty, hours in second:
            writer.record(student, scores, timestamp=timestamp, late_penalty=penalty, extension_hours=hours)
        assert writer.commit() == {}
        writer.add_students(["erin", "alice"])
    finally:
        writer.close()
    seen = read_back(ours)
    assert seen == read_back(theirs)
    alice = seen["per_student"]["alice"]["notebooks"][0]["grades"]
    assert next(g for g in alice if g["name"] == cells[0])["needs_manual_grade"] is True  # the human's stays
    assert {s["id"] for s in seen["students"]} == {"alice", "bob", "carol", "dave", "erin"}


def test_a_student_the_gradebook_refuses_costs_only_that_student(empty_gradebook, tmp_path):
    root, empty = empty_gradebook
    db = tmp_path / "gradebook.db"
    shutil.copy(empty, db)
    with open_gradebook(f"sqlite:///{db}") as gradebook:  # a trigger stands in for a row the database refuses
        from sqlalchemy import text

        gradebook.db.execute(
            text(
                "CREATE TRIGGER refuse BEFORE INSERT ON student WHEN NEW.id = 'mallory' "
                "BEGIN SELECT RAISE(ABORT, 'refused'); END"
            )
        )
        gradebook.db.commit()
    writer = GradebookWriter(root, f"sqlite:///{db}", "autograd", SOURCE)
    try:
        for student in ("alice", "mallory", "bob"):
            writer.record(student, {})
        failed = writer.commit()
    finally:
        writer.close()
    assert list(failed) == ["mallory"]
    assert "refused" in failed["mallory"]
    with open_gradebook(f"sqlite:///{db}") as gradebook:
        assert sorted(s.student_id for s in gradebook.assignment_submissions("autograd")) == ["alice", "bob"]


def test_a_batch_whose_gradebook_refuses_a_student_makes_only_them_an_autograder_error(tmp_path):
    """The files of a flush go first, the gradebook last: a refused student's row and feedback are then
    written again to say so, and everyone else is graded and recorded."""
    import csv
    import json

    from course.core.config import load_config
    from course.term.batch import grade_course
    from tests.support.helpers import copy_course, submitted_notebook, write

    root = copy_course(tmp_path / "course")
    config = load_config(root)
    for student in ("alice", "mallory"):
        write(submitted_notebook(), root / "submitted" / student / "autograd" / "autograd.ipynb")
    db = root / "gradebook.db"
    ensure_assignment_in_gradebook(root, f"sqlite:///{db}", "autograd", SOURCE)
    with open_gradebook(f"sqlite:///{db}") as gradebook:
        from sqlalchemy import text

        gradebook.db.execute(
            text(
                "CREATE TRIGGER refuse BEFORE INSERT ON student WHEN NEW.id = 'mallory' "
                "BEGIN SELECT RAISE(ABORT, 'refused'); END"
            )
        )
        gradebook.db.commit()
    grade_course(config, [], root, assignment_name="autograd", record_gradebook=True, jobs=1)
    with (root / "grades-autograd.csv").open(newline="") as stream:
        rows = {row["student_id"]: row for row in csv.DictReader(stream)}
    assert (rows["alice"]["status"], rows["alice"]["score"]) == ("graded", "57")
    assert (rows["mallory"]["status"], rows["mallory"]["score"]) == ("autograder_error", "0")
    said = json.loads((root / "feedback" / "mallory" / "autograd" / "feedback.json").read_text())
    assert said["status"] == "autograder_error"
    assert "could not record the results" in said["messages"][0]
    with open_gradebook(f"sqlite:///{db}") as gradebook:
        assert [s.student_id for s in gradebook.assignment_submissions("autograd")] == ["alice"]
        assert gradebook.find_submission("autograd", "alice").score == 57
