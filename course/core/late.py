"""Deadlines and late work: when a submission came in (nbgrader's timestamp.txt), when it was due (the
course YAML, else nbgrader's gradebook), the student's extension, and what the course's late policy
takes off. Plain functions over plain values; the grader applies the result to scores and feedback."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from course.core.schema import number, one_of, optional, setting

ACCEPT, PENALTY, ZERO = "accept", "penalty", "zero"
UNIT_SECONDS = {"day": 86400, "hour": 3600}


@dataclass(frozen=True)
class LatePolicy:
    """accept: late work counts in full; penalty: `percent` of the maximum score per started `per` (day or
    hour) late; zero: late work earns 0. With `cutoff_hours`, work later than that past the deadline earns 0
    under any mode."""

    mode: str = setting(
        ACCEPT,
        "`accept` (late work counts in full), `penalty` (`percent` of the maximum score "
        "per started `per` late) or `zero` (late work earns 0); required in a `late_policy:`",
        one_of(ACCEPT, PENALTY, ZERO),
    )
    percent: float = setting(
        0.0,
        "with `penalty`: the percent of the maximum score taken off per started `per`",
        number(at_least=0, at_most=100, to_float=True),
    )
    per: str = setting("day", "`day` or `hour`", one_of(*UNIT_SECONDS, words="day or hour"))
    cutoff_hours: float | None = setting(
        None,
        "work later than this past the (extended) deadline earns 0, whatever the mode",
        optional(number(to_float=True), "or left out for no cutoff"),
    )


@dataclass(frozen=True)
class Lateness:
    submitted: datetime | None
    due: datetime | None  # the student's own deadline: the due date plus any extension
    extension_hours: float
    seconds_late: float
    penalty: float  # points taken off the raw score
    explanation: str  # one sentence for the student's feedback ("" when on time or nothing is known)

    @property
    def late(self) -> bool:
        return self.seconds_late > 0


def _duration(seconds: float) -> str:
    days, rest = divmod(math.ceil(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    parts = [
        f"{n} {unit}{'s' if n != 1 else ''}" for n, unit in ((days, "day"), (hours, "hour"), (minutes, "minute")) if n
    ]
    return " ".join(parts[:2]) or "less than a minute"


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def assess(
    raw_score: float,
    max_score: float,
    submitted: datetime | None,
    due: datetime | None,
    extension_hours: float,
    policy: LatePolicy,
) -> Lateness:
    """How late the submission is and what the policy takes off (never more than the raw score)."""
    deadline = due + timedelta(hours=extension_hours) if due is not None else None
    if submitted is None or deadline is None or submitted <= deadline:
        return Lateness(submitted, deadline, extension_hours, 0.0, 0.0, "")
    seconds = (submitted - deadline).total_seconds()
    whose = "your extended deadline" if extension_hours else "the deadline"
    said = f"Submitted {_duration(seconds)} after {whose} ({_when(deadline)})"
    if policy.cutoff_hours is not None and seconds > policy.cutoff_hours * 3600:
        penalty = raw_score
        rule = f"work more than {policy.cutoff_hours:g} hours late earns no points"
    elif policy.mode == ZERO:
        penalty, rule = raw_score, "late work earns no points"
    elif policy.mode == PENALTY:
        units = math.ceil(seconds / UNIT_SECONDS[policy.per])
        penalty = min(raw_score, units * policy.percent / 100 * max_score)
        rule = f"{policy.percent:g}% of the {max_score:g} points per started {policy.per} late"
    else:
        return Lateness(submitted, deadline, extension_hours, seconds, 0.0, f"{said}; late work is accepted in full.")
    penalty = round(penalty, 6)
    final = round(raw_score - penalty, 6)
    explanation = (
        f"{said}: {rule}, so {penalty:g} of your {raw_score:g} points were taken off; "
        f"your score is {final:g} of {max_score:g}."
    )
    return Lateness(submitted, deadline, extension_hours, seconds, penalty, explanation)
