"""The service's policies at work: whether an attempt is allowed now, which attempt counts, and the numbers an
attempt is graded with. The policies themselves (attempts, cooldown, best/last, upload size, fresh numbers)
are the course YAML's `service:` section, validated with every other setting when the course is loaded
(course/core/config.py, `ServicePolicy`): here they are plain, trusted values."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from course.core.config import LAST, CourseConfig, ServicePolicy
from course.pipeline.content import Content
from course.pipeline.variants import Params, numbers_for

__all__ = [
    "ERROR_COOLDOWN_MINUTES",
    "FREE_AUTOGRADER_ERRORS",
    "SAME_NOTEBOOK_ERRORS",
    "Refusal",
    "ServicePolicy",
    "attempt_numbers",
    "counted",
    "numbers_attempt",
    "refusal",
]

# An autograder error is our failure: it never uses one of the student's attempts (docs/service.md, "Autograder
# errors"). But it must not become a stream of free grading runs either. So: the same notebook (byte for byte) that
# ended in an autograder error this many times is not taken again (it would fail again; the instructor sees it) ...
SAME_NOTEBOOK_ERRORS = 2
# ... and a student's first this many autograder errors at an assignment start no cooldown; each after them starts
# one of the course's cooldown, and at least ERROR_COOLDOWN_MINUTES, still using no attempt.
FREE_AUTOGRADER_ERRORS = 3
ERROR_COOLDOWN_MINUTES = 10.0


@dataclass(frozen=True)
class Refusal:
    """Why an attempt is refused now (429), and when the student may try again (None: never)."""

    message: str
    retry_after: float | None
    reopens_at: datetime | None = None  # naive UTC; None: never (or now)
    limit: str = ""  # the setting of a bound reached (the instructor's log says it), "" for the ordinary policies


def _megabytes(size: int) -> str:
    return f"{size / 2**20:.1f} MB" if size >= 2**20 else f"{max(1, round(size / 1024))} KB"


def _storage_refusal(policy: ServicePolicy, stored: int, size: int | None) -> Refusal | None:
    """The refusal of a notebook of `size` bytes (None: any) that would pass the storage limit, or None."""
    if stored + (1 if size is None else size) > policy.storage_bytes:
        if size is None:  # no notebook, however small, would be taken: clearing outputs cannot help
            said = (
                f"your attempts at this assignment already take the limit of {policy.storage_mb} MB per student: "
                "ask your instructor"
            )
        else:
            said = (
                f"your attempts at this assignment already take {_megabytes(stored)}, and this notebook "
                f"({_megabytes(size)}) would pass the limit of {policy.storage_mb} MB per student: clear its "
                "outputs (Edit > Clear Outputs of All Cells) and submit again, or ask your instructor"
            )
        return Refusal(said, None, limit="storage_mb")
    return None


def _error_cooldown_refusal(policy: ServicePolicy, errors: Sequence[datetime], now: datetime) -> Refusal | None:
    """The refusal of an upload too soon after more autograder errors than are free, or None."""
    charged = sorted(errors)[FREE_AUTOGRADER_ERRORS:]
    if charged:
        cooldown = max(policy.cooldown_minutes, ERROR_COOLDOWN_MINUTES)
        ready = charged[-1] + timedelta(minutes=cooldown)
        if now < ready:
            wait = (ready - now).total_seconds()
            free = FREE_AUTOGRADER_ERRORS
            return Refusal(
                f"{len(errors)} of your uploads could not be graded because of a fault on our side, not "
                f"yours (none used an attempt, and your instructor sees them); after {free} such, the next "
                f"upload is allowed {minutes(cooldown)} after the last, at {ready:%H:%M:%S} UTC, "
                f"{_duration(wait)} from now",
                wait,
                ready,
                limit="autograder_errors",
            )
    return None


def refusal(
    policy: ServicePolicy,
    earlier: list[datetime],
    now: datetime,
    *,
    stored: int = 0,
    size: int | None = None,
    errors: Sequence[datetime] = (),
    same_errors: int = 0,
) -> Refusal | None:
    """None when a new attempt is allowed after `earlier` attempts (their submission times) and `errors` (the
    submission times of those that ended in an autograder error, which `earlier` leaves out), whose notebooks
    take `stored` bytes, with a notebook of `size` bytes (None: any notebook, as the student's page asks before
    one is chosen) that ended in an autograder error `same_errors` times already."""
    storage = _storage_refusal(policy, stored, size)
    if storage is not None:
        return storage
    if same_errors >= SAME_NOTEBOOK_ERRORS:
        return Refusal(
            f"this very notebook could not be graded {same_errors} times because of a fault on our side, "
            "not yours (none of those used an attempt): sending it again would fail again. Your "
            "instructor sees it on their dashboard; change the notebook to try again, or ask them",
            None,
            limit="autograder_errors",
        )
    if policy.attempts is not None and len(earlier) >= policy.attempts:
        used = "the one attempt" if policy.attempts == 1 else f"all {policy.attempts} attempts"
        return Refusal(f"you have used {used} allowed for this assignment", None)
    if earlier and policy.cooldown_minutes:
        ready = max(earlier) + timedelta(minutes=policy.cooldown_minutes)
        if now < ready:
            wait = (ready - now).total_seconds()
            return Refusal(
                f"the next attempt is allowed at {ready:%H:%M:%S} UTC, {_duration(wait)} from now (a "
                f"cooldown of {minutes(policy.cooldown_minutes)} between attempts)",
                wait,
                ready,
            )
    return _error_cooldown_refusal(policy, errors, now)


def minutes(value: float) -> str:
    return f"{value:g} minute{'' if value == 1 else 's'}"


def _duration(seconds: float) -> str:
    whole = max(1, round(seconds))
    if whole < 120:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def counted(policy: ServicePolicy, scores: list[tuple[int, float]]) -> int | None:
    """Which attempt (its id) is the grade, of (id, score) pairs of graded attempts in order."""
    if not scores:
        return None
    if policy.counts == LAST:
        return scores[-1][0]
    return max(scores, key=lambda pair: (pair[1], -pair[0]))[0]


def numbers_attempt(policy: ServicePolicy, attempt: int) -> int:
    """Whose numbers attempt `attempt` (from 1) of a student is issued (`variants.numbers_for(attempt=)`): with
    fresh numbers, attempt n > 1 its own; else, and for the first attempt, the student's own (1). The term's
    record keeps it beside the attempt it records (course/pipeline/numbers_label.py), so `grade` in the course root
    grades the attempt with the same numbers."""
    return attempt if policy.fresh_numbers_per_attempt and attempt > 1 else 1


def attempt_numbers(
    config: CourseConfig, policy: ServicePolicy, content: Content, student_id: str, attempt: int, defaults: Params
) -> Params:
    """The numbers attempt `attempt` (from 1) of a student is graded with: the student's own (those of the
    notebook released to them) for the first attempt or without fresh numbers, else numbers of that attempt's
    own, derived by the assignment's `derive` (its exercises module) from the attempt's own seed."""
    return numbers_for(config, content, student_id, defaults, attempt=numbers_attempt(policy, attempt))
