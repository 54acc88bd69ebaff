"""nbgrader's own tools agree with our grades: formgrader's API (NbGraderAPI), read after `autograd-course grade`
in the README's default layout (submitted/ at the course root, grade with no PATH)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from tests.support.helpers import SAMPLE_TIMESTAMPS, formgrader_api

pytestmark = pytest.mark.slow


@pytest.fixture
def graded_course(graded_sample_class):
    """The sample class graded by `autograd-course grade` in the default layout (tests/conftest.py), read only."""
    return graded_sample_class[0]


def our_grades(root):
    with (root / "grades-autograd.csv").open(newline="") as stream:
        return {row["student_id"]: row for row in csv.DictReader(stream)}


def test_formgrader_shows_every_student_autograded_with_our_scores(graded_course):
    api = formgrader_api(graded_course)
    ours = our_grades(graded_course)
    submissions = {s["student"]: s for s in api.get_submissions("autograd")}
    assert set(submissions) == set(ours)
    for student, submission in submissions.items():
        assert submission["autograded"], student
        assert not submission["needs_manual_grade"], student
        assert submission["score"] == float(ours[student]["score"]), student
    assert submissions["alice"]["timestamp"].startswith("2026-11-20T09:00:00")


def test_formgrader_has_each_notebook_for_manual_grading_and_nothing_left_to_grade(graded_course):
    api = formgrader_api(graded_course)
    notebooks = api.get_notebook_submissions("autograd", "autograd")
    assert {n["student"] for n in notebooks} == set(our_grades(graded_course))  # not "No data available"
    assert not any(n["needs_manual_grade"] for n in notebooks)
    assert api.get_assignment("autograd")["num_submissions"] == 6


def test_per_cell_scores_in_the_gradebook_are_ours(graded_course):
    from nbgrader.api import Gradebook

    ours = our_grades(graded_course)
    with Gradebook(f"sqlite:///{graded_course / 'gradebook.db'}") as gradebook:
        for student, row in ours.items():
            notebook = gradebook.find_submission_notebook("autograd", "autograd", student)
            for grade in notebook.grades:
                assert grade.auto_score == float(row[grade.name.removeprefix("test_")]), (student, grade.name)
                assert grade.needs_manual_grade is False, (student, grade.name)


def test_autograded_notebook_has_no_hidden_tests_and_shows_our_result(graded_course):
    path = graded_course / "autograded" / "bob" / "autograd" / "autograd.ipynb"
    text = path.read_text()
    assert "BEGIN HIDDEN TESTS" not in text
    assert "marks.value(" not in text
    cells = {c["metadata"].get("nbgrader", {}).get("grade_id"): c for c in json.loads(text)["cells"]}
    assert cells["test_tiny_net"]["outputs"][0]["text"].startswith("autograd-course: 6 / 7 points")
    stamp = (graded_course / "autograded" / "alice" / "autograd" / "timestamp.txt").read_text()
    assert stamp == SAMPLE_TIMESTAMPS["alice"]
    # frank's file is no notebook: the release stands in, with a note, so formgrader can still open it
    frank = json.loads((graded_course / "autograded" / "frank" / "autograd" / "autograd.ipynb").read_text())
    assert "could not read this submission" in frank["cells"][0]["source"]


def nbgrader(root, *args):
    """The real `nbgrader` command, run in the course root as an instructor would."""
    import subprocess
    import sys
    from pathlib import Path

    command = [str(Path(sys.executable).parent / "nbgrader"), *args]
    return subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=300, check=False)


def test_nbgrader_export_agrees_and_does_not_collide(graded_course):
    ours_before = (graded_course / "grades-autograd.csv").read_text()
    done = nbgrader(graded_course, "export")
    assert done.returncode == 0, done.stderr
    assert (graded_course / "grades-autograd.csv").read_text() == ours_before
    with (graded_course / "grades.csv").open(newline="") as stream:
        theirs = {row["student_id"]: row for row in csv.DictReader(stream)}
    ours = our_grades(graded_course)
    assert {s: float(r["score"]) for s, r in theirs.items()} == {s: float(r["score"]) for s, r in ours.items()}


def test_nbgrader_generate_feedback_keeps_our_page_or_shows_no_hidden_test(graded_course, tmp_path):
    course = tmp_path / "copy"  # generate_feedback may replace feedback/: run it on a copy of the graded course
    shutil.copytree(graded_course, course)
    ours = (course / "feedback" / "bob" / "autograd" / "autograd.html").read_text()
    done = nbgrader(course, "generate_feedback", "autograd")
    assert done.returncode == 0, done.stderr
    assert (course / "feedback" / "bob" / "autograd" / "autograd.html").read_text() == ours  # skipped: up to date
    done = nbgrader(course, "generate_feedback", "autograd", "--force")
    assert done.returncode == 0, done.stderr
    page = (course / "feedback" / "bob" / "autograd" / "autograd.html").read_text()
    assert "autograd-course: 6 / 7 points" in page  # nbgrader's own rendering of our autograded notebook
    for secret in ("BEGIN HIDDEN TESTS", "marks.value(", "BEGIN SOLUTION", "net_dL_dw = 12"):
        assert secret not in page


def test_each_nbgrader_run_gets_kernel_sockets_of_its_own(tmp_path):
    """jupyter_client numbers ipc sockets from 1 under one prefix: graders sharing a prefix race for the same
    socket files and nbgrader autograde fails with 'Invalid Signature'."""
    from course.term.nbgrader_bridge import nbgrader_config

    first, second = (nbgrader_config(tmp_path, "sqlite://") for _ in range(2))
    assert first.KernelManager.transport == second.KernelManager.transport == "ipc"
    assert first.KernelManager.ip != second.KernelManager.ip
    assert Path(first.KernelManager.ip).parent == Path(second.KernelManager.ip).parent  # Jupyter's runtime folder
