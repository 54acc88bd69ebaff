"""The service's policies, from the `service:` mapping of the course YAML: how many attempts, how long
between them, which attempt counts, how large an upload may be, and whether each attempt gets fresh
numbers. Plain values, validated once at start with messages that name the file and the key."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from course.config import CONFIG_RELATIVE_PATH, CourseConfig
from course.content import Content
from course.errors import ConfigError
from course.variants import Params, course_secret, derive, numbers_for

BEST, LAST = "best", "last"
KEYS = {"attempts", "cooldown_minutes", "counts", "upload_kb", "fresh_numbers_per_attempt"}


@dataclass(frozen=True)
class ServicePolicy:
    attempts: int | None = None  # None: as many as the student likes
    cooldown_minutes: float = 0.0  # between one attempt and the next
    counts: str = BEST  # which attempt's score is the grade: best or last
    upload_kb: int = 2048  # the largest notebook accepted (413 above it)
    fresh_numbers_per_attempt: bool = False  # with variants: true, attempt n > 1 gets numbers of its own

    @property
    def upload_bytes(self) -> int:
        return self.upload_kb * 1024


def service_policy(config: CourseConfig) -> ServicePolicy:
    where = f"{config.root / CONFIG_RELATIVE_PATH}: service"
    data: dict[str, Any] = config.service
    unknown = sorted(set(data) - KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known keys: {', '.join(sorted(KEYS))})")
    values: dict[str, Any] = {}
    if data.get("attempts") is not None:
        if type(data["attempts"]) is not int or data["attempts"] < 1:
            raise ConfigError(f"{where}.attempts must be a whole number of at least 1 (or left out for no limit), "
                              f"got {data['attempts']!r}")
        values["attempts"] = data["attempts"]
    if "cooldown_minutes" in data:
        value = data["cooldown_minutes"]
        if type(value) not in (int, float) or value < 0:
            raise ConfigError(f"{where}.cooldown_minutes must be a number of minutes, 0 or more, got {value!r}")
        values["cooldown_minutes"] = float(value)
    if "counts" in data:
        if data["counts"] not in (BEST, LAST):
            raise ConfigError(f"{where}.counts must be best or last, got {data['counts']!r}")
        values["counts"] = data["counts"]
    if "upload_kb" in data:
        value = data["upload_kb"]
        if type(value) is not int or value < 1:
            raise ConfigError(f"{where}.upload_kb must be a whole number of kilobytes, got {value!r}")
        if value > config.limits.notebook_mb * 1024:
            raise ConfigError(f"{where}.upload_kb ({value}) is larger than limits.notebook_mb "
                              f"({config.limits.notebook_mb} MB), which the grader would refuse anyway")
        values["upload_kb"] = value
    if "fresh_numbers_per_attempt" in data:
        if type(data["fresh_numbers_per_attempt"]) is not bool:
            raise ConfigError(f"{where}.fresh_numbers_per_attempt must be true or false")
        if data["fresh_numbers_per_attempt"] and not config.variants:
            raise ConfigError(f"{where}.fresh_numbers_per_attempt needs variants: true (numbers per student)")
        values["fresh_numbers_per_attempt"] = data["fresh_numbers_per_attempt"]
    return ServicePolicy(**values)


@dataclass(frozen=True)
class Refusal:
    """Why an attempt is refused now (429), and when the student may try again (None: never)."""

    message: str
    retry_after: float | None


def refusal(policy: ServicePolicy, earlier: list[datetime], now: datetime) -> Refusal | None:
    """None when a new attempt is allowed after `earlier` attempts (their submission times)."""
    if policy.attempts is not None and len(earlier) >= policy.attempts:
        return Refusal(f"you have used all {policy.attempts} attempts allowed for this assignment", None)
    if earlier and policy.cooldown_minutes:
        ready = max(earlier) + timedelta(minutes=policy.cooldown_minutes)
        if now < ready:
            wait = (ready - now).total_seconds()
            return Refusal(f"the next attempt is allowed {wait:.0f} s from now (a cooldown of "
                           f"{policy.cooldown_minutes:g} minutes between attempts)", wait)
    return None


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
