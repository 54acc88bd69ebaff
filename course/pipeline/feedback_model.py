"""The feedback document as types: what feedback.json, a shard's record and the service's database hold.

`course.pipeline.feedback.build_feedback` makes a `Feedback`; every reader (the pages, Gradescope's Markdown, the class
summary, the LMS and nbgrader exports, the shards' merge, the service) asks its fields, never a string key.
`to_json` gives the plain data written to disk, key for key as the dicts of earlier versions were (so files and
database rows written before still read, and files written now are byte for byte what they were);
`from_json` reads it back as input: anything grading could not have written is a `FeedbackError` naming the
field, never a KeyError. The JSON Schema of what `to_json` writes is shipped beside this module
(course/schemas/feedback.schema.json; a test holds every sample student's feedback.json to it).

This module sits low in the package: it imports only the status words and the error family.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any, TypeGuard

from course.core.errors import CourseError
from course.core.status import GRADING_GIVES, Status

__all__ = [
    "SCHEMA_FILE",
    "AnswerFeedback",
    "CellError",
    "ChainRow",
    "ChainTable",
    "Feedback",
    "FeedbackError",
    "MisconceptionNote",
    "ProbeFeedback",
    "QuestionFeedback",
    "schema_text",
]

SCHEMA_FILE = "schemas/feedback.schema.json"  # inside the package `course`
READ_AGAIN = "grade again to write it"  # what to do about a feedback document that cannot be read


class FeedbackError(CourseError):
    """A feedback document read back (a feedback.json, a shard's record, a service row) is not one grading writes."""

    def __init__(self, message: str, field: str = "", what: str = "") -> None:
        super().__init__(message)
        self.field, self.what = field, what  # the field's path in the document ("" the whole) and what is wrong


class _Malformed(Exception):
    """Raised inside `from_json` with the field's path; `Feedback.from_json` turns it into one FeedbackError."""

    def __init__(self, at: str, what: str) -> None:
        super().__init__(at, what)
        self.at, self.what = at, what


def schema_text() -> str:
    """The JSON Schema of feedback.json, as shipped in the package."""
    return resources.files("course").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")


# ----------------------------------------------------------------------------- reading plain data as input


def _object(value: object, at: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise _Malformed(at, "is not an object")
    return value


def _text(data: dict[str, Any], key: str, at: str, default: str | None = None) -> str:
    value = data.get(key, default)
    if type(value) is not str:
        raise _Malformed(f"{at}{key}", "is missing" if key not in data else "is not text")
    return value


def _text_or_none(data: dict[str, Any], key: str, at: str) -> str | None:
    """A field always written, as text or null (torch's value where the feedback shows none, ...)."""
    if key not in data:
        raise _Malformed(f"{at}{key}", "is missing")
    value = data[key]
    if value is not None and type(value) is not str:
        raise _Malformed(f"{at}{key}", "is neither text nor null")
    return value


def finite_number(value: Any) -> TypeGuard[int | float]:
    """A JSON number grading could have written: a float that is finite, or an int a float holds exactly (JSON's
    integers have no bound: math.isfinite(10**400) raises OverflowError rather than answering)."""
    if type(value) is float:
        return math.isfinite(value)
    return type(value) is int and abs(value) <= 2**53


def _number(data: dict[str, Any], key: str, at: str) -> float:
    """A finite number as written (an int stays an int, so that writing it again gives the same bytes)."""
    value = data.get(key)
    if not finite_number(value):
        raise _Malformed(f"{at}{key}", "is missing" if key not in data else "is not a finite number")
    return value


def _number_or_none(data: dict[str, Any], key: str, at: str) -> float | None:
    return None if data.get(key) is None else _number(data, key, at)


def _count(data: dict[str, Any], key: str, at: str, default: int | None = None) -> int:
    value = data.get(key, default)
    if type(value) is not int or value < 0:
        raise _Malformed(f"{at}{key}", "is missing" if key not in data else "is not a count")
    return value


def _flag(data: dict[str, Any], key: str, at: str, default: bool | None = None) -> bool:
    value = data.get(key, default)
    if type(value) is not bool:
        raise _Malformed(f"{at}{key}", "is missing" if key not in data else "is not true or false")
    return value


def _unasked(data: dict[str, Any], at: str) -> bool:
    """A chain row's `asked`: absent (True), or False on a row no answer holds; written in no other way."""
    if "asked" in data and data["asked"] is not False:
        raise _Malformed(f"{at}asked", "is written only as false, on a row whose gradient no answer holds")
    return "asked" not in data


def _sentence(value: object, at: str) -> str:
    if type(value) is not str:
        raise _Malformed(at, "is not text")
    return value


def _items(data: dict[str, Any], key: str, at: str, default: list[Any] | None = None) -> list[Any]:
    value = data.get(key, default)
    if type(value) is not list:
        raise _Malformed(f"{at}{key}", "is missing" if key not in data else "is not a list")
    return value


# ----------------------------------------------------------------------------- the types


@dataclass(frozen=True)
class ProbeFeedback:
    """One point a function answer was called at: x, what it gave (or the error it raised), torch's value (None
    when the feedback shows no torch value), and whether the point is one drawn for the student
    (course/pipeline/probes.py; no view a student sees names it: this list is feedback.json's, the instructor's)."""

    x: float
    yours: str
    torch: str | None
    correct: bool
    private: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"x": self.x, "yours": self.yours, "torch": self.torch, "correct": self.correct, "private": self.private}

    @classmethod
    def read(cls, value: object, at: str) -> ProbeFeedback:
        data = _object(value, at)
        at += "."
        return cls(
            _number(data, "x", at),
            _text(data, "yours", at),
            _text_or_none(data, "torch", at),
            _flag(data, "correct", at),
            _flag(data, "private", at, False),
        )  # older files: no private points


@dataclass(frozen=True)
class AnswerFeedback:
    """One answer: the student's value (None when there is none: missing, a function), torch's (None when not
    shown), its answer status (course.core.answers: "value", "missing", "function", ...), points and the explanation.
    `detail`, `hand_work_note` and `probes` are left out of the JSON when empty, as they always were."""

    name: str
    your_value: str | None
    torch_value: str | None
    status: str
    correct: bool
    points: float
    earned: float
    explanation: str
    detail: str = ""
    hand_work_note: str = ""
    probes: tuple[ProbeFeedback, ...] = ()

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": self.name,
            "your_value": self.your_value,
            "torch_value": self.torch_value,
            "status": self.status,
            "correct": self.correct,
            "points": self.points,
            "earned": self.earned,
            "explanation": self.explanation,
        }
        if self.detail:
            entry["detail"] = self.detail
        if self.hand_work_note:
            entry["hand_work_note"] = self.hand_work_note
        if self.probes:
            entry["probes"] = [probe.to_json() for probe in self.probes]
        return entry

    @classmethod
    def read(cls, value: object, at: str) -> AnswerFeedback:
        data = _object(value, at)
        at += "."
        return cls(
            _text(data, "name", at),
            _text_or_none(data, "your_value", at),
            _text_or_none(data, "torch_value", at),
            _text(data, "status", at),
            _flag(data, "correct", at),
            _number(data, "points", at),
            _number(data, "earned", at),
            _text(data, "explanation", at),
            _text(data, "detail", at, ""),
            _text(data, "hand_work_note", at, ""),
            tuple(ProbeFeedback.read(p, f"{at}probes[{i}]") for i, p in enumerate(_items(data, "probes", at, []))),
        )


@dataclass(frozen=True)
class MisconceptionNote:
    """A misconception a question's answers show (course.pipeline.misconceptions): the answer it was seen in, the
    diagnosis (which relates the answer to torch's), the idea it violates, and whether it was found from the
    numbers alone (the sign slip). Kept whole in the document; `render.notes_shown` decides what a student sees."""

    id: str
    value: str
    diagnosis: str
    idea: str
    from_numbers: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "value": self.value,
            "diagnosis": self.diagnosis,
            "idea": self.idea,
            "from_numbers": self.from_numbers,
        }

    @classmethod
    def read(cls, value: object, at: str) -> MisconceptionNote:
        data = _object(value, at)
        at += "."
        return cls(
            _text(data, "id", at),
            _text(data, "value", at),
            _text(data, "diagnosis", at),
            _text(data, "idea", at),
            _flag(data, "from_numbers", at, False),
        )


@dataclass(frozen=True)
class ChainRow:
    """One node of a chain table: the node, its local derivative (as the exercise writes it), the answers holding
    its forward value (None: none) and its gradient, the student's values, torch's (None when not shown)."""

    node: str
    local_derivative: str
    torch_local_derivative: str | None
    forward: str | None
    your_forward: str
    torch_forward: str | None
    gradient: str
    your_gradient: str
    torch_gradient: str | None
    correct: bool
    asked: bool = True  # False: no answer holds this gradient (a row of a walk read from torch's graph)

    def to_json(self) -> dict[str, Any]:
        entry = {
            "node": self.node,
            "local_derivative": self.local_derivative,
            "torch_local_derivative": self.torch_local_derivative,
            "forward": self.forward,
            "your_forward": self.your_forward,
            "torch_forward": self.torch_forward,
            "gradient": self.gradient,
            "your_gradient": self.your_gradient,
            "torch_gradient": self.torch_gradient,
            "correct": self.correct,
        }
        if not self.asked:  # absent when asked, as every row was before rows without answers
            entry["asked"] = False
        return entry

    @classmethod
    def read(cls, value: object, at: str) -> ChainRow:
        data = _object(value, at)
        at += "."
        return cls(
            _text(data, "node", at),
            _text(data, "local_derivative", at),
            _text_or_none(data, "torch_local_derivative", at),
            _text_or_none(data, "forward", at),
            _text(data, "your_forward", at),
            _text_or_none(data, "torch_forward", at),
            _text(data, "gradient", at),
            _text(data, "your_gradient", at),
            _text_or_none(data, "torch_gradient", at),
            _flag(data, "correct", at),
            _unasked(data, at),
        )


@dataclass(frozen=True)
class ChainTable:
    """A question's backward walk node by node, and the row where it first breaks (None: it never does)."""

    rows: tuple[ChainRow, ...]
    first_wrong: int | None

    def to_json(self) -> dict[str, Any]:
        return {"rows": [row.to_json() for row in self.rows], "first_wrong": self.first_wrong}

    @classmethod
    def read(cls, value: object, at: str) -> ChainTable:
        data = _object(value, at)
        rows = tuple(ChainRow.read(row, f"{at}.rows[{i}]") for i, row in enumerate(_items(data, "rows", at + ".")))
        first_wrong = None if data.get("first_wrong") is None else _count(data, "first_wrong", at + ".")
        if first_wrong is not None and first_wrong >= len(rows):
            raise _Malformed(f"{at}.first_wrong", f"is not one of the table's {len(rows)} rows")
        return cls(rows, first_wrong)


@dataclass(frozen=True)
class QuestionFeedback:
    """One question: its points and what was earned, each answer, the misconceptions seen, the sentence of an
    autograder error in it ("" when none) and its chain table (None when the question has none or it could not
    be drawn)."""

    id: str
    title: str
    points: float
    earned: float
    values: tuple[AnswerFeedback, ...]
    misconceptions: tuple[MisconceptionNote, ...]
    error: str = ""
    chain_table: ChainTable | None = None

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "id": self.id,
            "title": self.title,
            "points": self.points,
            "earned": self.earned,
            "values": [value.to_json() for value in self.values],
            "misconceptions": [note.to_json() for note in self.misconceptions],
        }
        if self.error:
            entry["error"] = self.error
        if self.chain_table is not None:
            entry["chain_table"] = self.chain_table.to_json()
        return entry

    @classmethod
    def read(cls, value: object, at: str) -> QuestionFeedback:
        data = _object(value, at)
        at += "."
        table = data.get("chain_table")
        return cls(
            _text(data, "id", at),
            _text(data, "title", at),
            _number(data, "points", at),
            _number(data, "earned", at),
            tuple(AnswerFeedback.read(v, f"{at}values[{i}]") for i, v in enumerate(_items(data, "values", at))),
            tuple(
                MisconceptionNote.read(m, f"{at}misconceptions[{i}]")
                for i, m in enumerate(_items(data, "misconceptions", at))
            ),
            _text(data, "error", at, ""),
            None if table is None else ChainTable.read(table, f"{at}chain_table"),
        )


@dataclass(frozen=True)
class CellError:
    """An error the notebook reported: the cell's label, the error's text (the student's, bounded) and a hint
    naming the limit it looks like ("" when none)."""

    cell: str
    error: str
    hint: str = ""

    def to_json(self) -> dict[str, Any]:
        entry = {"cell": self.cell, "error": self.error}
        if self.hint:
            entry["hint"] = self.hint
        return entry

    @classmethod
    def read(cls, value: object, at: str) -> CellError:
        data = _object(value, at)
        at += "."
        return cls(_text(data, "cell", at), _text(data, "error", at), _text(data, "hint", at, ""))


@dataclass(frozen=True)
class Feedback:
    """The complete feedback of one submission (what feedback.json holds).

    `cell_errors_left_out`: how many of the notebook's errors past the first few were not kept (0: none, and
    absent from the JSON). `raw_score` and `late_penalty` are set once the late policy is applied (None before,
    and absent from the JSON): `score` is then raw_score less the penalty."""

    student_id: str
    assignment: str
    status: Status
    score: float
    max_score: float
    messages: tuple[str, ...]
    cell_errors: tuple[CellError, ...]
    reveals_torch_values: bool
    questions: tuple[QuestionFeedback, ...]
    cell_errors_left_out: int = 0
    raw_score: float | None = None
    late_penalty: float | None = None

    @property
    def before_penalty(self) -> float:
        """The score before the late policy (the score itself when it was not applied)."""
        return self.score if self.raw_score is None else self.raw_score

    @property
    def penalty(self) -> float:
        """The late penalty taken off (0 when none was, or the policy was not applied)."""
        return self.late_penalty or 0.0

    def question(self, question_id: str) -> QuestionFeedback | None:
        return next((q for q in self.questions if q.id == question_id), None)

    def earned_by_question(self) -> dict[str, float]:
        """{question id: points earned}, in the assignment's order."""
        return {q.id: q.earned for q in self.questions}

    def misconception_ids(self) -> set[str]:
        return {note.id for q in self.questions for note in q.misconceptions}

    def with_late_policy(self, penalty: float, explanation: str) -> Feedback:
        """The document once the late policy is applied: the raw score kept, the penalty taken off, and the
        policy's sentence (if any) after the other messages."""
        messages = (*self.messages, explanation) if explanation else self.messages
        return replace(
            self, messages=messages, raw_score=self.score, late_penalty=penalty, score=round(self.score - penalty, 6)
        )

    def to_json(self) -> dict[str, Any]:
        """Plain data in the order feedback.json has always had its keys."""
        data: dict[str, Any] = {
            "student_id": self.student_id,
            "assignment": self.assignment,
            "status": self.status,
            "score": self.score,
            "max_score": self.max_score,
            "messages": list(self.messages),
            "cell_errors": [error.to_json() for error in self.cell_errors],
        }
        if self.cell_errors_left_out:
            data["cell_errors_left_out"] = self.cell_errors_left_out
        data["reveals_torch_values"] = self.reveals_torch_values
        data["questions"] = [question.to_json() for question in self.questions]
        if self.raw_score is not None:
            data["raw_score"] = self.raw_score
        if self.late_penalty is not None:
            data["late_penalty"] = self.late_penalty
        return data

    @classmethod
    def from_json(cls, value: object, where: str = "feedback", then: str = READ_AGAIN) -> Feedback:
        """A feedback document read back as input. Anything grading could not have written is a FeedbackError
        naming `where` (the file, the shard's field, the database row), the field and what to do (`then`).
        Keys written by later versions are ignored; those added since the first release have their defaults
        (older files have no `reveals_torch_values`: they showed torch's values)."""
        try:
            return cls._read(value)
        except _Malformed as problem:
            at = f"`{problem.at}` " if problem.at else ""
            raise FeedbackError(
                f"{where}: {at}{problem.what}, not a feedback document grading writes; {then}", problem.at, problem.what
            ) from None

    @classmethod
    def _read(cls, value: object) -> Feedback:
        data = _object(value, "")
        student_id, assignment = _text(data, "student_id", ""), _text(data, "assignment", "")
        try:
            status = Status.read(data.get("status"))
        except ValueError:
            status = None
        if status not in GRADING_GIVES:  # `missing` is a grades row's: no submission's feedback says it
            raise _Malformed(
                "status", "is missing" if "status" not in data else f"is not one of {', '.join(GRADING_GIVES)}"
            )
        return cls(
            student_id,
            assignment,
            status,
            _number(data, "score", ""),
            _number(data, "max_score", ""),
            tuple(_sentence(m, f"messages[{i}]") for i, m in enumerate(_items(data, "messages", ""))),
            tuple(CellError.read(e, f"cell_errors[{i}]") for i, e in enumerate(_items(data, "cell_errors", ""))),
            _flag(data, "reveals_torch_values", "", True),
            tuple(QuestionFeedback.read(q, f"questions[{i}]") for i, q in enumerate(_items(data, "questions", ""))),
            _count(data, "cell_errors_left_out", "", 0),
            _number_or_none(data, "raw_score", ""),
            _number_or_none(data, "late_penalty", ""),
        )
