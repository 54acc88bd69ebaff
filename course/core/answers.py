"""Plain-data answers: what crosses back from the sandbox, validated at the trust boundary.

Nothing here ever calls into student code: the sandbox sends JSON text, and only JSON's own types
(numbers, strings, booleans, None, lists, dicts) are inspected, each one checked by its exact type.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Union

from course.core.text import MAX_SHORT_TEXT, safe_text
from course.forms import is_number as is_number  # the forms' rule, re-exported for the grader's modules

PlainValue = Union[int, float, bool, None, str, list[Any]]  # noqa: UP007 - a runtime alias

MAX_LIST = 1000
MAX_TEXT = 1000

VALUE = "value"
MISSING = "missing"
WRONG_FORM = "wrong_form"
FUNCTION = "function"
UNREADABLE = "unreadable"
# How the sandbox's runner details an answer still as released (a value `...`, a function returning `...` or
# raising NotImplementedError): course/sandbox/runner.py writes these very words (it imports nothing of the course).
STILL_RELEASED = ("still `...`", "still raises NotImplementedError")


@dataclass(frozen=True)
class Probe:
    """One call of a function answer, made inside the sandbox at a point the grader chose."""

    x: float
    value: PlainValue = None
    error: str = ""


@dataclass(frozen=True)
class Answer:
    status: str
    value: PlainValue = None
    detail: str = ""
    probes: tuple[Probe, ...] = field(default_factory=tuple)


NOT_REPORTED = Answer(MISSING, detail="not reported")  # a name the sandbox's report never named


class Invalid(ValueError):
    """A harvested item is not plain data of the agreed shape."""


def _scalar(item: Any) -> PlainValue:
    kind = type(item)
    if kind is dict:
        if set(item) == {"nonfinite"} and item["nonfinite"] in ("nan", "inf", "-inf"):
            return float(item["nonfinite"])
        raise Invalid("unexpected object")
    if kind is str:
        if len(item) > MAX_TEXT:
            raise Invalid("text too long")
        return safe_text(item, MAX_TEXT)
    if kind is int:
        if abs(item) > 2**63:
            raise Invalid("integer too large")
    if kind in (int, float, bool, type(None)):
        plain: PlainValue = item  # its exact type checked above
        return plain
    raise Invalid(f"unexpected {kind.__name__}")


def plain_value(item: Any) -> PlainValue:
    """Validate one decoded JSON value as a plain answer (a scalar or a flat list of scalars)."""
    if type(item) is list:
        if len(item) > MAX_LIST:
            raise Invalid("list too long")
        return [_scalar(element) for element in item]
    return _scalar(item)


def _text(item: Any, limit: int = MAX_SHORT_TEXT) -> str:
    return safe_text(item, limit, one_line=True)


def decode_answer(entry: Any, expected_points: list[float] | None) -> Answer:
    """One harvested entry -> Answer. Anything malformed becomes UNREADABLE, never an exception."""
    try:
        if type(entry) is not dict:
            raise Invalid("not an object")
        kind = entry.get("kind")
        if kind == VALUE:
            return Answer(VALUE, plain_value(entry.get("value")))
        if kind == MISSING:
            return Answer(MISSING, detail=_text(entry.get("detail")) or "not defined")
        if kind == WRONG_FORM:
            return Answer(WRONG_FORM, detail=_text(entry.get("type"), 100) or "unknown type")
        if kind == FUNCTION:
            return Answer(FUNCTION, probes=_decode_probes(entry.get("probes"), expected_points))
        raise Invalid(f"unknown kind {_text(repr(kind), 60)}")
    except Invalid as problem:
        return Answer(UNREADABLE, detail=f"the grader could not read this answer ({_text(str(problem), 100)})")


def _decode_probes(items: Any, expected_points: list[float] | None) -> tuple[Probe, ...]:
    if items is None:
        return ()
    if type(items) is not list or expected_points is None or len(items) != len(expected_points):
        raise Invalid("function results do not match the points asked for")
    probes = []
    for item, x in zip(items, expected_points, strict=True):
        if type(item) is not dict or item.get("x") != x:
            raise Invalid("function results do not match the points asked for")
        if "error" in item:
            probes.append(Probe(x, error=_text(item["error"]) or "failed"))
        else:
            value = _scalar(item.get("value"))
            probes.append(Probe(x, value=value))
    return tuple(probes)


def describe(value: PlainValue) -> str:
    """How a plain value is shown to a student."""
    if type(value) is float and value.is_integer() and abs(value) < 1e15:
        return str(int(value)) if value != 0 or math.copysign(1, value) > 0 else "0"
    if type(value) is list:
        return "[" + ", ".join(describe(item) for item in value) + "]"
    return repr(value)
