"""Grading one submission: notebook -> submission (read) -> sandbox (run student code) -> plain answers
-> judge (trusted) -> feedback. No stage reaches back into an earlier one; `course.term.batch` runs a class.
"""

from __future__ import annotations

import gc
import importlib
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import Any

from course import sandbox
from course.core.answers import MISSING, STILL_RELEASED, Answer
from course.core.config import CourseConfig
from course.core.errors import NotThisAssignment, NumbersLabelError, SubmissionError, UnreadableSubmission
from course.core.status import Status
from course.pipeline import handwork, integrity, tables
from course.pipeline.assignment import Assignment
from course.pipeline.discovery import SubmissionRef
from course.pipeline.feedback import MAX_SYNTAX_ERRORS, build_feedback, cell_errors_of, limit_messages
from course.pipeline.feedback_model import CellError, Feedback
from course.pipeline.graph_chain import with_derived_chains
from course.pipeline.judge import QuestionResult, judge
from course.pipeline.numbers_label import submission_numbers
from course.pipeline.probes import ProbePoints, course_probe_points, work_digest
from course.pipeline.submission import (
    Submission,
    other_assignment,
    other_assignment_text,
    read_regular_file,
    read_submission,
    student_id_problem,
)
from course.pipeline.variants import numbers_for


@dataclass(frozen=True)
class Graded:
    student_id: str
    status: Status
    questions: tuple[QuestionResult, ...]
    feedback: Feedback
    seconds: float
    internal_error: str = ""
    sandbox: str = ""  # the isolation level the notebook ran under ("" when it did not run)
    late_penalty: float = 0.0
    submitted: datetime | None = None
    integrity: tuple[str, ...] = ()  # for the instructor's class summary only, never the feedback


_frozen_start_up = False
_start_up = threading.Lock()


def warm_imports(*later: str) -> None:
    """Import what the judge needs (torch), then the modules named in `later`, ahead of their first use: a batch
    calls this in a thread of its own while the sandbox's workers start. torch comes first: the self-test's judge
    waits for it, and a second import beside it (they share one interpreter lock) would only slow it.

    The first time in a process, the imports run without the cyclic collector, and what they made is then frozen
    (gc.freeze): the collector would rescan the import's objects as they grow, and afterwards every full
    collection of the batch would walk them again, ~2 s of a 400-student batch's CPU (docs/performance.md). They
    are modules and their functions, which live as long as the process."""
    global _frozen_start_up
    with _start_up:
        first, collecting = not _frozen_start_up, gc.isenabled()
        if first:
            gc.disable()
        try:
            for name in ("torch", *later):
                importlib.import_module(name)
        finally:
            if first:
                gc.freeze()
                if collecting:
                    gc.enable()
                _frozen_start_up = True


def cold_runner(config: CourseConfig) -> sandbox.Runner:
    """The course's runner without warm workers: a fresh sandboxed interpreter per submission, at its isolation."""
    return partial(sandbox.run_cells, isolation=config.sandbox, uid=config.sandbox_uid)


def _zero(assignment: Assignment, answers_reason: str, config: CourseConfig) -> tuple[QuestionResult, ...]:
    names = assignment.answer_names + assignment.function_names
    answers = {name: Answer(MISSING, detail=answers_reason) for name in names}
    return judge(assignment, answers, tolerance=config.tolerance)


def _status_of(run: sandbox.RunResult) -> Status:
    return Status.TIMED_OUT if run.limit_hit in ("cell_seconds", "submission_seconds") else Status.GRADED


OUR_ERROR_TEXT = (
    "The autograder hit an error of its own while grading this notebook (not your fault). "
    "Your instructor can see the details; you do not need to resubmit."
)


INCOMPLETE_CHECK_TEXT = (
    "The hand-work check could not read all of this notebook's code (more of it than the check reads, or syntax "
    "nested deeper than Python's parser goes), so only part of it was checked for answers computed with torch; "
    "your answers were graded all the same."
)
DAMAGED_SHOWN = 3  # cells with a damaged grade_id named in the feedback; the rest are counted


def _damaged_metadata_messages(submission: Submission) -> list[str]:
    """What a grade_id that is no nbgrader id did: the cell ran as the student's own code (cell_metadata.py)."""
    damaged = submission.damaged_metadata
    if not damaged:
        return []
    named = "; ".join(damaged[:DAMAGED_SHOWN]) + (
        f"; and {len(damaged) - DAMAGED_SHOWN} more" if len(damaged) > DAMAGED_SHOWN else ""
    )
    return [
        f"Some cells' nbgrader metadata is not nbgrader's ({named}), so each ran as your own code, not as "
        "the course's cell it may have been (an answer cell among them counts as deleted). Start again from "
        "the released notebook and copy your answers in if that is not what you meant."
    ]


def numbers_messages(
    submission: Submission, student_id: str, params: dict[str, Any], assignment: Assignment, config: CourseConfig
) -> list[str]:
    """With variants, the sentence naming a notebook that does not carry the student's own numbers: the default
    ones (the release everyone was given) or another student's. The policy is fixed (docs/grading.md, "Whose
    numbers"): a notebook is always graded with the numbers of the id it is graded under, whatever numbers it
    shows, so the same notebook always earns the same score and a shared default notebook's answers earn nothing
    they should not; the sentence says why the score is low, first in the feedback."""
    if not config.variants or not params:
        return []
    claim = submission.personalised_for
    if claim is not None and claim != student_id:
        # The claimed id is the notebook's text: quoted, short and only ever a student id.
        claimed = claim if not student_id_problem(claim) else "?"
        return [
            f"This notebook was personalised for {claimed!r} but is graded as {student_id!r}, so it was "
            f"graded with {student_id!r}'s numbers: answers worked out from another student's numbers will not "
            "match. If this is your own work, submit the notebook released for you."
        ]
    if submission.default_numbers and params != assignment.default_params:
        return [
            f"This notebook has the default numbers, the same in everyone's copy, not yours: every notebook of "
            f"this course is graded with its student's own numbers, so it was graded with {student_id!r}'s, and "
            "answers worked out from the default numbers will not match. Get the notebook released for you "
            "(your instructor says where: the submission service's page, or the copy handed out to you), work "
            "your answers with its numbers, and submit that one."
        ]
    return []


def nothing_answered_text(assignment: Assignment) -> str:
    fetched = f"{assignment.name}/{assignment.notebook_path.name}"
    return (
        "Nothing in this notebook is answered: every answer is still as released. If you worked in another "
        f"copy, submit that one: nbgrader's fetch puts it in {fetched} in the folder you fetched in."
    )


def nothing_answered(answers: dict[str, Answer]) -> bool:
    """Every answer still `...` as released (and none deleted, renamed or broken): the untouched notebook."""
    return bool(answers) and all(a.status == MISSING and a.detail in STILL_RELEASED for a in answers.values())


def grade_submission(
    ref: SubmissionRef,
    assignment: Assignment,
    config: CourseConfig,
    probe_points: dict[str, list[float]] | None = None,
    *,
    run: sandbox.Runner | None = None,
    reveal_torch_values: bool | None = None,
    params: dict[str, Any] | None = None,
    secret: bytes | None = None,
) -> Graded:
    """Grade one notebook. Never raises: every failure becomes a status, a reason and score 0.
    probe_points: where function answers are called (default: the student's, `probes.course_probe_points`, the same
    on every run: a test may name its own, none of them private).
    reveal_torch_values: whether the feedback shows torch's values (default: the course's setting for
    local grading). params: the numbers to grade with (default: those the submission was issued,
    `numbers_label.submission_numbers`: the student's own, or those of the service's attempt the term's recording
    put there; the submission service passes its attempt's own). secret: the course secret as the run's context read
    it once (run_context.py; None: read where it is needed, when the course has one)."""
    started = time.monotonic()
    so_far = _SoFar()
    status, questions = _grade_or_fail(ref, assignment, config, probe_points, run, params, secret, so_far)
    if reveal_torch_values is None:
        reveal_torch_values = config.reveals_torch_values(gradescope=False)
    feedback = build_feedback(
        ref.student_id,
        assignment.name,
        questions,
        status=status,
        messages=so_far.messages,
        cell_errors=so_far.cell_errors,
        reveal_torch_values=reveal_torch_values,
        content=with_derived_chains(assignment.content, so_far.params),
    )
    return Graded(
        ref.student_id,
        status,
        questions,
        feedback,
        time.monotonic() - started,
        so_far.internal_error,
        sandbox=so_far.level,
        integrity=so_far.findings,
    )


def _grade_or_fail(
    ref: SubmissionRef,
    assignment: Assignment,
    config: CourseConfig,
    probe_points: dict[str, list[float]] | None,
    run: sandbox.Runner | None,
    params: dict[str, Any] | None,
    secret: bytes | None,
    so_far: _SoFar,
) -> tuple[Status, tuple[QuestionResult, ...]]:
    """`_grade`'s status and questions, or, when it raises, the failure's status, zeros and messages in `so_far`."""
    try:
        return _grade(ref, assignment, config, probe_points, run, params, secret, so_far)
    except UnreadableSubmission as problem:
        # The file is there but this grader cannot read it (permissions, a link, ...): the grader's set-up, so its
        # error, never the student's 0.
        zeros = _zero(assignment, "autograder error", config)
        so_far.internal_error = (
            f"the submitted file {ref.path} could not be read by the grader: {problem}. Make it "
            "a regular file the grader may read, and grade again"
        )
        so_far.messages.append(OUR_ERROR_TEXT)
        return Status.AUTOGRADER_ERROR, zeros
    except NumbersLabelError as problem:
        # The label that says whose numbers the notebook was issued is not the recording's: no grade with other
        # numbers, and no 0 of the student's (the label is ours, or one we cannot trust): the instructor is told.
        so_far.internal_error = str(problem)
        so_far.messages.append(OUR_ERROR_TEXT)
        return Status.AUTOGRADER_ERROR, _zero(assignment, "autograder error", config)
    except SubmissionError as problem:
        zeros = _zero(assignment, "the notebook could not be read", config)
        # Another assignment's notebook is named as that one's, not as this assignment's file.
        other = (
            other_assignment(config, assignment.name, problem.answer_ids)
            if isinstance(problem, NotThisAssignment)
            else ""
        )
        said = other_assignment_text(other, assignment) if other else str(problem)
        so_far.messages.append(f"Your submission could not be graded: {said}")
        return Status.FAILED, zeros
    except Exception:
        zeros = _zero(assignment, "autograder error", config)
        so_far.internal_error = traceback.format_exc()
        so_far.messages.append(OUR_ERROR_TEXT)
        return Status.AUTOGRADER_ERROR, zeros


@dataclass
class _SoFar:
    """What grading one notebook has learnt so far: kept when a later step fails (the run's level, the integrity
    findings), and the messages and cell errors of its feedback."""

    messages: list[str] = field(default_factory=list)
    cell_errors: list[CellError] = field(default_factory=list)
    internal_error: str = ""
    level: str = ""
    findings: tuple[str, ...] = ()
    params: dict[str, Any] | None = (
        None  # the numbers graded with, once known (the chain tables read from graphs use them)
    )


def _grade(
    ref: SubmissionRef,
    assignment: Assignment,
    config: CourseConfig,
    probe_points: dict[str, list[float]] | None,
    run: sandbox.Runner | None,
    params: dict[str, Any] | None,
    secret: bytes | None,
    so_far: _SoFar,
) -> tuple[Status, tuple[QuestionResult, ...]]:
    """Read the notebook, run it in the sandbox, judge its answers: the status and the questions' results. Raises
    for grade_submission to turn into a status: SubmissionError (the student's), anything else (ours)."""
    if ref.problem:
        raise SubmissionError(ref.problem)
    if params is None:
        ref, params = _issued_numbers(ref, assignment, config, secret)
    so_far.params = params
    submission = _read(ref, assignment, config, params)
    parsed = handwork.parse_cells(submission.cells)  # once, bounded: for hand work and the integrity report
    whose = numbers_messages(submission, ref.student_id, params, assignment, config)
    so_far.findings = integrity.review(
        submission, ref.student_id, parsed, default_numbers=bool(whose) and submission.personalised_for is None
    )
    points = (
        ProbePoints(probe_points)
        if probe_points is not None
        else course_probe_points(
            config, assignment, params, ref.student_id, secret, work_digest(cell.source for cell in submission.cells)
        )
    )
    runner = run or cold_runner(config)
    ran = runner(
        list(submission.cells), assignment.answer_names + assignment.function_names, points.points, config.limits
    )
    so_far.level = ran.isolation
    answers = dict(ran.answers)
    for cell_id in submission.deleted_answer_cells:
        question = assignment.question_by_answer_cell(cell_id)
        for name in question.answer_names + question.function_names:
            answers[name] = Answer(MISSING, detail="its answer cell was deleted")
    hand_work = handwork.computed_answers(parsed, assignment.answer_names + assignment.function_names)
    deduction = config.hand_work_deduction if config.hand_work == "deduct" else 0.0
    questions = judge(
        assignment,
        answers,
        tolerance=config.tolerance,
        computed=hand_work.computed,
        deduction=deduction,
        params=params,
        private_points=points.private,
    )
    so_far.findings = _with_tables(so_far.findings, parsed, assignment, questions)
    status = _status_of(ran)
    _add_messages(so_far.messages, whose, parsed.syntax_errors, ran, submission, assignment, config, hand_work.complete)
    so_far.cell_errors = cell_errors_of(ran, config.limits)
    return status, questions


def _with_tables(
    findings: tuple[str, ...],
    parsed: handwork.ParsedCells,
    assignment: Assignment,
    questions: tuple[QuestionResult, ...],
) -> tuple[str, ...]:
    """The integrity findings with those of function answers that look like tables of torch's values (tables.py),
    within the report's bound."""
    more = tables.looked_up(parsed, assignment.function_names) + tables.answered_only_plausible(questions)
    return (*findings, *more)[: integrity.MAX_FINDINGS]


def _add_messages(
    messages: list[str],
    whose: list[str],
    syntax_errors: Sequence[str],
    ran: sandbox.RunResult,
    submission: Submission,
    assignment: Assignment,
    config: CourseConfig,
    hand_work_complete: bool,
) -> None:
    """The feedback's messages of a notebook that ran: what explains the whole score first, then how the run went."""
    # A syntax error first: every answer its cell sets is missing because of it, not because of the answers.
    # The first few (a feedback's size is bounded: feedback.MAX_CELL_ERRORS), then how many more.
    shown = syntax_errors[:MAX_SYNTAX_ERRORS]
    more = len(syntax_errors) - len(shown)
    # Whose numbers first, then an untouched notebook: each explains the whole score.
    untouched = nothing_answered(dict(ran.answers)) and not submission.deleted_answer_cells
    first = whose + ([nothing_answered_text(assignment)] if untouched else [])
    messages[:0] = (
        first
        + [
            f"{where[:1].upper()}{where[1:]} has a syntax error, so nothing in that cell ran and "
            "its answers are missing. Fix it first."
            for where in shown
        ]
        + (
            [f"… and {more:,} more {'cell has a syntax error' if more == 1 else 'cells have syntax errors'}."]
            if more
            else []
        )
    )
    if ran.ended_early:
        messages.append(
            f"Your notebook did not run to the end: {ran.ended_early}. Answers set before that point were graded."
        )
    messages += limit_messages(ran, config)
    if not hand_work_complete:
        messages.append(INCOMPLETE_CHECK_TEXT)
    messages += _damaged_metadata_messages(submission)


def _issued_numbers(
    ref: SubmissionRef, assignment: Assignment, config: CourseConfig, secret: bytes | None
) -> tuple[SubmissionRef, dict[str, Any]]:
    """The numbers the notebook was issued (`numbers_label.submission_numbers`: the label beside it says when they
    are those of a service attempt's own), and the ref with the notebook's bytes, read once (bounded, no link
    followed) to check the label against: the very bytes then graded. A notebook handed over in memory has no
    folder, so no label: the student's own numbers."""
    if ref.content is not None or not config.variants:
        return ref, numbers_for(config, assignment.content, ref.student_id, assignment.default_params, secret)
    ref = replace(ref, content=read_regular_file(ref.path, config.limits.notebook_mb * 1024 * 1024))
    return ref, submission_numbers(config, assignment, ref.student_id, ref.path.parent, ref.content, secret)


def _read(ref: SubmissionRef, assignment: Assignment, config: CourseConfig, params: dict[str, Any]) -> Submission:
    return read_submission(
        ref.path,
        ref.student_id,
        assignment,
        params=params,
        max_bytes=config.limits.notebook_mb * 1024 * 1024,
        max_cells=config.limits.max_cells,
        content=ref.content,
    )
