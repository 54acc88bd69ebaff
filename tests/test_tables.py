"""A function answer that reads like a table of torch's values (course/pipeline/tables.py): the static look at its
code, and the judge's checks of a function right only where a table would be."""

from __future__ import annotations

import pytest

from course.core.answers import FUNCTION, Answer, Probe
from course.pipeline import handwork
from course.pipeline.feedback import failure_in_words
from course.pipeline.judge import judge
from course.pipeline.tables import answered_only_plausible, looked_up
from course.sandbox.handed_in import Cell
from tests.support.helpers import contract_answers

TOL = 1e-6


def _parsed(source: str) -> handwork.ParsedCells:
    return handwork.parse_cells((Cell(3, "your answer cell for 9. Challenge", source),))


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("T = {}\ndef cubic_derivative(x):\n    return T[x]\n", "indexes a table with a computed key"),
        ("def cubic_derivative(x):\n    return {1.5: 4.75}.get(x, 0.0)\n", "looks its argument up with .get"),
        ("def cubic_derivative(x):\n    return 4.75 if x in (1.5,) else 0\n", "tests whether its argument is in"),
        ("def cubic_derivative(x):\n    if x == 2.5:\n        return 16.75\n", "compares its argument with a number"),
        ("def cubic_derivative(x):\n    t = {1: 1, 2: 10, 3: 25, 4: 46}\n    return 0\n", "holds a table of numbers"),
    ],
)
def test_code_that_looks_its_argument_up_is_named(source, said):
    (finding,) = looked_up(_parsed(source), ("cubic_derivative",))
    assert finding.startswith("the answer cell of 9. Challenge: cubic_derivative ")
    assert said in finding


@pytest.mark.parametrize(
    "source",
    [
        "def cubic_derivative(x):\n    return 3 * x ** 2 - 2\n",
        "def cubic_derivative(x):\n    if x == 0:\n        return -2.0\n    return 3 * x * x - 2\n",
        "def other(x):\n    return {1: 1, 2: 2, 3: 3, 4: 4}[x]\n",  # not a function answer
    ],
)
def test_a_derivative_is_not_named(source):
    assert looked_up(_parsed(source), ("cubic_derivative",)) == []


def _judged(assignment, answer, private):
    answers = contract_answers(assignment)
    answers["cubic_derivative"] = answer
    return tuple(judge(assignment, answers, tolerance=TOL, private_points={"cubic_derivative": private}))


def test_right_at_every_plausible_point_and_wrong_at_every_drawn_one_is_named(assignment):
    slope = lambda x: 3 * x * x - 2  # noqa: E731
    plausible, drawn = (4.0, 0.0, -3.5, 2.5), (-6.81, 6.59, -2.87)
    table = Answer(FUNCTION, probes=(*(Probe(x, slope(x)) for x in plausible), *(Probe(x, 0.0) for x in drawn)))
    (finding,) = answered_only_plausible(_judged(assignment, table, frozenset(drawn)))
    assert finding.startswith("cubic_derivative agrees with torch at each of the 4 plausible points")
    one_right = Answer(FUNCTION, probes=(*table.probes[:-1], Probe(drawn[-1], slope(drawn[-1]))))
    assert answered_only_plausible(_judged(assignment, one_right, frozenset(drawn))) == []
    wrong_everywhere = Answer(FUNCTION, probes=tuple(Probe(p.x, 1.0) for p in table.probes))
    assert answered_only_plausible(_judged(assignment, wrong_everywhere, frozenset(drawn))) == []
    assert answered_only_plausible(_judged(assignment, table, frozenset())) == []  # a test's own points: none drawn


@pytest.mark.parametrize(
    ("error", "said"),
    [
        ("", "disagrees with torch's slope"),
        ("raised ZeroDivisionError", "raised ZeroDivisionError"),
        ("raised At_m3_217529296875", "raised an exception of a class of its own"),
        ("did not return within 2 s", "did not return in time"),
        ("returned a value of type At_m3_2, not a plain number", "returned something that is not a plain number"),
        ("returned `...` (replace `return ...` with your derivative), not a plain number", "returned `...`"),
    ],
)
def test_a_failing_call_at_a_drawn_point_is_told_in_our_words(error, said):
    assert failure_in_words(error).startswith(said)
