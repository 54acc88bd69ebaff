"""A command proves its own setup before it grades anyone.

`grade`, `serve` and `run_autograder` first grade two notebooks whose scores are known: the course's own
solution (the source notebook with its hidden tests removed, which the release proof showed earns full marks)
and the untouched release (0). They go through the very runner, isolation level and limits about to grade the
class, and the trusted judge. Unless they score full marks and 0, nothing is graded: `prove_setup` raises
SelfTestError, one message naming the level, the limits and the first difference. So a machine where the sandbox
cannot start, a limit too tight for torch, or a broken judge stops the command instead of grading a class 0.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from course import sandbox
from course.core.config import Limits
from course.core.errors import SandboxStartError, SelfTestError
from course.core.status import Status
from course.core.text import safe_text
from course.pipeline.assignment import (
    SOLUTION_BEGIN,
    SOLUTION_END,
    Assignment,
    cell_text,
    nbgrader_meta,
    strip_region,
)
from course.pipeline.discovery import SubmissionRef
from course.pipeline.grading import Graded, grade_submission
from course.pipeline.run_context import RunContext
from course.pipeline.selftest_proof import Proof, keep, proof_key, record_path, reusable

log = logging.getLogger(__name__)

SOLUTION, UNTOUCHED = "the course's solution", "the untouched release"


@dataclass(frozen=True)
class SelfTest:
    """What the self-test saw: each known notebook's score, and how long it took."""

    solution_score: float
    untouched_score: float
    max_score: float
    level: str
    seconds: float
    reused: datetime | None = None  # when the proof reused was made (selftest_proof.py); None: proven by this run

    def line(self) -> str:
        scores = (
            f"the course's solution {self.solution_score:g}/{self.max_score:g} and the untouched release "
            f"{self.untouched_score:g}/{self.max_score:g} at the {self.level} level"
        )
        if self.reused is not None:
            made = self.reused.astimezone()
            when = made.strftime("%H:%M" if made.date() == datetime.now().astimezone().date() else "%Y-%m-%d %H:%M")
            return (
                f"self-test: reused the proof of {when} ({scores}; same course, sandbox and interpreter; "
                "--self-test proves it again)"
            )
        return (
            f"self-test: the course's solution {self.solution_score:g}/{self.max_score:g} and the untouched "
            f"release {self.untouched_score:g}/{self.max_score:g} at the {self.level} level, before anyone was "
            f"graded ({self.seconds:.1f} s, the sandbox's start included)"
        )


def from_source(assignment: Assignment, *, solved: bool) -> dict[str, Any]:
    """The source notebook as a student would hand it in: the hidden tests removed, and each answer cell either as
    the answer key writes it (solved: its markers removed) or as released (its solution region removed)."""
    notebook: dict[str, Any] = json.loads(assignment.notebook_path.read_text(encoding="utf-8"))
    answer_ids = {question.answer_cell_id for question in assignment.questions}
    for cell in notebook["cells"]:
        grade_id = nbgrader_meta(cell).get("grade_id")
        text = cell_text(cell)
        if grade_id in answer_ids:
            cell["source"] = (
                "\n".join(line for line in text.splitlines() if SOLUTION_BEGIN not in line and SOLUTION_END not in line)
                if solved
                else strip_region(text, SOLUTION_BEGIN, SOLUTION_END)
            )
        elif grade_id in assignment.released_sources:
            cell["source"] = assignment.released_sources[grade_id]
    return notebook


def untouched_release(context: RunContext) -> dict[str, Any]:
    """The release students were given (release/), or where a course travels without it (a Gradescope bundle,
    the grader's image) the same made from the source notebook."""
    path = context.paths.release_notebook
    if not path.exists():
        return from_source(context.assignment, solved=False)
    try:
        release: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return release
    except (OSError, ValueError) as error:
        raise SelfTestError(
            f"{path}: cannot read the release for the self-test ({error}); run `autograd-course release` again"
        ) from None


def describe_limits(limits: Limits) -> str:
    return ", ".join(f"{field.name}={getattr(limits, field.name):g}" for field in fields(limits))


def _first_difference(graded: Graded, *, full: bool) -> str:
    """Why a known notebook did not score what it must: the run's failure, else the first value off."""
    if graded.status != Status.GRADED:
        # The exception that ended grading, as raised (its message may span lines: a failed start's output).
        error = graded.internal_error.strip()
        start = error.rfind(f"\n{SandboxStartError.__module__}.")
        cause = " ".join(error[start:].split()).split(": ", 1)[-1] if start >= 0 else (error.splitlines() or [""])[-1]
        said = " ".join(graded.feedback.messages)
        return f"its status was {graded.status}: {safe_text(cause or said, 1500, one_line=True)}"
    messages = [m for m in graded.feedback.messages if "did not run to the end" in m]
    if messages:
        return safe_text(messages[0], 1500, one_line=True)
    for question in graded.questions:
        off = question.earned != question.points if full else question.earned != 0
        if not off:
            continue
        if question.error:  # the hidden tests raised (the course's own code, yet bounded like any text)
            return (
                f"question {question.title!r} ({question.grade_id}): its hidden tests raised "
                f"{safe_text(question.error, 1500, one_line=True)}"
            )
        for value in question.values:
            if value.correct != full:
                return (
                    f"question {question.title!r}: {value.name} was {value.student!r} against torch's "
                    f"{value.expected!r}" + (f" ({value.detail})" if value.detail else "")
                )
        return f"question {question.title!r} earned {question.earned:g} of {question.points:g}"
    return "its score was off"


def prove_setup(context: RunContext, run: sandbox.Runner, *, level: str) -> SelfTest:
    """Grade the course's solution and the untouched release of the run's assignment through `run` (at `level`, for
    the message); raise SelfTestError unless they earn full marks and 0. The two run side by side (on the first two
    warm workers)."""
    started = time.monotonic()
    assignment = context.assignment
    # The self-test proves the machinery, not a course policy: hand work is only noted, as the release proof does.
    config = replace(context.config, hand_work="note")
    notebooks = {SOLUTION: from_source(assignment, solved=True), UNTOUCHED: untouched_release(context)}
    with tempfile.TemporaryDirectory(prefix="autograd-selftest-") as scratch:
        refs = {}
        for index, (what, notebook) in enumerate(notebooks.items()):
            path = Path(scratch) / f"known-{index}.ipynb"
            path.write_text(json.dumps(notebook), encoding="utf-8")
            refs[what] = SubmissionRef(f"selftest-{index}", path)
        with ThreadPoolExecutor(len(refs)) as executor:
            futures = {
                what: executor.submit(
                    grade_submission,
                    ref,
                    assignment,
                    config,
                    run=run,
                    params=assignment.default_params,
                    secret=context.secret,
                )
                for what, ref in refs.items()
            }
            graded = {what: future.result() for what, future in futures.items()}
    solution, untouched = graded[SOLUTION], graded[UNTOUCHED]
    max_score = assignment.max_score
    for what, one, full in ((SOLUTION, solution, True), (UNTOUCHED, untouched, False)):
        score = one.feedback.score
        if one.status == Status.GRADED and score == (max_score if full else 0):
            continue
        raise SelfTestError(
            f"the self-test failed, so nothing was graded: {what} of assignment {assignment.name!r} scored "
            f"{score:g}/{max_score:g} (it must score {max_score if full else 0:g}) at the {level} level with "
            f"limits {describe_limits(config.limits)}: {_first_difference(one, full=full)}. "
            + (
                "Fix those hidden tests in the source notebook, release, and run the command again."
                if one.status == Status.GRADED and any(question.error for question in one.questions)
                else "Fix the machine or source/course.yaml (limits, sandbox) and run the command again."
            )
        )
    return SelfTest(solution.feedback.score, untouched.feedback.score, max_score, level, time.monotonic() - started)


def proven_setup(context: RunContext, run: sandbox.Runner, *, level: str, force: bool = False) -> SelfTest:
    """`prove_setup`, once per what it proves: the proof kept in the course's scratch (selftest_proof.py) for the same
    course, settings, level, interpreter and package is reused, said in its line; else (or `force`: `--self-test`)
    the self-test runs, and its proof is kept for the next run. A failed self-test keeps nothing."""
    path = record_path(context.root, context.name)
    try:
        key = proof_key(
            context.root,
            context.name,
            context.paths.source_notebook.parent,
            context.paths.release_notebook,
            repr(context.config),
            level,
        )
    except OSError as error:  # the course's files were read a moment ago: prove, and keep nothing
        log.warning("the self-test's proof cannot be keyed (%s): it runs, and is not kept", error)
        return prove_setup(context, run, level=level)
    earlier = None if force else reusable(path, key, context.secret, level)
    if earlier is not None:
        return SelfTest(
            earlier.solution_score, earlier.untouched_score, earlier.max_score, level, 0.0, reused=earlier.proved_at
        )
    # The self-test runs: whatever proof was kept is gone first, so that one that fails here (forced, or at another
    # key) leaves none for a later run to reuse.
    try:
        path.unlink(missing_ok=True)
    except OSError as error:
        log.warning("the self-test's earlier proof %s could not be removed (%s)", path, error)
    proven = prove_setup(context, run, level=level)
    made = Proof(
        datetime.now(UTC),
        level,
        proven.solution_score,
        proven.untouched_score,
        proven.max_score,
        proven.seconds,
    )
    keep(path, key, made, context.secret)
    return proven
