"""The slip search (course/pipeline/slip_search.py, mutations.py) on the course's own assignments: for each kind of
slip, the value a student who makes it gives, worked out by hand at the notebooks' own numbers (never by the search's
code: tests/support/slips.py, where each is written out), is named with that kind; torch's own value and values
nobody's slip gives are not attributed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from course.pipeline.assignment import Assignment, load_assignment
from course.pipeline.slip_search import SlipSearch, explainer
from course.pipeline.slips import DROPPED_LOCAL, SLIP_KINDS, SUM_FOR_MEAN
from tests.support.helpers import ROOT
from tests.support.slips import AUTOGRAD_P, CASES, RANDOM_WRONG, RIGHT, TRAINING_P, micrograd_dg_da

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


@pytest.mark.parametrize(
    ("name", "question", "answer", "value", "where", "said"),
    [
        # h = w·x + b: the product has no name of its own, so the sentence writes it out.
        ("autograd", "tiny_net", "net_dL_dw", 6.0, "∂(w·x)/∂w", "∂(w·x)/∂w taken as 1"),
        ("autograd", "closed_relu", "closed_dL_dw", 4.0, "∂a/∂h", "at a = ReLU(h)"),  # the hidden cell's own names
        ("backprop", "gate", "gate_df_dx", 1.0, "∂f/∂q", "∂f/∂q taken as 1"),  # the kit build's local names
        ("backprop", "micrograd", "mg_dg_da", micrograd_dg_da(3, -23), "∂e/∂d", "∂e/∂d taken with the wrong sign"),
        ("training", "accumulate_on_purpose", "averaged_w_grad", 8.0, "the division by 2", "the division by 2"),
        ("autograd", "accumulation", "accumulated_grads", [6.0, 6.0, 6.0], ".grad", "each backward() replaced .grad"),
    ],
)
def test_a_slip_says_where_in_the_exercises_own_names(request, name, question, answer, value, where, said):
    search = search_for(name, request)
    slip = search(question, answer, numbers(search), value)
    assert slip is not None
    assert slip.where == where
    assert said in slip.sentence


def test_a_cell_that_calls_autograd_grad_is_searched_too():
    """A hidden cell may take its gradients with torch.autograd.grad rather than backward(): the same slips."""
    course = assignment("autograd")
    cell = (
        "### BEGIN HIDDEN TESTS\n"
        'x = torch.tensor(float(P["net_x"]))\n'
        'w = torch.tensor(float(P["net_w"]), requires_grad=True)\n'
        'b = torch.tensor(float(P["net_b"]), requires_grad=True)\n'
        'loss = (torch.relu(w * x + b) - P["net_target"]) ** 2\n'
        "w_grad, b_grad = torch.autograd.grad(loss, [w, b])\n"
        "marks = Marks()\n"
        'marks.value("net_dL_dw", net_dL_dw, w_grad, "")\n'
        'marks.value("net_dL_db", net_dL_db, b_grad, "")\n'
        "### END HIDDEN TESTS\n"
    )
    questions = tuple(dataclasses.replace(q, test_source=cell) if q.id == "tiny_net" else q for q in course.questions)
    graphs = {key: build for key, build in course.content.graphs.items() if key != "tiny_net"}
    search = explainer(
        dataclasses.replace(course, questions=questions, content=dataclasses.replace(course.content, graphs=graphs)),
        tolerance=TOLERANCE,
    )
    # dL/dw = 2(5 - 2) * 2 = 12; with dh/dw = x taken as 1: 6.
    assert search("tiny_net", "net_dL_dw", numbers(search), 12.0) is None
    slip = search("tiny_net", "net_dL_dw", numbers(search), 6.0)
    assert slip is not None
    assert slip.kind == DROPPED_LOCAL


def test_searches_from_several_threads_agree_with_one():
    """The service may ask from several threads: the torch function mode is per thread and one search runs at a
    time, so each thread gets what a single thread gets."""
    import threading

    asks = [case for case in CASES if case[0] == "autograd"]
    alone = explainer(assignment("autograd"), tolerance=TOLERANCE)
    expected = [alone(q, a, numbers(alone), v) for _, q, a, v, _ in asks]
    shared = explainer(assignment("autograd"), tolerance=TOLERANCE)
    results: dict[int, list] = {}

    def ask(index: int) -> None:
        results[index] = [shared(q, a, numbers(shared), v) for _, q, a, v, _ in asks]

    threads = [threading.Thread(target=ask, args=(index,)) for index in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [results[index] for index in range(6)] == [expected] * 6


def test_an_answer_is_searched_with_the_mutations_of_its_own_backward_passes():
    """The averaged gradients' cell runs backward passes of three shapes (one loss; the two losses summed; a loss
    halved); the halving left out is a mutation of the last, late in the order. A probe per shape (NaN sent into
    its backward passes) shows which answers each reaches, and only the halved shape's mutations are run for the
    averaged gradient."""
    search = explainer(assignment("training"), tolerance=TOLERANCE)
    found = search.find("accumulate_on_purpose", "averaged_w_grad", numbers(search), 8.0)
    assert found is not None
    assert found.slip.kind == SUM_FOR_MEAN
    source = search.source("accumulate_on_purpose", "averaged_w_grad", numbers(search))
    assert source is not None
    assert len(source.signatures) == 3
    reaching = [shape for shape, answers in source.reaches.items() if answers and "averaged_w_grad" in answers]
    assert reaching == [found.mutation.signature]
    position = source.mutations.index(found.mutation)
    assert search.stats.mutations_run < position  # probes included: most of the order before it was skipped
