"""Scores -> feedback a student learns from: per value explanations, chain tables, misconceptions.

`build_feedback` makes one `course.pipeline.feedback_model.Feedback`: the model that `course.pipeline.render` shows as
an HTML page
and as Gradescope's Markdown, and whose `to_json` is feedback.json.
"""

from __future__ import annotations

import builtins

from course.core.answers import VALUE, describe, is_number
from course.core.config import CourseConfig, Limits
from course.core.status import Status
from course.pipeline.content import NO_CONTENT, ChainStep, Content
from course.pipeline.feedback_model import (
    AnswerFeedback,
    CellError,
    ChainRow,
    ChainTable,
    Feedback,
    MisconceptionNote,
    ProbeFeedback,
    QuestionFeedback,
)
from course.pipeline.judge import ProbeCheck, QuestionResult, ValueResult
from course.pipeline.misconceptions import Diagnosis, diagnose
from course.sandbox import RunResult
from course.sandbox.limits import PTYS


def _shown(result: ValueResult | None) -> str:
    if result is None:
        return "—"
    if result.status == VALUE:
        return describe(result.student)
    return result.detail or result.status


NOT_ASKED = "not asked"  # a chain table's gradient that no answer holds: the student works it out on the way


def _local_value(values: dict[str, ValueResult], step: ChainStep) -> str:
    """torch's local derivative at this node: the graph's own where the step was read from it, else the
    gradient leaving it over the gradient arriving."""
    if step.torch_local is not None:
        return describe(step.torch_local)
    leaving = values[step.gradient].expected if step.gradient in values else None
    arriving = values[step.upstream].expected if step.upstream in values else 1.0
    if not (is_number(leaving) and is_number(arriving)) or arriving == 0:
        return "—"
    return describe(leaving / arriving)


def chain_table(steps: tuple[ChainStep, ...], values: dict[str, ValueResult], reveal: bool) -> ChainTable | None:
    """The backward walk node by node; torch's numbers (forward, local derivative, gradient) only if `reveal`."""
    if not steps or not all(
        step.gradient in values if step.asked else step.torch_gradient is not None for step in steps
    ):
        return None
    rows, first_wrong = [], None
    for index, step in enumerate(steps):
        forward = values.get(step.forward) if step.forward else None
        gradient = values[step.gradient] if step.asked else None  # None: on the way, no answer holds it
        ok = (gradient is None or gradient.correct) and (forward is None or forward.correct)
        if not ok and first_wrong is None:
            first_wrong = index
        torch_gradient = step.torch_gradient if gradient is None else gradient.expected
        rows.append(
            ChainRow(
                node=step.node,
                local_derivative=step.local,
                torch_local_derivative=_local_value(values, step) if reveal else None,
                forward=step.forward,
                your_forward=_shown(forward) if forward else "—",
                torch_forward=(describe(forward.expected) if forward else "—") if reveal else None,
                gradient=step.gradient,
                your_gradient=NOT_ASKED if gradient is None else _shown(gradient),
                torch_gradient=describe(torch_gradient) if reveal else None,
                correct=ok,
                asked=gradient is not None,
            )
        )
    return ChainTable(tuple(rows), first_wrong)


def _value_entry(result: ValueResult, reveal: bool) -> AnswerFeedback:
    """One answer: the student's value, torch's (only if `reveal`), points and the reasoning: the hidden test's
    hint with torch's values, its idea without them. A hint may tell the answer ("ReLU of a negative number is
    0"), and a right answer's hint another's, so verdicts-only feedback shows no hint at all."""
    torch_value = "torch's slope at each point" if result.function else describe(result.expected)
    detail = result.detail
    if detail:
        wrong = [p for p in result.probes if not p.correct]
        if wrong:
            detail += ": " + wrong_points(wrong, reveal)
    return AnswerFeedback(
        name=result.name,
        your_value=_shown(result) if result.status == VALUE else None,
        torch_value=torch_value if reveal else None,
        status=result.status,
        correct=result.correct,
        points=result.points,
        earned=result.earned,
        explanation=" ".join(
            part
            for part in ("Matches torch." if result.correct else "", result.hint if reveal else result.idea)
            if part
        ),
        detail=detail,
        hand_work_note=(
            "This value was computed with torch in your code rather than written down from your own derivation."
        )
        if result.hand_work_note
        else "",
        probes=tuple(
            ProbeFeedback(
                p.x, p.error or describe(p.student), describe(p.expected) if reveal else None, p.correct, p.private
            )
            for p in result.probes
        ),
    )


MAX_STATED_POINTS = 3  # the points a function was wrong at, stated one by one; past these, how many more


def wrong_points(wrong: list[ProbeCheck], reveal: bool) -> str:
    """Where a function answer was wrong, point by point (the exercise's own point, zero and the plausible halves
    first): x, what it gave, and torch's value when the feedback shows torch's values. A point drawn for the student
    (course/pipeline/probes.py) is never named, nor what the function or torch gave there (either would tell it),
    whatever the feedback shows: only its sign and how the call failed, in words of ours
    (`failure_in_words`), so that no feedback, resubmission or classmate collects the points for a table
    (SECURITY.md, "The same notebook always earns the same score")."""
    said = []
    for probe in wrong[:MAX_STATED_POINTS]:
        if probe.private:
            sign = "negative" if probe.x < 0 else "positive"
            said.append(f"at a {sign} x drawn for you, yours {failure_in_words(probe.error)}")
            continue
        yours = f"yours {probe.error}" if probe.error else f"yours gave {describe(probe.student)}"
        if reveal:
            said.append(f"at x = {describe(probe.x)} {yours}, torch's slope is {describe(probe.expected)}")
        else:
            said.append(f"at x = {describe(probe.x)} {yours}")
    more = len(wrong) - len(said)
    return "; ".join(said) + (f"; and at {more} more" if more else "")


_BUILTIN_ERRORS = frozenset(
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
)


def failure_in_words(error: str) -> str:
    """How a call at a drawn point failed, in a closed set of our words: the sandbox's text names the type the
    student's code raised or returned, and a type's name is the student's to choose (`type(f"E{x}", ...)`), so
    only a builtin exception's name is kept."""
    if not error:
        return "disagrees with torch's slope"
    if error.startswith("raised "):
        name = error.removeprefix("raised ")
        return f"raised {name}" if name in _BUILTIN_ERRORS else "raised an exception of a class of its own"
    if error.startswith("did not return within "):
        return "did not return in time"
    if error.startswith("returned `...`"):
        return "returned `...` (replace `return ...` with your derivative)"
    return "returned something that is not a plain number"


def question_entry(
    question: QuestionResult, diagnoses: list[Diagnosis], reveal: bool = True, chain: tuple[ChainStep, ...] = ()
) -> QuestionFeedback:
    values = {value.name: value for value in question.values}
    return QuestionFeedback(
        id=question.id,
        title=question.title,
        points=question.points,
        earned=question.earned,
        values=tuple(_value_entry(v, reveal) for v in question.values),
        misconceptions=tuple(MisconceptionNote(d.id, d.value, d.message, d.idea, d.from_numbers) for d in diagnoses),
        error=(
            "The autograder could not score this question (a problem on our side, not in your notebook). Your "
            "instructor has been told; you do not need to do anything."
        )
        if question.error
        else "",
        chain_table=chain_table(chain, values, reveal),
    )


# A feedback document's size is bounded where it is made, so every view (the page, Gradescope's Markdown, the
# service's database) holds the same bounded model: a notebook of 2000 raising cells made 1 MB of feedback,
# parsed again at every reload of the student's page. Each error's text is already bounded (MAX_ERROR_TEXT);
# past the first MAX_CELL_ERRORS only their number is kept (`cell_errors_left_out`, absent when none was).
MAX_CELL_ERRORS = 20
MAX_SYNTAX_ERRORS = 5  # a message each at the top of the feedback (course/pipeline/grading.py), then how many more


def build_feedback(
    student_id: str,
    assignment_name: str,
    questions: tuple[QuestionResult, ...],
    *,
    status: Status,
    messages: list[str],
    cell_errors: list[CellError],
    reveal_torch_values: bool = True,
    content: Content = NO_CONTENT,
) -> Feedback:
    """The complete feedback of one submission (`Feedback.to_json` is what feedback.json holds), with the chain
    tables and misconception notes of the assignment's `content`. Without `reveal_torch_values` it holds no torch
    value at all: verdicts, chain-table verdicts and notes only. The notes are kept whole either way (the class
    summary counts them); what a student is shown of them is `course.pipeline.render.notes_shown`'s to decide. Of
    `cell_errors`, the first MAX_CELL_ERRORS are kept, and how many more there were."""
    diagnoses = diagnose(questions, content.rules)
    return Feedback(
        student_id=student_id,
        assignment=assignment_name,
        status=status,
        score=round(sum(q.earned for q in questions), 6),
        max_score=sum(q.points for q in questions),
        messages=tuple(messages),
        cell_errors=tuple(cell_errors[:MAX_CELL_ERRORS]),
        cell_errors_left_out=max(0, len(cell_errors) - MAX_CELL_ERRORS),
        reveals_torch_values=reveal_torch_values,
        questions=tuple(
            question_entry(q, diagnoses.get(q.id, []), reveal_torch_values, content.chains.get(q.id, ()))
            for q in questions
        ),
    )


# ----------------------------------------------------------------------------- what a run's limits say

# What a limit looks like in an error the notebook reported, and how the feedback names it. The error
# text comes from the student's process, so this is only a hint shown beside that error, in the section of
# the notebook's own errors: never a statement in the grader's voice.
LIMIT_SIGNS = (
    (
        ("MemoryError", "can't allocate memory", "Cannot allocate memory"),
        "This looks like the memory limit ({memory_mb} MB).",
    ),
    (
        ("Resource temporarily unavailable", "BlockingIOError"),
        "This looks like the limit on processes and threads ({processes}).",
    ),
    (("File too large",), "This looks like the limit on the size of a file ({file_size_mb} MB)."),
    (
        ("No space left on device",),
        "This looks like the limit on scratch space ({tmp_mb} MB) or, if it came from "
        "opening a pseudo-terminal, on pseudo-terminals ({ptys}).",
    ),
    (("Too many open files",), "This looks like the limit on open files ({open_files})."),
)


def limit_hint(error: str, limits: Limits) -> str:
    """The hint for one reported error ("" when it names no limit)."""
    return " ".join(
        template.format(**vars(limits), ptys=PTYS)
        for signs, template in LIMIT_SIGNS
        if any(sign in error for sign in signs)
    )


def cell_errors_of(run: RunResult, limits: Limits) -> list[CellError]:
    """The errors the notebook reported, each labelled with its cell and, where it fits, a limit hint."""
    return [CellError(cell.label, cell.error, limit_hint(cell.error, limits)) for cell in run.cells if cell.error]


def limit_messages(run: RunResult, config: CourseConfig) -> list[str]:
    """The limits the grader saw hit itself (time limits are told by `ended_early`)."""
    messages = []
    if run.limit_hit == "output_kb":
        messages.append(f"Your notebook printed more than {config.limits.output_kb} KB; the rest was discarded.")
    if run.limit_hit == "cpu_seconds":
        messages.append(
            f"The notebook used more CPU time than allowed ({config.limits.submission_seconds:g} s "
            "in all), so the system stopped it."
        )
    return messages
