"""From slip to rule: a slip the search found, drafted as a misconception `Rule` for the exercises module (issue 43).

A rule looks only at plain values (the student's answers and torch's references, course/pipeline/content.py), never
at the numbers, so the draft says what the slip gives in terms of torch's own values, checked at the numbers the
slip was found with and, where the assignment derives per-student numbers, at a few more drawn the same way:

1. another answer of the question: the slip gives exactly what torch gives for it (`∂L/∂w` equal to the gradient
   at h: the last local derivative dropped);
2. the answer's own reference times a constant (item by item for a list): `× 1/2` for one backward() of two;
3. else the value itself, which holds at the numbers it was found with only (a comment says so).

`draft_rule` returns the Python source to append to the module (`MISCONCEPTIONS = (*MISCONCEPTIONS, Rule(...))`),
its message and idea drafted in plain words from the slip's kind, for the author to read, reword and keep. The
value in it is torch's under the mutation, never a student's text.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Collection, Mapping, Sequence
from fractions import Fraction
from typing import Any

from course.core.answers import PlainValue, is_number
from course.forms import matches
from course.pipeline.slip_search import SlipSearch
from course.pipeline.slips import (
    ACCUMULATION_OFF,
    DROPPED_LOCAL,
    FORWARD_FOR_SLOPE,
    GATE_IGNORED,
    ONE_BRANCH,
    SIGN_FLIPPED,
    SUM_FOR_MEAN,
)

SAMPLES = 6  # extra number sets drawn with the assignment's derive() to check a relation on
MAX_DENOMINATOR = 1000  # a factor written as a fraction when one this small gives it exactly

# What the message adds to the slip's sentence: what the step should have done (shown beside torch's values).
ADVICE = {
    GATE_IGNORED: "A ReLU passes the gradient back only where its input was positive (a leaky one times its small "
    "slope where it was negative): here it was not, and the gradient went through as if the slope were 1.",
    ACCUMULATION_OFF: "backward() adds its gradient to what .grad already holds, and only zeroing empties it.",
    ONE_BRANCH: "This value is used more than once on the way to the output, and the gradients of all its uses add "
    "up: the answer follows only one of them.",
    DROPPED_LOCAL: "On the way back every node multiplies the gradient by its local derivative: one is left out.",
    SIGN_FLIPPED: "One step of the backward pass has the wrong sign: check the sign of each local slope (a "
    "subtraction sends −1 times the gradient to its second input).",
    SUM_FOR_MEAN: "A mean divides by the count, and so does its gradient.",
    FORWARD_FOR_SLOPE: "A node's local slope is the derivative of its operation at the value that went in, not the "
    "value it computed.",
}
# The concept the slip violates, the same for everyone (verdicts-only feedback shows it: never the answer).
IDEAS = {
    GATE_IGNORED: "Every gradient behind a ReLU is multiplied by the ReLU's local slope, which depends on the sign of "
    "its input.",
    ACCUMULATION_OFF: "Gradients accumulate: backward() adds into .grad, it does not overwrite it.",
    ONE_BRANCH: "Where a value feeds several later nodes, the gradients of all the paths add up.",
    DROPPED_LOCAL: "The chain rule, one node at a time: local slope × incoming gradient, at every node of the path.",
    SIGN_FLIPPED: "A gradient's sign says which way the loss moves; each negative local slope flips it.",
    SUM_FOR_MEAN: "Scaling a loss scales its gradient: a mean's gradient is the sum's divided by the count.",
    FORWARD_FOR_SLOPE: "A node's local slope is the derivative of its own operation, evaluated at the value that "
    "went in.",
}


def draft_rule(
    search: SlipSearch,
    question: str,
    answer: str,
    numbers: Mapping[str, Any],
    value: PlainValue,
    *,
    students: int = 0,
    samples: int = SAMPLES,
    taken: Collection[str] = (),
    extends: bool | None = None,
) -> str | None:
    """The source of a misconception Rule that recognises `value` for `answer` (the slip the search finds for it),
    ready to append to the assignment's exercises module; None when the search explains no slip there. `students`:
    how many gave the value (said in the draft's comment). Drafts appended together: `taken` holds the rule ids
    the drafts before this one used, and `extends` says the module has MISCONCEPTIONS by then (None: as it has
    now)."""
    found = search.find(question, answer, numbers, value)
    if found is None:
        return None
    observations = []  # (torch's values, the slip's value for the answer) at each set of numbers
    for each in [dict(numbers), *_drawn(search, samples)]:
        source = search.source(question, answer, each)
        if source is None:
            continue
        slipped = search.result(source, found.mutation).get(answer)
        if slipped is not None and not matches(slipped, source.reference[answer], search.tolerance):
            observations.append((source.reference, slipped))
    if not observations:
        return None
    test, said = _relation(answer, observations, search.tolerance)
    content = search.assignment.content
    rule_id = _unique(f"{found.slip.kind}_{answer}", {rule.id for rule in content.rules} | set(taken))
    extend = bool(content.rules) if extends is None else extends
    message = f"Your answer is what the backward pass gives with {found.slip.sentence}. {ADVICE[found.slip.kind]}"
    who = f"{students} students' answers" if students else "the class's answers"
    head = (
        f"Drafted by the slip search from {who} to {answer}: {found.slip.sentence}. The test: {said}. Read it, "
        "reword the message and the idea, then keep it (and move the import to the top)."
    )
    lines = [
        *(f"# {line}" for line in _lines(head, 98)),
        "from course.pipeline.content import Rule, expected, student_equals",
        "",
        "MISCONCEPTIONS = (",
        *(["    *MISCONCEPTIONS,"] if extend else []),
        "    Rule(",
        f"        {rule_id!r},",
        f"        {answer!r},",
        f"        lambda v: {test},",
        *_literal(message),
        *_literal(IDEAS[found.slip.kind]),
        "    ),",
        ")",
        "",
    ]
    return "\n".join(lines)


def _drawn(search: SlipSearch, samples: int) -> list[dict[str, Any]]:
    """Number sets drawn with the assignment's derive() (seeded, so a draft is the same every time), if it has one."""
    content = search.assignment.content
    if content.derive is None:
        return []
    drawn = []
    for seed in range(samples):
        rng = random.Random(seed)  # noqa: S311 - exercise numbers, not secrets
        try:
            drawn.append(dict(content.derive(rng)))
        except Exception:  # noqa: S110 - the instructor's derive: a draw that fails is one check fewer
            pass
    return drawn


def _relation(
    answer: str, observations: Sequence[tuple[Mapping[str, PlainValue], PlainValue]], tolerance: float
) -> tuple[str, str]:
    """The predicate's test (Python source on `v`) and its description, the first of the relations that holds at
    every observation (of the other answers, those the computation gives before this one first, nearest first:
    the values just upstream of it on the way back)."""
    references, slipped = observations[0]
    names = list(references)
    before = names[: names.index(answer)] if answer in names else names
    nearest = [*reversed(before), *(name for name in names if name not in before and name != answer)]
    for other in nearest:
        if all(matches(got, seen.get(other), tolerance) for seen, got in observations):
            return (
                f"student_equals(v, {answer!r}, expected(v, {other!r}))",
                f"the answer equals torch's {other}",
            )
    factor = _factor(references[answer], slipped)
    if factor is not None and all(matches(got, _scaled(seen[answer], factor), tolerance) for seen, got in observations):
        if isinstance(factor, tuple):
            factors = ", ".join(_number(item) for item in factor)
            return (
                f"student_equals(v, {answer!r}, [e * k for e, k in zip(expected(v, {answer!r}), ({factors},), "
                "strict=True)])",
                f"the answer equals torch's {answer} times ({factors}), item by item",
            )
        return (
            f"student_equals(v, {answer!r}, expected(v, {answer!r}) * ({_number(factor)}))",
            f"the answer equals torch's {answer} times {_number(factor)}",
        )
    where = "the numbers it was found with only: check it for others" if len(observations) > 1 else "these numbers"
    return f"student_equals(v, {answer!r}, {slipped!r})", f"the answer equals {slipped!r}, which holds at {where}"


def _factor(reference: PlainValue, slipped: PlainValue) -> Fraction | float | tuple[Fraction | float, ...] | None:
    if is_number(reference) and is_number(slipped):
        return _nice(slipped / reference) if reference != 0 else None
    if type(reference) is list and type(slipped) is list and len(reference) == len(slipped) and reference:
        if all(is_number(r) and is_number(s) and r != 0 for r, s in zip(reference, slipped, strict=True)):
            return tuple(_nice(s / r) for r, s in zip(reference, slipped, strict=True))
    return None


def _nice(ratio: float) -> Fraction | float:
    """A ratio as a small fraction when one gives it exactly (1/2, -1, 1/3), else the float itself."""
    if not math.isfinite(ratio):
        return ratio
    fraction = Fraction(ratio).limit_denominator(MAX_DENOMINATOR)
    return fraction if abs(float(fraction) - ratio) <= 1e-12 * max(1.0, abs(ratio)) else ratio


def _number(factor: Fraction | float) -> str:
    if isinstance(factor, Fraction):
        return str(factor.numerator) if factor.denominator == 1 else f"{factor.numerator} / {factor.denominator}"
    return repr(factor)


def _scaled(reference: PlainValue, factor: Any) -> PlainValue:
    if isinstance(factor, tuple) and type(reference) is list:
        if len(reference) != len(factor) or not all(is_number(item) for item in reference):
            return None
        return [item * float(k) for item, k in zip(reference, factor, strict=True)]
    if is_number(reference):
        return reference * float(factor)
    return None


def _unique(rule_id: str, taken: set[str]) -> str:
    base = re.sub(r"\W", "_", rule_id)
    found, count = base, 2
    while found in taken:
        found, count = f"{base}_{count}", count + 1
    return found


def _lines(text: str, width: int) -> list[str]:
    words, lines, line = text.split(" "), [], ""
    for word in words:
        if line and len(line) + len(word) + 1 > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return [*lines, line]


def _literal(text: str) -> list[str]:
    """A string literal as the modules write long ones: adjacent literals, one a line, then a comma."""
    parts = _lines(text, 84)
    return [f"        {part + ' '!r}" for part in parts[:-1]] + [f"        {parts[-1]!r},"]
