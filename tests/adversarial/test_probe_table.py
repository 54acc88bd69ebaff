"""A table of torch's values in place of a derivative (issue 50, items 5 and 6): it earns exactly what the honest
literals beside it earn, and the integrity report names it; and no message a student sees names the points drawn for
her, so one student's feedback helps no classmate build a table.

Until the points were drawn per student from reals (course/pipeline/probes.py), they were halves in [-8, 8], the same
for every student of a course: a 33-entry table of 3x² - 2 scored 57/57 with no finding, and a function that raised at
every point had its feedback name those points for the whole class.
"""

from __future__ import annotations

import ast
import html
import re

import pytest

from course.core.answers import describe
from course.pipeline.render import question_markdown, render_html, summary_markdown
from tests.support.adversarial import grade, per_question
from tests.support.gradescope import unescape_markdown
from tests.support.helpers import CORRECT_CODE, submitted_notebook

pytestmark = pytest.mark.slow

FULL = 57
FUNCTION_POINTS = 5  # cubic_derivative's share of the cubic question


def _slope(x: float) -> float:
    return 3 * x * x - 2


def _table(points) -> str:
    """A literal table of torch's values at `points`, looked up by the function answer."""
    rows = ", ".join(f"{x!r}: {_slope(x)!r}" for x in points)
    return f"def cubic_derivative(x):\n    table = {{{rows}}}\n    return table.get(x, 0.0)\n"


GRID = [n / 2 for n in range(-16, 17)]  # the 33 halves in [-8, 8], zero among them: today's public grid
# What a student would guess the grader calls at: whole numbers, halves, quarters, tenths in [-10, 10], 4 (cubic_x)
PLAUSIBLE = sorted({n / d for d in (1, 2, 4, 10) for n in range(-10 * d, 10 * d + 1)})
GRID_ONLY = "def cubic_derivative(x):\n    return 3 * x * x - 2 if (2 * x).is_integer() else 0.0\n"

ATTACKS = {
    "the 33-entry grid table": _table(GRID),
    "a table at plausible points": _table(PLAUSIBLE),
    "a function right only on the grid": GRID_ONLY,
}


def _notebook(function: str) -> dict:
    return submitted_notebook({**CORRECT_CODE, "cubic_derivative": function})


@pytest.fixture(scope="module")
def honest(tmp_path_factory):
    """The same notebook with the function answer left as released: what its honest literals earn."""
    graded, _ = grade(_notebook("def cubic_derivative(x):\n    return ...\n"), tmp_path_factory.mktemp("honest"))
    assert graded.status == "graded"
    assert graded.feedback.score == FULL - FUNCTION_POINTS
    return per_question(graded)


def _table_findings(graded) -> list[str]:
    return [f for f in graded.integrity if "cubic_derivative" in f and "table" in f]


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_table_earns_exactly_the_honest_literals_with_an_integrity_finding(attack, honest, tmp_path, grader):
    graded, _ = grader(_notebook(ATTACKS[attack]), tmp_path, student="mallory")
    assert graded.status == "graded"
    assert per_question(graded) == honest
    assert _table_findings(graded), graded.integrity
    for view in _student_views(graded):  # the report is the instructor's alone
        assert "a table of torch's values" not in view


def test_a_right_derivative_has_no_table_finding(tmp_path, grader):
    graded, _ = grader(_notebook(CORRECT_CODE["cubic_derivative"]), tmp_path)
    assert graded.feedback.score == FULL
    assert not _table_findings(graded)


def _student_views(graded) -> list[str]:
    """What a student is shown: the page (nbgrader's feedback, the service's page) and Gradescope's Markdown."""
    feedback = graded.feedback
    markdown = [question_markdown(q, feedback.reveals_torch_values) for q in feedback.questions]
    return [
        html.unescape(render_html(feedback)),
        *(unescape_markdown(m) for m in [*markdown, summary_markdown(feedback)]),
    ]


def _folder(tmp_path, name):
    folder = tmp_path / name
    folder.mkdir()
    return folder


def _drawn(graded) -> list[float]:
    cubic = next(q for q in graded.feedback.to_json()["questions"] if q["id"] == "cubic")
    function = next(v for v in cubic["values"] if v["name"] == "cubic_derivative")
    return [p["x"] for p in function["probes"] if p["private"]]


def _spellings(x: float) -> set[str]:
    """How a point could be written out: repr, `describe`, %g, and with `.` and `-` spelled for a class name."""
    forms = {repr(x), describe(x), f"{x:g}", f"{x:.6g}"}
    return forms | {f.replace(".", "_").replace("-", "m") for f in forms}


RIGHT_AT_ZERO_AND_FOUR = "def cubic_derivative(x):\n    if x == 0 or x == 4:\n        return 3 * x * x - 2\n"
FAILING = {  # right at zero and at the exercise's own point, failing everywhere else
    "raises": "    raise ValueError('no')\n",
    "raises a class named after x": (
        "    name = 'At' + repr(x).replace('.', '_').replace('-', 'm')\n    raise type(name, (Exception,), {})()\n"
    ),
    "returns x": "    return x\n",
    "returns a type named after x": ("    return type('At' + repr(x).replace('.', '_').replace('-', 'm'), (), {})()\n"),
}


@pytest.fixture(scope="module")
def secret_course(tmp_path_factory):
    """The course with a course secret (variants off), so that today's main marks its drawn points too."""
    from dataclasses import replace

    from course.core.config import load_config
    from course.pipeline.assignment import load_assignment
    from tests.support.adversarial import fast_config
    from tests.support.helpers import copy_course

    root = copy_course(tmp_path_factory.mktemp("secret") / "course")
    secret = root / "course.key"
    secret.write_text("a course secret for the probe points\n")
    secret.chmod(0o600)
    yaml = root / "source" / "course.yaml"
    yaml.write_text(yaml.read_text() + "\nvariant_secret_file: course.key\n")
    config = replace(load_config(root), limits=fast_config().limits)
    return config, load_assignment(config.source_notebook(), "autograd")


@pytest.mark.parametrize("reveal", [True, False], ids=["torch-values", "verdicts"])
@pytest.mark.parametrize("function", list(FAILING))
def test_a_failing_call_is_described_without_its_point(function, reveal, secret_course, tmp_path, monkeypatch):
    from dataclasses import replace

    monkeypatch.delenv("AUTOGRAD_COURSE_SECRET", raising=False)
    config, assignment = secret_course
    config = replace(config, feedback_reveals="torch_values" if reveal else "verdicts")
    notebook = _notebook(RIGHT_AT_ZERO_AND_FOUR + FAILING[function])
    graded, _ = grade(notebook, tmp_path, config=config, assignment=assignment, student="alice")
    assert graded.feedback.reveals_torch_values is reveal
    drawn = _drawn(graded)
    assert len(drawn) >= 2
    views = _student_views(graded)
    assert any("drawn for you" in view for view in views)
    for view in views:
        for x in drawn:
            for spelled in _spellings(x) | _spellings(_slope(x)):
                assert spelled not in view, (function, spelled)


LEAKER = "def cubic_derivative(x, seen=[]):\n    seen.append(x)\n    raise ValueError('no')\n"
CARRY_OUT = "raise RuntimeError('POINTS ' + repr(cubic_derivative.__defaults__[0]))"


def test_one_students_leaked_points_are_no_table_for_another(honest, tmp_path, grader):
    """alice's function records where it is called and a later cell's error carries the points out (her feedback
    shows her own error text): a table of torch's values at them answers only alice's points, never bob's."""
    from tests.support.helpers import add_cell

    alice, _ = grader(add_cell(_notebook(LEAKER), CARRY_OUT), _folder(tmp_path, "alice"), student="alice")
    shown = next(e.error for e in alice.feedback.cell_errors if "POINTS" in e.error)
    leaked = ast.literal_eval(re.search(r"POINTS (\[.*\])", shown).group(1))
    assert set(_drawn(alice)) <= set(leaked)  # every point she was called at, her drawn ones among them

    bob, _ = grader(_notebook(_table(leaked)), _folder(tmp_path, "bob"), student="bob")
    assert not set(_drawn(bob)) & set(leaked)
    assert per_question(bob) == honest
    assert _table_findings(bob), bob.integrity


def test_points_one_attempt_gave_away_are_no_table_for_her_next(honest, tmp_path, grader):
    """alice's own attempt carries her points out in its error text; her next attempt, a table of torch's values
    at exactly those points, is another notebook, called at points of its own: the table earns only the honest
    literals, with a finding. (With points a function of the student alone, this table answered every drawn point.)
    Her own points stay hers whatever she edits: a resubmission can only add points.
    Her first notebook, graded again, is called where it was before."""
    from tests.support.helpers import add_cell

    leaker = add_cell(_notebook(LEAKER), CARRY_OUT)
    first, _ = grader(leaker, _folder(tmp_path, "first"), student="alice")
    shown = next(e.error for e in first.feedback.cell_errors if "POINTS" in e.error)
    leaked = ast.literal_eval(re.search(r"POINTS (\[.*\])", shown).group(1))
    assert set(_drawn(first)) <= set(leaked)

    table, _ = grader(_notebook(_table(leaked)), _folder(tmp_path, "next"), student="alice")
    assert set(_drawn(table)) - set(leaked)  # the next notebook's own points, which no earlier attempt gave away
    assert per_question(table) == honest
    assert _table_findings(table), table.integrity
    again, _ = grader(leaker, _folder(tmp_path, "again"), student="alice")
    assert _drawn(again) == _drawn(first)
    assert _drawn(first)[:-2] == _drawn(table)[:-2]  # the student's own drawn points, in every notebook of hers


def _points(graded) -> list[float]:
    cubic = next(q for q in graded.feedback.to_json()["questions"] if q["id"] == "cubic")
    return [p["x"] for p in next(v for v in cubic["values"] if v["name"] == "cubic_derivative")["probes"]]


def test_the_same_student_gets_the_same_points_and_score_on_every_regrade(tmp_path, grader):
    """Points of her own, a function of the course, the student and her numbers: never of the run."""
    notebook = _notebook(ATTACKS["a table at plausible points"])
    runs = [grader(notebook, _folder(tmp_path, f"run-{n}"), student="carol")[0] for n in range(2)]
    assert _points(runs[0]) == _points(runs[1])
    assert runs[0].feedback.to_json() == runs[1].feedback.to_json()
    assert runs[0].integrity == runs[1].integrity
    other, _ = grader(notebook, _folder(tmp_path, "dave"), student="dave")
    assert _points(other)[:2] == _points(runs[0])[:2] == [4.0, 0.0]  # the exercise's own point, zero: public
    assert not set(_points(other)[4:]) & set(_points(runs[0])[4:])  # the drawn ones: each student's own
