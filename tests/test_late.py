"""Late work: the policy's arithmetic, and the course YAML keys that set it."""

from __future__ import annotations

import re
from datetime import datetime

import pytest
import yaml

from course.core.config import parse_config
from course.core.errors import ConfigError
from course.core.late import LatePolicy, assess

DUE = datetime(2026, 11, 20, 23, 59)


@pytest.mark.parametrize(
    ("submitted", "extension", "policy", "penalty"),
    [
        (datetime(2026, 11, 20, 23, 0), 0, LatePolicy("penalty", 10, "day"), 0),  # on time
        (datetime(2026, 11, 21, 1, 0), 0, LatePolicy("accept"), 0),  # late, accepted
        (datetime(2026, 11, 21, 1, 0), 0, LatePolicy("penalty", 10, "day"), 5.7),  # 1 started day
        (datetime(2026, 11, 22, 1, 0), 0, LatePolicy("penalty", 10, "day"), 11.4),  # 2 started days
        (datetime(2026, 11, 21, 1, 0), 0, LatePolicy("penalty", 1, "hour"), 1.14),  # 2 started hours
        (datetime(2026, 11, 21, 1, 0), 0, LatePolicy("zero"), 40),  # any lateness: all of it
        (datetime(2026, 11, 25, 0, 0), 0, LatePolicy("penalty", 10, "day", 72), 40),  # past the cutoff
        (datetime(2026, 11, 22, 1, 0), 48, LatePolicy("penalty", 10, "day"), 0),  # within the extension
        (datetime(2026, 12, 9, 0, 0), 0, LatePolicy("penalty", 10, "day"), 40),  # never below zero
    ],
)
def test_penalty(submitted, extension, policy, penalty):
    assert assess(40, 57, submitted, DUE, extension, policy).penalty == pytest.approx(penalty)


def test_no_timestamp_or_no_due_date_is_on_time():
    policy = LatePolicy("zero")
    assert assess(40, 57, None, DUE, 0, policy).penalty == 0
    assert assess(40, 57, datetime(2030, 1, 1), None, 0, policy).penalty == 0


def test_the_student_is_told_how_late_and_what_it_cost():
    lateness = assess(40, 57, datetime(2026, 11, 22, 2, 30), DUE, 0, LatePolicy("penalty", 10, "day"))
    assert lateness.explanation == (
        "Submitted 1 day 2 hours after the deadline (2026-11-20 23:59 UTC): 10% of the 57 points per started day "
        "late, so 11.4 of your 40 points were taken off; your score is 28.6 of 57."
    )


BASE = "course_id: c\nassignments:\n  - name: autograd\n    notebook: autograd.ipynb\n"


def parse(extra: str):
    return parse_config(yaml.safe_load(BASE + extra), root=None, where="course.yaml")


def test_due_date_extensions_and_policy_from_the_yaml():
    config = parse(
        "    due: 2026-11-20 23:59:00 UTC\n    extensions: {carol: 48}\n"
        "late_policy: {mode: penalty, percent: 10, per: day, cutoff_hours: 72}\n"
    )
    assert config.assignment().due == DUE
    assert config.assignment().extensions == {"carol": 48.0}
    assert config.late_policy == LatePolicy("penalty", 10.0, "day", 72.0)
    assert parse("").late_policy == LatePolicy()  # default: late work accepted


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("    due: next friday\n", "assignments[0].due must be a date and time like '2026-11-20 23:59 UTC'"),
        ("late_policy: {mode: harsh}\n", "late_policy.mode must be one of accept, penalty, zero"),
        ("late_policy: {mode: penalty}\n", "late_policy: mode penalty needs percent"),
        ("late_policy: {mode: penalty, percent: 10, per: week}\n", "late_policy.per must be day or hour"),
        ("late_policy: {mode: accept, grace: 1}\n", "late_policy: unknown key 'grace'"),
    ],
)
def test_mistyped_late_settings_say_which_key(extra, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse(extra)


def test_without_a_due_date_in_the_yaml_nbgrader_gradebook_s_due_date_counts(tmp_path):
    from course.term.nbgrader_bridge import assignment_due, open_gradebook

    db = tmp_path / "gradebook.db"
    assert assignment_due(f"sqlite:///{db}", db, "autograd") is None  # no gradebook yet: nothing is created
    assert not db.exists()
    with open_gradebook(f"sqlite:///{db}") as gradebook:  # as `nbgrader db assignment add autograd --duedate=...`
        gradebook.add_assignment("autograd", duedate="2026-11-20 23:59:00 UTC")
    assert assignment_due(f"sqlite:///{db}", db, "autograd") == DUE
    assert assignment_due(f"sqlite:///{db}", db, "other") is None
