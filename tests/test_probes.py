"""Where function answers are called (course/pipeline/probes.py): fixed per course, assignment, function, student and
numbers, keyed with the course secret where there is one, and always the exercise's own point, zero, two plausible
halves, and drawn reals off that grid, a negative and a positive one among them."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest

from course.core.config import load_config
from course.core.errors import ConfigError, SourceNotebookError
from course.pipeline.probes import GRID, drawn_points, has_secret, points_label, probe_points
from tests.support.helpers import ROOT


@pytest.fixture(scope="module")
def config():
    return load_config(ROOT)


def _points(config, assignment, numbers=None, secret=None, student="alice"):
    return probe_points(config, assignment, numbers or assignment.default_params, secret, student)


def test_the_points_are_the_same_on_every_call_for_one_student(config, assignment):
    first = _points(config, assignment)
    assert first == _points(config, assignment, dict(assignment.default_params))
    points = first.points["cubic_derivative"]
    assert points[:2] == [4.0, 0.0]  # the exercise's own point (FUNCTION_POINTS: cubic_x), then zero
    assert set(points[2:4]) <= set(GRID)  # two plausible halves
    assert len(points) == 4 + config.function_probes
    assert len(set(points)) == len(points)
    assert first.private == {"cubic_derivative": frozenset(points[4:])}  # drawn: never named, with or without secret


@pytest.mark.parametrize("count", [1, 2, 5, 16])
def test_every_student_is_called_at_a_negative_zero_and_a_positive_point_off_the_grid(config, assignment, count):
    course = replace(config, function_probes=count)
    for n in range(200):
        points = _points(course, assignment, student=f"student-{n}").points["cubic_derivative"]
        assert 0.0 in points
        drawn = points[4:]
        assert len(drawn) == max(count, 2)
        assert drawn[0] < 0 < drawn[1]  # the first slice's, then the last's
        assert all(-8 <= x < 8 and (2 * x) % 1 for x in drawn)  # never on the public grid of halves
        assert all((x * 2**20).is_integer() for x in drawn)  # 24 significant bits: an exact square


def test_the_drawn_points_are_exact_for_a_quadratic_however_it_is_evaluated(config, assignment):
    import torch

    for n in range(50):
        for x in _points(config, assignment, student=f"s{n}").points["cubic_derivative"][4:]:
            at = torch.tensor(x, dtype=torch.float64, requires_grad=True)
            (at**3 - 2 * at).backward()
            assert {3 * x**2 - 2, 3 * x * x - 2, x * x * 3 - 2, (3 * x) * x - 2.0} == {at.grad.item()}


def test_each_student_and_each_secret_has_points_of_its_own(config, assignment):
    public = _points(config, assignment).points["cubic_derivative"]
    keyed = _points(config, assignment, secret=b"one secret")
    other = _points(config, assignment, secret=b"another secret")
    bob = _points(config, assignment, secret=b"one secret", student="bob")
    assert keyed.points["cubic_derivative"][:2] == public[:2] == [4.0, 0.0]
    drawn = [set(p.points["cubic_derivative"][4:]) for p in (keyed, other, bob)] + [set(public[4:])]
    assert all(not (a & b) for i, a in enumerate(drawn) for b in drawn[i + 1 :])
    assert keyed.private["cubic_derivative"] == frozenset(keyed.points["cubic_derivative"][4:])


def test_the_points_differ_by_course_assignment_function_student_and_numbers(config, assignment):
    label = partial(points_label, "course", "autograd", "f", "alice")
    base = drawn_points(b"k", label({"a": 1}), 5)
    assert base == drawn_points(b"k", label({"a": 1}), 5)
    assert all(
        not set(base) & set(drawn_points(b"k", changed, 5))
        for changed in (
            points_label("other", "autograd", "f", "alice", {"a": 1}),
            points_label("course", "training", "f", "alice", {"a": 1}),
            points_label("course", "autograd", "g", "alice", {"a": 1}),
            points_label("course", "autograd", "f", "bob", {"a": 1}),
            label({"a": 2}),
        )
    )


def test_the_own_point_is_the_students_number(config, assignment):
    numbers = {**assignment.default_params, "cubic_x": 6}
    points = _points(config, assignment, numbers).points["cubic_derivative"]
    assert points[:2] == [6.0, 0.0]
    assert 6.0 not in points[2:]  # no point is called twice


def test_an_own_point_that_is_no_number_is_the_exercises_modules_error(config, assignment):
    with pytest.raises(ConfigError, match="FUNCTION_POINTS names 'cubic_x' as the point of 'cubic_derivative'"):
        _points(config, assignment, {**assignment.default_params, "cubic_x": "four"})


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
