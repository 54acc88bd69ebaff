"""The first assignment, `autograd`: what the engine needs to know of its exercises beyond the notebook.

Read by the grader through source/course.yaml (see README, "Adding an assignment"): the layout of the locked
numbers cell, how per-student variants derive their numbers, the chain tables of the feedback and the
misconception catalogue. The default numbers are the article's, in the notebook's `numbers` cell.

Variant numbers are small integers or halves, chosen so that every exercise stays what the article makes it:
the tiny network's ReLU open (and shut for the closed-ReLU input), no zero gradient where the article has a
non-zero one, and every answer exact in floating point.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from course.core.answers import is_number
from course.pipeline.content import ChainStep, Rule, constant_list, expected, student, student_equals, wrong

# The numbers cell, one line per exercise.
NUMBER_GROUPS = [
    ["graph_x"],
    ["net_x", "net_w", "net_b", "net_target"],
    ["closed_x"],
    ["retain_x", "retain_factor"],
    ["accum_x", "accum_steps"],
    ["nograd_x"],
    ["call_w", "call_b", "call_x", "call_target"],
    ["cubic_x"],
    ["w2"],
]


def derive(rng: random.Random) -> dict[str, Any]:
    """One student's numbers (variants: true): small integers and halves, constrained as described above."""
    while True:
        net = {
            "net_x": rng.choice([1, 2, 3, 4]),
            "net_w": rng.choice([2, 3, 4, 5]),
            "net_b": rng.choice([-3, -2, -1, 1, 2]),
            "net_target": rng.choice([1, 2, 3, 4, 5, 6]),
        }
        h = net["net_w"] * net["net_x"] + net["net_b"]
        if h > 0 and h != net["net_target"]:
            break
    closed = [x for x in (-1, -2, -3) if net["net_w"] * x + net["net_b"] < 0]
    w2 = rng.choice([w for w in (0.5, 1.5, 2.0, 2.5, 3.0) if w * h != net["net_target"]])
    while True:
        call = {
            "call_w": rng.choice([1, 2, 3, 4]),
            "call_b": rng.choice([-2, -1, 1, 2, 3]),
            "call_x": rng.choice([1, 2, 3, 4]),
            "call_target": rng.choice([2, 3, 4, 5, 6, 7, 8, 9]),
        }
        if call["call_w"] * call["call_x"] + call["call_b"] != call["call_target"]:
            break
    return {
        "graph_x": rng.choice([2, 3, 4, 5, 6, 7]),
        **net,
        "closed_x": rng.choice(closed),
        "retain_x": rng.choice([1, 2, 3, 4]),
        "retain_factor": rng.choice([2, 3, 4, 5, 6, 7]),
        "accum_x": rng.choice([1, 2, 3, 4, 5, 6]),
        "accum_steps": rng.choice([2, 3, 4, 5]),
        "nograd_x": rng.choice([2, 3, 4, 5, 6, 7]),
        **call,
        "cubic_x": rng.choice([2, 3, 4, 5, 6, 7]),
        "w2": w2,
    }


def constraint_violations(params: dict[str, Any]) -> list[str]:
    """What, if anything, makes these numbers unfit for the exercises (empty list: fit)."""
    problems = []
    for key, value in params.items():
        if type(value) not in (int, float) or (value * 2) != int(value * 2) or abs(value) > 10:
            problems.append(f"{key} = {value!r} is not a small integer or half")
    h = params["net_w"] * params["net_x"] + params["net_b"]
    if h <= 0:
        problems.append("the tiny network's ReLU is shut")
    if params["net_w"] * params["closed_x"] + params["net_b"] >= 0:
        problems.append("the closed-ReLU input does not shut the ReLU")
    if h == params["net_target"]:
        problems.append("the tiny network's loss gradient is zero")
    if params["w2"] * h == params["net_target"]:
        problems.append("the w2 network's loss gradient is zero")
    if params["call_w"] * params["call_x"] + params["call_b"] == params["call_target"]:
        problems.append("the one-call loss gradient is zero")
    if params["net_target"] == 0:
        problems.append("the closed ReLU has a zero loss")
    if 0 in (params["retain_x"], params["accum_x"], params["call_x"], params["net_x"]):
        problems.append("a zero input makes a gradient zero")
    if params["accum_steps"] < 2:
        problems.append("accumulation needs at least two steps")
    return problems


# The number each function answer's exercise asks about: the grader always calls the function there too (beside
# zero and the course's own points of both signs, course/pipeline/probes.py), with the student's own number.
FUNCTION_POINTS = {"cubic_derivative": "cubic_x"}


# The backward walk of the two networks, node by node: the feedback shows where a chain broke.
CHAINS = {
    "tiny_net": (
        ChainStep("L = (a − target)²", "∂L/∂a = 2(a − target)", "net_loss", "net_dL_da", None),
        ChainStep("a = ReLU(h)", "∂a/∂h = 1 if h > 0, else 0", "net_a", "net_dL_dh", "net_dL_da"),
        ChainStep("h = w·x + b (to w)", "∂h/∂w = x", "net_h", "net_dL_dw", "net_dL_dh"),
        ChainStep("h = w·x + b (to b)", "∂h/∂b = 1", "net_h", "net_dL_db", "net_dL_dh"),
    ),
    "w2_net": (
        ChainStep("L = (out − target)²", "∂L/∂out = 2(out − target)", "w2_loss", "w2_dL_dout", None),
        ChainStep("out = w2·a (to w2)", "∂out/∂w2 = a", "w2_out", "w2_dL_dw2", "w2_dL_dout"),
        ChainStep("out = w2·a (to a)", "∂out/∂a = w2", "w2_out", "w2_dL_da", "w2_dL_dout"),
        ChainStep("a = ReLU(h)", "∂a/∂h = 1 if h > 0, else 0", None, "w2_dL_dh", "w2_dL_da"),
        ChainStep("h = w·x + b (to w)", "∂h/∂w = x", None, "w2_dL_dw", "w2_dL_dh"),
        ChainStep("h = w·x + b (to b)", "∂h/∂b = 1", None, "w2_dL_db", "w2_dL_dh"),
    ),
}


# The same two networks as torch builds them in the hidden tests: their chain tables read from torch's graph
# (course/pipeline/graph_chain.py) agree with the hand-written CHAINS above, which are kept for their words: the local
# derivative as a formula ("∂h/∂w = x", where the graph gives "∂h/∂w" and its number) and the target by name (a
# subtraction keeps neither operand, so the graph writes "(a − const)²"). tests/test_graph_chain.py holds them to it.
def tiny_net_graph(P: dict[str, Any]) -> Any:
    import torch

    from course.pipeline.graph_chain import Computation

    x = torch.tensor(float(P["net_x"]))
    w = torch.tensor(float(P["net_w"]), requires_grad=True)
    b = torch.tensor(float(P["net_b"]), requires_grad=True)
    h = w * x + b
    a = torch.relu(h)
    loss = (a - torch.tensor(float(P["net_target"]))) ** 2
    return Computation(
        loss,
        {"x": x, "w": w, "b": b, "h": h, "a": a, "L": loss},
        forwards={"h": "net_h", "a": "net_a", "L": "net_loss"},
        gradients={"a": "net_dL_da", "h": "net_dL_dh", "w": "net_dL_dw", "b": "net_dL_db"},
    )


def w2_net_graph(P: dict[str, Any]) -> Any:
    import torch

    from course.pipeline.graph_chain import Computation

    x = torch.tensor(float(P["net_x"]))
    w = torch.tensor(float(P["net_w"]), requires_grad=True)
    b = torch.tensor(float(P["net_b"]), requires_grad=True)
    w2 = torch.tensor(float(P["w2"]), requires_grad=True)
    h = w * x + b
    a = torch.relu(h)
    out = w2 * a
    loss = (out - torch.tensor(float(P["net_target"]))) ** 2
    return Computation(
        loss,
        {"x": x, "w": w, "b": b, "w2": w2, "h": h, "a": a, "out": out, "L": loss},
        forwards={"out": "w2_out", "L": "w2_loss"},
        gradients={
            "out": "w2_dL_dout",
            "w2": "w2_dL_dw2",
            "a": "w2_dL_da",
            "h": "w2_dL_dh",
            "w": "w2_dL_dw",
            "b": "w2_dL_db",
        },
    )


GRAPHS = {"tiny_net": tiny_net_graph, "w2_net": w2_net_graph}


# Wrong answers that betray a specific misunderstanding; each names the idea of the article it violates.
def _forgot_times_x(grad_name: str, upstream_name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda v: student_equals(v, grad_name, expected(v, upstream_name))


def _w2_dropped(values: dict[str, Any]) -> bool:
    out_grad, a_grad = expected(values, "w2_dL_dout"), expected(values, "w2_dL_da")
    if not (is_number(out_grad) and is_number(a_grad)) or out_grad == 0:
        return False
    w2 = a_grad / out_grad
    if w2 == 0:
        return False
    w_grad = expected(values, "w2_dL_dw")
    return student_equals(values, "w2_dL_da", out_grad) or (
        is_number(w_grad) and student_equals(values, "w2_dL_dw", w_grad / w2)
    )


def _through_closed_relu(values: dict[str, Any]) -> bool:
    return any(
        wrong(values, name) and expected(values, name) == 0 and is_number(student(values, name))
        for name in ("closed_dL_dw", "closed_dL_db")
    )


def _cubic_dropped_linear_term(values: dict[str, Any]) -> bool:
    reference = expected(values, "cubic_grad")
    return is_number(reference) and student_equals(values, "cubic_grad", reference + 2)


ACCUMULATE = "Gradients accumulate: backward() adds into .grad, it does not overwrite it."
CHAIN_X = "The chain rule, one node at a time: local slope × incoming gradient, and h = w·x + b has ∂h/∂w = x."
LEAVES = "Only leaves keep .grad; an intermediate keeps its gradient only after retain_grad()."
MISCONCEPTIONS = (
    Rule(
        "accumulation_overwrites",
        "accumulated_grads",
        lambda v: constant_list(v, "accumulated_grads", "accumulated_grads"),
        "You gave the same gradient at every step, as if each backward() replaced .grad. "
        "Without zeroing, each call adds its gradient to what is already there.",
        ACCUMULATE,
    ),
    Rule(
        "zeroing_ignored",
        "zeroed_grads",
        lambda v: student_equals(v, "zeroed_grads", expected(v, "accumulated_grads")),
        "You let the gradients pile up even though .grad is zeroed before every backward(): "
        "after zero_() each step starts from nothing.",
        ACCUMULATE,
    ),
    Rule(
        "gradient_through_closed_relu",
        "closed_dL_dw",
        _through_closed_relu,
        "A gradient got through the shut ReLU. With a negative input ReLU's local slope is 0, and "
        "everything behind it is multiplied by that 0.",
        "Every gradient behind a ReLU is multiplied by the ReLU's local slope, which depends on the sign of its input.",
    ),
    Rule(
        "forgot_times_x",
        "net_dL_dw",
        _forgot_times_x("net_dL_dw", "net_dL_dh"),
        "Your ∂L/∂w equals the gradient at h: the last step, × x (since ∂h/∂w = x), is missing.",
        CHAIN_X,
    ),
    Rule(
        "forgot_times_x_w2",
        "w2_dL_dw",
        _forgot_times_x("w2_dL_dw", "w2_dL_dh"),
        "Your ∂L/∂w equals the gradient at h: the last step, × x (since ∂h/∂w = x), is missing.",
        CHAIN_X,
    ),
    Rule(
        "forgot_times_x_one_call",
        "one_call_w_grad",
        _forgot_times_x("one_call_w_grad", "one_call_b_grad"),
        "Your w gradient equals the b gradient: w reaches the prediction multiplied by x, so its gradient "
        "carries that factor x too.",
        CHAIN_X,
    ),
    Rule(
        "w2_factor_missing",
        "w2_dL_da",
        _w2_dropped,
        "Your chain skips the new weight: out = w2·a, so on the way back the gradient is multiplied by w2 "
        "before it reaches a (and everything behind a).",
        "Backpropagation multiplies the local slope of every node on the path; w2 is one of those nodes.",
    ),
    Rule(
        "cubic_dropped_linear_term",
        "cubic_grad",
        _cubic_dropped_linear_term,
        "You differentiated x³ (3x²) but not the −2x term, whose slope is −2.",
        "Differentiate term by term: the gradient of a sum is the sum of the gradients.",
    ),
    Rule(
        "retained_grad_is_none",
        "retain_y_grad",
        lambda v: (
            wrong(v, "retain_y_grad")
            and student(v, "retain_y_grad") is None
            and expected(v, "retain_y_grad") is not None
        ),
        "retain_grad() was called on y, so y keeps its gradient dz/dy after backward().",
        LEAVES,
    ),
    Rule(
        "unretained_grad_kept",
        "y_grad_without_retain",
        lambda v: (
            wrong(v, "y_grad_without_retain")
            and expected(v, "y_grad_without_retain") is None
            and is_number(student(v, "y_grad_without_retain"))
        ),
        "Without retain_grad() an intermediate's gradient is used on the way back and then discarded: y.grad is None.",
        LEAVES,
    ),
    # Exercise 11 asks for .grad after two backward() calls: a student who gives one call's gradient (the
    # tiny network's, from exercise 3) read the second call as replacing the first.
    Rule(
        "second_backward_overwrites",
        "twice_w_grad",
        lambda v: wrong(v, "twice_w_grad") and student_equals(v, "twice_w_grad", expected(v, "net_dL_dw")),
        "You gave the gradient of one backward() call. The second call adds the same gradient again, so .grad "
        "holds twice as much.",
        ACCUMULATE,
    ),
    Rule(
        "second_backward_overwrites_b",
        "twice_b_grad",
        lambda v: wrong(v, "twice_b_grad") and student_equals(v, "twice_b_grad", expected(v, "net_dL_db")),
        "You gave the bias gradient of one backward() call. The second call adds the same gradient again, so "
        ".grad holds twice as much.",
        ACCUMULATE,
    ),
    Rule(
        "backward_order",
        "local_slopes",
        lambda v: (
            type(expected(v, "local_slopes")) is list
            and student_equals(v, "local_slopes", list(reversed(expected(v, "local_slopes"))))
        ),
        "You listed the local slopes in forward order. The backward pass meets the nodes right to left: "
        "+1 first, the square last.",
        "backward() walks the graph in reverse, from the output to the leaves.",
    ),
)
