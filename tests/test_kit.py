"""The authoring kit (course/authoring/kit.py, course/authoring/scaffold.py): one definition per exercise writes the
source notebook's cells in the cell conventions, idempotently, keeping every hand-written cell; its errors name the
file, the exercise and what to do; `new assignment` makes an assignment that loads, releases and grades as it stands."""

from __future__ import annotations

import json
import re

import pytest

from course.authoring.kit import AuthoringError, load_exercises, write_cells, write_notebook
from course.cli import main
from course.core.answers import VALUE, Answer
from course.core.config import load_config
from course.pipeline.assignment import load_assignment, load_course_assignment
from course.pipeline.judge import judge
from tests.support.helpers import SOURCE_NOTEBOOK, course_assignments, load
from tests.support.kit import SLOPE, exercises_module


def _grade_ids(notebook: dict) -> list[str]:
    return [cell["metadata"].get("nbgrader", {}).get("grade_id", "") for cell in notebook["cells"]]


def test_a_definition_adds_its_cells_and_keeps_every_hand_written_cell(tmp_path):
    module = exercises_module(tmp_path, SLOPE)
    original = load(SOURCE_NOTEBOOK)
    written = write_cells(original, load_exercises(module), module)
    ids = _grade_ids(written)
    # after the last hand-written question, before the closing words
    last_test = max(index for index, grade_id in enumerate(_grade_ids(original)) if grade_id.startswith("test_"))
    assert ids[last_test + 2 : last_test + 5] == ["answer_line", "form_line", "test_line"]
    kept = [cell for cell in written["cells"] if not str(cell.get("id", "")).startswith("kit-")]
    numbers = next(index for index, grade_id in enumerate(ids) if grade_id == "numbers")
    assert [c for i, c in enumerate(kept) if i != numbers] == [
        c for i, c in enumerate(original["cells"]) if i != numbers
    ]
    numbers_source = "".join(written["cells"][numbers]["source"])
    assert '"cubic_x": 4,' in numbers_source
    assert '"line_w": 3, "line_x": 2, "line_b": -1,' in numbers_source
    # a second run changes nothing
    assert write_cells(written, load_exercises(module), module) == written

    notebook = tmp_path / "source" / "autograd" / "autograd.ipynb"
    notebook.write_text(json.dumps(written), encoding="utf-8")
    assignment = load_assignment(notebook, "autograd")
    question = assignment.questions[-1]
    assert (question.id, question.points, question.answer_names) == ("line", 3.0, ("line_y", "line_dy_dw"))
    answers = {name: Answer(VALUE, None) for name in assignment.answer_names}
    answers |= {"line_y": Answer(VALUE, 5), "line_dy_dw": Answer(VALUE, 2)}
    result = judge(assignment, answers, tolerance=1e-6)[-1]
    assert (result.error, result.earned) == (None, 3)
    slip = judge(assignment, answers | {"line_dy_dw": Answer(VALUE, 3)}, tolerance=1e-6)[-1]
    assert slip.earned == 1


def test_a_changed_definition_rewrites_its_own_cells_in_place_and_keeps_their_ids(tmp_path):
    module = exercises_module(tmp_path, SLOPE)
    first = write_cells(load(SOURCE_NOTEBOOK), load_exercises(module), module)
    module.write_text(SLOPE.replace("∂y/∂w is x.", "The slope in w is x."), encoding="utf-8")
    second = write_cells(first, load_exercises(module), module)
    changed = [index for index, (a, b) in enumerate(zip(first["cells"], second["cells"], strict=True)) if a != b]
    assert [_grade_ids(second)[index] for index in changed] == ["test_line"]
    assert [cell.get("id") for cell in first["cells"]] == [cell.get("id") for cell in second["cells"]]


def test_write_notebook_writes_only_when_something_changed(tmp_path):
    module = exercises_module(tmp_path, SLOPE)
    notebook = tmp_path / "source" / "autograd" / "autograd.ipynb"
    notebook.write_text(SOURCE_NOTEBOOK.read_text(encoding="utf-8"), encoding="utf-8")
    assert write_notebook(notebook, module) is True
    text = notebook.read_text(encoding="utf-8")
    assert write_notebook(notebook, module) is False
    assert notebook.read_text(encoding="utf-8") == text


@pytest.mark.parametrize("mode", [0o600, 0o640])
def test_write_notebook_keeps_the_notebook_as_private_as_the_author_made_it(tmp_path, mode):
    """The source notebook holds the answer key: the kit writes it again with the mode it had, never 0644 (the
    mode of what students must read) over an author's 0600."""
    module = exercises_module(tmp_path, SLOPE)
    notebook = tmp_path / "source" / "autograd" / "autograd.ipynb"
    notebook.write_text(SOURCE_NOTEBOOK.read_text(encoding="utf-8"), encoding="utf-8")
    notebook.chmod(mode)
    assert write_notebook(notebook, module) is True
    assert notebook.stat().st_mode & 0o777 == mode


BROKEN = [
    (
        SLOPE.replace("y = w * x + b\n", "y = w * x + b\n    y = y / 0 + undefined_name\n"),
        r"build raised NameError: name 'undefined_name' is not defined \(line \d+ of .*exercises.py: "
        r"y = y / 0 \+ undefined_name\); fix build",
    ),
    (
        SLOPE.replace('"line_dy_dw": w.grad}', '"line_dy_dW": w.grad}'),
        "build must return exactly its answers by name; no value for line_dy_dw; line_dy_dW asked by no Ask",
    ),
    (
        SLOPE.replace('Ask("line_y",', 'Ask("line_y", form="list of 2 numbers",'),
        "build returns 5.0 for 'line_y', which is not a list of 2 numbers",
    ),
    (SLOPE.replace('Ask("line_y",', 'Ask("line_y", form="a number",'), "has the form 'a number'"),
    (SLOPE.replace('Ask("line_dy_dw"', 'Ask("line_y"'), "answer 'line_y' is asked by exercise 'line' too"),
    (SLOPE.replace("b = {{b}}", "c = {{c}}"), r"its question shows \{\{c\}\}, which is none of its numbers"),
    (SLOPE.replace("build=line,", "build=lambda w, x, b: line(w, x, b),"), "build must be a plain function"),
    (SLOPE.replace('"b": -1}', '"bias": -1}'), r"build takes \(b, w, x\) but numbers names \(bias, w, x\)"),
    (SLOPE.replace(', idea="The forward pass."', ""), "needs a hint .* and an idea"),
    (SLOPE.replace('id="line"', 'id="Line"'), "its id must be lower-case letters"),
    (
        SLOPE.replace("y = w * x + b\n", "y = w * x + b + OFFSET\n").replace(
            "EXERCISES = [", "OFFSET = 0\nEXERCISES = ["
        ),
        "build, run alone as the hidden tests run it, raised NameError: name 'OFFSET' is not defined; build may use "
        "only its arguments, torch and math",
    ),
    (SLOPE.replace('"line_y"', '"references"'), "the answer references is a name the hidden tests use themselves"),
    (
        SLOPE.replace("EXERCISES = [Exercise(", "EXERCISES = [('not an exercise'), Exercise("),
        "EXERCISES holds str, not an Exercise",
    ),
]


@pytest.mark.parametrize(("text", "said"), BROKEN)
def test_a_broken_definition_names_the_file_the_exercise_and_what_to_do(tmp_path, text, said):
    module = exercises_module(tmp_path, text)
    with pytest.raises(AuthoringError, match=said) as caught:
        write_cells(load(SOURCE_NOTEBOOK), load_exercises(module), module)
    assert str(module) in str(caught.value)
    assert (
        "exercise 'line'" in str(caught.value)
        or "EXERCISES holds" in str(caught.value)
        or "exercise 'Line'" in str(caught.value)
    )


def test_cells_of_a_definition_that_is_gone_are_named_not_kept_silently(tmp_path):
    module = exercises_module(tmp_path, SLOPE)
    written = write_cells(load(SOURCE_NOTEBOOK), load_exercises(module), module)
    module.write_text(SLOPE.replace('id="line"', 'id="straight"'), encoding="utf-8")
    with pytest.raises(
        AuthoringError,
        match=r"cell \d+ of the notebook \(kit-line-question\) was written by the "
        "kit for an exercise that no definition of EXERCISES names now",
    ):
        write_cells(written, load_exercises(module), module)


def test_a_module_without_exercises_says_how_to_write_them(tmp_path):
    module = exercises_module(tmp_path, "CHAINS = {}\n")
    with pytest.raises(AuthoringError, match="defines no EXERCISES; add EXERCISES = "):
        load_exercises(module)


# ----------------------------------------------------------------------------- the scaffold and the commands


def test_new_assignment_makes_an_assignment_that_loads_and_scores_its_own_key(course_root, capsys):
    config_before = (course_root / "source" / "course.yaml").read_text(encoding="utf-8")
    assert main(["--course", str(course_root), "new", "assignment", "demo"]) == 0
    assert "new assignment demo:" in capsys.readouterr().out
    config_text = (course_root / "source" / "course.yaml").read_text(encoding="utf-8")
    assert config_text.startswith(config_before.split("\n\n# How close")[0])  # comments and entries kept
    assert "  - name: demo\n    notebook: demo.ipynb\n" in config_text
    assert config_text.endswith(config_before.split("notebook: backprop.ipynb\n", 1)[1])
    assignment = load_course_assignment(load_config(course_root), "demo")
    assert [q.id for q in assignment.questions] == ["square"]
    answers = {"square_y": Answer(VALUE, 9), "square_dy_dx": Answer(VALUE, 6)}
    assert [r.earned for r in judge(assignment, answers, tolerance=1e-6)] == [3]

    assert main(["--course", str(course_root), "kit", "write"]) == 0
    # the hand-written assignments are left alone; the two written with the kit are up to date, and every
    # exercise gets a table (micrograd, which asks only for the chain's ends, the whole walk with torch's numbers)
    out = capsys.readouterr().out.splitlines()
    assert out == ["backprop: already up to date", "demo: already up to date"]
    assert main(["--course", str(course_root), "new", "assignment", "demo"]) == 1
    assert re.search(
        r"course.yaml: the course already has an assignment 'demo'; choose another name", capsys.readouterr().err
    )
    assert main(["--course", str(course_root), "new", "assignment", "Bad-Name"]) == 1
    assert "an assignment's name is lower-case letters" in capsys.readouterr().err
    assert main(["--course", str(course_root), "kit", "write", "--assignment", "autograd"]) == 1  # hand-written
    assert "source/autograd/exercises.py: defines no EXERCISES; add EXERCISES = " in capsys.readouterr().err


@pytest.mark.slow
def test_a_new_assignment_releases_and_its_proof_passes_as_it_stands(course_root):
    from course.authoring.release import release

    assert main(["--course", str(course_root), "new", "assignment", "demo"]) == 0
    report = release(load_config(course_root), "demo")
    assert (report.questions, report.solution_score, report.untouched_score, report.max_score) == (1, 3, 0, 3)


def test_a_course_yaml_the_scaffold_cannot_extend_is_left_as_it_is_with_what_to_do(any_course, capsys):
    course_root = any_course
    config = course_root / "source" / "course.yaml"
    names = course_assignments(course_root)
    text = config.read_text(encoding="utf-8")
    block = "assignments:\n" + "".join(f"  - name: {name}\n    notebook: {name}.ipynb\n" for name in names)
    assert block in text
    flow = "assignments: [\n  " + ",\n  ".join(f"{{name: {name}, notebook: {name}.ipynb}}" for name in names) + "]\n"
    flow = text.replace(block, flow)
    config.write_text(flow, encoding="utf-8")
    assert [a.name for a in load_config(course_root).assignments] == names
    assert main(["--course", str(course_root), "new", "assignment", "demo"]) == 1
    assert "no block list `assignments:` to add 'demo' to; add `- name: demo`" in capsys.readouterr().err
    assert config.read_text(encoding="utf-8") == flow
    assert not (course_root / "source" / "demo").exists()


def test_cells_that_would_clash_with_a_hand_written_exercise_are_named_and_nothing_is_written(tmp_path):
    module = exercises_module(
        tmp_path, SLOPE.replace('"line_y"', '"cubic_grad"')
    )  # an answer of the hand-written cubic
    notebook = tmp_path / "source" / "autograd" / "autograd.ipynb"
    notebook.write_text(SOURCE_NOTEBOOK.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(
        AuthoringError,
        match=r"would break the notebook's cell conventions, so .*autograd.ipynb was "
        r"left as it was: .*answer 'cubic_grad' is assigned in both answer_cubic "
        "and answer_line",
    ):
        write_notebook(notebook, module)
    assert notebook.read_text(encoding="utf-8") == SOURCE_NOTEBOOK.read_text(encoding="utf-8")
