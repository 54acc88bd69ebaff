"""Where function answers are called (course/pipeline/probes.py): fixed per course, assignment and function, keyed
with the
course secret where there is one, and always the exercise's own point, zero, a negative and a positive point."""

from __future__ import annotations

from dataclasses import replace

import pytest

from course.core.config import load_config
from course.core.errors import ConfigError, SourceNotebookError
from course.pipeline.probes import GRID, drawn_points, has_secret, probe_points
from tests.support.helpers import ROOT


@pytest.fixture(scope="module")
def config():
    return load_config(ROOT)


def test_the_points_are_the_same_on_every_call_and_for_every_student(config, assignment):
    first = probe_points(config, assignment, assignment.default_params, None)
    assert first == probe_points(config, assignment, dict(assignment.default_params), None)
    assert first.private == {}
    points = first.points["cubic_derivative"]
    assert points[:2] == [4.0, 0.0]  # the exercise's own point (FUNCTION_POINTS: cubic_x), then zero
    assert len(points) == 2 + config.function_probes
    assert len(set(points)) == len(points)


@pytest.mark.parametrize("count", [1, 2, 5, 16])
def test_every_course_calls_at_a_negative_zero_and_a_positive_point(config, assignment, count):
    for n in range(200):
        course = replace(config, course_id=f"course-{n}", function_probes=count)
        points = probe_points(course, assignment, assignment.default_params, None).points["cubic_derivative"]
        assert 0.0 in points
        assert min(points) < 0 < max(points)
        assert set(points[2:]) <= set(GRID)
        assert len(points) == 2 + max(count, 2)


def test_the_secret_keys_the_drawn_points_and_marks_them_private(config, assignment):
    public = probe_points(config, assignment, assignment.default_params, None).points["cubic_derivative"]
    keyed = probe_points(config, assignment, assignment.default_params, b"one secret")
    other = probe_points(config, assignment, assignment.default_params, b"another secret")
    assert keyed.points["cubic_derivative"][:2] == public[:2] == [4.0, 0.0]
    assert len({tuple(p.points["cubic_derivative"]) for p in (keyed, other)} | {tuple(public)}) == 3
    assert keyed.private["cubic_derivative"] == frozenset(keyed.points["cubic_derivative"][2:])


def test_the_points_differ_by_course_assignment_and_function():
    base = drawn_points(b"k", "course", "autograd", "f", 5)
    assert base == drawn_points(b"k", "course", "autograd", "f", 5)
    assert all(
        base != changed
        for changed in (
            drawn_points(b"k", "other", "autograd", "f", 5),
            drawn_points(b"k", "course", "training", "f", 5),
            drawn_points(b"k", "course", "autograd", "g", 5),
        )
    )


def test_the_own_point_is_the_students_number(config, assignment):
    numbers = {**assignment.default_params, "cubic_x": 6}
    points = probe_points(config, assignment, numbers, None).points["cubic_derivative"]
    assert points[:2] == [6.0, 0.0]
    assert 6.0 not in points[2:]  # drawn among the others: no point is called twice


def test_an_own_point_that_is_no_number_is_the_exercises_modules_error(config, assignment):
    with pytest.raises(ConfigError, match="FUNCTION_POINTS names 'cubic_x' as the point of 'cubic_derivative'"):
        probe_points(config, assignment, {**assignment.default_params, "cubic_x": "four"}, None)


@pytest.mark.parametrize(
    ("mapping", "problem"),
    [
        ('{"cubic_derivative": "no_such_number"}', "the numbers cell's P has no 'no_such_number'"),
        ('{"cubic_grad": "cubic_x"}', "'cubic_grad' is no function answer of autograd.ipynb"),
        ('["cubic_derivative"]', "FUNCTION_POINTS must map function answers to names"),
    ],
)
def test_function_points_naming_nothing_are_refused_where_the_assignment_loads(tmp_path, mapping, problem):
    from course.pipeline.assignment import load_assignment

    exercises = tmp_path / "exercises.py"
    source = (ROOT / "source" / "autograd" / "exercises.py").read_text()
    exercises.write_text(
        source.replace('FUNCTION_POINTS = {"cubic_derivative": "cubic_x"}', f"FUNCTION_POINTS = {mapping}")
    )
    with pytest.raises(SourceNotebookError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        load_assignment(ROOT / "source" / "autograd" / "autograd.ipynb", "autograd", exercises)


def test_a_course_has_a_secret_by_its_settings_alone(config, monkeypatch):
    monkeypatch.setenv("AUTOGRAD_COURSE_SECRET", "in this shell only")
    assert not has_secret(config)  # a variable one shell holds would give `grade` and `serve` different points
    assert has_secret(replace(config, variants=True))
    assert has_secret(replace(config, variant_secret_file="course.key"))  # noqa: S106 - a file's name
