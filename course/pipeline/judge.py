"""The trusted side: run the source's hidden tests with the harvested plain answers injected.

torch recomputes every reference here, in the grader's process. Nothing from the student is imported,
unpickled or called: the hidden tests only ever see validated plain values (numbers, lists, booleans,
None, strings) or inert markers for answers that could not be read.
"""

from __future__ import annotations

import builtins
import copy
import functools
import json
import math
import random
import threading
import traceback
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

from course import forms
from course.core.answers import FUNCTION, MISSING, VALUE, Answer, PlainValue
from course.forms import matches as matches  # the one comparison, re-exported for the grader's modules
from course.pipeline.assignment import HIDDEN_BEGIN, HIDDEN_END, Assignment, Question, region_lines
from course.pipeline.hidden_tests import reads_no_answer


@dataclass(frozen=True)
class ProbeCheck:
    x: float
    student: PlainValue
    expected: PlainValue
    error: str
    correct: bool
    private: bool = False  # one of the points drawn for the student (course/pipeline/probes.py): never named to her


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
    function: bool = False  # a function answer (whatever the student left there): torch has no one value
    # What verdicts-only feedback says in place of `hint`, which may tell the answer: the concept or the step to
    # revisit, never the value or the verdict ("" when the hidden test gives none: then it says nothing).
    idea: str = ""


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
        plain: PlainValue = reference
        return plain
    raise TypeError(f"a hidden test gave a reference of type {type(reference).__name__}; use tensors or plain values")


def declared_forms(question: Question) -> dict[str, str]:
    """name -> the form the question's public check asks for, in words (where it names one the judge knows)."""
    shapes = {name: forms.form(declared) for name, declared in question.forms}
    return {name: shape.words for name, shape in shapes.items() if shape}


def form_in_words(expected: PlainValue) -> str:
    """What form an answer must have, judged from torch's value when its public check declares none. Never the
    value itself: an expected None is said as one of the plain forms, not as None."""
    if expected is None:
        return "a plain value (a number, True or False, a list, or None)"
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

    def __init__(
        self,
        answers: dict[str, Answer],
        tolerance: float,
        computed: frozenset[str],
        deduction: float,
        sink: list[ValueResult],
        forms: dict[str, str] | None = None,
        private: dict[str, frozenset[float]] | None = None,
    ) -> None:
        self.answers, self.tolerance, self.computed, self.deduction = answers, tolerance, computed, deduction
        self.sink, self.forms, self.private = sink, forms or {}, private or {}

    def _answer(self, name: str) -> Answer:
        if name not in self.answers:
            raise KeyError(f"hidden tests score {name!r}, which no answer cell of the source assigns")
        return self.answers[name]

    def _earned(self, name: str, correct: bool, points: float) -> tuple[float, bool]:
        flagged = name in self.computed
        if not correct:
            return 0.0, flagged
        return points * (1 - self.deduction) if flagged else float(points), flagged

    def value(self, name: str, answer: Any, reference: Any, hint: str, points: float = 1, *, idea: str = "") -> None:
        del answer  # the judge reads the validated answer by name, never the object passed in
        expected = to_plain(reference)
        found = self._answer(name)
        if found.status == VALUE:
            correct = matches(found.value, expected, self.tolerance)
            earned, flagged = self._earned(name, correct, points)
            self.sink.append(
                ValueResult(
                    name,
                    VALUE,
                    found.value,
                    expected,
                    correct,
                    float(points),
                    earned,
                    hint,
                    hand_work_note=flagged,
                    idea=idea,
                )
            )
        else:
            self.sink.append(
                ValueResult(
                    name,
                    found.status,
                    None,
                    expected,
                    False,
                    float(points),
                    0.0,
                    hint,
                    detail=_unanswered_detail(found, self.forms.get(name) or form_in_words(expected)),
                    idea=idea,
                )
            )

    def function(self, name: str, answer: Any, reference: Any, hint: str, points: float = 1, *, idea: str = "") -> None:
        del answer
        found = self._answer(name)
        if found.status != FUNCTION or not found.probes:
            detail = (
                "your function was not called: the notebook stopped before grading reached it"
                if found.status == FUNCTION
                else _unanswered_detail(found, forms.FUNCTION_WORDS)
            )
            self.sink.append(
                ValueResult(
                    name,
                    found.status,
                    None,
                    None,
                    False,
                    float(points),
                    0.0,
                    hint,
                    detail=detail,
                    function=True,
                    idea=idea,
                )
            )
            return
        checks = []
        private = self.private.get(name, frozenset())
        for probe in found.probes:
            expected = to_plain(reference(probe.x))
            correct = not probe.error and matches(probe.value, expected, self.tolerance)
            checks.append(ProbeCheck(probe.x, probe.value, expected, probe.error, correct, probe.x in private))
        correct = all(check.correct for check in checks)
        wrong = [check for check in checks if not check.correct]
        # Which points, and torch's value there, are the feedback's to state or not (feedback_reveals, a private
        # point), never the judge's: it says how many.
        detail = f"disagrees with torch at {len(wrong)} of the {len(checks)} points the grader uses" if wrong else ""
        earned, flagged = self._earned(name, correct, points)
        self.sink.append(
            ValueResult(
                name,
                FUNCTION,
                None,
                None,
                correct,
                float(points),
                earned,
                hint,
                detail,
                flagged,
                tuple(checks),
                function=True,
                idea=idea,
            )
        )

    def total(self) -> float:
        return sum(result.earned for result in self.sink)


def _hidden_test_namespace(answers: dict[str, Answer], marks_factory: Any, params: dict[str, Any]) -> dict[str, Any]:
    import torch

    namespace: dict[str, Any] = {
        "__builtins__": builtins,
        "torch": torch,
        "math": math,
        "warnings": warnings,
        "random": random,
        "Marks": marks_factory,
        "P": copy.deepcopy(params),
    }
    for name, answer in answers.items():
        namespace[name] = copy.deepcopy(answer.value) if answer.status == VALUE else Unanswered(answer)
    return namespace


def judge_question(
    question: Question,
    answers: dict[str, Answer],
    *,
    tolerance: float,
    computed: frozenset[str] = frozenset(),
    deduction: float = 0.0,
    params: dict[str, Any],
    _params_key: str | None = None,
    private_points: dict[str, frozenset[float]] | None = None,
) -> QuestionResult:
    """Score one question by running its hidden-test cell from source/ in this (trusted) process, with the
    student's numbers `params` (or replaying what that cell gave Marks for the same numbers, when the cell
    reads nothing of the student's: see course/pipeline/hidden_tests.py)."""
    results: list[ValueResult] = []

    forms = declared_forms(question)

    def marks_factory() -> _Marks:
        return _Marks(answers, tolerance, computed, deduction, results, forms, private_points)

    recorded = _recorded(question, answers, params, _params_key or _key_of(params))
    if recorded is not None and _replay(recorded, marks_factory()):
        error = recorded.error
    else:
        results.clear()
        error = _run_hidden_tests(question, _hidden_test_namespace(answers, marks_factory, params))
    awarded = sum(r.points for r in results)
    if error is None and abs(awarded - question.points) > 1e-9:
        error = f"the hidden tests award {awarded:g} points but the cell is worth {question.points:g}"
    if error is not None:
        return QuestionResult(
            question.id, question.title, question.test_cell_id, question.points, 0.0, tuple(results), error
        )
    earned = round(sum(r.earned for r in results), 6)
    return QuestionResult(question.id, question.title, question.test_cell_id, question.points, earned, tuple(results))


def _run_hidden_tests(question: Question, namespace: dict[str, Any]) -> str | None:
    """Run the question's hidden tests in `namespace`; what they raised, as text, with the line of the hidden tests
    it came from (None: nothing)."""
    try:
        code = _hidden_code(question.test_source, question.test_cell_id)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(code, namespace)  # noqa: S102 - the instructor's hidden tests from source/, never student code
    except Exception as failure:
        where = _hidden_filename(question.test_cell_id)
        lines = [frame.lineno for frame in traceback.extract_tb(failure.__traceback__) if frame.filename == where]
        if isinstance(failure, SyntaxError) and failure.filename == where:
            lines.append(failure.lineno)
        at = f" (line {lines[-1]} of the hidden tests)" if lines and lines[-1] else ""
        return f"{type(failure).__name__}: {failure}{at}"
    return None


def _hidden_filename(cell_id: str) -> str:
    return f"<hidden tests of {cell_id}>"


@functools.lru_cache(maxsize=256)
def _hidden_region(test_source: str) -> str:
    # Only the hidden region scores: the visible part of a test cell is the public form check that makes
    # nbgrader validate fail on a missing answer, and here a missing answer is the judge's to score.
    return "\n".join(region_lines(test_source, HIDDEN_BEGIN, HIDDEN_END))


@functools.lru_cache(maxsize=256)
def _hidden_code(test_source: str, cell_id: str) -> CodeType:
    """The hidden tests compiled once per batch, not once per student."""
    return compile(_hidden_region(test_source), _hidden_filename(cell_id), "exec")


# ------------------------------------------------------------------- references once per parameter set


@dataclass(frozen=True)
class _Recorded:
    """What a hidden-test cell that reads nothing of the student's handed to Marks, in order (method,
    answer name, torch's reference as plain data or a memoised reference function, hint, points, idea), and
    what it raised after that."""

    calls: tuple[tuple[str, str, Any, Any, Any, Any], ...]
    error: str | None


class _Recorder:
    """Stands for Marks while such a cell runs once: keeps the arguments of each call (a reference is made
    plain data at once, as the judge's Marks does, so a tensor changed later in the cell is seen as it was)."""

    def __init__(self, calls: list[tuple[str, str, Any, Any, Any, Any]]) -> None:
        self.calls = calls

    def value(self, name: str, answer: Any, reference: Any, hint: str, points: float = 1, *, idea: str = "") -> None:
        del answer
        self.calls.append(("value", name, to_plain(reference), hint, points, idea))

    def function(self, name: str, answer: Any, reference: Any, hint: str, points: float = 1, *, idea: str = "") -> None:
        del answer
        self.calls.append(("function", name, _Memoised(reference), hint, points, idea))

    def total(self) -> float:
        return 0.0  # only ever a bare statement in a cell that is recorded: its value is never used


class _Memoised:
    """A reference function evaluated once per point (and type of point) for every student of a parameter
    set; each caller gets its own copy of the plain result."""

    def __init__(self, reference: Any) -> None:
        self.reference = reference
        self.seen: dict[tuple[type, Any], PlainValue] = {}

    def __call__(self, x: Any) -> PlainValue:
        key = (type(x), x)
        if key not in self.seen:
            self.seen[key] = to_plain(self.reference(x))
        return to_plain(self.seen[key])


_RECORDED: OrderedDict[tuple[Any, ...], _Recorded] = OrderedDict()
_RECORDED_LOCK = threading.Lock()
RECORDED_PARAMETER_SETS = 512  # question x parameter set entries kept (a class with variants has one set each)


def _key_of(params: dict[str, Any]) -> str:
    """The parameter set as a key ("" when it is not plain data: then nothing is recorded)."""
    try:
        return json.dumps(params, sort_keys=True)
    except (TypeError, ValueError):
        return ""


def _recorded(
    question: Question, answers: dict[str, Answer], params: dict[str, Any], params_key: str
) -> _Recorded | None:
    """The cell's calls for these parameters, recorded on first use; None when the cell must run per student."""
    names = frozenset(answers)
    if not params_key or not reads_no_answer(_hidden_region(question.test_source), names):
        return None
    key = (question.test_cell_id, question.test_source, names, params_key)
    with _RECORDED_LOCK:
        found = _RECORDED.get(key)
        if found is not None:
            _RECORDED.move_to_end(key)
            return found
    calls: list[tuple[str, str, Any, Any, Any, Any]] = []
    placeholders = {name: Answer(MISSING, detail="not read by these hidden tests") for name in names}
    error = _run_hidden_tests(question, _hidden_test_namespace(placeholders, lambda: _Recorder(calls), params))
    found = _Recorded(tuple(calls), error)
    with _RECORDED_LOCK:
        _RECORDED[key] = found
        while len(_RECORDED) > RECORDED_PARAMETER_SETS:
            _RECORDED.popitem(last=False)
    return found


def recorded_references(
    question: Question, params: dict[str, Any]
) -> tuple[dict[str, PlainValue], str | None, dict[str, Any]]:
    """Run a question's hidden tests with no answer (each a placeholder) and these numbers, as the judge records a
    cell that reads nothing of the student's: {answer: torch's reference, as plain data} for each `marks.value`
    (function answers left out), what the cell raised (None: nothing), and the namespace it ran in (its tensors
    by name). Never cached: the slip search (course/pipeline/slip_search.py) runs it under one mutation of
    torch's backward at a time, and caches what it needs itself."""
    calls: list[tuple[str, str, Any, Any, Any, Any]] = []
    placeholders = {name: Answer(MISSING, detail="not read here") for name in question.answer_names}
    namespace = _hidden_test_namespace(placeholders, lambda: _Recorder(calls), params)
    error = _run_hidden_tests(question, namespace)
    references = {name: reference for method, name, reference, *_ in calls if method == "value"}
    return references, error, namespace


def _replay(recorded: _Recorded, marks: _Marks) -> bool:
    """Hand this student's Marks what the cell handed it; False (run the cell itself) if anything raises,
    since the cell might have caught it and gone on differently."""
    try:
        for method, name, reference, hint, points, idea in recorded.calls:
            getattr(marks, method)(name, None, reference, hint, points, idea=idea)
    except Exception:
        return False
    return True


def judge(
    assignment: Assignment,
    answers: dict[str, Answer],
    *,
    tolerance: float,
    computed: frozenset[str] = frozenset(),
    deduction: float = 0.0,
    params: dict[str, Any] | None = None,
    private_points: dict[str, frozenset[float]] | None = None,
) -> tuple[QuestionResult, ...]:
    """Score every question; `params` are the student's numbers (the source notebook's when None);
    `private_points` the points of each function answer drawn for the student (course/pipeline/probes.py)."""
    numbers = assignment.default_params if params is None else params
    key = _key_of(numbers)
    return tuple(
        judge_question(
            q,
            answers,
            tolerance=tolerance,
            computed=computed,
            deduction=deduction,
            params=numbers,
            _params_key=key,
            private_points=private_points,
        )
        for q in assignment.questions
    )
