"""`autograd-course kit remove EXERCISE` (course/authoring/kit_remove.py): the example exercise of a new assignment,
or any exercise the kit wrote, taken out with its cells, its numbers in `P` and, where the edit is safe, its
definition; `kit write` then succeeds. Real kit, real notebook files, the CLI in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course.cli import main
from course.core.config import load_config
from course.pipeline.assignment import load_course_assignment

PRODUCT = """

def product(x, y):
    x = torch.tensor(float(x), dtype=torch.float64, requires_grad=True)
    y = torch.tensor(float(y), dtype=torch.float64, requires_grad=True)
    f = x * y
    f.backward()
    return {"product_f": f, "product_df_dx": x.grad}


PRODUCT = Exercise(
    id="product",
    title="2. A product",
    question="For f = x · y with x = {{x}} and y = {{y}}, give f and ∂f/∂x.",
    build=product,
    numbers={"x": 3, "y": -2},
    answers=[
        Ask("product_f", hint="x times y.", idea="The forward pass."),
        Ask("product_df_dx", points=2, hint="∂f/∂x is y.", idea="A product's local slope is the other factor."),
    ],
)
"""


def _run(root: Path, *argv: str) -> int:
    return main(["--course", str(root), *argv])


def _chain(root: Path) -> tuple[Path, Path]:
    """docs/authoring.md's walk-through: `new assignment chain`, the product exercise added after the example."""
    assert _run(root, "new", "assignment", "chain") == 0
    module = root / "source" / "chain" / "exercises.py"
    text = module.read_text(encoding="utf-8")
    text = text.replace("\n\nEXERCISES = [", PRODUCT + "\n\nEXERCISES = [", 1)
    text = text.replace("    ),\n]\nNUMBER_GROUPS", "    ),\n    PRODUCT,\n]\nNUMBER_GROUPS", 1)
    module.write_text(text, encoding="utf-8")
    assert _run(root, "kit", "write", "--assignment", "chain") == 0
    return root / "source" / "chain" / "chain.ipynb", module


def _cells(notebook: Path) -> list[dict]:
    return json.loads(notebook.read_text(encoding="utf-8"))["cells"]


def _numbers(notebook: Path) -> str:
    cell = next(c for c in _cells(notebook) if c["metadata"].get("nbgrader", {}).get("grade_id") == "numbers")
    return "".join(cell["source"])


def _ids(notebook: Path) -> list[str]:
    return [str(cell.get("id")) for cell in _cells(notebook)]


def test_the_example_exercise_goes_with_its_cells_numbers_and_definition(course_root, capsys):
    notebook, module = _chain(course_root)
    assert '"square_x": 3' in _numbers(notebook)
    capsys.readouterr()
    assert _run(course_root, "kit", "remove", "square") == 0
    out = capsys.readouterr().out
    assert "chain: removed exercise 'square': 4 cells and square_x from its numbers cell" in out
    assert f"chain: removed its definition from {module}" in out
    assert not [cell_id for cell_id in _ids(notebook) if cell_id.startswith("kit-square-")]
    assert "square" not in _numbers(notebook)
    assert '"product_x": 3, "product_y": -2,' in _numbers(notebook)
    text = module.read_text(encoding="utf-8")
    assert "def square" not in text
    assert 'id="square"' not in text
    assert "EXERCISES = [\n    PRODUCT,\n]\n" in text
    assert _run(course_root, "kit", "write", "--assignment", "chain") == 0
    assert capsys.readouterr().out.startswith("chain: already up to date")
    assignment = load_course_assignment(load_config(course_root), "chain")
    assert [question.id for question in assignment.questions] == ["product"]
    assert _run(course_root, "release", "--no-verify", "--assignment", "chain") == 0


def test_cells_left_by_a_definition_deleted_by_hand_are_named_then_removed(course_root, capsys):
    """The docs' "or delete it": `kit write` names `kit remove`, which takes the cells out; then it writes."""
    notebook, module = _chain(course_root)
    text = module.read_text(encoding="utf-8")
    start = text.index('    Exercise(\n        id="square"')
    end = text.index("    ),\n", start) + len("    ),\n")
    module.write_text(text[:start] + text[end:], encoding="utf-8")
    capsys.readouterr()
    assert _run(course_root, "kit", "write", "--assignment", "chain") == 1
    assert "run `autograd-course kit remove square` to remove its cells and numbers" in capsys.readouterr().err
    assert _run(course_root, "kit", "remove", "square", "--assignment", "chain") == 0
    out = capsys.readouterr().out
    assert "removed exercise 'square': 4 cells and square_x from its numbers cell" in out
    assert "definition" not in out
    assert "square" not in _numbers(notebook)
    assert _run(course_root, "kit", "write", "--assignment", "chain") == 0


def test_a_definition_the_kit_cannot_edit_safely_is_left_with_what_to_delete(course_root, capsys):
    notebook, module = _chain(course_root)
    text = module.read_text(encoding="utf-8").replace("    PRODUCT,\n]\n", "]\nEXERCISES.append(PRODUCT)\n")
    module.write_text(text, encoding="utf-8")
    assert _run(course_root, "kit", "write", "--assignment", "chain") == 0
    capsys.readouterr()
    assert _run(course_root, "kit", "remove", "square") == 0
    out = capsys.readouterr().out
    assert f"chain: now delete the definition of exercise 'square' from EXERCISES in {module}" in out
    assert module.read_text(encoding="utf-8") == text
    assert not [cell_id for cell_id in _ids(notebook) if cell_id.startswith("kit-square-")]
    # the author deletes it by hand, as said: kit write then succeeds, without the example
    start = text.index('    Exercise(\n        id="square"')
    end = text.index("    ),\n", start) + len("    ),\n")
    module.write_text(text[:start] + text[end:], encoding="utf-8")
    assert _run(course_root, "kit", "write", "--assignment", "chain") == 0
    assert not [cell_id for cell_id in _ids(notebook) if cell_id.startswith("kit-square-")]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["gate", "--assignment", "chain"], "chain.ipynb: no exercise 'gate' (the kit's exercises there: square, "),
        (["nope"], "no source notebook of the course (autograd, training, backprop, chain) holds an exercise 'nope'"),
        (["tiny_net", "--assignment", "autograd"], "exercise 'tiny_net' was written by hand, not by the kit; delete"),
        (["Bad-Id"], "'Bad-Id' is not an exercise id"),
    ],
)
def test_what_cannot_be_removed_is_said_in_one_sentence_and_nothing_changes(course_root, capsys, argv, said):
    notebook, module = _chain(course_root)
    before = (notebook.read_bytes(), module.read_bytes())
    capsys.readouterr()
    assert _run(course_root, "kit", "remove", *argv) == 1
    err = capsys.readouterr().err
    assert said in err, err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
    assert (notebook.read_bytes(), module.read_bytes()) == before


def test_the_only_exercise_and_an_id_in_two_assignments_are_refused(course_root, capsys):
    assert _run(course_root, "new", "assignment", "one") == 0
    assert _run(course_root, "new", "assignment", "two") == 0
    capsys.readouterr()
    assert _run(course_root, "kit", "remove", "square") == 1
    assert "exercise 'square' is in several assignments (one, two); name one with --assignment" in (
        capsys.readouterr().err
    )
    assert _run(course_root, "kit", "remove", "square", "--assignment", "one") == 1
    assert "exercise 'square' is the only one of EXERCISES, and the kit needs one; define the next" in (
        capsys.readouterr().err
    )


def test_a_number_a_hand_written_cell_still_reads_stays_in_p(course_root, capsys):
    notebook, _ = _chain(course_root)
    data = json.loads(notebook.read_text(encoding="utf-8"))
    closing = next(cell for cell in data["cells"] if cell.get("id") == "before-submit")
    closing["source"] = [*closing["source"], "\n\nThe example's x was {{square_x}}."]
    notebook.write_text(json.dumps(data), encoding="utf-8")
    capsys.readouterr()
    assert _run(course_root, "kit", "remove", "square") == 0
    assert "chain: removed exercise 'square': 4 cells\n" in capsys.readouterr().out
    assert '"square_x": 3' in _numbers(notebook)
