"""An author sees what broke (issue 42), one author's mistake per test, each failing on 3e77494:

- `kit write` names a hidden test that raises by its cell, its line and the exception, and fails (it said "cells
  written" and the release proof later "earn 0 of 3");
- a check_form that names an answer the solution cell has no template line for, or leaves one out, is named as
  that, never as a problem of the checks' order; an unlocked test cell is refused (it was released);
- answers a sign slip or a dropped factor would pass, and values not exact in float32, are warnings naming the file,
  the exercise and the answer, printed by `kit write` and by `release`, which they never stop;
- declared ranges that cannot keep their requirements stop the release, release/ untouched.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course.authoring.kit import load_exercises, write_cells
from course.authoring.review import review
from course.cli import main
from course.core.errors import SourceNotebookError
from course.pipeline.assignment import load_assignment
from tests.support.helpers import SOURCE_NOTEBOOK, copy_course, load
from tests.support.kit import SLOPE, exercises_module

ONE_CALL = "8. One `backward()` fills every parameter"
TYPO = 'marks.value("one_call_loss", one_call_lose,'


def edit_cell(path: Path, grade_id: str, change=None, **nbgrader) -> None:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    (cell,) = [c for c in notebook["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id]
    cell["source"] = change("".join(cell["source"])) if change else cell["source"]
    cell["metadata"]["nbgrader"].update(nbgrader)
    path.write_text(json.dumps(notebook, indent=1), encoding="utf-8")


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_kit_write_names_a_hidden_tests_exception_by_cell_line_and_error(tmp_path, capsys):
    """autograd with a kit exercise added (its module defines EXERCISES) and a typo in a hand-written hidden test."""
    root = copy_course(tmp_path / "course")
    source = root / "source" / "autograd"
    edit_cell(source / "autograd.ipynb", "test_one_call", lambda text: text.replace(TYPO.replace("lose", "loss"), TYPO))
    module = source / "exercises.py"
    module.write_text(module.read_text(encoding="utf-8") + "\n\n" + SLOPE.replace("from __future__", "#"))
    assert main(["--course", str(root), "kit", "write", "--assignment", "autograd"]) == 1
    out, err = capsys.readouterr()
    assert "autograd: cells written" in out
    assert (
        f"error: autograd: {source / 'autograd.ipynb'}: question {ONE_CALL!r}: its hidden tests (test_one_call) raise "
        "NameError: name 'one_call_lose' is not defined (line 8 of the hidden tests: `marks.value(\"one_call_loss\", "
        "one_call_lose, loss,"
    ) in err, err


def _load(tmp_path: Path, change) -> str:
    """The autograd source with one cell changed, loaded as release loads it: the refusal's sentence."""
    path = tmp_path / "autograd.ipynb"
    path.write_text(SOURCE_NOTEBOOK.read_text(encoding="utf-8"), encoding="utf-8")
    change(path)
    with pytest.raises(SourceNotebookError) as refused:
        load_assignment(path, "autograd")
    return str(refused.value)


def _drop(text: str, start: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith(start))


def test_a_check_of_an_answer_without_its_template_line_is_named_as_such(tmp_path):
    """The template line and the form cell's check both gone, the test cell's visible check still naming it."""

    def change(path):
        edit_cell(path, "answer_slopes", lambda text: _drop(text, "slope_at_3 = ..."))
        edit_cell(path, "form_slopes", lambda text: text.replace('slope_at_3="number", ', ""))

    said = _load(tmp_path, change)
    assert (
        "cell 6 (test_slopes): its check_form(...) checks slope_at_3, but the solution cell answer_slopes has no "
        "template line for it outside its ### BEGIN SOLUTION region (`slope_at_3 = ...`)"
    ) in said, said
    assert "order" not in said


@pytest.mark.parametrize(("grade_id", "index"), [("form_slopes", 5), ("test_slopes", 6)])
def test_a_check_that_leaves_an_answer_out_says_which(tmp_path, grade_id, index):
    said = _load(
        tmp_path, lambda path: edit_cell(path, grade_id, lambda text: text.replace('slope_at_3="number", ', ""))
    )
    assert (
        f"cell {index} ({grade_id}): its check_form(...) does not check slope_at_3, which the solution cell "
        "answer_slopes asks for; add slope_at_3=<its form> to it"
    ) in said, said
    assert "must name the answers" not in said  # not blamed on the checks' order


def test_an_unlocked_test_cell_is_refused(tmp_path, capsys):
    root = copy_course(tmp_path / "course")
    before = snapshot(root / "release")
    edit_cell(root / "source" / "autograd" / "autograd.ipynb", "test_slopes", locked=False)
    assert main(["--course", str(root), "release", "--assignment", "autograd", "--no-verify"]) == 1
    assert "cell 6 (test_slopes): the cell is not locked (nbgrader: read-only)" in capsys.readouterr().err
    assert snapshot(root / "release") == before


def _reviewed(tmp_path: Path, numbers: str):
    """SLOPE (y = w·x + b; y and dy/dw = x) at `numbers`, written into the autograd source and reviewed."""
    module = exercises_module(tmp_path, SLOPE.replace('numbers={"w": 3, "x": 2, "b": -1}', f"numbers={numbers}"))
    notebook = tmp_path / "source" / "autograd" / "autograd.ipynb"
    notebook.write_text(json.dumps(write_cells(load(SOURCE_NOTEBOOK), load_exercises(module), module)))
    return module, review(load_assignment(notebook, "autograd", module), 1e-6)


def test_answers_a_slip_would_pass_are_warned_of_with_file_exercise_and_answer(tmp_path):
    # y = 8e-7: y/4 (a factor w dropped) is within 1e-6 of it; dy/dw = x = 2e-7: so is -x (a sign slip)
    module, reviewed = _reviewed(tmp_path, '{"w": 4, "x": 2e-07, "b": 0}')
    ours = [line for line in reviewed.warnings if line.startswith(f"{module}: exercise 'line': ")]
    assert ours[:2] == [
        f"{module}: exercise 'line': answer line_y = 8e-07: the answer divided by line_w = 4 (a factor dropped or "
        "doubled) would pass, being within the tolerance 1e-06 of torch's value; change the numbers so that line_y "
        "is further from 0 than the tolerance allows",
        f"{module}: exercise 'line': answer line_dy_dw = 2e-07: a sign slip (-line_dy_dw) would pass, being within "
        "the tolerance 1e-06 of torch's value; change the numbers so that line_dy_dw is clearly not 0 (and "
        "require=[NoZero()] keeps every variant so)",
    ], reviewed.warnings
    assert ours[2].startswith(f"{module}: exercise 'line': torch's values of line_y, line_dy_dw are not exact in ")
    assert reviewed.errors == ()
    _, exact = _reviewed(tmp_path, '{"w": 3, "x": 2, "b": -1}')  # the same exercise at numbers that tell slips apart
    assert not [line for line in exact.warnings if "exercise 'line'" in line]


def test_release_prints_the_warnings_and_still_releases(tmp_path, capsys):
    """backprop's micrograd without float64=True (which says its question asks for float64 values)."""
    root = copy_course(tmp_path / "course")
    module = root / "source" / "backprop" / "exercises.py"
    text = module.read_text(encoding="utf-8")
    assert text.count("    float64=True,  # the question asks for the arithmetic or exact fractions") == 1
    module.write_text(text.replace("    float64=True,  # the question asks for the arithmetic or exact", "    # "))
    assert main(["--course", str(root), "release", "--assignment", "backprop", "--no-verify"]) == 0
    out = capsys.readouterr().out
    assert f"warning: {module}: exercise 'micrograd': torch's values of mg_g, mg_dg_da, mg_dg_db are not exact" in out
    assert "beyond the tolerance 1e-06 for mg_dg_da, mg_dg_db: a student who computes or checks with torch's" in out
    assert f"released {root / 'release' / 'backprop' / 'backprop.ipynb'}" in out
    assert "exercise 'neuron'" not in out  # float64=True: its question says so


def test_declared_ranges_that_cannot_keep_their_requirements_stop_the_release(tmp_path, capsys):
    root = copy_course(tmp_path / "course")
    before = snapshot(root / "release")
    module = root / "source" / "backprop" / "exercises.py"
    text = module.read_text(encoding="utf-8")
    assert '"z": Integers(-5, 4, skip=[-1, 0, 1])' in text
    module.write_text(text.replace('"z": Integers(-5, 4, skip=[-1, 0, 1])', '"z": Integers(0, 0)'), encoding="utf-8")
    assert main(["--course", str(root), "release", "--assignment", "backprop", "--no-verify"]) == 1
    err = capsys.readouterr().err
    assert f"{module}: exercise 'gate': none of all 42 combinations of its ranges keeps its requirements" in err, err
    assert "Widen a range in vary (x: Integers(-4, 3, skip=[0]), y: Integers(1, 6), z: Integers(0, 0))" in err, err
    assert snapshot(root / "release") == before
