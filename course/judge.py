"""The trusted side: run the source's hidden tests with the harvested plain answers injected.

torch recomputes every reference here, in the grader's process. Nothing from the student is imported,
unpickled or called: the hidden tests only ever see validated plain values (numbers, lists, booleans,
None, strings) or inert markers for answers that could not be read.
"""

from __future__ import annotations

import builtins
import copy
import math
import random
import warnings
from dataclasses import dataclass, field
from typing import Any

from course.answers import FUNCTION, VALUE, Answer, PlainValue, describe, is_number
from course.assignment import HIDDEN_BEGIN, HIDDEN_END, Assignment, Question, region_lines


@dataclass(frozen=True)
class ProbeCheck:
    x: float
    student: PlainValue
    expected: PlainValue
    error: str
    correct: bool


@dataclass(frozen=True)
class ValueResult:
    name: str
    status: str
    student: PlainValue
    expected: PlainValue
    correct: bool
    points: float
    earned: float
    hint: str
    detail: str = ""
    hand_work_note: bool = False
    probes: tuple[ProbeCheck, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class QuestionResult:
    id: str
    title: str
    grade_id: str
    points: float
    earned: float
    values: tuple[ValueResult, ...]
    error: str | None = None


class Unanswered:
    """Stands in the hidden tests' namespace for an answer that has no plain value."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer

    def __repr__(self) -> str:
        return f"<unanswered: {self.answer.status}>"


def to_plain(reference: Any) -> PlainValue:
    """torch's reference (a tensor, a list of them, a bool, None, a number) -> plain Python."""
    import torch  # imported on first use: the grader starts its sandboxes while torch loads

    if isinstance(reference, torch.Tensor):
        return reference.detach().tolist()
    if type(reference) in (list, tuple):
        return [to_plain(item) for item in reference]
    if reference is None or type(reference) in (bool, int, float, str):
        return reference
    raise TypeError(f"a hidden test gave a reference of type {type(reference).__name__}; use tensors or plain values")


def matches(student: PlainValue, expected: PlainValue, tolerance: float) -> bool:
    """The one comparison of the course: exact for None/bools/strings, within `tolerance` for numbers."""
    if expected is None or type(expected) is bool:
        return student is expected
    if type(expected) is str:
        return type(student) is str and student == expected
    if type(expected) is list:
        return (type(student) is list and len(student) == len(expected)
                and all(matches(s, e, tolerance) for s, e in zip(student, expected, strict=True)))
    return is_number(student) and is_number(expected) and abs(student - expected) <= tolerance


def form_in_words(expected: PlainValue) -> str:
    """What form an answer must have, said as the public checks say it (never the value itself)."""
    if expected is None:
        return "None"
    if type(expected) is bool:
        return "True or False"
    if type(expected) is list:
        return f"a list of {len(expected)} values"
    if type(expected) is str:
        return "a name in quotes (a string)"
    return "a number"


def _unanswered_detail(answer: Answer, form: str) -> str:
    """Why an answer scored nothing before any comparison; `form` says in words what was expected."""
    if answer.status == "missing":
        return f"no answer ({answer.detail})"
    if answer.status == "wrong_form":
        return f"wrong form: a value of type {answer.detail}, where {form} was expected"
    if answer.status == FUNCTION:
        return f"a function, where {form} was expected"
    return answer.detail or answer.status


class _Marks:
    """The judge's implementation of the `Marks` the hidden tests call."""

    def __init__(self, answers: dict[str, Answer], tolerance: float, computed: frozenset[str], deduction: float,
                 sink: list[ValueResult]) -> None:
        self.answers, self.tolerance, self.computed, self.deduction = answers, tolerance, computed, deduction
        self.sink = sink

    def _answer(self, name: str) -> Answer:
        if name not in self.answers:
            raise KeyError(f"hidden tests score {name!r}, which no answer cell of the source assigns")
        return self.answers[name]

    def _earned(self, name: str, correct: bool, points: float) -> tuple[float, bool]:
        flagged = name in self.computed
        if not correct:
            return 0.0, flagged
        return points * (1 - self.deduction) if flagged else float(points), flagged

    def value(self, name: str, answer: Any, reference: Any, hint: str, points: float = 1) -> None:
        del answer  # the judge reads the validated answer by name, never the object passed in
        expected = to_plain(reference)
        found = self._answer(name)
        if found.status == VALUE:
            correct = matches(found.value, expected, self.tolerance)
            earned, flagged = self._earned(name, correct, points)
            self.sink.append(ValueResult(name, VALUE, found.value, expected, correct, float(points), earned, hint,
                                         hand_work_note=flagged))
        else:
            self.sink.append(ValueResult(name, found.status, None, expected, False, float(points), 0.0, hint,
                                         detail=_unanswered_detail(found, form_in_words(expected))))

    def function(self, name: str, answer: Any, reference: Any, hint: str, points: float = 1) -> None:
        del answer
        found = self._answer(name)
        if found.status != FUNCTION or not found.probes:
            detail = ("your function was not called: the notebook stopped before grading reached it"
                      if found.status == FUNCTION else _unanswered_detail(found, "a function of x"))
            self.sink.append(ValueResult(name, found.status, None, None, False, float(points), 0.0, hint,
                                         detail=detail))
            return
        checks = []
        for probe in found.probes:
            expected = to_plain(reference(probe.x))
            correct = not probe.error and matches(probe.value, expected, self.tolerance)
            checks.append(ProbeCheck(probe.x, probe.value, expected, probe.error, correct))
        correct = all(check.correct for check in checks)
        wrong = [check for check in checks if not check.correct]
        detail = ""
        if wrong:
            first = wrong[0]
            said = first.error or f"returned {describe(first.student)}"
            # torch's value there is the feedback's to show or not (feedback_reveals), never the judge's
            detail = (f"disagrees with torch at {len(wrong)} of the {len(checks)} points the grader chose "
                      f"(at x = {describe(first.x)} it {said})")
        earned, flagged = self._earned(name, correct, points)
        self.sink.append(ValueResult(name, FUNCTION, None, None, correct, float(points), earned, hint, detail,
                                     flagged, tuple(checks)))

    def total(self) -> float:
        return sum(result.earned for result in self.sink)


def _hidden_test_namespace(answers: dict[str, Answer], marks_factory: Any, params: dict) -> dict[str, Any]:
    import torch

    namespace: dict[str, Any] = {
        "__builtins__": builtins, "torch": torch, "math": math, "warnings": warnings, "random": random,
        "Marks": marks_factory, "P": copy.deepcopy(params),
    }
    for name, answer in answers.items():
        namespace[name] = copy.deepcopy(answer.value) if answer.status == VALUE else Unanswered(answer)
    return namespace


def judge_question(question: Question, answers: dict[str, Answer], *, tolerance: float,
                   computed: frozenset[str] = frozenset(), deduction: float = 0.0,
                   params: dict) -> QuestionResult:
    """Score one question by running its hidden-test cell from source/ in this (trusted) process, with the
    student's numbers `params`."""
    results: list[ValueResult] = []

    def marks_factory() -> _Marks:
        return _Marks(answers, tolerance, computed, deduction, results)

    namespace = _hidden_test_namespace(answers, marks_factory, params)
    error = None
    try:
        # Only the hidden region scores: the visible part of a test cell is the public form check that makes
        # nbgrader validate fail on a missing answer, and here a missing answer is the judge's to score.
        hidden = "\n".join(region_lines(question.test_source, HIDDEN_BEGIN, HIDDEN_END))
        code = compile(hidden, f"<hidden tests of {question.test_cell_id}>", "exec")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(code, namespace)  # noqa: S102 - the instructor's hidden tests from source/, never student code
    except Exception as failure:
        error = f"{type(failure).__name__}: {failure}"
    awarded = sum(r.points for r in results)
    if error is None and abs(awarded - question.points) > 1e-9:
        error = f"the hidden tests award {awarded:g} points but the cell is worth {question.points:g}"
    if error is not None:
        return QuestionResult(question.id, question.title, question.test_cell_id, question.points, 0.0,
                              tuple(results), error)
    earned = round(sum(r.earned for r in results), 6)
    return QuestionResult(question.id, question.title, question.test_cell_id, question.points, earned,
                          tuple(results))


def judge(assignment: Assignment, answers: dict[str, Answer], *, tolerance: float,
          computed: frozenset[str] = frozenset(), deduction: float = 0.0,
          params: dict | None = None) -> tuple[QuestionResult, ...]:
    """Score every question; `params` are the student's numbers (the source notebook's when None)."""
    numbers = assignment.default_params if params is None else params
    return tuple(judge_question(q, answers, tolerance=tolerance, computed=computed, deduction=deduction,
                                params=numbers) for q in assignment.questions)


def choose_probe_points(function_names: tuple[str, ...], count: int) -> dict[str, list[float]]:
    """Fresh random points for each function answer, drawn per grading run (integers and halves)."""
    chooser = random.SystemRandom()
    candidates = [n / 2 for n in range(-16, 17)]
    return {name: sorted(chooser.sample(candidates, count)) for name in function_names}
