"""The misconception catalogue: wrong answers that betray a specific misunderstanding.

Each rule looks only at plain values: the student's answers and torch's references from the judge, so it
works for any numbers the exercises use. Each diagnosis names the idea of the article it violates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from course.answers import VALUE, is_number
from course.judge import QuestionResult, ValueResult, matches

TOLERANCE = 1e-6


@dataclass(frozen=True)
class Diagnosis:
    id: str
    value: str
    message: str
    idea: str


@dataclass(frozen=True)
class Rule:
    id: str
    value: str
    applies: Callable[[dict[str, ValueResult]], bool]
    message: str
    idea: str


def _student(values: dict[str, ValueResult], name: str):
    result = values.get(name)
    return result.student if result is not None and result.status == VALUE else None


def _expected(values: dict[str, ValueResult], name: str):
    result = values.get(name)
    return result.expected if result is not None else None


def _wrong(values: dict[str, ValueResult], name: str) -> bool:
    result = values.get(name)
    return result is not None and result.status == VALUE and not result.correct


def _student_equals(values: dict[str, ValueResult], name: str, target) -> bool:
    return _wrong(values, name) and target is not None and matches(_student(values, name), target, TOLERANCE)


def _forgot_times_x(grad_name: str, upstream_name: str) -> Callable[[dict[str, ValueResult]], bool]:
    return lambda v: _student_equals(v, grad_name, _expected(v, upstream_name))


def _constant_list(values: dict[str, ValueResult], name: str, like: str) -> bool:
    first = (_expected(values, like) or [None])[0]
    expected = _expected(values, like)
    return type(expected) is list and _student_equals(values, name, [first] * len(expected))


def _w2_dropped(values: dict[str, ValueResult]) -> bool:
    out_grad, a_grad = _expected(values, "w2_dL_dout"), _expected(values, "w2_dL_da")
    if not (is_number(out_grad) and is_number(a_grad)) or out_grad == 0:
        return False
    w2 = a_grad / out_grad
    if w2 == 0:
        return False
    w_grad = _expected(values, "w2_dL_dw")
    return _student_equals(values, "w2_dL_da", out_grad) or (
        is_number(w_grad) and _student_equals(values, "w2_dL_dw", w_grad / w2)
    )


def _through_closed_relu(values: dict[str, ValueResult]) -> bool:
    return any(
        _wrong(values, name) and _expected(values, name) == 0 and is_number(_student(values, name))
        for name in ("closed_dL_dw", "closed_dL_db")
    )


def _cubic_dropped_linear_term(values: dict[str, ValueResult]) -> bool:
    expected = _expected(values, "cubic_grad")
    return is_number(expected) and _student_equals(values, "cubic_grad", expected + 2)


ACCUMULATE = "Gradients accumulate: backward() adds into .grad, it does not overwrite it."
CHAIN_X = "The chain rule, one node at a time: local slope × incoming gradient, and h = w·x + b has ∂h/∂w = x."
LEAVES = "Only leaves keep .grad; an intermediate keeps its gradient only after retain_grad()."
RULES: tuple[Rule, ...] = (
    Rule("accumulation_overwrites", "accumulated_grads",
         lambda v: _constant_list(v, "accumulated_grads", "accumulated_grads"),
         "You gave the same gradient at every step, as if each backward() replaced .grad. "
         "Without zeroing, each call adds its gradient to what is already there.", ACCUMULATE),
    Rule("zeroing_ignored", "zeroed_grads",
         lambda v: _student_equals(v, "zeroed_grads", _expected(v, "accumulated_grads")),
         "You let the gradients pile up even though .grad is zeroed before every backward(): "
         "after zero_() each step starts from nothing.", ACCUMULATE),
    Rule("gradient_through_closed_relu", "closed_dL_dw", _through_closed_relu,
         "A gradient got through the shut ReLU. With a negative input ReLU's local slope is 0, and "
         "everything behind it is multiplied by that 0.",
         "A zero gradient means something on the way back multiplied by zero: a closed ReLU is a shut gate."),
    Rule("forgot_times_x", "net_dL_dw", _forgot_times_x("net_dL_dw", "net_dL_dh"),
         "Your ∂L/∂w equals the gradient at h: the last step, × x (since ∂h/∂w = x), is missing.", CHAIN_X),
    Rule("forgot_times_x_w2", "w2_dL_dw", _forgot_times_x("w2_dL_dw", "w2_dL_dh"),
         "Your ∂L/∂w equals the gradient at h: the last step, × x (since ∂h/∂w = x), is missing.", CHAIN_X),
    Rule("forgot_times_x_one_call", "one_call_w_grad", _forgot_times_x("one_call_w_grad", "one_call_b_grad"),
         "Your w gradient equals the b gradient: w reaches the prediction multiplied by x, so its gradient "
         "carries that factor x too.", CHAIN_X),
    Rule("w2_factor_missing", "w2_dL_da", _w2_dropped,
         "Your chain skips the new weight: out = w2·a, so on the way back the gradient is multiplied by w2 "
         "before it reaches a (and everything behind a).",
         "Backpropagation multiplies the local slope of every node on the path; w2 is one of those nodes."),
    Rule("cubic_dropped_linear_term", "cubic_grad", _cubic_dropped_linear_term,
         "You differentiated x³ (3x²) but not the −2x term, whose slope is −2.",
         "Differentiate term by term: the gradient of a sum is the sum of the gradients."),
    Rule("retained_grad_is_none", "retain_y_grad", lambda v: _wrong(v, "retain_y_grad") and
         _student(v, "retain_y_grad") is None and _expected(v, "retain_y_grad") is not None,
         "retain_grad() was called on y, so y keeps its gradient dz/dy after backward().", LEAVES),
    Rule("unretained_grad_kept", "y_grad_without_retain", lambda v: _wrong(v, "y_grad_without_retain") and
         _expected(v, "y_grad_without_retain") is None and is_number(_student(v, "y_grad_without_retain")),
         "Without retain_grad() an intermediate's gradient is used on the way back and then discarded: "
         "y.grad is None.", LEAVES),
    # Exercise 11 asks for .grad after two backward() calls: a student who gives one call's gradient (the
    # tiny network's, from exercise 3) read the second call as replacing the first.
    Rule("second_backward_overwrites", "twice_w_grad",
         lambda v: _wrong(v, "twice_w_grad") and _student_equals(v, "twice_w_grad", _expected(v, "net_dL_dw")),
         "You gave the gradient of one backward() call. The second call adds the same gradient again, so .grad "
         "holds twice as much.", ACCUMULATE),
    Rule("second_backward_overwrites_b", "twice_b_grad",
         lambda v: _wrong(v, "twice_b_grad") and _student_equals(v, "twice_b_grad", _expected(v, "net_dL_db")),
         "You gave the bias gradient of one backward() call. The second call adds the same gradient again, so "
         ".grad holds twice as much.", ACCUMULATE),
    Rule("backward_order", "local_slopes", lambda v: type(_expected(v, "local_slopes")) is list and
         _student_equals(v, "local_slopes", list(reversed(_expected(v, "local_slopes")))),
         "You listed the local slopes in forward order. The backward pass meets the nodes right to left: "
         "+1 first, the square last.", "backward() walks the graph in reverse, from the output to the leaves."),
)


def _sign_slips(values: dict[str, ValueResult], already: set[str]) -> list[Diagnosis]:
    slips = []
    for name, result in values.items():
        expected = result.expected
        if name in already or not is_number(expected) or expected == 0:
            continue
        if _student_equals(values, name, -expected):
            slips.append(Diagnosis(
                "sign_slip", name,
                f"{name} has the right size but the wrong sign: check the sign of each local slope on the way back.",
                "A gradient's sign says which way the loss moves; each negative local slope flips it.",
            ))
    return slips


def diagnose(questions: tuple[QuestionResult, ...]) -> dict[str, list[Diagnosis]]:
    """{question id: diagnoses} for every rule that matches this submission."""
    values = {value.name: value for question in questions for value in question.values}
    owner = {value.name: question.id for question in questions for value in question.values}
    found: dict[str, list[Diagnosis]] = {}
    named: set[str] = set()
    for rule in RULES:
        if rule.value in values and rule.applies(values):
            found.setdefault(owner[rule.value], []).append(Diagnosis(rule.id, rule.value, rule.message, rule.idea))
            named.add(rule.value)
    for slip in _sign_slips(values, named):
        found.setdefault(owner[slip.value], []).append(slip)
    return found
