"""One run's context (course/pipeline/run_context.py): each front end reads the course's settings, looks the
assignment up and reads its notebook once, and hands that down."""

from __future__ import annotations

from dataclasses import replace

import pytest

from course.core.config import load_config
from course.core.errors import CourseError
from course.core.status import Status
from course.pipeline.discovery import SubmissionRef
from course.pipeline.grading import grade_submission
from course.pipeline.run_context import open_run, run_of
from tests.support.helpers import ROOT, counting_loads


def test_one_grade_of_the_sample_class_loads_the_settings_and_the_assignment_once(sample_class_run):
    """Six students, one assignment: on 3e77494 the settings were looked up by name 25 times (four times a
    student, for the paths of their release and autograded/), the notebook read once."""
    assert "6 submissions" in sample_class_run.printed
    assert sample_class_run.loads == {
        "config parsed": 1,
        "settings looked up": 1,
        "assignment read": 1,
        "secret read": 0,  # the sample course has no variants, hence no secret
    }


def test_the_count_sees_every_load():
    with counting_loads() as loads:
        config = load_config(ROOT)
        open_run(config, "training")
        config.release_notebook("autograd")  # a path asked by name looks the settings up again
    assert loads == {"config parsed": 1, "settings looked up": 2, "assignment read": 1, "secret read": 0}


def test_the_context_holds_the_assignment_its_settings_paths_and_due_date():
    config = load_config(ROOT)
    context = open_run(config, "training")
    assert (context.name, context.assignment.name, context.settings) == (
        "training",
        "training",
        config.assignment("training"),
    )
    assert context.paths.release_notebook == config.release_notebook("training")
    assert context.paths.personalised_notebook("ann") == config.personalised_notebook("ann", "training")
    assert context.due == context.settings.due
    assert open_run(config).name == config.assignments[0].name


def test_a_run_that_grades_checks_the_course_secret_and_merge_does_not(monkeypatch):
    unset = "AUTOGRAD_TEST_NO_SUCH_SECRET"  # the name of a variable that holds no secret
    config = replace(load_config(ROOT), variants=True, variant_secret_env=unset)
    monkeypatch.delenv(unset, raising=False)
    with pytest.raises(CourseError):
        open_run(config, "autograd")
    assert run_of(config, config.assignment("autograd"), grades=False).name == "autograd"


def test_a_student_graded_with_the_runs_context_reads_no_secret_again(monkeypatch, tmp_path):
    """With variants on, each student's numbers need the course secret: read once by the run's context, not again
    for every student (a notebook that is no JSON still has its numbers derived first; no sandbox runs)."""
    monkeypatch.setenv("AUTOGRAD_COURSE_SECRET", "a course secret for the tests")
    config = replace(load_config(ROOT), variants=True)
    broken = tmp_path / "autograd.ipynb"
    broken.write_text("{ not json")
    with counting_loads() as loads:
        context = open_run(config, "autograd")
        read_once = loads["secret read"]
        graded = [
            grade_submission(SubmissionRef(student, broken), context.assignment, config, secret=context.secret)
            for student in ("alice", "bob", "carol")
        ]
    assert read_once == 1
    assert context.secret is not None
    assert loads["secret read"] == 1
    assert {one.status for one in graded} == {Status.FAILED}
    assert "a course secret" not in repr(context)  # never shown
    with counting_loads() as loads:  # the count can fail: without the context's secret, each student reads it
        grade_submission(SubmissionRef("alice", broken), context.assignment, config)
    assert loads["secret read"] == 1


def test_check_looks_the_settings_up_once(tmp_path):
    """The student's `check` in a course folder: the settings once, for the assignment's name and its release's
    numbers alike (a reviewer found the release's path asked by name again)."""
    from course.pipeline.selfcheck import check_notebook
    from tests.support.helpers import submitted_notebook, write

    notebook = write(submitted_notebook(), tmp_path / "autograd.ipynb")
    config = load_config(ROOT)
    with counting_loads() as loads:
        check_notebook(notebook, config)
    assert loads["settings looked up"] == 1
