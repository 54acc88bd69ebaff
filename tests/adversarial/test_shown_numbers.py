"""A number shown in the question is the number graded (issue 50, item 10), each test failing on e2fd90b:

- a `{{placeholder}}` prints its number exactly (repr's shortest round-trip form), in the release and in every
  personalised copy: a student who copies a derived irrational number from the question earns full marks (it printed
  `r = 6.88141` while the hidden tests used 6.881411303642535, and 3·r was 3.9e-6 off, beyond the tolerance);
- a number the author typed next to a named number, in a kit question's prose, a table of the notebook or a format
  of a placeholder, that is not the number graded stops `kit write` (nothing written) and `release` (release/
  untouched) with one sentence naming the number, where it is shown, the shown text and the graded value;
- a literal that is right at the default numbers but not in a student's personalised copy stops `release
  --students`, naming the student; a kit question that shows a varying number as a literal stops `kit write`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from course.authoring.review import review
from course.cli import main
from course.core.config import load_config
from course.pipeline.assignment import load_course_assignment
from course.pipeline.variants import numbers_for
from tests.support.adversarial import fast_config, grade, per_question
from tests.support.helpers import copy_course, fill, load

R = math.log(974)  # 6.881411303642535: `:g` printed 6.88141
SECRET = "a course secret for the shown-numbers tests"  # noqa: S105 - the tests' own

SCALE = """

def scale(r, x):
    x = torch.tensor(float(x), dtype=torch.float64, requires_grad=True)
    y = r * x
    y.backward()
    return {"scale_y": y, "scale_dy_dx": x.grad}


SCALE = Exercise(
    id="scale",
    title="4. A scaled input",
    question="A gain r = {{r}}, the logarithm of 974, scales x = {{x}}: y = r · x. Give y and ∂y/∂x.",
    build=scale,
    numbers={"r": math.log(974), "x": 3},
    float64=True,
    answers=[
        Ask("scale_y", hint="r · x.", idea="The forward pass."),
        Ask("scale_dy_dx", points=2, hint="∂y/∂x is r.", idea="A product's slope in one factor is the other."),
    ],
)


EXERCISES = [GATE, NEURON, MICROGRAD, SCALE]
"""


def with_scale(root: Path, question: str | None = None) -> Path:
    """backprop's exercises module with a fourth exercise whose gain r is a derived irrational number."""
    module = root / "source" / "backprop" / "exercises.py"
    text = module.read_text(encoding="utf-8")
    assert text.count("\nEXERCISES = [GATE, NEURON, MICROGRAD]\n") == 1
    scale = SCALE if question is None else SCALE.replace("A gain r = {{r}}, the logarithm of 974,", question)
    text = text.replace("\nEXERCISES = [GATE, NEURON, MICROGRAD]\n", scale).replace(
        "import torch\n", "import math\n\nimport torch\n", 1
    )
    module.write_text(text, encoding="utf-8")
    return module


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def kit_write(root: Path, assignment: str = "backprop") -> int:
    return main(["--course", str(root), "kit", "write", "--assignment", assignment])


def release(root: Path, assignment: str = "backprop", *more: str) -> int:
    return main(["--course", str(root), "release", "--assignment", assignment, "--no-verify", *more])


def question_text(notebook: dict, cell_id: str) -> str:
    (cell,) = [c for c in notebook["cells"] if c.get("id") == cell_id]
    return "".join(cell["source"])


@pytest.mark.slow
def test_a_derived_irrational_number_is_shown_exactly_and_copying_it_earns_full_marks(tmp_path, capsys):
    root = copy_course(tmp_path / "course")
    with_scale(root)
    assert kit_write(root) == 0
    assert release(root) == 0, capsys.readouterr().err
    released = load(root / "release" / "backprop" / "backprop.ipynb")
    shown = re.search(r"A gain r = (\S+), the logarithm", question_text(released, "kit-scale-question")).group(1)
    # A student who works from the number as printed: the hidden tests give the question its full 3 points.
    student = fill(released, {"scale_y": f"{shown} * 3", "scale_dy_dx": shown})
    config = replace(load_config(root), limits=fast_config().limits)
    graded, _ = grade(student, tmp_path, config=config, assignment=load_course_assignment(config, "backprop"))
    assert per_question(graded)["scale"] == 3, shown
    assert shown == repr(R) == "6.881411303642535"


def test_a_rounded_number_in_a_kit_question_stops_kit_write_and_release_with_a_sentence(tmp_path, capsys):
    root = copy_course(tmp_path / "course")
    module = with_scale(root, "A gain r = 6.88141, the logarithm of 974,")
    notebook = root / "source" / "backprop" / "backprop.ipynb"
    before, released = notebook.read_bytes(), snapshot(root / "release")
    said = (
        f"{module}: exercise 'scale', its question (cell 15 of backprop.ipynb): the prose shows r = 6.88141, but the "
        "hidden tests grade with P['scale_r'] = 6.881411303642535 (1.3e-06 off, beyond the tolerance 1e-06): a "
        "student who works from the number shown loses the mark; show it with {{r}}, which prints the exact value"
    )
    assert kit_write(root) == 1
    assert said in capsys.readouterr().err
    assert notebook.read_bytes() == before  # nothing written
    # The same cells written by hand (as a kit write without the check would have): release refuses them.
    with_scale(copy_course(tmp_path / "exact"))
    assert kit_write(tmp_path / "exact") == 0
    exact = (tmp_path / "exact" / "source" / "backprop" / "backprop.ipynb").read_text(encoding="utf-8")
    notebook.write_text(exact.replace("A gain r = {{scale_r}}", "A gain r = 6.88141"), encoding="utf-8")
    assert release(root) == 1
    err = capsys.readouterr().err
    assert f"{root / 'release' / 'backprop' / 'backprop.ipynb'} would show students numbers other than those" in err
    assert said in err
    assert snapshot(root / "release") == released


def _with_table(root: Path, table: str) -> Path:
    """The scale exercise written by the kit, then a hand-written Markdown cell with `table` just before it."""
    with_scale(root)
    assert kit_write(root) == 0
    path = root / "source" / "backprop" / "backprop.ipynb"
    notebook = load(path)
    at = next(i for i, c in enumerate(notebook["cells"]) if c.get("id") == "kit-scale-question")
    notebook["cells"].insert(at, {"cell_type": "markdown", "id": "gains", "metadata": {}, "source": table})
    path.write_text(json.dumps(notebook, indent=1), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("table", "said"),
    [
        ("| r | x |\n|---|---|\n| 6.88141 | 3 |\n", "the table shows r as 6.88141"),
        ("| number | value |\n|---|---|\n| r | 6.88141 |\n| x | 3 |\n", "the table shows r as 6.88141"),
        ("The gain, rounded: **r ≈ 6.88141**.\n", "the prose shows r ≈ 6.88141"),
        ("The gain is {{scale_r:.6g}}.\n", "the placeholder {{scale_r:.6g}} has a format, which nothing fills"),
    ],
    ids=["header-table", "row-table", "prose", "formatted-placeholder"],
)
def test_a_hand_written_number_beyond_the_tolerance_stops_kit_write_and_release(tmp_path, capsys, table, said):
    root = copy_course(tmp_path / "course")
    path = _with_table(root, table)
    capsys.readouterr()
    released = snapshot(root / "release")
    where = f"{path}: cell 15 (question '4. A scaled input'): {said}"
    assert kit_write(root) == 1
    assert f"error: backprop: {where}" in capsys.readouterr().err
    assert release(root) == 1
    err = capsys.readouterr().err
    assert where in err, err
    if "placeholder" not in said:
        assert "but the hidden tests grade with P['scale_r'] = 6.881411303642535 (1.3e-06 off, beyond the " in err
        assert "show it with {{scale_r}}, which prints the exact value" in err
    else:
        assert "write {{scale_r}}, which prints the exact value (scale_r = 6.881411303642535)" in err
    assert snapshot(root / "release") == released
    # The review the kit and release run says it too, as an error (not a warning a release would print and ship).
    reviewed = review(load_course_assignment(load_config(root), "backprop"), 1e-6)
    assert any(line.startswith(where) for line in reviewed.errors), reviewed.errors


def test_a_number_within_the_tolerance_or_shown_exactly_passes(tmp_path, capsys):
    root = copy_course(tmp_path / "course")
    _with_table(root, "| r | x |\n|---|---|\n| 6.8814113 | 3 |\n\nThat is r = {{scale_r}}, and x: 3.\n")
    capsys.readouterr()
    assert kit_write(root) == 0, capsys.readouterr().err
    assert release(root) == 0, capsys.readouterr().err


def _variants(root: Path, monkeypatch) -> None:
    monkeypatch.setenv("AUTOGRAD_COURSE_SECRET", SECRET)
    path = root / "source" / "course.yaml"
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), "variants": True}))


def test_a_literal_right_only_at_the_default_numbers_stops_release_for_the_students_it_is_wrong_for(
    tmp_path, capsys, monkeypatch
):
    """autograd's tiny network shows x = 2 typed in, where it said x = {{net_x}}: right in the release, not for eve."""
    root = copy_course(tmp_path / "course")
    _variants(root, monkeypatch)
    notebook = root / "source" / "autograd" / "autograd.ipynb"
    text = notebook.read_text(encoding="utf-8")
    assert text.count("with **x = {{net_x}}, w") == 1
    notebook.write_text(text.replace("with **x = {{net_x}}, w", "with **x = 2, w"), encoding="utf-8")
    config = load_config(root)
    assignment = load_course_assignment(config, "autograd")
    mine = {s: numbers_for(config, assignment.content, s, assignment.default_params)["net_x"] for s in ("ann", "eve")}
    assert assignment.default_params["net_x"] == 2
    assert mine["ann"] == 2, mine  # the secret gives ann the default x
    assert mine["eve"] != 2, mine  # and eve another
    assert release(root, "autograd") == 0  # the release itself shows the default numbers: x = 2 is right there
    released = snapshot(root / "release")
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id\nann\neve\n")
    capsys.readouterr()
    assert release(root, "autograd", "--students", str(roster)) == 1
    err = capsys.readouterr().err
    assert (
        f"{notebook}: cell 15 (question '3. A whole (tiny) network by hand'), in eve's personalised copy: the prose "
        f"shows x = 2, but the hidden tests grade with P['net_x'] = {mine['eve']!r}"
    ) in err, err
    assert "ann's" not in err
    assert "show it with {{net_x}}, which prints the exact value" in err
    assert not (root / "personalised").exists()
    assert snapshot(root / "release") == released


def test_a_kit_question_that_shows_a_varying_number_as_a_literal_stops_kit_write(tmp_path, capsys):
    root = copy_course(tmp_path / "course")
    module = root / "source" / "backprop" / "exercises.py"
    text = module.read_text(encoding="utf-8")
    assert text.count("Three inputs, x = {{x}}, y") == 1
    module.write_text(text.replace("Three inputs, x = {{x}}, y", "Three inputs, x = -2, y"), encoding="utf-8")
    before = (root / "source" / "backprop" / "backprop.ipynb").read_bytes()
    assert kit_write(root) == 1
    assert (
        f"{module}: exercise 'gate': its question shows x = -2, but x varies per student (vary=): every other "
        "student would work from a number that is not theirs; write {{x}}, which prints each student's exact number"
    ) in capsys.readouterr().err
    assert (root / "source" / "backprop" / "backprop.ipynb").read_bytes() == before
