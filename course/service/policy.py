"""The service's policies at work: whether an attempt is allowed now, which attempt counts, and the numbers an
attempt is graded with. The policies themselves (attempts, cooldown, best/last, upload size, fresh numbers)
are the course YAML's `service:` section, validated with every other setting when the course is loaded
(course/config.py, `ServicePolicy`): here they are plain, trusted values."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from course.config import LAST, CourseConfig, ServicePolicy
from course.content import Content
from course.variants import Params, course_secret, derive, numbers_for

__all__ = ["Refusal", "ServicePolicy", "attempt_numbers", "counted", "refusal"]


@dataclass(frozen=True)
class Refusal:
    """Why an attempt is refused now (429), and when the student may try again (None: never)."""

    message: str
    retry_after: float | None
    reopens_at: datetime | None = None  # naive UTC; None: never (or now)
    limit: str = ""  # the setting of a bound reached (the instructor's log says it), "" for the ordinary policies


def _megabytes(size: int) -> str:
    return f"{size / 2**20:.1f} MB" if size >= 2**20 else f"{max(1, round(size / 1024))} KB"


def refusal(policy: ServicePolicy, earlier: list[datetime], now: datetime, *, stored: int = 0,
            size: int | None = None) -> Refusal | None:
    """None when a new attempt is allowed after `earlier` attempts (their submission times), whose notebooks
    take `stored` bytes, with a notebook of `size` bytes (None: any notebook, as the student's page asks before
    one is chosen)."""
    if stored + (1 if size is None else size) > policy.storage_bytes:
        if size is None:  # no notebook, however small, would be taken: clearing outputs cannot help
            said = (f"your attempts at this assignment already take the limit of {policy.storage_mb} MB per student: "
                    "ask your instructor")
        else:
            said = (f"your attempts at this assignment already take {_megabytes(stored)}, and this notebook "
                    f"({_megabytes(size)}) would pass the limit of {policy.storage_mb} MB per student: clear its "
                    "outputs (Edit > Clear Outputs of All Cells) and submit again, or ask your instructor")
        return Refusal(said, None, limit="storage_mb")
    if policy.attempts is not None and len(earlier) >= policy.attempts:
        return Refusal(f"you have used all {policy.attempts} attempts allowed for this assignment", None)
    if earlier and policy.cooldown_minutes:
        ready = max(earlier) + timedelta(minutes=policy.cooldown_minutes)
        if now < ready:
            wait = (ready - now).total_seconds()
            return Refusal(f"the next attempt is allowed at {ready:%H:%M:%S} UTC, {_duration(wait)} from now (a "
                           f"cooldown of {minutes(policy.cooldown_minutes)} between attempts)", wait, ready)
    return None


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


def attempt_numbers(config: CourseConfig, policy: ServicePolicy, content: Content, student_id: str, attempt: int,
                    defaults: Params) -> Params:
    """The numbers attempt `attempt` (from 1) of a student is graded with: the student's own (those of the
    notebook released to them) for the first attempt or without fresh numbers, else numbers of that attempt's
    own, derived by the assignment's `derive` (its exercises module) from the attempt's own seed."""
    if not policy.fresh_numbers_per_attempt or attempt <= 1:
        return numbers_for(config, content, student_id, defaults)
    return derive(content, course_secret(config), f"{student_id}#attempt-{attempt}", set(defaults))
