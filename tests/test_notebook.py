"""course.notebook, what the student's notebook imports: form checks that say every problem of a question
at once in sentences (in a real kernel too, without a traceback), and nbgrader's Marks."""

from __future__ import annotations

import dataclasses
import json

import nbformat
import pytest
import torch
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from course.notebook import FormError, Marks, check_form, check_with_torch
from tests.support.helpers import CORRECT_CODE, RELEASE_NOTEBOOK, fill, load

NBGRADER_VALIDATE_WIDTH = 87  # nbgrader validate cuts longer lines with "..."


def run_check(code: str, **answers) -> tuple[list[str], str]:
    """Run a form cell's code with `answers` as the notebook's globals: (problems, printed)."""
    import contextlib
    import io

    namespace = {"check_form": check_form, **answers}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        try:
            exec(code, namespace)  # noqa: S102 - a form cell of the course
        except FormError as error:
            return list(error.problems), printed.getvalue()
    return [], printed.getvalue()


def test_every_problem_of_a_question_is_reported_at_once():
    problems, printed = run_check(
        'check_form(a="number", b="list of 3 numbers", c="True or False", d="number", e="number or None")',
        a=...,
        b=[1, 2],
        c="False",
        e=None,
    )
    assert problems == [
        "a is still `...`: replace it with the value you derived by hand.",
        "b should be a list of 3 numbers, but it has 2.",
        "c should be True or False, but it is a str: 'False'.",
        "d is not defined: run its answer cell (keep the line `d = ...`).",
    ]
    assert printed == "ok   e: right form (number or None)\n"


@pytest.mark.parametrize(
    ("form", "value", "problem"),
    [
        ("number", torch.tensor(3.0), "x is a tensor: write down the plain number you derived, e.g. x = 7.5"),
        ("number", True, "x should be a number, but it is a bool: True."),
        ("number", float("nan"), "x should be a number, but it is a float: nan."),
        ("number", "12", "x should be a number, but it is a str: '12'."),
        ("list of 2 numbers", (1, 2), "x should be a list of 2 numbers, but it is a tuple: (1, 2)."),
        ("list of 2 numbers", [1, ...], "x should be a list of 2 numbers, but item 2 is still `...`."),
        ("list of 2 numbers", [1, "2"], "x should be a list of 2 numbers, but item 2 is a str: '2'."),
        ("function", 3, "x should be a function of x, but it is an int: 3."),
        ("function", lambda x: ..., "x(1.5) returns `...`: replace `return ...` with your derivative."),
        ("function", lambda x: 1 / 0, "x(1.5) raised ZeroDivisionError: division by zero"),
        ("function", lambda x: torch.tensor(x), "x should return a number, but x(1.5) returned a tensor."),
        (
            "class name or None",
            "Add Backward",
            "x should be a class name in quotes (a string) or None, but it is a str: 'Add Backward'.",
        ),
        ("class name or None", 0, "x should be a class name in quotes (a string) or None, but it is an int: 0."),
        # said in words, never a type's internal name or a memory address
        ("number", None, "x should be a number, but it is None."),
        ("function", lambda x: None, "x should return a number, but x(1.5) returned None."),
        ("list of 2 numbers", [1, None], "x should be a list of 2 numbers, but item 2 is None."),
        ("number", torch.tensor(2.0).item, "x should be a number, but it is a function (item)."),
        (
            "class name or None",
            (torch.tensor(2.0, requires_grad=True) ** 2).grad_fn,
            "x should be a class name in quotes (a string) or None, but it is a PowBackward0 object.",
        ),
        ("number", object(), "x should be a number, but it is an object."),
        (
            "list of 3 numbers",
            torch.tensor([1.0, 2.0, 3.0]),
            "x is a tensor: write down the 3 plain numbers you derived as a list, e.g. x = [7.5, ...]",
        ),
    ],
)
def test_each_wrong_form_is_said_in_a_sentence(form, value, problem):
    assert run_check(f"check_form(x={form!r})", x=value)[0] == [problem]


@pytest.mark.parametrize(
    ("form", "value"),
    [
        ("number", 2),
        ("number", -0.5),
        ("number or None", None),
        ("True or False", False),
        ("list of 3 numbers", [1, 2.5, -3]),
        ("function", lambda x: 3 * x**2 - 2),
        ("class name or None", "AddBackward0"),
        ("class name or None", None),
    ],
)
def test_a_well_formed_answer_passes(form, value):
    assert run_check(f"check_form(x={form!r})", x=value) == ([], f"ok   x: right form ({form})\n")


def test_quiet_prints_nothing_but_still_fails():
    assert run_check('check_form(x="number", quiet=True)', x=1) == ([], "")
    assert run_check('check_form(x="number", quiet=True)', x=...)[0] == [
        "x is still `...`: replace it with the value you derived by hand."
    ]


def test_a_form_that_does_not_exist_is_the_instructors_error():
    with pytest.raises(ValueError, match="'nmber' is not a form"):
        run_check('check_form(x="nmber")', x=1)


def test_the_rendered_message_is_plain_sentences_that_fit_nbgrader_validate():
    long_name = "a_rather_long_answer_name_for_a_long_problem"
    problems, _ = run_check(f'check_form(x="number", {long_name}="list of 8 numbers")', x=..., **{long_name: "no"})
    lines = FormError(problems)._render_traceback_()
    assert lines[0] == "Not ready yet: 2 answers here need your attention."
    assert lines[1] == "  - x is still `...`: replace it with the value you derived by hand."
    assert lines[-1] == "(This checks only the form of your answers, never whether a value is right.)"
    assert all(len(line) <= NBGRADER_VALIDATE_WIDTH for line in lines)
    assert " ".join(line.strip(" -") for line in lines[2:-1]) == problems[1]
    assert FormError(problems[:1])._render_traceback_()[0] == "Not ready yet: one answer here needs your attention."


def test_marks_scores_value_by_value_for_plain_nbgrader(capsys):
    marks = Marks()
    marks.value("a", 6, torch.tensor(6.0), "hint a")
    marks.value("b", [1, 2], [torch.tensor(1.0), torch.tensor(3.0)], "hint b", points=2)
    marks.value("c", None, None, "hint c")
    marks.function("f", lambda x: 2 * x, lambda x: torch.tensor(2.0 * x), "hint f", points=3)
    marks.value("g", "PowBackward0", "PowBackward0", "hint g")
    marks.value("v", [2.0, 4.0], torch.tensor([2.0, 4.0]), "hint v")  # a vector reference, as judge.to_plain reads it
    marks.value("t", [1, 2], (torch.tensor(1.0), torch.tensor(2.0)), "hint t")
    marks.value("h", "AddBackward0", "MulBackward0", "hint h")
    marks.value("i", None, "MulBackward0", "hint i")
    assert marks.total() == 8
    assert (
        capsys.readouterr().out == "b does not match torch. hint b\nh does not match torch. hint h\n"
        "i does not match torch. hint i\n"
    )


def run_torch_check(code: str, **answers) -> list[str]:
    """Run a torch cell's `check_with_torch(...)` with `answers` as the notebook's globals: the printed lines."""
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(code, {"check_with_torch": check_with_torch, "torch": torch, **answers})  # noqa: S102 - a torch cell
    return printed.getvalue().splitlines()


def test_check_with_torch_says_match_or_not_yet_and_never_torchs_value():
    lines = run_torch_check(
        "check_with_torch(a=torch.tensor(6.0), b=torch.tensor(-0.0408, dtype=torch.float64), c=torch.tensor(2.5),"
        " d=True, e='MulBackward0', f=[torch.tensor(9.0), torch.tensor(0.5625), torch.tensor(4.0)], g=None,"
        " h=torch.tensor(1.0), i=torch.tensor(7.25), j=torch.tensor(3.0))",
        a=6,
        b=-0.0408,
        c=3,
        d=False,
        e="AddBackward0",
        f=[9, 0.25, 5],
        g=None,
        h=...,
        i=torch.tensor(7.25),
    )
    assert lines == [
        "✓ a matches torch.",
        "✓ b matches torch.",
        "✗ c not yet: yours is higher than torch's.",
        "✗ d not yet: torch disagrees.",
        "✗ e not yet: torch disagrees.",
        "✗ f not yet (item 2: yours is lower than torch's; item 3: yours is higher than torch's).",
        "✓ g matches torch.",
        "✗ h is still `...`: write your hand value first, then run this cell again.",
        "✗ i is a tensor: write down the plain value you derived, not torch's.",
        "j is not defined: run its answer cell first.",
        "3 of 10 match torch. Find the slip on paper, then run this cell again.",
    ]
    said = "\n".join(lines)
    for number in ("2.5", "0.5625", "7.25", "Mul", "True"):  # torch's values, where the hand value differs
        assert number not in said


def test_check_with_torch_compares_lists_item_by_item_and_counts_a_whole_match():
    assert run_torch_check(
        "check_with_torch(v=[torch.tensor(1.0), torch.tensor(2.0)], w=torch.tensor([1.0, 2.0]))",
        v=[1, 2.0],
        w=[1, 2, 3],
    ) == [
        "✓ v matches torch at every item.",
        "✗ w should be a list of 2 numbers, as torch's is.",
        "1 of 2 match torch. Find the slip on paper, then run this cell again.",
    ]
    assert run_torch_check("check_with_torch(v=torch.tensor(0.1 + 0.2))", v=0.3) == [
        "✓ v matches torch.",
        "1 of 1 match torch.",
    ]
    assert run_torch_check("check_with_torch(f=torch.tensor(46.0))", f=lambda x: 3 * x**2 - 2)[0] == (
        "✗ f is a function: compare what it returns at a point with torch's slope there."
    )


# ----------------------------------------------------------------------------------- in a real kernel


def execute(notebook: dict) -> nbformat.NotebookNode:
    """Run the notebook in a real kernel like Run All: it stops at the first cell that fails."""
    node = nbformat.reads(json.dumps(notebook), as_version=4)
    client = NotebookClient(node, timeout=120, kernel_name="python3")
    with pytest.raises(CellExecutionError):
        client.execute()
    return node


def cell_of(notebook, grade_id: str):
    return next(c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


@pytest.mark.slow
def test_in_a_kernel_a_form_check_shows_its_sentences_and_no_traceback():
    """The released notebook, the slopes right and the graph walk half done: Run All stops at the graph
    walk's form check, which shows the well formed value as ok and both problems, and nothing else."""
    answers = {**CORRECT_CODE, "local_slopes": "(1, 2, 6)", "dz_dx": "torch.tensor(12.0)"}
    answers.pop("forward_values")
    ran = execute(fill(load(RELEASE_NOTEBOOK), answers))
    slopes = cell_of(ran, "form_slopes")
    assert [o.get("text") for o in slopes.outputs] == [
        "ok   slope_at_3: right form (number)\nok   slope_at_minus_2: right form (number)\n"
        "ok   slope_at_0: right form (number)\n"
    ]
    outputs = cell_of(ran, "form_graph_walk").outputs
    assert [o.output_type for o in outputs] == ["error"]
    error = outputs[0]
    assert error.ename == "FormError"
    assert error.traceback == [
        "Not ready yet: 3 answers here need your attention.",
        "  - forward_values is still `...`: replace it with the value you derived by hand.",
        "  - local_slopes should be a list of 3 numbers, but it is a tuple: (1, 2, 6).",
        "  - dz_dx is a tensor: write down the plain number you derived, e.g. dz_dx = 7.5",
        "(This checks only the form of your answers, never whether a value is right.)",
    ]
    # Run All stopped there (documented in the README): the next cells never ran.
    assert cell_of(ran, "test_graph_walk").get("execution_count") is None


# ------------------------------------------------------------------- the judge's Marks, not the notebook's


def test_hidden_tests_never_bring_their_own_marks_or_checks(assignment):
    """The judge runs only the hidden region, with its own `Marks` in the namespace; nothing there may
    import or rebind the notebook's (which would score with the student's kernel's arithmetic)."""
    import ast

    from course.pipeline.assignment import HIDDEN_BEGIN, HIDDEN_END, region_lines

    for question in assignment.questions:
        tree = ast.parse("\n".join(region_lines(question.test_source, HIDDEN_BEGIN, HIDDEN_END)))
        for node in ast.walk(tree):
            assert not isinstance(node, ast.Import | ast.ImportFrom), question.test_cell_id
            if isinstance(node, ast.Name) and node.id in ("Marks", "check_form", "course"):
                assert isinstance(node.ctx, ast.Load), question.test_cell_id


def test_the_judges_marks_wins_over_the_notebooks(assignment, monkeypatch):
    """Even with course.notebook imported in the grader's process and its Marks broken, the judge scores
    every question with its own Marks (ValueResults come only from it) and never runs the setup cell."""
    import course.notebook
    from course.pipeline.judge import judge
    from tests.support.helpers import contract_answers

    class Sabotaged:
        def __init__(self, *args, **kwargs) -> None:
            raise AssertionError("the notebook's Marks was used by the judge")

    monkeypatch.setattr(course.notebook, "Marks", Sabotaged)
    broken_setup = dataclasses.replace(assignment, setup_source="raise SystemExit('setup ran')")
    results = judge(broken_setup, contract_answers(assignment), tolerance=1e-6)
    assert all(r.error is None for r in results), [r.error for r in results]
    assert sum(r.earned for r in results) == assignment.max_score
    assert sum(len(r.values) for r in results) == len(assignment.answer_names) + len(assignment.function_names)


def test_the_grader_hands_the_module_to_the_sandbox_as_text(tmp_path):
    """The cell the grader runs before the setup defines course.notebook from the package file's text (the
    sandbox sees no course files) and leaves no name in the notebook's namespace."""
    import subprocess
    import sys

    from course.sandbox.handed_in import notebook_module_cell

    program = (
        "import json, sys\n"
        "namespace = {}\n"
        f"exec({notebook_module_cell()!r}, namespace)\n"
        "before = sorted(k for k in namespace if k != '__builtins__')\n"
        "exec('from course.notebook import Marks, check_form', namespace)\n"
        "import course.notebook\n"
        "print(json.dumps([before, course.notebook.__file__, namespace['check_form'].__module__]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", program], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[], "course/notebook.py", "course.notebook"]
