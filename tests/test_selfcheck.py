"""The student's self-check works from the released notebook alone (no source/, no course YAML), builds the
same questions as the grader's source, and reports every form problem of a question."""

from __future__ import annotations

import json
import shutil

import pytest

from course.cli import main
from course.core.answers import VALUE, Answer
from course.core.errors import SourceNotebookError, SubmissionError
from course.pipeline.assignment import load_assignment, released_assignment
from course.pipeline.selfcheck import CheckReport, QuestionCheck
from tests.support.helpers import CORRECT_CODE, RELEASE_NOTEBOOK, SOURCE_NOTEBOOK, load, submitted_notebook, write


def test_the_release_alone_gives_the_questions_the_source_gives(assignment):
    released = released_assignment(load(RELEASE_NOTEBOOK), RELEASE_NOTEBOOK, "autograd")
    assert [(q.id, q.title, q.points, q.answer_names, q.function_names) for q in released.questions] == [
        (q.id, q.title, q.points, q.answer_names, q.function_names) for q in assignment.questions
    ]
    assert released.setup_source == assignment.setup_source
    assert released.default_params == assignment.default_params
    assert released.released_sources == assignment.released_sources
    for question in released.questions:
        assert "BEGIN HIDDEN TESTS" not in question.test_source
        assert "marks." not in question.test_source


def test_a_students_answers_do_not_change_which_answers_a_question_has():
    """The answers come from the locked checks, so a deleted or an extra line in an answer cell cannot
    hide an answer from the check."""
    notebook = submitted_notebook({**CORRECT_CODE, "net_h": "5\nhelper = 3"})
    for cell in notebook["cells"]:
        if "net_dL_db = 6" in "".join(cell["source"]):
            cell["source"] = "".join(cell["source"]).replace("net_dL_db = 6\n", "")
    questions = {q.id: q for q in released_assignment(notebook, RELEASE_NOTEBOOK, "autograd").questions}
    assert questions["tiny_net"].answer_names == (
        "net_h",
        "net_a",
        "net_loss",
        "net_dL_da",
        "net_dL_dh",
        "net_dL_dw",
        "net_dL_db",
    )


def test_a_notebook_that_is_not_the_courses_is_named_as_such(tmp_path):
    notebook = {
        "cells": [{"cell_type": "code", "metadata": {}, "source": "x = 1", "outputs": []}],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    with pytest.raises(SubmissionError, match="setup cell is missing; start again from the released notebook"):
        released_assignment(notebook, tmp_path / "mine.ipynb", "autograd")


def test_a_source_whose_form_check_misses_an_answer_is_refused(tmp_path):
    """The self-check knows the answers only from the checks, so the source must name them all there."""
    notebook = load(SOURCE_NOTEBOOK)
    for cell in notebook["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "form_slopes":
            cell["source"] = 'check_form(slope_at_3="number", slope_at_minus_2="number")\n'
    path = write(notebook, tmp_path / "autograd.ipynb")
    with pytest.raises(
        SourceNotebookError,
        # named as what it is: an answer the check leaves out, not an order problem (issue 42)
        match=r"\(form_slopes\): its check_form\(\.\.\.\) does not check slope_at_0, which the solution cell "
        r"answer_slopes asks for; add slope_at_0=<its form> to it",
    ):
        load_assignment(path, "autograd")


def in_an_empty_folder(tmp_path, monkeypatch, notebook: dict):
    """Like a student: only the notebook, in a folder of its own, the check run there."""
    folder = tmp_path / "student"
    folder.mkdir()
    write(notebook, folder / "autograd.ipynb")
    monkeypatch.chdir(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["autograd.ipynb"]


def test_check_in_an_empty_folder_says_what_each_question_lacks(tmp_path, monkeypatch, capsys):
    answers = {**CORRECT_CODE, "local_slopes": "[1, 2]", "net_dL_dw": "torch.tensor(12.0)"}
    del answers["closed_a"]
    in_an_empty_folder(tmp_path, monkeypatch, submitted_notebook(answers))
    assert main(["check", "autograd.ipynb"]) == 1
    out = capsys.readouterr().out
    assert "[ok  ] 1. A gradient is a slope: slope_at_3 answered" in out
    assert (
        "[todo] 2. Walking a computation graph: z = 2x² + 1: forward_values answered, local_slopes not a list "
        "of 3 numbers (it has 2)"
    ) in out
    assert "form: local_slopes" not in out  # said once, on its answer's line
    assert "[todo] 3. A whole (tiny) network by hand:" in out
    assert "net_dL_dw wrong form (Tensor)" in out
    assert "       form: net_dL_dw is a tensor: write down the plain number you derived, e.g. net_dL_dw = 7.5" in out
    assert "closed_a missing (still `...`)" in out
    assert "form: closed_a" not in out  # a missing answer is said once
    assert "Not ready yet" in out


def test_check_in_an_empty_folder_is_ready_for_a_complete_notebook(tmp_path, monkeypatch, capsys):
    in_an_empty_folder(tmp_path, monkeypatch, submitted_notebook(CORRECT_CODE))
    assert main(["check", "autograd.ipynb"]) == 0
    out = capsys.readouterr().out
    assert out.count("[ok  ]") == 11
    assert "Ready to submit" in out


def test_check_of_something_else_is_one_clear_line(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "student"
    folder.mkdir()
    (folder / "notes.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    monkeypatch.chdir(folder)
    assert main(["check", "notes.ipynb"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == (
        "autograd-course check: notes.ipynb: the course's setup cell is missing; start again "
        "from the released notebook and copy your answers in"
    )


def test_check_of_a_mangled_notebook_names_the_cell(tmp_path, monkeypatch, capsys):
    notebook = submitted_notebook(CORRECT_CODE)
    notebook["cells"][7] = ["not", "a", "cell"]
    in_an_empty_folder(tmp_path, monkeypatch, notebook)
    assert main(["check", "autograd.ipynb"]) == 1
    assert capsys.readouterr().err.strip() == "autograd-course check: autograd.ipynb: cell 7 is not a notebook cell"


def test_check_in_the_course_folder_uses_the_course_settings(tmp_path, monkeypatch, capsys):
    """In a course folder the course YAML's settings apply (here a cell time limit too short for torch)."""
    root = tmp_path / "course"
    (root / "source").mkdir(parents=True)
    (root / "source" / "course.yaml").write_text(
        "course_id: c\nassignments: [{name: autograd, notebook: autograd.ipynb}]\nlimits: {max_cells: 5}\n"
    )
    shutil.copy(RELEASE_NOTEBOOK, root / "autograd.ipynb")
    monkeypatch.chdir(root)
    assert main(["check", "autograd.ipynb"]) == 1
    assert "more than the limit of 5" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("return ...", "cubic_derivative missing (still `...`)"),  # as released
        ("raise NotImplementedError", "cubic_derivative missing (still raises NotImplementedError)"),
    ],
)
def test_check_says_a_function_still_as_released_is_not_answered(tmp_path, monkeypatch, capsys, body, said):
    answers = {**CORRECT_CODE, "cubic_derivative": f"def cubic_derivative(x):\n    {body}\n"}
    in_an_empty_folder(tmp_path, monkeypatch, submitted_notebook(answers))
    assert main(["check", "autograd.ipynb"]) == 1
    out = capsys.readouterr().out
    assert f"[todo] 9. Challenge: y = x³ − 2x: cubic_grad answered, {said}" in out
    assert "cubic_derivative answered" not in out
    assert "form: cubic_derivative" not in out  # said once, as for a value still `...`


def test_check_still_says_a_function_that_returns_something_else_is_answered(tmp_path, monkeypatch, capsys):
    answers = {**CORRECT_CODE, "cubic_derivative": "def cubic_derivative(x):\n    return 'slope'\n"}
    in_an_empty_folder(tmp_path, monkeypatch, submitted_notebook(answers))
    assert main(["check", "autograd.ipynb"]) == 1
    out = capsys.readouterr().out
    assert "cubic_derivative answered" in out
    assert "form: cubic_derivative should return a number, but cubic_derivative(1.5) returned a str: 'slope'." in out


NAN = float("nan")


@pytest.mark.parametrize(
    ("value", "form", "said"),
    [
        (None, "number", "x not a number (it is None)"),
        ("five", "number", "x not a number (it is a string: 'five')"),
        (True, "number", "x not a number (it is True)"),
        (NAN, "number", "x not a number (it is nan)"),
        ([1, 2], "number", "x not a number (it is a list of 2)"),
        (2.5, "number", "x answered"),
        (None, "number or None", "x answered"),
        ("None", "number or None", "x not a number or None (it is a string: 'None')"),
        (1, "True or False", "x not True or False (it is 1)"),
        (False, "True or False", "x answered"),
        ("MulBackward0", "class name or None", "x answered"),
        (3, "class name or None", "x not a class name in quotes (a string) or None (it is 3)"),
        ([1, None, 3], "list of 3 numbers", "x not a list of 3 numbers (item 2 is None)"),
        ([1, 2], "list of 3 numbers", "x not a list of 3 numbers (it has 2)"),
        (7.5, "list of 3 numbers", "x not a list of 3 numbers (it is 7.5)"),
        ([1, 2, 3], "list of 3 numbers", "x answered"),
        (None, "", "x answered"),  # a form the check does not declare: nothing to hold the answer to
    ],
    ids=repr,
)
def test_check_says_an_answer_without_its_form_is_not_answered(value, form, said):
    """An answer that is there but not of its form (None where a number is asked for, above all) is said to be
    so on its own line, as the feedback would show it (your value: None), and not as "answered"."""
    question = QuestionCheck(
        "1. Q",
        {"x": Answer(VALUE, value)},
        None if said.endswith("answered") else "FormError: x should be something else.",
        {"x": form},
    )
    lines = CheckReport((question,), None, ()).lines()
    assert lines[0] == f"[{'ok  ' if said.endswith('answered') else 'todo'}] 1. Q: {said}"
    assert not any("form: x" in line for line in lines)  # said once, as for a missing answer
    assert question.ready == said.endswith("answered")


def test_check_says_none_where_a_number_is_asked_for_is_not_a_number(tmp_path, monkeypatch, capsys):
    answers = {**CORRECT_CODE, "net_h": "None", "retain_y_grad": "None"}  # retain_y_grad may be None (its form)
    in_an_empty_folder(tmp_path, monkeypatch, submitted_notebook(answers))
    assert main(["check", "autograd.ipynb"]) == 1
    out = capsys.readouterr().out
    assert "[todo] 3. A whole (tiny) network by hand: net_h not a number (it is None), net_a answered" in out
    assert "form: net_h" not in out
    assert "retain_y_grad answered" in out
