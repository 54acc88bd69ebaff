"""The service's pages as a student and an instructor read them, rendered in-process from plain attempts."""

from __future__ import annotations

import re
from datetime import datetime

from course.config import ServicePolicy
from course.service import pages
from course.service.policy import refusal
from course.service.results import student_records
from course.service.store import QUEUED, Attempt

SUBMITTED = datetime(2026, 11, 30, 12, 0, 0)
FEEDBACK = {"questions": [{"id": "slopes", "title": "Slopes", "earned": 5, "points": 5},
                          {"id": "cubic", "title": "A cubic", "earned": 0, "points": 3},
                          {"id": "tiny_net", "title": "A <tiny> net", "earned": 1, "points": 4}]}


def attempt(number: int, *, status: str = "graded", score: float | None = 6.0) -> Attempt:
    return Attempt(100 + number, "ana", "autograd", number, SUBMITTED, status, score, 12.0, 0.0, FEEDBACK, [], 1.0, 1)


def test_the_feedback_opens_with_when_what_to_revisit_and_the_way_back():
    lead = pages.feedback_lead(attempt(2), "../")
    assert "<strong>Attempt 2</strong>, submitted 2026-11-30 12:00:00 UTC: 6 / 12" in lead
    assert re.findall(r'href="(#q-[^"]+)"', lead) == ["#q-cubic", "#q-tiny_net"]  # the right one is not listed
    assert "A &lt;tiny&gt; net" in lead  # escaped
    assert 'href="../">back to your attempts' in lead
    assert 'href="../#submit">submit another attempt' in lead
    assert "submit another" not in pages.feedback_lead(attempt(2), "../../ana", instructor=True)


def test_the_form_is_closed_with_the_reason_and_the_time_it_reopens():
    policy = ServicePolicy(attempts=3, cooldown_minutes=30)
    record = student_records(policy, ["ana"], [attempt(1)])[0]
    refused = refusal(policy, [SUBMITTED], datetime(2026, 11, 30, 12, 10, 0))
    page = pages.student_page(record, "autograd", policy, None, "csrf", refused=refused)
    assert "<button type=submit disabled>" in page
    assert "Not open now: the next attempt is allowed at 12:30:00 UTC, 20 min 00 s from now" in page
    assert "<meta http-equiv=refresh content=1201>" in page  # the page opens the form again by itself
    assert "1 of 3 attempts used; your best attempt counts; 30 minutes between attempts; no due date" in page
    assert 'href="attempts/1">attempt 1</a>' in page  # by the student's number, not the service's id
    spent = refusal(policy, [SUBMITTED] * 3, SUBMITTED)
    closed = pages.student_page(record, "autograd", policy, None, "csrf", refused=spent)
    assert "all 3 attempts" in closed
    assert "http-equiv=refresh" not in closed  # nothing to wait for
    open_form = pages.student_page(record, "autograd", policy, None, "csrf")
    assert "<button type=submit>Submit</button>" in open_form
    assert "Submit attempt 2" in open_form


def test_the_waiting_page_says_it_is_being_graded_and_refreshes_itself():
    page = pages.waiting_page(attempt(3, status=QUEUED, score=None))
    assert "Attempt 3 was received 2026-11-30 12:00:00 UTC" in page
    assert "<meta http-equiv=refresh" in page
    assert 'id=progress role=status>Queued' in page


def test_the_form_is_closed_once_the_attempts_take_the_storage_limit():
    """The student's page asks the policy with no notebook in hand: at the storage limit any notebook would pass
    it, so the form is shown closed with the reason, one byte below it the form is open."""
    policy = ServicePolicy()
    record = student_records(policy, ["ana"], [attempt(1)])[0]
    full = refusal(policy, [SUBMITTED], SUBMITTED, stored=policy.storage_bytes)
    assert full is not None
    assert full.limit == "storage_mb"
    page = pages.student_page(record, "autograd", policy, None, "csrf", refused=full)
    assert "<button type=submit disabled>" in page
    assert f"already take the limit of {policy.storage_mb} MB per student: ask your instructor" in page
    assert "Clear Outputs" not in page  # no notebook would fit: clearing one cannot help
    assert refusal(policy, [SUBMITTED], SUBMITTED, stored=policy.storage_bytes - 1) is None
