"""training: autograd inside a training loop — the numbers, how variants derive them, the chain table, the
misconceptions.

The notebook's locked `numbers` cell holds the defaults (the article's tiny network: x = 2, w = 3, b = −1,
target 2; the closed-ReLU input x = −1). Per-student variants keep every exercise what it is:

- the leaky network's input shuts a plain ReLU (h < 0), so only LeakyReLU's 0.01 slope lets a gradient through;
- the training loop with `optimizer.zero_grad()` keeps its ReLU open and its loss falling at every step, while
  the loop without it overshoots: its third loss is higher than its second (the "strange loss curve");
- every value of both loops, and every intermediate torch computes on the way, is exact in float32, so the
  hand values equal torch's bit for bit (learning rates are powers of two, the inputs small integers);
- the second mini-batch keeps its ReLU open and pulls w the other way or by another amount than the first,
  so accumulating is visibly a sum, never a doubling or a no-op;
- no gradient that should teach something is zero.
"""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Any

from course.pipeline.content import ChainStep, Rule, expected, student, student_equals, wrong

# Layout of the locked `numbers` cell: one line per group.
NUMBER_GROUPS = [
    ["graph_x"],
    ["net_x", "net_w", "net_b", "net_target"],
    ["closed_x"],
    ["detach_x"],
    ["lr"],
    ["batch_x", "batch_target"],
]

LEARNING_RATES = (0.5, 0.25, 0.125, 0.0625)
STEPS = 3  # the training loop's steps (fixed: the notebook's text and answer lists say three)
LIMIT = 1000  # no value of the exercises is larger than this in size
FLOAT32_BITS = 24  # significant bits of a float32


def derive(rng: random.Random) -> dict:
    """One student's numbers: drawn until every constraint holds (about one draw in five fits)."""
    while True:
        numbers = {
            "graph_x": rng.choice([2, 3, 4, 5, 6, 7]),
            "net_x": rng.choice([1, 2, 3]),
            "net_w": rng.choice([1, 2, 3, 4]),
            "net_b": rng.choice([-2, -1, 1, 2]),
            "net_target": rng.choice([1, 2, 3, 4, 5, 6]),
            "closed_x": rng.choice([-1, -2, -3]),
            "detach_x": rng.choice([2, 3, 4, 5, 6, 7]),
            "lr": rng.choice(LEARNING_RATES),
            "batch_x": rng.choice([1, 2, 3, 4]),
            "batch_target": rng.choice([1, 2, 3, 4, 5, 6]),
        }
        if not constraint_violations(numbers):
            return numbers


def _float32_exact(value: Fraction) -> bool:
    """A binary fraction with at most 24 significant bits: float32 holds it, and every operation that yields it
    from float32-exact operands is exact (no rounding anywhere in torch's computation)."""
    if value == 0:
        return True
    numerator, denominator = abs(value.numerator), value.denominator
    if denominator & (denominator - 1):
        return False
    while numerator % 2 == 0:
        numerator //= 2
    return numerator.bit_length() <= FLOAT32_BITS


def training_run(numbers: dict, zero_grad: bool) -> dict[str, list[Fraction]]:
    """The three SGD steps of the tiny network, exactly: the loss of each step (before its update), w and b
    after each update, the pre-activation h of each step, and every intermediate torch computes."""
    x, w, b, target, lr = (Fraction(numbers[key]) for key in ("net_x", "net_w", "net_b", "net_target", "lr"))
    w_grad = b_grad = Fraction(0)
    run: dict[str, list[Fraction]] = {"loss": [], "w": [], "b": [], "h": [], "intermediates": []}
    for _ in range(STEPS):
        if zero_grad:
            w_grad = b_grad = Fraction(0)
        h = w * x + b
        a = max(h, Fraction(0))
        dL_da = 2 * (a - target)
        dL_dh = dL_da if h > 0 else Fraction(0)
        w_grad += dL_dh * x  # backward() adds into .grad; zero_grad() emptied it before, or not
        b_grad += dL_dh
        w, b = w - lr * w_grad, b - lr * b_grad
        run["loss"].append((a - target) ** 2)
        run["w"].append(w)
        run["b"].append(b)
        run["h"].append(h)
        run["intermediates"] += [w * x, h, a - target, dL_da, dL_dh * x, w_grad, b_grad, lr * w_grad, lr * b_grad]
    run["intermediates"] += run["loss"] + run["w"] + run["b"]
    return run


def _small_or_half(value: object) -> bool:
    return (
        type(value) in (int, float)
        and isinstance(value, int | float)
        and value * 2 == int(value * 2)
        and abs(value) <= 10
    )


def constraint_violations(numbers: dict) -> list[str]:
    """What, if anything, makes these numbers unfit for the exercises (empty list: fit)."""
    keys = [key for group in NUMBER_GROUPS for key in group]
    missing = [key for key in keys if key not in numbers]
    if missing:
        return [f"missing number {key!r}" for key in missing]
    problems = [
        f"{key} = {numbers[key]!r} is not a small integer or half"
        for key in keys
        if key != "lr" and not _small_or_half(numbers[key])
    ]
    if numbers["lr"] not in LEARNING_RATES:
        problems.append(f"lr = {numbers['lr']!r} is not one of {', '.join(map(str, LEARNING_RATES))}")
    if problems:
        return problems
    x, w, b, target = numbers["net_x"], numbers["net_w"], numbers["net_b"], numbers["net_target"]
    if w * x + b <= 0:
        problems.append("the tiny network's ReLU is shut at the start")
    if w * numbers["closed_x"] + b >= 0:
        problems.append("the leaky network's input does not shut a plain ReLU (h must be negative)")
    if target == 0:
        problems.append("a zero target makes the shut network's loss zero")
    if numbers["detach_x"] == 0 or numbers["net_x"] == 0 or numbers["batch_x"] == 0:
        problems.append("a zero input makes a gradient zero")
    problems += _training_problems(numbers)
    problems += _batch_problems(numbers)
    return problems


def _training_problems(numbers: dict) -> list[str]:
    problems = []
    zeroed, piled = training_run(numbers, zero_grad=True), training_run(numbers, zero_grad=False)
    if not all(h > 0 for h in zeroed["h"]):
        problems.append("the training loop with zero_grad() shuts its ReLU")
    if not all(earlier > later for earlier, later in zip(zeroed["loss"], zeroed["loss"][1:], strict=False)):
        problems.append("the loss of the loop with zero_grad() does not fall at every step")
    if any(h == 0 for h in piled["h"]):
        problems.append("the loop without zero_grad() meets ReLU exactly at 0, where its slope is a convention")
    if not piled["loss"][2] > piled["loss"][1]:
        problems.append("the loop without zero_grad() shows no strange loss curve (its third loss does not rise)")
    values = zeroed["intermediates"] + piled["intermediates"]
    if not all(_float32_exact(value) for value in values):
        problems.append("a value of the training loop is not exact in float32")
    if any(abs(value) > LIMIT for value in values):
        problems.append(f"a value of the training loop is larger than {LIMIT}")
    return problems


def batch_gradients(numbers: dict, x_key: str, target_key: str) -> tuple[Fraction, Fraction]:
    """(∂L/∂w, ∂L/∂b) of one mini-batch of the tiny network with the shared w and b."""
    x, target = Fraction(numbers[x_key]), Fraction(numbers[target_key])
    h = numbers["net_w"] * x + numbers["net_b"]
    dL_dh = 2 * (max(h, 0) - target) if h > 0 else Fraction(0)
    return dL_dh * x, dL_dh


def _batch_problems(numbers: dict) -> list[str]:
    problems = []
    if numbers["net_w"] * numbers["batch_x"] + numbers["net_b"] <= 0:
        problems.append("the second mini-batch shuts the ReLU")
    a_w, a_b = batch_gradients(numbers, "net_x", "net_target")
    b_w, b_b = batch_gradients(numbers, "batch_x", "batch_target")
    if 0 in (b_w, b_b):
        problems.append("the second mini-batch's gradient is zero")
    if a_w == b_w:
        problems.append("both mini-batches give w the same gradient, so accumulating looks like doubling")
    if a_w + b_w == 0 or a_b + b_b == 0:
        problems.append("the accumulated gradient is zero")
    return problems


# The backward walk of the leaky network (exercise 3), node by node.
CHAINS = {
    "leaky_relu": (
        ChainStep("L = (a − target)²", "∂L/∂a = 2(a − target)", "leaky_loss", "leaky_dL_da", None),
        ChainStep("a = LeakyReLU(h)", "∂a/∂h = 1 if h > 0, else 0.01", "leaky_a", "leaky_dL_dh", "leaky_dL_da"),
        ChainStep("h = w·x + b (to w)", "∂h/∂w = x", "leaky_h", "leaky_dL_dw", "leaky_dL_dh"),
        ChainStep("h = w·x + b (to b)", "∂h/∂b = 1", "leaky_h", "leaky_dL_db", "leaky_dL_dh"),
    ),
}


# The leaky network as the hidden test builds it (float64, as there): its chain table read from torch's graph
# (course/pipeline/graph_chain.py) agrees with CHAINS above, which is kept for its words (the local derivative as a
# formula,
# the target by name: a subtraction keeps neither operand, so the graph writes "(a − const)²");
# tests/test_graph_chain.py holds the two to it.
def leaky_relu_graph(P: dict) -> Any:
    import torch

    from course.pipeline.graph_chain import Computation

    x = torch.tensor(float(P["closed_x"]), dtype=torch.float64)
    w = torch.tensor(float(P["net_w"]), dtype=torch.float64, requires_grad=True)
    b = torch.tensor(float(P["net_b"]), dtype=torch.float64, requires_grad=True)
    h = w * x + b
    a = torch.nn.functional.leaky_relu(h, negative_slope=0.01)
    loss = (a - torch.tensor(float(P["net_target"]), dtype=torch.float64)) ** 2
    return Computation(
        loss,
        {"x": x, "w": w, "b": b, "h": h, "a": a, "L": loss},
        forwards={"h": "leaky_h", "a": "leaky_a", "L": "leaky_loss"},
        gradients={"a": "leaky_dL_da", "h": "leaky_dL_dh", "w": "leaky_dL_dw", "b": "leaky_dL_db"},
    )


GRAPHS = {"leaky_relu": leaky_relu_graph}


def _scaled(values, name: str, of: str, factor) -> bool:
    """The student's `name` equals torch's `of` times `factor` (and is wrong); the square's output is its
    input times itself, so `factor` may be a reference too."""
    reference = expected(values, of)
    numbers = (int, float)
    return type(reference) in numbers and type(factor) in numbers and student_equals(values, name, reference * factor)


def _wrote_forward_name(values, name: str) -> bool:
    """A grad_fn answered with the operation's name ("Pow", "pow", "PowBackward") instead of the class."""
    answer, reference = student(values, name), expected(values, name)
    return (
        wrong(values, name)
        and type(answer) is str
        and type(reference) is str
        and len(answer.strip()) >= 3
        and reference.lower().startswith(answer.strip().lower()[:3])
    )


def _piled_up(values, name: str, other: str) -> bool:
    """The student's list `name` equals torch's list `other` (the loop of the other version)."""
    return student_equals(values, name, expected(values, other))


def _operation_name_rule(name: str) -> Rule:
    return Rule(
        f"operation_name_{name}",
        name,
        lambda v: _wrote_forward_name(v, name),
        "Your answer names the operation (or almost its class), but grad_fn holds an object of the class "
        "torch made to reverse it, spelled exactly as type(t.grad_fn).__name__ prints it: the operation's "
        "name followed by Backward0.",
        HISTORY,
    )


LEAF = "A leaf is a tensor that no operation made: being one is about its history, not about whether it requires grad."
HISTORY = "Every computed tensor remembers the node that made it: grad_fn names the backward of that operation."
SAVED = (
    "The forward pass keeps what each node's local derivative will need, and no more; backward() uses it "
    "and then frees it."
)
LEAKY = "LeakyReLU never shuts: for a negative input its slope is 0.01, so a small gradient still flows back."
ZERO_GRAD = "Gradients accumulate: optimizer.zero_grad() before every backward() is what makes each step its own."
ACCUMULATE = (
    "Accumulating on purpose: backward() after backward() adds the gradients, which is the gradient of "
    "the summed loss; scaling each loss scales its gradient."
)
DETACH = "detach() makes a constant for autograd: the value stays, the path back through it is cut."

MISCONCEPTIONS = (
    Rule(
        "data_is_not_a_leaf",
        "data_is_leaf",
        lambda v: wrong(v, "data_is_leaf") and student(v, "data_is_leaf") is False,
        "A tensor that does not require grad is a leaf too: it was made directly, with no operation behind it. "
        "Being a leaf is about history, not about wanting a gradient.",
        LEAF,
    ),
    Rule(
        "leaf_grad_fn_accumulate",
        "x_grad_fn",
        lambda v: (
            wrong(v, "x_grad_fn")
            and type(student(v, "x_grad_fn")) is str
            and "accumulate" in str(student(v, "x_grad_fn")).lower()
        ),
        "AccumulateGrad is the node backward() uses to write into x.grad (you find it in y.grad_fn.next_functions), "
        "but x itself was not computed by anything: x.grad_fn is None.",
        LEAF,
    ),
    *(_operation_name_rule(name) for name in ("y_grad_fn", "doubled_grad_fn", "z_grad_fn")),
    Rule(
        "saved_the_output",
        "square_saved",
        lambda v: _scaled(v, "square_saved", "square_saved", expected(v, "square_saved")),
        "You gave the square's output. Its local slope is 2x, so the node keeps its input x.",
        SAVED,
    ),
    Rule(
        "leaky_slope_forgotten",
        "leaky_dL_dh",
        lambda v: (
            student_equals(v, "leaky_dL_dh", expected(v, "leaky_dL_da"))
            or student_equals(v, "leaky_dL_dh", student(v, "leaky_dL_da"))
        ),
        "Your gradient passed LeakyReLU unchanged, as if its slope were 1. The input h is negative, so the "
        "slope is the negative slope, 0.01.",
        LEAKY,
    ),
    Rule(
        "leaky_treated_as_relu",
        "leaky_dL_dw",
        lambda v: (
            any(wrong(v, name) and student(v, name) == 0 for name in ("leaky_dL_dw", "leaky_dL_db"))
            or student_equals(v, "leaky_a", 0)
        ),
        "You treated LeakyReLU like ReLU: a negative h gives a = 0.01·h (not 0), and a slope of 0.01 (not 0), "
        "so w and b do get a (small) gradient.",
        LEAKY,
    ),
    Rule(
        "leaky_times_x_missing",
        "leaky_dL_dw",
        lambda v: student_equals(v, "leaky_dL_dw", expected(v, "leaky_dL_dh")),
        "Your ∂L/∂w equals the gradient at h: the last link, ∂h/∂w = x, is missing (and x is negative here).",
        "The chain rule, one node at a time: local slope × incoming gradient.",
    ),
    Rule(
        "detach_ignored",
        "detach_grad",
        lambda v: student_equals(v, "detach_grad", expected(v, "full_grad")),
        "You differentiated x·x as x²: but the detached factor is a constant to autograd, so only one x "
        "carries a gradient, which is half as much.",
        DETACH,
    ),
    Rule(
        "detach_ignored_cube",
        "cube_detach_grad",
        lambda v: _scaled(v, "cube_detach_grad", "cube_detach_grad", 1.5),
        "You differentiated x³ as a whole (3x²): the detached x is a constant, so only x² is differentiated.",
        DETACH,
    ),
    Rule(
        "zero_grad_is_boilerplate",
        "nozero_w",
        lambda v: _piled_up(v, "nozero_w", "sgd_w"),
        "Without zero_grad() the steps are not the same as with it: from the second step on, .grad holds the "
        "sum of every gradient so far, and SGD steps with that sum.",
        ZERO_GRAD,
    ),
    Rule(
        "zero_grad_is_boilerplate_b",
        "nozero_b",
        lambda v: _piled_up(v, "nozero_b", "sgd_b"),
        "Without zero_grad() b moves by the sum of all its gradients so far, not by this step's.",
        ZERO_GRAD,
    ),
    Rule(
        "zero_grad_ignored",
        "sgd_w",
        lambda v: _piled_up(v, "sgd_w", "nozero_w"),
        "optimizer.zero_grad() empties .grad before every backward(), so each step uses only its own "
        "gradient: your values let the gradients pile up.",
        ZERO_GRAD,
    ),
    Rule(
        "accumulation_overwrites",
        "accumulated_w_grad",
        lambda v: student_equals(v, "accumulated_w_grad", expected(v, "batch_b_w_grad")),
        "The second backward() does not replace the first mini-batch's gradient: it adds to it.",
        ACCUMULATE,
    ),
    Rule(
        "accumulated_differs_from_summed",
        "summed_w_grad",
        lambda v: (
            wrong(v, "summed_w_grad")
            and not wrong(v, "accumulated_w_grad")
            and student(v, "accumulated_w_grad") is not None
        ),
        "The gradient of a sum is the sum of the gradients: one backward() of loss_a + loss_b fills .grad with "
        "exactly what two backward() calls accumulate.",
        ACCUMULATE,
    ),
    Rule(
        "average_not_halved",
        "averaged_w_grad",
        lambda v: student_equals(v, "averaged_w_grad", expected(v, "accumulated_w_grad")),
        "Each loss was halved before its backward(), and halving a loss halves its gradient: the accumulated "
        "gradient is that of the mean loss, half the sum.",
        ACCUMULATE,
    ),
)
