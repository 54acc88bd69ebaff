"""Chain tables read from torch's graph (course/pipeline/graph_chain.py): the published numbers of three public
backpropagation examples, forks, the order of torch's own backward pass, agreement with the hand-written CHAINS
of the two assignments, and a derived table reaching the feedback of an exercise that has none by hand."""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path

import pytest
import torch

from course.core.answers import VALUE, Answer
from course.core.config import load_config
from course.core.errors import SourceNotebookError
from course.pipeline.assignment import load_assignment
from course.pipeline.content import ChainStep
from course.pipeline.feedback import build_feedback
from course.pipeline.graph_chain import (
    MAX_EXPRESSION,
    MAX_NODES,
    GraphChainError,
    GraphStep,
    chain_from_graph,
    computation_from_build,
    kit_graphs,
    walk,
    with_derived_chains,
)
from course.pipeline.judge import judge
from tests.support.helpers import ROOT

CLOSE = 1e-4  # the published numbers have four decimals (micrograd) or three (CS231n)


def steps_by_name(steps: tuple[GraphStep, ...]) -> dict[str, GraphStep]:
    return {step.name: step for step in steps}


def assert_chain_rule_holds(steps: tuple[GraphStep, ...]) -> None:
    """Every gradient sent is the upstream gradient times the local derivative, and every value's upstream
    gradient is the sum of what its uses sent back (a fork: two or more)."""
    for step in steps:
        if step.contributions:
            total = sum(torch.tensor(c.gradient, dtype=torch.float64) for c in step.contributions)
            assert torch.allclose(total, torch.tensor(step.upstream, dtype=torch.float64)), step.name
        for local, gradient in zip(step.local, step.gradients, strict=True):
            if local is not None and isinstance(step.upstream, float):
                assert torch.allclose(
                    torch.tensor(local, dtype=torch.float64) * step.upstream,
                    torch.tensor(gradient, dtype=torch.float64),
                ), step.name


# ----------------------------------------------------------------------------- CS231n: the gate circuit


def test_cs231n_gate_circuit():
    """f = (x + y)·z at x = −2, y = 5, z = −4: ∂f/∂x = ∂f/∂y = −4, ∂f/∂z = 3 (CS231n, backprop notes)."""
    x, y, z = (torch.tensor(v, requires_grad=True) for v in (-2.0, 5.0, -4.0))
    q = x + y
    f = q * z
    steps = walk(f, {"x": x, "y": y, "z": z, "q": q, "f": f})
    by_name = steps_by_name(steps)
    assert [s.node for s in steps if not s.leaf] == ["f = q·z", "q = x + y"]
    assert by_name["f"].forward == -12.0
    assert by_name["f"].upstream == 1.0
    assert by_name["f"].contributions == ()
    assert by_name["f"].inputs == ("q", "z")
    assert by_name["f"].local == (-4.0, 3.0)
    assert by_name["q"].local == (1.0, 1.0)
    assert by_name["q"].upstream == -4.0
    assert [by_name[n].upstream for n in ("x", "y", "z")] == [-4.0, -4.0, 3.0]
    assert not any(step.fork for step in steps)
    assert_chain_rule_holds(steps)


# ----------------------------------------------------------------------------- CS231n: the 2-D sigmoid neuron

NEURON_DX = [0.393, -0.590]
NEURON_DW = [-0.197, -0.393, 0.197]


def test_cs231n_sigmoid_neuron_element_by_element():
    """f = 1/(1 + exp(−(w0·x0 + w1·x1 + w2))) at w = [2, −3, −3], x = [−1, −2], each number a leaf."""
    w0, w1, w2, x0, x1 = (
        torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (2.0, -3.0, -3.0, -1.0, -2.0)
    )
    dot = w0 * x0 + w1 * x1 + w2
    f = 1 / (1 + torch.exp(-dot))
    steps = walk(f, {"w0": w0, "w1": w1, "w2": w2, "x0": x0, "x1": x1, "dot": dot, "f": f})
    by_name = steps_by_name(steps)
    assert by_name["f"].forward == pytest.approx(0.7311, abs=CLOSE)
    assert by_name["dot"].forward == 1.0
    # The sigmoid's local derivative is (1 − f)·f, CS231n's shortcut.
    (local,) = by_name["f"].local
    assert local == pytest.approx((1 - by_name["f"].forward) * by_name["f"].forward)
    assert [by_name[n].upstream for n in ("x0", "x1")] == pytest.approx(NEURON_DX, abs=1e-3)
    assert [by_name[n].upstream for n in ("w0", "w1", "w2")] == pytest.approx(NEURON_DW, abs=1e-3)
    assert by_name["dot"].expression == "w0·x0 + w1·x1 + w2"
    assert_chain_rule_holds(steps)


def test_cs231n_sigmoid_neuron_as_vectors():
    """The same neuron with w and x as vectors: each element a use of the vector, their gradients adding."""
    w = torch.tensor([2.0, -3.0, -3.0], dtype=torch.float64, requires_grad=True)
    x = torch.tensor([-1.0, -2.0], dtype=torch.float64, requires_grad=True)
    f = torch.sigmoid(w[0] * x[0] + w[1] * x[1] + w[2])
    by_name = steps_by_name(walk(f, {"w": w, "x": x, "f": f}))
    assert by_name["f"].expression == "σ(w[0]·x[0] + w[1]·x[1] + w[2])"
    assert by_name["x"].upstream == pytest.approx(NEURON_DX, abs=1e-3)
    assert by_name["w"].upstream == pytest.approx(NEURON_DW, abs=1e-3)
    assert by_name["w"].fork
    assert len(by_name["w"].contributions) == 3
    assert by_name["w"].contributions[0].gradient == pytest.approx([NEURON_DW[0], 0, 0], abs=1e-3)


# ----------------------------------------------------------------------------- micrograd's README expression


def micrograd_expression(a_value: float = -4.0, b_value: float = 2.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """micrograd's README expression, line for line (`c += x` is `c = c + x`), each value named."""
    a = torch.tensor(a_value, dtype=torch.float64, requires_grad=True)
    b = torch.tensor(b_value, dtype=torch.float64, requires_grad=True)
    c1 = a + b
    d1 = a * b + b**3
    c2 = c1 + (c1 + 1)
    c3 = c2 + (1 + c2 + (-a))
    d2 = d1 + (d1 * 2 + (b + a).relu())
    d3 = d2 + (3 * d2 + (b - a).relu())
    e = c3 - d3
    f = e**2
    g1 = f / 2.0
    g = g1 + 10.0 / f
    return g, {
        "a": a,
        "b": b,
        "c1": c1,
        "d1": d1,
        "c2": c2,
        "c3": c3,
        "d2": d2,
        "d3": d3,
        "e": e,
        "f": f,
        "g1": g1,
        "g": g,
    }


def test_micrograd_readme_expression():
    """g = 24.7041, ∂g/∂a = 138.8338, ∂g/∂b = 645.5773 (micrograd's README)."""
    g, names = micrograd_expression()
    steps = walk(g, names)
    by_name = steps_by_name(steps)
    assert by_name["g"].forward == pytest.approx(24.7041, abs=CLOSE)
    assert by_name["a"].upstream == pytest.approx(138.8338, abs=CLOSE)
    assert by_name["b"].upstream == pytest.approx(645.5773, abs=CLOSE)
    assert by_name["c2"].expression == "c1 + c1 + const"  # torch keeps no number it adds
    assert_chain_rule_holds(steps)


def test_micrograd_forks_show_each_use_and_their_sum():
    """c1 is used twice by one step (c1 + (c1 + 1)), f twice (g1 = f/2 and g = g1 + 10/f), d2 twice, a and b in
    many places: each use is a contribution of its own, and the gradient at the value is their sum."""
    g, names = micrograd_expression()
    by_name = steps_by_name(walk(g, names))
    assert [c.source for c in by_name["c1"].contributions] == ["c2", "c2"]
    assert [c.source for c in by_name["d2"].contributions] == ["d3", "d3"]
    f = by_name["f"]
    assert [c.source for c in f.contributions] == ["g", "g1"]
    # g = f/2 + 10/f: ∂g/∂f = 1/2 − 10/f², one use each (backward reaches 10/f in g before f/2 in g1).
    assert [c.gradient for c in f.contributions] == pytest.approx([-10 / 49**2, 0.5])
    assert f.upstream == pytest.approx(0.5 - 10 / 49**2)
    assert by_name["a"].fork
    assert len(by_name["a"].contributions) == 5
    assert sum(c.gradient for c in by_name["a"].contributions) == pytest.approx(138.8338, abs=CLOSE)
    assert not by_name["e"].fork


def test_an_unnamed_fork_is_a_step_of_its_own():
    """A value used twice that the author did not name still shows as a fork, named t1."""
    a = torch.tensor(3.0, requires_grad=True)
    b = a * 2
    out = b * b + 1
    by_name = steps_by_name(walk(out, {"a": a, "out": out}))
    t1 = by_name["t1"]
    assert t1.expression == "a·2"
    assert t1.forward is None
    assert [c.gradient for c in t1.contributions] == [6.0, 6.0]
    assert t1.upstream == 12.0
    assert by_name["a"].upstream == 24.0


def test_the_walk_is_in_the_order_of_torchs_own_backward_pass():
    """The steps come in the order a real backward() computes the gradients of the named values (each tensor
    hook fires as its gradient is complete), a leaf after the last step that sends it a gradient."""
    g, names = micrograd_expression()
    steps = walk(g, names)
    fired: list[str] = []
    for name, tensor in names.items():
        if tensor.grad_fn is not None and tensor is not g:
            tensor.register_hook(lambda grad, name=name: fired.append(name))
    g.backward()
    assert [s.name for s in steps if not s.leaf and s.name != "g"] == fired
    position = {s.name: i for i, s in enumerate(steps)}
    for step in steps:
        assert all(position[c.source] < position[step.name] for c in step.contributions)


def test_the_walk_leaves_grad_and_the_graph_as_they_were():
    g, names = micrograd_expression()
    walk(g, names)
    assert names["a"].grad is None
    g.backward()  # the graph is still there to run
    assert names["a"].grad.item() == pytest.approx(138.8338, abs=CLOSE)


def test_what_cannot_be_walked_is_said():
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(GraphChainError, match="one-number tensor"):
        walk(a * 2, {"a": a})
    with pytest.raises(GraphChainError, match="one-number tensor"):
        walk(torch.tensor(1.0), {})
    b = torch.tensor(2.0, requires_grad=True)
    with pytest.raises(GraphChainError, match=r"a leaf that requires grad has no name \(its value 2"):
        walk((a * b).sum(), {"a": a})
    assert issubclass(GraphChainError, SourceNotebookError)


def test_a_graph_backward_has_freed_is_named_as_such():
    w = torch.tensor(2.0, requires_grad=True)
    y = w * w
    y.backward()
    with pytest.raises(GraphChainError, match="torch has freed this graph: backward\\(\\) ran on it already"):
        walk(y, {"w": w, "y": y})


def test_a_graph_up_to_the_bound_is_walked_and_past_it_refused():
    """Up to MAX_NODES nodes, one chain of unnamed ones is one step (its expression written one frame a node,
    its text bounded); one more node and the graph is refused."""
    x = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    y = x
    for _ in range(MAX_NODES - 1):  # and x's own node
        y = y * 1.001
    first, leaf = walk(y, {"x": x})
    assert len(first.node) <= MAX_EXPRESSION + len("output = ")
    assert first.node.endswith("…")
    assert leaf.upstream == pytest.approx(1.001 ** (MAX_NODES - 1))
    with pytest.raises(GraphChainError, match="more than 500 nodes"):
        walk(y * 1.001, {"x": x})


# ----------------------------------------------------------------------------- the two assignments' CHAINS


def load(name: str, exercises: Path | None = None):
    config = load_config(ROOT)
    return load_assignment(config.source_notebook(name), name, exercises)


def solution_values(assignment, question_id: str) -> dict:
    """The source notebook's own solution to one question (trusted: the instructor's cell)."""
    question = next(q for q in assignment.questions if q.id == question_id)
    source = next(
        cell
        for cell in _cells(assignment)
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == question.answer_cell_id
    )["source"]
    namespace: dict = {}
    exec("".join(source), namespace)  # noqa: S102 - the course's own solution cell
    return {name: namespace[name] for name in question.answer_names}


def _cells(assignment) -> list[dict]:
    import json

    return json.loads(assignment.notebook_path.read_text())["cells"]


HAND_WRITTEN = [("autograd", "tiny_net"), ("autograd", "w2_net"), ("training", "leaky_relu")]


@pytest.mark.parametrize(("name", "question"), HAND_WRITTEN)
def test_derived_tables_agree_with_the_hand_written_ones(name, question):
    """The same walk: the same rows, in the same order, naming the same answers; the node's expression the same
    but for the target (a subtraction keeps neither operand, so torch's graph cannot name it), the local
    derivative the same quantity (the hand-written one adds its formula). The differences are explained beside
    the hand-written tables in source/<assignment>/exercises.py, which keep them for their words."""
    assignment = load(name)
    derived = assignment.content.graphs[question](assignment.default_params).chain()
    written = assignment.content.chains[question]
    assert [(s.forward, s.gradient, s.upstream) for s in derived] == [
        (s.forward, s.gradient, s.upstream) for s in written
    ]
    for mine, theirs in zip(derived, written, strict=True):
        assert mine.node.replace("const", "target") == theirs.node
        assert theirs.local.startswith(f"{mine.local} = ")


@pytest.mark.parametrize(("name", "question"), HAND_WRITTEN)
def test_derived_numbers_are_the_solutions(name, question):
    """Every forward value and gradient the walk reads from torch's graph is the notebook's own solution."""
    assignment = load(name)
    computation = assignment.content.graphs[question](assignment.default_params)
    by_name = steps_by_name(walk(computation.output, computation.names))
    solution = solution_values(assignment, question)
    for symbol, answer in computation.forwards.items():
        assert by_name[symbol].forward == pytest.approx(solution[answer]), answer
    for symbol, answer in computation.gradients.items():
        assert by_name[symbol].upstream == pytest.approx(solution[answer]), answer


# ----------------------------------------------------------------------------- a derived table in the feedback


def without_chains(tmp_path: Path, name: str) -> Path:
    """The assignment's exercises module with no hand-written CHAINS: its graphs give the tables."""
    exercises = tmp_path / "exercises.py"
    shutil.copy(ROOT / "source" / name / "exercises.py", exercises)
    exercises.write_text(exercises.read_text() + "\nCHAINS = {}\n")
    return exercises


def test_an_exercise_without_a_hand_written_table_gets_the_graphs_in_its_feedback(tmp_path):
    assignment = load("autograd", without_chains(tmp_path, "autograd"))
    assert assignment.content.chains == {}
    solution = {
        name: value
        for q in assignment.questions
        if q.id in ("tiny_net", "w2_net")
        for name, value in solution_values(assignment, q.id).items()
    }
    answers = {name: Answer(VALUE, value) for name, value in solution.items()}
    answers["net_dL_dw"] = Answer(VALUE, solution["net_dL_dw"] + 1)  # one slip, at the end of the chain
    questions = tuple(q for q in judge(assignment, answers, tolerance=1e-6) if q.id in ("tiny_net", "w2_net"))
    content = with_derived_chains(assignment.content, assignment.default_params)
    feedback = build_feedback(
        "s1", "autograd", questions, status="graded", messages=[], cell_errors=[], content=content
    )
    document = feedback.to_json()  # the document as written to feedback.json
    table = next(q for q in document["questions"] if q["id"] == "tiny_net")["chain_table"]
    assert [row["node"] for row in table["rows"]] == [
        "L = (a − const)²",
        "a = ReLU(h)",
        "h = w·x + b (to w)",
        "h = w·x + b (to b)",
    ]
    assert table["first_wrong"] == 2
    assert [row["torch_local_derivative"] for row in table["rows"]] == ["6", "1", "2", "1"]
    assert "chain_table" in next(q for q in document["questions"] if q["id"] == "w2_net")


def test_a_hand_written_table_overrides_the_graphs():
    assignment = load("autograd")
    content = with_derived_chains(assignment.content, assignment.default_params)
    assert content.chains == assignment.content.chains


def write_exercises(tmp_path: Path, body: str) -> Path:
    exercises = tmp_path / "exercises.py"
    shutil.copy(ROOT / "source" / "autograd" / "exercises.py", exercises)
    exercises.write_text(exercises.read_text() + "\nCHAINS = {}\n" + body)
    return exercises


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("GRAPHS = {'nothing_here': tiny_net_graph}\n", r"GRAPHS names 'nothing_here', which is no question"),
        (
            "GRAPHS = {'w2_net': tiny_net_graph}\n",
            r"GRAPHS\['w2_net'\] names 'net_a', .* which are no answer of "
            r"'w2_net': map each value to one of w2_out",
        ),
        (
            "GRAPHS = {'tiny_net': lambda P: P['no_such_number']}\n",
            r"GRAPHS\['tiny_net'\]: the build fails with these numbers: KeyError: 'no_such_number'",
        ),
        ("GRAPHS = {'tiny_net': lambda P: 3}\n", r"GRAPHS\['tiny_net'\]: it returned int, not a"),
        (
            "import dataclasses\n_g = tiny_net_graph\nGRAPHS = {'tiny_net': lambda P: dataclasses.replace(_g(P), "
            "gradients={'w': 'net_dL_dw'})}\n",
            r"the gradient at 'h' is no answer.* name the answer that holds it",
        ),
        ("GRAPHS = {'tiny_net': 3}\n", r"GRAPHS must map question ids to functions"),
    ],
)
def test_a_build_that_cannot_give_a_table_is_refused_at_load_saying_where(tmp_path, body, said):
    exercises = write_exercises(tmp_path, body)
    with pytest.raises(SourceNotebookError, match=said) as raised:
        load("autograd", exercises)
    assert str(exercises) in str(raised.value)


def test_a_build_failing_with_a_students_numbers_costs_only_the_table(tmp_path):
    body = (
        "def _fragile(P):\n    assert P['net_x'] == 2\n    return tiny_net_graph(P)\nGRAPHS = {'tiny_net': _fragile}\n"
    )
    assignment = load("autograd", write_exercises(tmp_path, body))
    assert assignment.default_params["net_x"] == 2
    content = with_derived_chains(assignment.content, {**assignment.default_params, "net_x": 3})
    assert "tiny_net" not in content.chains


def test_chain_from_graph_names_answers_only():
    x = torch.tensor(2.0)
    w = torch.tensor(3.0, requires_grad=True)
    y = w * x
    assert chain_from_graph(y, {"w": w, "y": y}, gradients={"w": "dy_dw"}) == (
        ChainStep("y = w·2", "∂y/∂w", None, "dy_dw", None),
    )
    with pytest.raises(GraphChainError, match="'z' name no value of the walk"):
        chain_from_graph(y, {"w": w, "y": y}, gradients={"z": "dz"})
    assert math.isclose(walk(y, {"w": w, "y": y})[-1].upstream, 2.0)


# ----------------------------------------------------------------------------- builds in the authoring kit's shape


@pytest.fixture(scope="module")
def backprop():
    """The kit's definitions of the backprop assignment (source/backprop/exercises.py), by id: their builds call
    backward() themselves and return answers by name."""
    from course.authoring.kit import load_exercises

    return {exercise.id: exercise for exercise in load_exercises(ROOT / "source" / "backprop" / "exercises.py")}


def test_a_kit_build_gives_its_table_from_its_own_run(backprop):
    """The output is what backward() was called on, the names the build's own variables, and each answer a
    forward value or a gradient by what it is: CS231n's gate as the kit's backprop assignment asks it."""
    computation = computation_from_build(backprop["gate"].build, {"x": -2, "y": 5, "z": -4})
    assert computation.forwards == {"q": "gate_q", "f": "gate_f"}
    assert computation.gradients == {"q": "gate_df_dq", "z": "gate_df_dz", "x": "gate_df_dx", "y": "gate_df_dy"}
    assert computation.chain() == (
        ChainStep("f = q·z (to q)", "∂f/∂q", "gate_f", "gate_df_dq", None),
        ChainStep("f = q·z (to z)", "∂f/∂z", "gate_f", "gate_df_dz", None),
        ChainStep("q = x + y (to x)", "∂q/∂x", "gate_q", "gate_df_dx", "gate_df_dq"),
        ChainStep("q = x + y (to y)", "∂q/∂y", "gate_q", "gate_df_dy", "gate_df_dq"),
    )
    by_name = steps_by_name(walk(computation.output, computation.names))  # the graph was kept to walk again
    assert [by_name[n].upstream for n in ("x", "y", "z")] == [-4.0, -4.0, 3.0]


def test_a_kit_build_of_vectors_and_one_that_asks_only_the_ends(backprop):
    neuron = computation_from_build(backprop["neuron"].build, {"w0": 2, "w1": -3, "w2": -3, "x0": -1, "x1": -2})
    assert [(s.node, s.gradient) for s in neuron.chain()] == [
        ("f = 1/(exp(−dot) + const)", "neuron_df_ddot"),
        ("dot = w[0]·x[0] + w[1]·x[1] + w[2] (to w)", "neuron_df_dw"),
        ("dot = w[0]·x[0] + w[1]·x[1] + w[2] (to x)", "neuron_df_dx"),
    ]
    by_name = steps_by_name(walk(neuron.output, neuron.names))
    assert by_name["w"].upstream == pytest.approx(NEURON_DW, abs=1e-3)
    # micrograd's exercise asks for g and the gradients at a and b only: a declared build (not partial) is told
    # what to add; a kit build (partial) shows the whole walk, the gradients on the way with torch's numbers alone.
    micrograd = computation_from_build(backprop["micrograd"].build, {"a": -4, "b": 2})
    assert micrograd.partial
    with pytest.raises(GraphChainError, match="the gradient at 'd' is no answer"):
        chain_from_graph(micrograd.output, micrograd.names, gradients=micrograd.gradients)


def test_a_kit_build_that_asks_only_the_ends_shows_the_whole_walk(backprop):
    """micrograd's README expression: every edge of the walk is a row; only the two sums at the leaves are answers,
    each the published gradient and the sum of the rows that send a path's share to it."""
    micrograd = computation_from_build(backprop["micrograd"].build, {"a": -4, "b": 2})
    chain = micrograd.chain()
    asked = [step for step in chain if step.asked]
    assert [(s.node, s.gradient) for s in asked] == [
        ("a (5 paths add up)", "mg_dg_da"),
        ("b (4 paths add up)", "mg_dg_db"),
    ]
    assert asked[0].torch_gradient == pytest.approx(138.8338, abs=CLOSE)
    assert asked[1].torch_gradient == pytest.approx(645.5773, abs=CLOSE)
    for leaf, total in (("a", 138.8338), ("b", 645.5773)):
        paths = [s for s in chain if not s.asked and s.gradient == f"{leaf} (from {s.local[1:].split('/')[0]})"]
        assert sum(s.torch_gradient for s in paths) == pytest.approx(total, abs=CLOSE)
    # The first rows, by hand: g = f/2 + 10/f with f = 49 sends 1/2 − 10/49² to f; f = e² with e = −7 sends
    # 2e times that.
    first, second = chain[0], chain[1]
    assert (first.node, first.gradient, first.forward) == ("g = f/2 + 10/f", "f", "mg_g")
    assert first.torch_gradient == pytest.approx(0.5 - 10 / 49**2)
    assert (second.node, second.torch_local) == ("f = e²", -14.0)
    assert second.torch_gradient == pytest.approx(-14 * (0.5 - 10 / 49**2))
    # The ReLU of b + a = −2 is shut: its rows send nothing.
    shut = [s for s in chain if s.node.startswith("t1 = ") and s.gradient in ("a (from t1)", "b (from t1)")]
    assert [s.torch_gradient for s in shut] == [0.0, 0.0]


def test_a_kit_build_leaves_no_trace(backprop):
    before = sys.getprofile()
    computation_from_build(backprop["gate"].build, {"x": -2, "y": 5, "z": -4})
    assert sys.getprofile() is before
    x = torch.tensor(1.0, requires_grad=True)
    y = x * x
    y.backward()  # no mode left behind that keeps graphs: a second backward() finds its graph freed
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


def test_a_kit_build_that_calls_backward_twice_is_refused():
    def twice(x):
        x = torch.tensor(float(x), requires_grad=True)
        (x * 2).backward()
        (x * 3).backward()
        return {"dx": x.grad}

    with pytest.raises(GraphChainError, match="called backward\\(\\) 2 times"):
        computation_from_build(twice, {"x": 1})


def test_kit_graphs_read_the_numbers_cell_through_the_exercises_names(backprop):
    graphs = kit_graphs([backprop["gate"]])
    computation = graphs["gate"]({"gate_x": -2, "gate_y": 5, "gate_z": -4, "other": 1})
    assert computation.output.item() == -12.0


@pytest.mark.slow
def test_grading_shows_the_graphs_table_where_none_is_written(course_root, tmp_path):
    """The whole way: a notebook graded in the sandbox, its feedback's tiny_net table read from the graph (the
    course's copy has no hand-written CHAINS), breaking where the student's chain broke."""
    from course.core.config import load_config
    from course.pipeline.discovery import SubmissionRef
    from course.pipeline.grading import grade_submission
    from tests.support.helpers import ALL_VALUES, CORRECT_CODE, submitted_notebook, write

    exercises = course_root / "source" / "autograd" / "exercises.py"
    exercises.write_text(exercises.read_text() + "\nCHAINS = {}\n")
    config = load_config(course_root)
    assignment = load("autograd", exercises)
    wrong = {**CORRECT_CODE, "net_dL_dw": repr(ALL_VALUES["net_dL_dw"] + 1)}
    path = write(submitted_notebook(wrong), tmp_path / "alice.ipynb")
    graded = grade_submission(SubmissionRef("alice", path), assignment, config, reveal_torch_values=True)
    document = graded.feedback.to_json()  # the document as written to feedback.json
    table = next(q for q in document["questions"] if q["id"] == "tiny_net")["chain_table"]
    assert table["rows"][0]["node"] == "L = (a − const)²"
    assert table["first_wrong"] == 2
    assert "chain_table" in next(q for q in document["questions"] if q["id"] == "w2_net")
