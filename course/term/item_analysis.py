"""Item analysis of a class: per answer, how many got it right, how well it separates the class, the blanks and
the common wrong values, each with who gave it and, where one is found, the slip that explains it (issue 43).

This module holds the plain-data result (`ItemAnalysis`, `AnswerItem`, `WrongValue`) and the `Explainer` a slip
search plugs in (course/pipeline/slips.py); the analysis itself is written beside it. Only the instructor's
outputs carry student ids and values: a student's own pages never show another student's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from course.core.answers import PlainValue
from course.pipeline.slips import Slip


class Explainer(Protocol):
    """Finds the slip that turns torch's value of `answer` (in `question`, at these numbers) into `value`, or None
    (unexplained). Bounded in time and count by whoever builds it."""

    def __call__(self, question: str, answer: str, numbers: Mapping[str, Any], value: PlainValue) -> Slip | None: ...


@dataclass(frozen=True)
class WrongValue:
    """A wrong value several students gave (values equal within the grading tolerance grouped, `value` the first
    seen), how many, who (sorted student ids) and the slip found for it (an author's misconception rule, when one
    named it, comes first as `rule`)."""

    value: PlainValue
    count: int
    students: tuple[str, ...]
    slip: Slip | None = None
    rule: str = ""


@dataclass(frozen=True)
class AnswerItem:
    """One answer across the class: share right (of all students), discrimination (point-biserial of right/wrong
    against the rest of the score; None when it is undefined, e.g. everyone right), blanks, and the wrong values
    by count, most common first."""

    question: str
    answer: str
    students: int
    right: int
    blanks: int
    share_right: float
    discrimination: float | None
    wrong_values: tuple[WrongValue, ...]


@dataclass(frozen=True)
class ItemAnalysis:
    """The item analysis of one assignment's class."""

    assignment: str
    students: int
    answers: tuple[AnswerItem, ...]
