"""What an independent review of the authoring kit found (issue 42): an assignment with numbers and no derive(rng)
while variants are on is refused where it is loaded, and `release` checks every assignment before it writes any;
`kit write` never overwrites a hand-written number of P, keeps the numbers cell's layout, removes the numbers a
kit exercise no longer has and says so; a kit build that calls backward() other than once gets no derived chain
table, said at kit write, not a refused assignment; derived tables are computed once per (file, question,
numbers), in a bounded cache."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from course.authoring.kit import AuthoringError, load_exercises, write_cells, write_notebook
from course.cli import main
from course.core.config import load_config
from course.core.errors import ConfigError
from course.pipeline import graph_chain
from course.pipeline.assignment import load_assignment, load_course_assignment
from course.pipeline.content import ChainStep, Content
from course.pipeline.variants import numbers_for
from tests.support.helpers import SOURCE_NOTEBOOK, load
from tests.support.kit import SLOPE, exercises_module

SECRET = "a secret for the tests"  # noqa: S105 - the tests' own


def _numbers(notebook: dict) -> str:
    cell = next(c for c in notebook["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "numbers")
    return "".join(cell["source"])


def _p(notebook: dict) -> dict:
    return eval(_numbers(notebook).split("P = ", 1)[1])  # noqa: S307 - the kit's own literal dict of numbers


# ----------------------------------------------------------------------------- 1. variants without a derive


def without_derive(course_root):
    """backprop as a kit assignment without its derive(rng) (and constraint_violations): no VARIANTS."""
    exercises = course_root / "source" / "backprop" / "exercises.py"
    exercises.write_text(exercises.read_text(encoding="utf-8") + "\ndel VARIANTS\n")


def test_variants_refuse_a_kit_assignment_without_derive_where_it_is_loaded(course_root, monkeypatch):
    monkeypatch.setenv("AUTOGRAD_COURSE_SECRET", SECRET)
    without_derive(course_root)
    config = replace(load_config(course_root), variants=True)
    with pytest.raises(ConfigError) as refused:
        load_course_assignment(config, "backprop")
    said = str(refused.value)
    assert said.startswith(f"{course_root / 'source' / 'backprop' / 'exercises.py'}: variants: true, but assignment")
    assert "defines no derive(rng)" in said
    assert "add derive(rng) there" in said
    assert "set variants: false" in said
    assert "remove the assignment" in said
    load_course_assignment(config, "autograd")  # an assignment with its derive loads as before


def test_release_checks_every_assignment_before_it_writes_anything(course_root, monkeypatch, capsys):
    monkeypatch.setenv("AUTOGRAD_COURSE_SECRET", SECRET)
    without_derive(course_root)
    settings = course_root / "source" / "course.yaml"
    settings.write_text(settings.read_text(encoding="utf-8").replace("variants: false", "variants: true"))
    roster = course_root / "roster.csv"
    roster.write_text("student_id\nada\n")
    before = {path: path.read_bytes() for path in (course_root / "release").rglob("*") if path.is_file()}
    assert main(["--course", str(course_root), "release", "--no-verify", "--students", str(roster)]) == 1
    err = capsys.readouterr().err
    assert "source/backprop/exercises.py: variants: true, but assignment 'backprop'" in err
    assert "Traceback" not in err
    assert not (course_root / "personalised").exists()  # autograd and training were not released before it
    after = {path: path.read_bytes() for path in (course_root / "release").rglob("*") if path.is_file()}
    assert after == before


def test_a_new_assignment_works_under_variants_as_it_says(course_root, monkeypatch, capsys):
    monkeypatch.setenv("AUTOGRAD_COURSE_SECRET", SECRET)
    assert main(["--course", str(course_root), "new", "assignment", "demo"]) == 0
    capsys.readouterr()
    config = replace(load_config(course_root), variants=True)
    assignment = load_course_assignment(config, "demo")
    numbers = {
        student: numbers_for(config, assignment.content, student, assignment.default_params) for student in "abcdef"
    }
    assert all(set(given) == {"square_x"} for given in numbers.values())
    assert len({given["square_x"] for given in numbers.values()}) > 1  # each student their own


# ----------------------------------------------------------------------------- 2. and 3. the numbers cell


def test_a_kit_number_named_like_a_hand_written_one_is_refused(tmp_path):
    # kit exercise `net` with number `w`: `net_w`, which the hand-written tiny_net's number is called already
    module = exercises_module(tmp_path, SLOPE.replace('id="line"', 'id="net"').replace('"w": 3', '"w": 7'))
    original = load(SOURCE_NOTEBOOK)
    with pytest.raises(AuthoringError) as refused:
        write_cells(original, load_exercises(module), module)
    said = str(refused.value)
    assert said.startswith(f"{module}: exercise 'net': its number 'w' goes in the numbers cell's P as 'net_w'")
    assert "already holds for a hand-written exercise" in said
    assert "rename the number 'w'" in said


def test_kit_write_keeps_the_numbers_cells_hand_written_layout_and_adds_its_groups(tmp_path):
    module = exercises_module(tmp_path, SLOPE)
    original = load(SOURCE_NOTEBOOK)
    written = write_cells(original, load_exercises(module), module)
    before, after = _numbers(original).splitlines(), _numbers(written).splitlines()
    assert after == [*before[:-1], '    "line_w": 3, "line_x": 2, "line_b": -1,', "}"]
    # the module's own NUMBER_GROUPS come first where it has them
    grouped = exercises_module(tmp_path, SLOPE + '\nNUMBER_GROUPS = [["line_b", "line_w"], ["line_x"]]\n')
    notebook = tmp_path / "source" / "autograd" / "autograd.ipynb"
    notebook.write_text(json.dumps(original), encoding="utf-8")
    assert write_notebook(notebook, grouped) is True
    lines = _numbers(json.loads(notebook.read_text(encoding="utf-8"))).splitlines()
    assert lines[2:4] == ['    "line_b": -1, "line_w": 3,', '    "line_x": 2,']
    assert lines[4:-1] == before[2:-1]


def test_numbers_a_kit_exercise_no_longer_has_leave_p_and_are_named(tmp_path):
    module = exercises_module(tmp_path, SLOPE)
    first = write_cells(load(SOURCE_NOTEBOOK), load_exercises(module), module)
    assert {"line_w", "line_x", "line_b"} <= set(_p(first))
    renamed = exercises_module(
        tmp_path,
        SLOPE.replace("def line(w, x, b)", "def line(u, x, b)")
        .replace("float(w)", "float(u)")
        .replace("w = torch", "u = torch")
        .replace("y = w * x", "y = u * x")
        .replace('"line_dy_dw": w.grad', '"line_dy_dw": u.grad')
        .replace("w = {{w}}", "u = {{u}}")
        .replace('"w": 3', '"u": 3'),
    )
    second = write_cells(first, load_exercises(renamed), renamed)
    assert "line_w" not in _p(second)
    assert {"line_u", "line_x", "line_b", "net_w", "cubic_x"} <= set(_p(second))  # the hand-written ones kept
    notes: list[str] = []
    assert write_cells(first, load_exercises(renamed), renamed, notes=notes) == second
    assert notes == ["removed line_w from the numbers cell's P: exercise 'line' no longer has that number"]


# ----------------------------------------------------------------------------- 4. builds that give no table

NO_BACKWARD = """\
import torch

from course.authoring.kit import Ask, Exercise
from course.pipeline.graph_chain import kit_graphs


def twice(x):
    x = torch.tensor(float(x), dtype=torch.float64, requires_grad=True)
    y = 2 * x
    return {"twice_y": y}


def square(v):
    v = torch.tensor(float(v), dtype=torch.float64, requires_grad=True)
    y = v * v
    y.backward()
    return {"square_y": y, "square_dy_dv": v.grad}


EXERCISES = [
    Exercise(id="twice", title="12. Twice", question="y = 2x at x = {{x}}.", build=twice, numbers={"x": 3},
             answers=[Ask("twice_y", hint="2x.", idea="The forward pass.")]),
    Exercise(id="square", title="13. Square", question="y = v² at v = {{v}}.", build=square, numbers={"v": 5},
             answers=[Ask("square_y", hint="v·v.", idea="The forward pass."),
                      Ask("square_dy_dv", hint="2v.", idea="The power rule.")]),
]
GRAPHS = kit_graphs(EXERCISES)
"""


def test_a_kit_build_without_one_backward_gets_no_table_and_kit_write_says_so(tmp_path):
    module = exercises_module(tmp_path, NO_BACKWARD)
    notebook = tmp_path / "source" / "autograd" / "autograd.ipynb"
    notebook.write_text(SOURCE_NOTEBOOK.read_text(encoding="utf-8"), encoding="utf-8")
    notes: list[str] = []
    assert write_notebook(notebook, module, notes) is True
    assert notes == [
        "exercise 'twice' gets no chain table: the build called backward() 0 times: a chain table walks one "
        "output (call it once, on the output, or write the table by hand: Exercise(chain=...))"
    ]
    assignment = load_assignment(notebook, "autograd", module)
    derived = graph_chain.with_derived_chains(assignment.content, assignment.default_params)
    assert "twice" not in derived.chains
    assert [step.gradient for step in derived.chains["square"]] == ["square_dy_dv"]


def test_a_kit_module_without_graphs_is_told_its_exercises_get_no_table(tmp_path):
    """A newcomer's module (as `new assignment` wrote it before GRAPHS was in its template) had no GRAPHS, and its
    feedback no chain table, with nothing said: kit write names the exercises and the line to add."""
    module = exercises_module(tmp_path, NO_BACKWARD.replace("GRAPHS = kit_graphs(EXERCISES)\n", ""))
    notebook = tmp_path / "source" / "autograd" / "autograd.ipynb"
    notebook.write_text(SOURCE_NOTEBOOK.read_text(encoding="utf-8"), encoding="utf-8")
    notes: list[str] = []
    assert write_notebook(notebook, module, notes) is True
    assert notes == [
        "exercises 'twice', 'square' get no chain table: the module has no GRAPHS; add `GRAPHS = "
        "kit_graphs(EXERCISES)` (from course.pipeline.graph_chain import kit_graphs) to read each table from its "
        "build's graph"
    ]


# ----------------------------------------------------------------------------- 5. derived tables cached


def test_derived_chain_tables_are_computed_once_per_file_question_and_numbers(tmp_path, monkeypatch):
    import torch

    runs: list[int] = []

    def build(P: dict) -> graph_chain.Computation:
        runs.append(P["x"])
        x = torch.tensor(float(P["x"]), dtype=torch.float64, requires_grad=True)
        y = x * x
        return graph_chain.Computation(y, {"x": x, "y": y}, gradients={"x": "dy_dx"})

    content = Content(path=tmp_path / "exercises.py", graphs={"q": build})
    first = graph_chain.with_derived_chains(content, {"x": 3})
    again = graph_chain.with_derived_chains(content, {"x": 3})
    assert first.chains == again.chains == {"q": (ChainStep("y = x·x", "∂y/∂x", None, "dy_dx", None),)}
    assert runs == [3]  # the second submission with these numbers read the table from the cache
    graph_chain.with_derived_chains(content, {"x": 4})
    assert runs == [3, 4]
    reloaded = replace(content, graphs={"q": lambda P: build(P)})  # the module loaded again: its build is new
    graph_chain.with_derived_chains(reloaded, {"x": 3})
    assert runs == [3, 4, 3]

    monkeypatch.setattr(graph_chain, "CACHE_SIZE", 3)
    for x in range(5, 12):
        graph_chain.with_derived_chains(content, {"x": x})
    assert len(graph_chain._cache) <= 3  # bounded: the least recently used dropped
