"""The forms a question's public check may declare for an answer, defined once: what each accepts and how it
is said. `check_form(slope="number", values="list of 3 numbers")` declares them in the notebook. And, once
too, when an answer of the right form is right: `matches`, the one comparison with torch's value.

Three places hold an answer to its form, and all three use what is here, so they cannot drift apart: the form
check in the student's notebook (course/notebook.py, on the live value), the self-check's report
(course/pipeline/selfcheck.py, on the plain value the sandbox sent back) and the judge's notes on an unanswered value
(course/pipeline/judge.py). Each says a problem in its own sentence; the rule and the words come from here.

It imports nothing but the standard library and nothing of the course: the grader hands this file's text to
the sandbox, where it becomes the module `course.forms` that `course.notebook` imports (course/pipeline/submission.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

FUNCTION = "function"
LIST_FORM = re.compile(r"list of (\d+) numbers?")


def is_number(value: object) -> TypeGuard[int | float]:
    """A plain finite number (bool excluded)."""
    return type(value) in (int, float) and math.isfinite(value)  # type: ignore[arg-type]


def _class_name_or_none(value: object) -> bool:
    return value is None or (type(value) is str and value.isidentifier())


# form -> (how a sentence says it, what it accepts); "list of N numbers" is the one form with a count.
_PLAIN: dict[str, tuple[str, Callable[[object], bool]]] = {
    "number": ("a number", is_number),
    "number or None": ("a number or None", lambda value: value is None or is_number(value)),
    "True or False": ("True or False", lambda value: type(value) is bool),
    "class name or None": ("a class name in quotes (a string) or None", _class_name_or_none),
    FUNCTION: ("a function of x", callable),
}
NAMES = (*_PLAIN, "list of N numbers")  # every form a check may declare, as an instructor writes it
FUNCTION_WORDS = _PLAIN[FUNCTION][0]


@dataclass(frozen=True)
class Form:
    """One declared form: `name` as the check declares it, `words` as a sentence says it ("a number"),
    `length` the number of items of a list form (None for the others)."""

    name: str
    words: str
    length: int | None = None


@dataclass(frozen=True)
class Gap:
    """What keeps a value from its form: the value is not of it at all (`count` and `item` None), a list has
    `count` items where the form asks for another number of them, or its item number `item` (from 1) is no
    number. `value` is what is at fault: the whole value, or that item."""

    value: object
    count: int | None = None
    item: int | None = None

    def said(self, what: Callable[[Any], str]) -> str:
        """The gap in a few words ("it is None", "it has 2", "item 2 is None"); `what` says what a value is,
        as the medium knows it (a live value in the notebook, a plain one in the self-check)."""
        if self.count is not None:
            return f"it has {self.count}"
        if self.item is not None:
            return f"item {self.item} is {what(self.value)}"
        return f"it is {what(self.value)}"


def form(name: str) -> Form | None:
    """The form a check declares as `name` ("number", "list of 3 numbers", ...); None when it is none."""
    if name in _PLAIN:
        return Form(name, _PLAIN[name][0])
    listed = LIST_FORM.fullmatch(name)
    if listed:
        return Form(name, f"a list of {listed.group(1)} numbers", int(listed.group(1)))
    return None


def gap(value: object, shape: Form) -> Gap | None:
    """What keeps `value` from the form `shape` (None when it has the form)."""
    if shape.length is None:
        return None if _PLAIN[shape.name][1](value) else Gap(value)
    if type(value) is not list:
        return Gap(value)
    if len(value) != shape.length:
        return Gap(value, count=len(value))
    for position, item in enumerate(value, start=1):
        if not is_number(item):
            return Gap(item, item=position)
    return None


def matches(answer: object, expected: object, tolerance: float) -> bool:
    """The one comparison of the course: exact for None, booleans and text (a class name), within `tolerance`
    for numbers, item by item for lists. The judge scores with it; the notebook's check_with_torch and plain
    nbgrader's Marks compare with it too, so what they say and what the grader scores cannot differ."""
    if expected is None or type(expected) is bool:
        return answer is expected
    if type(expected) is str:
        return type(answer) is str and answer == expected
    if type(expected) is list:
        return (
            type(answer) is list
            and len(answer) == len(expected)
            and all(matches(a, e, tolerance) for a, e in zip(answer, expected, strict=True))
        )
    return is_number(answer) and is_number(expected) and abs(answer - expected) <= tolerance
