"""One run's context (course/pipeline/run_context.py): each front end reads the course's settings, looks the
assignment up and reads its notebook once, and hands that down."""

from __future__ import annotations

from dataclasses import replace

import pytest

from course.core.config import load_config
from course.core.errors import CourseError
from course.pipeline.run_context import open_run, run_of
from tests.support.helpers import ROOT, counting_loads


def test_one_grade_of_the_sample_class_loads_the_settings_and_the_assignment_once(sample_class_run):
    """Six students, one assignment: on 3e77494 the settings were looked up by name 25 times (four times a
    student, for the paths of their release and autograded/), the notebook read once."""
    assert "6 submissions" in sample_class_run.printed
    assert sample_class_run.loads == {"config parsed": 1, "settings looked up": 1, "assignment read": 1}


def test_the_count_sees_every_load():
    with counting_loads() as loads:
        config = load_config(ROOT)
        open_run(config, "training")
        config.release_notebook("autograd")  # a path asked by name looks the settings up again
    assert loads == {"config parsed": 1, "settings looked up": 2, "assignment read": 1}


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
