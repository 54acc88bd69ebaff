"""What an author should see before students do: hidden tests that raise, and answers a common slip would pass.

`review(assignment, tolerance)` runs every question's hidden tests in this process, as the judge does
(course/pipeline/judge.py), at the numbers cell's numbers, with the answer key of the source's solution cells
(evaluated with torch, math and P only: a key that needs more is simply not known here), and reads torch's
reference values back. It says:

- errors: a hidden test that raises, by its cell, its line of the hidden tests and the exception (the release proof
  would give the question 0 and, before this, said no more than "earn 0 of 4"); a number the Markdown shows (a
  placeholder, the prose, a table) that is not the number graded, within the tolerance (course/authoring/shown.py:
  a student who works from `b = 6.88137` while the tests use 6.881373587019543 loses the mark);
- warnings: a reference value that is not exact in float32 (a student who checks with torch's default dtype sees
  another number, beyond the tolerance for large values); a reference within the grading tolerance of a sign slip
  (|2v| <= tolerance: a zero answer) or of a dropped factor among the question's numbers (v·k or v/k within the
  tolerance of v), so that the slip would pass.

`kit write` prints both (and fails on an error); `release` prints the warnings, which never block it (the proof
under nbgrader autograde is what refuses a release whose hidden tests raise; release.py refuses one whose shown
numbers are not those graded, in the release and in every personalised copy).
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from dataclasses import dataclass
from typing import Any

from course.authoring.ranges import float32
from course.core.answers import MISSING, VALUE, Answer
from course.core.text import safe_text
from course.forms import matches
from course.pipeline.assignment import (
    HIDDEN_BEGIN,
    HIDDEN_END,
    SOLUTION_BEGIN,
    SOLUTION_END,
    Assignment,
    Question,
    cell_text,
    nbgrader_meta,
    region_lines,
)

KIT_MARK = "# Written by the authoring kit from "  # the first line of a kit-written hidden region (kit.WRITTEN_BY)
P_KEY = re.compile(r"""P\[\s*["']([^"']+)["']\s*\]""")  # a number of P as a cell reads it: P["gate_x"]
MAX_SHOWN = 4  # answers named in one float32 warning


@dataclass(frozen=True)
class Review:
    """What the author should see: errors (a hidden test raises) and warnings (a slip would pass, float32)."""

    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def answer_key(assignment: Assignment) -> dict[str, Answer]:
    """The source's answer key as the judge reads answers: each solution region run with torch, math and P (the
    numbers cell's numbers) and the names the regions before it bound; a value that is not plain, or a key that
    raises, leaves its answer missing (its hidden tests are then not blamed for what they raise)."""
    import builtins

    import torch

    from course.pipeline.judge import to_plain

    cells = json.loads(assignment.notebook_path.read_text(encoding="utf-8"))["cells"]
    by_id = {nbgrader_meta(cell).get("grade_id"): cell for cell in cells}
    namespace: dict[str, Any] = {"__builtins__": builtins, "torch": torch, "math": math, "P": assignment.default_params}
    answers: dict[str, Answer] = {}
    for question in assignment.questions:
        key = textwrap.dedent(
            "\n".join(region_lines(cell_text(by_id[question.answer_cell_id]), SOLUTION_BEGIN, SOLUTION_END))
        )
        try:
            exec(compile(key, f"<answer key of {question.answer_cell_id}>", "exec"), namespace)  # noqa: S102 - the instructor's own
        except Exception:  # noqa: S110 - a key that needs the notebook's own cells: what it bound so far is kept
            pass
        for name in question.answer_names:
            try:
                answers[name] = Answer(VALUE, to_plain(namespace[name])) if name in namespace else Answer(MISSING)
            except TypeError:
                answers[name] = Answer(MISSING)
        answers.update({name: Answer(MISSING) for name in question.function_names})
    return answers


def float64_exercises(assignment: Assignment) -> frozenset[str]:
    """The kit exercises of the assignment that say their answers need float64 (Exercise(float64=True))."""
    from course.authoring.kit import load_exercises

    path = assignment.content.path
    if path is None or not path.is_file() or "EXERCISES" not in path.read_text(encoding="utf-8"):
        return frozenset()
    return frozenset(exercise.id for exercise in load_exercises(path) if getattr(exercise, "float64", False))


def review(assignment: Assignment, tolerance: float, *, float64: frozenset[str] = frozenset()) -> Review:
    """The assignment's hidden tests run at its own numbers with its answer key: errors and warnings, each a sentence
    with the file, the question (or the kit's exercise), the answer and what to change. `float64`: the questions
    whose answers need float64 by design (float64_exercises), not warned of for float32."""
    from course.pipeline.hidden_tests import reads_no_answer
    from course.pipeline.judge import judge

    answers = answer_key(assignment)
    results = judge(assignment, answers, tolerance=tolerance)
    errors: list[str] = []
    warnings: list[str] = []
    for question, result in zip(assignment.questions, results, strict=True):
        at = _where(assignment, question)
        if result.error is not None:
            region = "\n".join(region_lines(question.test_source, HIDDEN_BEGIN, HIDDEN_END))
            known = all(answers[name].status == VALUE for name in question.answer_names)
            if known or reads_no_answer(region, frozenset(assignment.answer_names)):
                errors.append(
                    f"{at}: its hidden tests ({question.test_cell_id}) raise "
                    f"{safe_text(_with_line(result.error, region), 1500, one_line=True)}; fix them (the release "
                    "proof would give the question 0)"
                )
            continue
        numbers = _numbers_of(question, assignment.default_params)
        inexact: list[tuple[str, float]] = []
        for value in result.values:
            items = _items(value.expected)
            if value.function or not items:
                continue
            off = [item for item in items if float32(item) != item]
            if off:
                inexact.append((value.name, off[0]))
            warnings += _slips(at, value.name, value.expected, numbers, tolerance, kit=KIT_MARK in question.test_source)
        if inexact and question.id not in float64:
            warnings.append(_float32_warning(at, inexact, tolerance))
    errors += shown_numbers(assignment, tolerance)
    return Review(tuple(errors), tuple(warnings))


def shown_numbers(assignment: Assignment, tolerance: float) -> list[str]:
    """The numbers the notebook's Markdown shows (placeholders, prose, tables) that are not, within the tolerance,
    the numbers its hidden tests grade with (course/authoring/shown.py): one sentence each."""
    from course.authoring.shown import shown_problems

    cells = json.loads(assignment.notebook_path.read_text(encoding="utf-8"))["cells"]
    return shown_problems(
        cells,
        assignment.questions,
        assignment.default_params,
        tolerance,
        notebook=assignment.notebook_path,
        exercises=assignment.content.path,
    )


HIDDEN_LINE = re.compile(r"\(line (\d+) of the hidden tests\)$")


def _with_line(error: str, region: str) -> str:
    """The judge's "... (line N of the hidden tests)" with that line's code."""
    found = HIDDEN_LINE.search(error)
    lines = region.splitlines()
    if found is None or not 1 <= int(found.group(1)) <= len(lines):
        return error
    number = int(found.group(1))
    return f"{error[: found.start()]}(line {number} of the hidden tests: `{lines[number - 1].strip()}`)"


def _where(assignment: Assignment, question: Question) -> str:
    """`<exercises.py>: exercise '<id>'` for a question the kit wrote, else `<notebook>: question '<title>'`."""
    if KIT_MARK in question.test_source and assignment.content.path is not None:
        return f"{assignment.content.path}: exercise {question.id!r}"
    return f"{assignment.notebook_path}: question {question.title!r}"


def _numbers_of(question: Question, params: dict[str, Any]) -> dict[str, float]:
    """The numbers of P the question's test cell reads (its hidden tests build the exercise from them)."""
    return {
        key: params[key]
        for key in dict.fromkeys(P_KEY.findall(question.test_source))
        if key in params and type(params[key]) in (int, float)
    }


def _items(value: Any) -> list[float]:
    if type(value) is list:
        return [item for inner in value for item in _items(inner)]
    return [value] if type(value) in (int, float) and math.isfinite(value) else []


def _scaled(value: Any, factor: float) -> Any:
    return [_scaled(item, factor) for item in value] if type(value) is list else value * factor


def _show(value: Any) -> str:
    if type(value) is list:
        return "[" + ", ".join(_show(item) for item in value) + "]"
    return f"{value:.10g}" if type(value) is float else repr(value)


def _slips(at: str, name: str, expected: Any, numbers: dict[str, float], tolerance: float, *, kit: bool) -> list[str]:
    """A sign slip, or a dropped factor among the question's numbers, whose result the tolerance would accept."""
    if matches(_scaled(expected, -1), expected, tolerance):
        return [
            f"{at}: answer {name} = {_show(expected)}: a sign slip (-{name}) would pass, being within the tolerance "
            f"{tolerance:g} of torch's value; change the numbers so that {name} is clearly not 0"
            + (" (and require=[NoZero()] keeps every variant so)" if kit else "")
        ]
    for key, factor in numbers.items():
        if factor == 0 or abs(factor) == 1:
            continue  # dropping a factor of ±1 is no slip, and of 0 no division
        for slipped, how in ((_scaled(expected, factor), "times"), (_scaled(expected, 1 / factor), "divided by")):
            if matches(slipped, expected, tolerance):
                return [
                    f"{at}: answer {name} = {_show(expected)}: the answer {how} {key} = {factor:g} (a factor dropped "
                    f"or doubled) would pass, being within the tolerance {tolerance:g} of torch's value; change the "
                    f"numbers so that {name} is further from 0 than the tolerance allows"
                ]
    return []


def _float32_warning(at: str, inexact: list[tuple[str, float]], tolerance: float) -> str:
    beyond = [(name, item) for name, item in inexact if abs(float32(item) - item) > tolerance]
    name, item = (beyond or inexact)[0]
    names = ", ".join(n for n, _ in inexact[:MAX_SHOWN]) + (
        f" and {len(inexact) - MAX_SHOWN} more" if len(inexact) > MAX_SHOWN else ""
    )
    verdict = (
        f"beyond the tolerance {tolerance:g} for {', '.join(n for n, _ in beyond)}: a student who computes or checks "
        "with torch's default float32 would be marked wrong"
        if beyond
        else f"within the tolerance {tolerance:g}, yet not the number the grader shows"
    )
    return (
        f"{at}: torch's values of {names} are not exact in float32 ({name} = {item!r} is {float32(item)!r} in "
        f"float32, {verdict}); pick numbers whose values are exact, or say in the question that answers need "
        "float64 (dtype=torch.float64) or enough decimals (a kit exercise: then Exercise(float64=True))"
    )
