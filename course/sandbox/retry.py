"""A run that never reached student code is the grader's failure, never the student's.

The runner sends `ready` before any student code (see runner.py), so a run that ended without it ran nothing of
the notebook: its end (a worker that died, a mount the kernel refused, a machine out of memory) says nothing
about the student. Such a run is tried again, each try said in the grader's log, and when no try reaches
`ready` the run raises SandboxStartError, which grading turns into an autograder error: never a result to
grade, never a score of 0 in the gradebook."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from course.core.errors import NoIsolationError, SandboxError, SandboxStartError
from course.core.text import safe_text
from course.sandbox.supervisor import RunResult

log = logging.getLogger(__name__)

CAUSE_CHARS = 500  # how much of a failed start's last line of output its cause keeps

Try = tuple[str, Callable[[], RunResult]]  # (what the try is, for the log: "a fresh worker"; the try itself)


def start_failure(result: RunResult) -> str:
    """Why a run that never reached `ready` ended: how it ended and the last line of its output (what the grader's
    own start-up code raised, or bubblewrap's complaint), bounded."""
    ended = result.ended_early or "it ended without a word"
    lines = [line.strip() for line in result.output.splitlines() if line.strip()]
    return f"{ended}; its last words: {safe_text(lines[-1][-CAUSE_CHARS:], CAUSE_CHARS)}" if lines else ended


def first_ready(tries: Sequence[Try]) -> RunResult:
    """The result of the first try that reached the runner's `ready`, trying each in turn; SandboxStartError
    (naming every try and the last cause) when none did. A try that raises SandboxError counts as one that
    failed to start."""
    causes: list[str] = []
    for index, (what, attempt) in enumerate(tries):
        if causes:
            log.warning(
                f"a run ended before any student code ran ({safe_text(causes[-1], 300, one_line=True)}); "
                f"trying again on {what}"
            )
        try:
            result = attempt()
        except NoIsolationError:  # nothing to try again: no level works here
            raise
        except SandboxError as error:  # a worker that did not start, a try that itself tried (the cold fallback)
            causes.append(str(error))
            continue
        if result.ready:
            if causes:
                log.info(f"the run started on {what} after {index} failed {'try' if index == 1 else 'tries'}")
            return result
        causes.append(start_failure(result))
    raise SandboxStartError(
        f"the sandbox ended before any student code ran, on all {len(causes)} tries "
        f"({', '.join(what for what, _ in tries)}); the last: {causes[-1]}"
    )
