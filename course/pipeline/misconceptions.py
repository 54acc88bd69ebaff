"""Diagnosing misconceptions: wrong answers that betray a specific misunderstanding.

The catalogue of rules is each assignment's own (`MISCONCEPTIONS` in its exercises module, see
`course.pipeline.content`); the sign slip, the right size with the wrong sign, is the engine's and holds for any
exercise. Rules look only at plain values: the student's answers and torch's references from the judge.

A diagnosis has two parts: its `message` relates this student's answer to torch's ("the right size but the
wrong sign", "y.grad is None"), its `idea` names the concept the slip violates, in the same words for everyone.
Feedback that shows torch's values shows both; verdicts-only feedback shows only the idea, and nothing of a
diagnosis found from the numbers alone (`from_numbers`, the sign slip), whose being there tells the sign
(`course.pipeline.render.notes_shown`).
"""

from __future__ import annotations

from dataclasses import dataclass

from course.core.answers import is_number
from course.pipeline.content import Rule, student_equals
from course.pipeline.judge import QuestionResult, ValueResult


@dataclass(frozen=True)
class Diagnosis:
    id: str
    value: str
    message: str
    idea: str
    from_numbers: bool = False  # found from the values alone, naming no misunderstanding (the sign slip)


def _sign_slips(values: dict[str, ValueResult], already: set[str]) -> list[Diagnosis]:
    slips = []
    for name, result in values.items():
        expected = result.expected
        if name in already or not is_number(expected) or expected == 0:
            continue
        if student_equals(values, name, -expected):
            slips.append(
                Diagnosis(
                    "sign_slip",
                    name,
                    f"{name} has the right size but the wrong sign: check the sign of each local slope on the way "
                    "back.",
                    "A gradient's sign says which way the loss moves; each negative local slope flips it.",
                    from_numbers=True,
                )
            )
    return slips


def diagnose(questions: tuple[QuestionResult, ...], rules: tuple[Rule, ...]) -> dict[str, list[Diagnosis]]:
    """{question id: diagnoses} for every rule of the assignment's catalogue that matches this submission, and
    a sign slip wherever no rule spoke. A rule that fails on unusual values is skipped, never fatal."""
    values = {value.name: value for question in questions for value in question.values}
    owner = {value.name: question.id for question in questions for value in question.values}
    found: dict[str, list[Diagnosis]] = {}
    named: set[str] = set()
    for rule in rules:
        try:
            applies = rule.value in values and rule.applies(values)
        except (ArithmeticError, LookupError, TypeError, ValueError):
            applies = False
        if applies:
            found.setdefault(owner[rule.value], []).append(Diagnosis(rule.id, rule.value, rule.message, rule.idea))
            named.add(rule.value)
    for slip in _sign_slips(values, named):
        found.setdefault(owner[slip.value], []).append(slip)
    return found
