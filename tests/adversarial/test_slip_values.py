"""A student's wrong value reaches the slip search (course/pipeline/slip_search.py) and the rule drafts
(course/pipeline/slip_rules.py) only to be compared with: text that looks like code is never run nor written into a
draft, values the comparison cannot take (an integer too large for a float, NaN, infinities, deep or long lists) are
"unexplained", never an error of the class's analysis, and nothing a student sends changes what the search finds for
the next value (its cache is keyed by the grader's numbers, never by a student's value)."""

from __future__ import annotations

from pathlib import Path

import pytest

from course.pipeline.assignment import load_assignment
from tests.support.helpers import ROOT

TOLERANCE = 1e-6


def deep_list(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def hostile_values(marker: Path) -> list:
    code = f"__import__('pathlib').Path({str(marker)!r}).write_text('ran')"
    return [
        code,
        f"exec({code!r})",
        "6.0",
        10**400,
        -(10**400),
        float("nan"),
        float("inf"),
        -float("inf"),
        True,
        None,
        deep_list(500),
        [6.0] * 100_000,
        [10**400, 6.0, 6.0],
        [code, code, code],
    ]


@pytest.fixture(scope="module")
def search():
    from course.pipeline.slip_search import explainer

    course = load_assignment(ROOT / "source/autograd/autograd.ipynb", "autograd")
    return explainer(course, tolerance=TOLERANCE)


@pytest.mark.parametrize(
    ("question", "answer"),
    [("tiny_net", "net_dL_dw"), ("accumulation", "accumulated_grads"), ("closed_relu", "closed_dL_dw")],
)
def test_hostile_values_are_only_compared(search, tmp_path, question, answer):
    from course.pipeline.slip_rules import draft_rule

    marker = tmp_path / "ran"
    numbers = dict(search.assignment.default_params)
    for value in hostile_values(marker):
        assert search(question, answer, numbers, value) is None, repr(value)[:80]
        assert draft_rule(search, question, answer, numbers, value) is None, repr(value)[:80]
    assert not marker.exists()
    # The search still finds what it found before: no value of a student's changed its tables.
    planted = {"tiny_net": 6.0, "accumulation": [6.0, 6.0, 6.0], "closed_relu": 4.0}[question]
    assert search(question, answer, numbers, planted) is not None


def test_the_grader_numbers_key_the_cache_not_the_students_value(search):
    numbers = dict(search.assignment.default_params)
    before = search.stats.tables
    for value in (1.0, 2.0, "x", [1.0], None):
        search("tiny_net", "net_dL_dw", numbers, value)
    assert search.stats.tables - before <= 1  # one table for these numbers at most, whatever the values
