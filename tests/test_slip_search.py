"""The slip search (course/pipeline/slip_search.py, mutations.py) on the course's own assignments: for each kind of
slip, the value a student who makes it gives, worked out by hand below at the notebooks' own numbers (never by the
search's code), is named with that kind; torch's own value and values nobody's slip gives are not attributed."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from course.pipeline.assignment import Assignment, load_assignment
from course.pipeline.slip_search import SlipSearch, explainer
from course.pipeline.slips import (
    ACCUMULATION_OFF,
    DROPPED_LOCAL,
    FORWARD_FOR_SLOPE,
    GATE_IGNORED,
    ONE_BRANCH,
    SIGN_FLIPPED,
    SLIP_KINDS,
    SUM_FOR_MEAN,
)
from tests.support.helpers import ROOT

TOLERANCE = 1e-6  # source/course.yaml's


def assignment(name: str) -> Assignment:
    return load_assignment(ROOT / "source" / name / f"{name}.ipynb", name)


@pytest.fixture(scope="module")
def autograd() -> SlipSearch:
    return explainer(assignment("autograd"), tolerance=TOLERANCE)


@pytest.fixture(scope="module")
def training() -> SlipSearch:
    return explainer(assignment("training"), tolerance=TOLERANCE)


@pytest.fixture(scope="module")
def backprop() -> SlipSearch:
    return explainer(assignment("backprop"), tolerance=TOLERANCE)


# ----------------------------------------------------------------------------- the numbers, by hand

# autograd's numbers cell: x = 2, w = 3, b = -1, target 2; w2 = 0.5; the closed ReLU's x = -1; accumulation at x = 3
# over 3 steps. The tiny network: h = 3*2 - 1 = 5, a = relu(5) = 5, L = (5 - 2)^2 = 9, dL/da = 2(5 - 2) = 6,
# dL/dh = 6 (ReLU open), dL/dw = 6 * 2 = 12, dL/db = 6.
AUTOGRAD_P = {"net_x": 2, "net_w": 3, "net_b": -1, "net_target": 2, "w2": 0.5, "closed_x": -1, "accum_x": 3}
# The w2 network: out = 0.5 * 5 = 2.5, dL/dout = 2(2.5 - 2) = 1, dL/da = 1 * w2 = 0.5.
# The closed ReLU: h = 3*(-1) - 1 = -4 < 0, so a = 0 and dL/da = 2(0 - 2) = -4; the gate passes nothing: dL/dw = 0.
# Accumulation: d(x^2)/dx = 2*3 = 6 per backward(); .grad holds [6, 12, 18] without zeroing, [6, 6, 6] with it.
# Two backward() calls of the tiny network: .grad of w = 12 + 12 = 24.

# training's numbers cell: x = 2, w = 3, b = -1, target 2, lr = 1/8; the leaky network's x = -1; batch B: x = 1,
# target 4. Leaky: h = -4, a = 0.01 * -4 = -0.04, dL/da = 2(-0.04 - 2) = -4.08, dL/dh = -4.08 * 0.01 = -0.0408.
TRAINING_P = {"net_x": 2, "net_w": 3, "net_b": -1, "net_target": 2, "lr": 0.125, "closed_x": -1, "batch_x": 1}

# micrograd's README expression at a = -4, b = 2 (backprop's numbers): c = a + b = -2, d = a*b + b^3 = 0,
# c2 = c + c + 1 = -3, c3 = c2 + 1 + c2 - a = -1, d2 = 3*d + relu(b + a) = 0 (relu(-2) shut),
# d3 = 4*d2 + relu(b - a) = 6 (relu(6) open), e = c3 - d3 = -7, f = e^2 = 49, g = f/2 + 10/f.
# dg/de = (1/2 - 10/f^2) * 2e. Back to a: through c, dc3/da = 2 * 2 * 1 - 1 = 3; through d, dd3/da = 4 * 3 * b - 1 = 23
# (d = a*b has d/da = b = 2; relu(b - a) open, slope -1); e = c - d, so dg/da = dg/de * (3 - 23) = 138.8338...
DG_DE = (1 / 2 - 10 / 49**2) * 2 * -7


def micrograd_dg_da(through_c: float, through_d: float) -> float:
    return DG_DE * (through_c - through_d)


# The sigmoid neuron at w = [2, -3, -3], x = [-1, -2]: s = -2 + 6 - 3 = 1, built as f = 1 / (1 + exp(-s)).
NEURON_F = 1 / (1 + math.exp(-1))


CASES = [
    # (assignment, question, answer, the slip's value by hand, the kind)
    # dL/dw with dh/dw = x taken as 1: the gradient at h, 6.
    ("autograd", "tiny_net", "net_dL_dw", 6.0, DROPPED_LOCAL),
    # The square's slope 2(a - t) taken with the wrong sign: 2(2 - 5) = -6.
    ("autograd", "tiny_net", "net_dL_da", -6.0, SIGN_FLIPPED),
    # The square's own value (a - t)^2 = 9 used as its slope.
    ("autograd", "tiny_net", "net_dL_da", 9.0, FORWARD_FOR_SLOPE),
    # d(out)/da = w2 taken as 1: dL/da = 1, not 0.5.
    ("autograd", "w2_net", "w2_dL_da", 1.0, DROPPED_LOCAL),
    # The shut ReLU's slope taken as 1: dL/dw = -4 * x = -4 * -1 = 4, dL/db = -4.
    ("autograd", "closed_relu", "closed_dL_dw", 4.0, GATE_IGNORED),
    ("autograd", "closed_relu", "closed_dL_db", -4.0, GATE_IGNORED),
    # Each backward() replacing .grad: [6, 6, 6]; the first counted twice: [12, 18, 24]; left out: [0, 6, 12].
    ("autograd", "accumulation", "accumulated_grads", [6.0, 6.0, 6.0], ACCUMULATION_OFF),
    ("autograd", "accumulation", "accumulated_grads", [12.0, 18.0, 24.0], ACCUMULATION_OFF),
    ("autograd", "accumulation", "accumulated_grads", [0.0, 6.0, 12.0], ACCUMULATION_OFF),
    # zero_() ignored: the gradients pile up, [6, 12, 18].
    ("autograd", "accumulation", "zeroed_grads", [6.0, 12.0, 18.0], ACCUMULATION_OFF),
    # One backward() of two: 12, not 24.
    ("autograd", "predict_twice", "twice_w_grad", 12.0, ACCUMULATION_OFF),
    # LeakyReLU's slope 0.01 taken as 1: dL/dh = dL/da = -4.08, dL/dw = -4.08 * -1 = 4.08.
    ("training", "leaky_relu", "leaky_dL_dh", -4.08, GATE_IGNORED),
    ("training", "leaky_relu", "leaky_dL_dw", 4.08, GATE_IGNORED),
    # Each loss halved before backward(): (12 + -4) / 2 = 4. With the halving left out (a sum for the mean): 8.
    # Batch A: dL/dh = 2(5 - 2) = 6, dL/dw = 6 * 2 = 12; batch B: h = 3*1 - 1 = 2, dL/dh = 2(2 - 4) = -4, dL/dw = -4.
    ("training", "accumulate_on_purpose", "averaged_w_grad", 8.0, SUM_FOR_MEAN),
    # optimizer.zero_grad() ignored in the training loop (lr 1/8): step 1 w = 3 - 12/8 = 1.5, b = -1 - 6/8 = -1.75;
    # step 2: h = 1.5*2 - 1.75 = 1.25, dL/dh = 2(1.25 - 2) = -1.5, .grad of w = 12 - 3 = 9, w = 1.5 - 9/8 = 0.375;
    # step 3: h = 0.75 - 2.3125 < 0 adds nothing, w = 0.375 - 9/8 = -0.75.
    ("training", "training_loop", "sgd_w", [1.5, 0.375, -0.75], ACCUMULATION_OFF),
    # The multiplier f = q*z: df/dq = z taken as 1 reaches x unchanged: 1 (not -4).
    ("backprop", "gate", "gate_df_dx", 1.0, DROPPED_LOCAL),
    # df/dz given z's own value (-4) where the other input's, q = 3, belongs.
    ("backprop", "gate", "gate_df_dz", -4.0, FORWARD_FOR_SLOPE),
    # The reciprocal r = 1/u (u = 1 + e^-s) given its value f where its slope -1/u^2 = -f^2 belongs:
    # df/ds = f * 1 * e^-s * -1 (the exp's slope e^-s, the negation's -1).
    ("backprop", "neuron", "neuron_df_ddot", -NEURON_F * math.exp(-1), FORWARD_FOR_SLOPE),
    # relu(b + a) = relu(-2) passing the gradient as if open: dd3/da = 4 * (3b + 1) - 1 = 27, so dg/da = dg/de*(3 - 27).
    ("backprop", "micrograd", "mg_dg_da", micrograd_dg_da(3, 27), GATE_IGNORED),
    # e = c - d with de/dd = +1: dg/da = dg/de * (3 + 23).
    ("backprop", "micrograd", "mg_dg_da", micrograd_dg_da(3, -23), SIGN_FLIPPED),
    # c2 = c + c + 1 with one use of c followed: dc2/dc = 1, so dc3/da = 2 * 1 - 1 = 1.
    ("backprop", "micrograd", "mg_dg_da", micrograd_dg_da(1, 23), ONE_BRANCH),
    # d2 = d + d*2 + ... with only the d path followed: dd2/dd = 1, so dd3/da = 4 * 1 * 2 - 1 = 7.
    ("backprop", "micrograd", "mg_dg_da", micrograd_dg_da(3, 7), ONE_BRANCH),
]

# torch's own values, by hand, for the answers above: never attributed to a slip.
RIGHT = [
    ("autograd", "tiny_net", "net_dL_dw", 12.0),
    ("autograd", "tiny_net", "net_dL_da", 6.0),
    ("autograd", "w2_net", "w2_dL_da", 0.5),
    ("autograd", "closed_relu", "closed_dL_dw", 0.0),
    ("autograd", "accumulation", "accumulated_grads", [6.0, 12.0, 18.0]),
    ("autograd", "accumulation", "zeroed_grads", [6.0, 6.0, 6.0]),
    ("autograd", "predict_twice", "twice_w_grad", 24.0),
    ("training", "leaky_relu", "leaky_dL_dh", -0.0408),
    ("training", "accumulate_on_purpose", "averaged_w_grad", 4.0),
    ("training", "training_loop", "sgd_w", [1.5, 1.875, 1.78125]),
    ("backprop", "gate", "gate_df_dx", -4.0),
    ("backprop", "neuron", "neuron_df_ddot", NEURON_F * (1 - NEURON_F)),
    ("backprop", "micrograd", "mg_dg_da", micrograd_dg_da(3, 23)),
]
RANDOM_WRONG = (17.25, -3.5, 1234.0, 0.123456)


def search_for(name: str, request: pytest.FixtureRequest) -> SlipSearch:
    found: SlipSearch = request.getfixturevalue(name)
    return found


def numbers(search: SlipSearch) -> dict:
    return dict(search.assignment.default_params)


def test_the_hand_arithmetic_uses_the_notebooks_numbers():
    assert AUTOGRAD_P.items() <= assignment("autograd").default_params.items()
    assert TRAINING_P.items() <= assignment("training").default_params.items()
    backprop = assignment("backprop").default_params
    assert (backprop["micrograd_a"], backprop["micrograd_b"]) == (-4, 2)
    assert [backprop[f"gate_{k}"] for k in "xyz"] == [-2, 5, -4]
    assert [backprop[f"neuron_{k}"] for k in ("w0", "w1", "w2", "x0", "x1")] == [2, -3, -3, -1, -2]
    assert micrograd_dg_da(3, 23) == pytest.approx(138.8338, abs=1e-4)  # micrograd's README


def test_every_kind_is_covered_by_a_case():
    assert {case[-1] for case in CASES} == set(SLIP_KINDS)


@pytest.mark.parametrize(("name", "question", "answer", "value", "kind"), CASES)
def test_a_planted_slip_is_named(request, name, question, answer, value, kind):
    search = search_for(name, request)
    slip = search(question, answer, numbers(search), value)
    assert slip is not None, f"{value!r} for {answer} unexplained"
    assert slip.kind == kind, slip.sentence
    assert slip.sentence.startswith(SLIP_KINDS[kind])
    assert slip.where


@pytest.mark.parametrize(("name", "question", "answer", "value"), RIGHT)
def test_torchs_own_value_is_never_a_slip(request, name, question, answer, value):
    search = search_for(name, request)
    source = search.source(question, answer, numbers(search))
    assert source is not None
    assert source.reference[answer] == pytest.approx(value)  # the hand value is torch's
    assert search(question, answer, numbers(search), value) is None


@pytest.mark.parametrize(("name", "question", "answer", "value"), RIGHT)
def test_values_no_slip_gives_are_unexplained(request, name, question, answer, value):
    search = search_for(name, request)
    for wrong in RANDOM_WRONG:
        planted = [wrong] * len(value) if isinstance(value, list) else wrong
        assert search(question, answer, numbers(search), planted) is None, planted


def test_a_mutation_that_gives_torchs_value_explains_nothing(autograd):
    # At x = 1 taking dh/dw = x as 1 changes nothing: the gradient at h (2(6 - 2) = 8 at w = 4, b = 2) is dL/dw.
    at_one = {**numbers(autograd), "net_x": 1, "net_w": 4, "net_b": 2}
    assert autograd("tiny_net", "net_dL_dw", at_one, 8.0) is None
    # At other numbers the same slip is found again: x = 3, w = 2: h = 5, dL/dh = 6, dL/dw = 18; the slip gives 6.
    at_three = {**numbers(autograd), "net_x": 3, "net_w": 2}
    slip = autograd("tiny_net", "net_dL_dw", at_three, 6.0)
    assert slip is not None
    assert slip.kind == DROPPED_LOCAL


def test_each_question_and_numbers_is_computed_once():
    search = explainer(assignment("autograd"), tolerance=TOLERANCE)
    P = numbers(search)
    assert search("accumulation", "accumulated_grads", P, [6.0, 6.0, 6.0]) is not None
    first = dataclasses.replace(search.stats)
    for _ in range(3):
        assert search("accumulation", "accumulated_grads", P, [6.0, 6.0, 6.0]) is not None
    assert search.stats.tables == first.tables == 1
    assert search.stats.mutations_run == first.mutations_run
    assert search.stats.calls == 4
    assert search.stats.explained == 4


def test_the_mutation_cap_bounds_the_search():
    # The closed ReLU's cell has its gate first in the order; a value only a later kind gives is then out of reach.
    capped = explainer(assignment("autograd"), tolerance=TOLERANCE, max_mutations=1)
    P = numbers(capped)
    assert capped("closed_relu", "closed_dL_dw", P, 4.0) is not None  # the gate: the first mutation
    assert capped("tiny_net", "net_dL_dw", P, 6.0) is None  # dh/dw dropped: past the cap
    assert capped.stats.mutations_run <= 2


def test_the_time_budget_stops_a_search_and_the_next_call_resumes():
    search = explainer(assignment("autograd"), tolerance=TOLERANCE, budget_seconds=-1.0)
    P = numbers(search)
    assert search("tiny_net", "net_dL_dw", P, 6.0) is None
    assert search.stats.budget_stops == 1
    assert search.stats.mutations_run == 0
    search.budget_seconds = 60.0
    assert search("tiny_net", "net_dL_dw", P, 6.0) is not None


def test_a_build_that_raises_costs_only_its_explanation():
    course = assignment("autograd")

    def broken(P):
        raise ZeroDivisionError("the instructor's build")

    def raising_cell(question):
        source = "### BEGIN HIDDEN TESTS\nraise ValueError('the hidden tests')\n### END HIDDEN TESTS\n"
        return dataclasses.replace(question, test_source=source) if question.id == "closed_relu" else question

    broken_course = dataclasses.replace(
        course,
        content=dataclasses.replace(course.content, graphs={**course.content.graphs, "tiny_net": broken}),
        questions=tuple(raising_cell(question) for question in course.questions),
    )
    search = explainer(broken_course, tolerance=TOLERANCE)
    P = numbers(search)
    assert search("closed_relu", "closed_dL_dw", P, 4.0) is None  # its cell raises: unexplained
    # tiny_net's GRAPHS build raises: its hidden-test cell, the same computation, still explains the slip.
    slip = search("tiny_net", "net_dL_dw", P, 6.0)
    assert slip is not None
    assert slip.kind == DROPPED_LOCAL
    assert search("accumulation", "accumulated_grads", P, [6.0, 6.0, 6.0]) is not None  # the others unaffected
    assert search.stats.errors == 2
    assert search("no_such_question", "net_dL_dw", P, 6.0) is None


def test_slips_of_a_mean_and_a_sum_reduction(tmp_path: Path):
    """torch.mean and torch.sum, which no assignment uses yet: a mean's gradient not divided by its count (and a
    sum's divided by it) is a sum taken for a mean."""
    course = assignment("autograd")

    def mean_build(P):
        import torch

        from course.pipeline.graph_chain import Computation

        w = torch.tensor(float(P["net_w"]), requires_grad=True)
        xs = torch.tensor([1.0, 2.0, 3.0, 6.0])
        loss = (w * xs).mean()
        return Computation(loss, {"w": w, "L": loss}, gradients={"w": "net_dL_dw"})

    def sum_build(P):
        import torch

        from course.pipeline.graph_chain import Computation

        w = torch.tensor(float(P["net_w"]), requires_grad=True)
        xs = torch.tensor([1.0, 2.0, 3.0, 6.0])
        loss = (w * xs).sum()
        return Computation(loss, {"w": w, "L": loss}, gradients={"w": "net_dL_dw"})

    for build, right, slipped in ((mean_build, 3.0, 12.0), (sum_build, 12.0, 3.0)):
        # d/dw mean(w * xs) = mean(xs) = 12 / 4 = 3; the sum's gradient is sum(xs) = 12.
        graphs = {**course.content.graphs, "tiny_net": build}
        search = explainer(
            dataclasses.replace(course, content=dataclasses.replace(course.content, graphs=graphs)),
            tolerance=TOLERANCE,
        )
        assert search("tiny_net", "net_dL_dw", numbers(search), right) is None
        slip = search("tiny_net", "net_dL_dw", numbers(search), slipped)
        assert slip is not None
        assert slip.kind == SUM_FOR_MEAN
