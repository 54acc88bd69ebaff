"""The service's pages as a student and an instructor read them, rendered in-process from plain attempts."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime

from course.core.config import ServicePolicy
from course.core.status import Status
from course.pipeline.feedback_model import Feedback, QuestionFeedback
from course.platforms.service import pages
from course.platforms.service.policy import refusal
from course.platforms.service.results import student_records
from course.platforms.service.store import QUEUED, Attempt

SUBMITTED = datetime(2026, 11, 30, 12, 0, 0)
FEEDBACK = Feedback(
    "ana",
    "autograd",
    Status.GRADED,
    6,
    12,
    (),
    (),
    True,
    (
        QuestionFeedback("slopes", "Slopes", 5, 5, (), ()),
        QuestionFeedback("cubic", "A cubic", 3, 0, (), ()),
        QuestionFeedback("tiny_net", "A <tiny> net", 4, 1, (), ()),
    ),
)


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
    assert "id=progress role=status>Queued" in page


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


# ----------------------------------------------------------------------------- issue 40, item 9


def test_the_revisit_list_shows_the_courses_backticked_names_as_code_and_escapes_the_rest():
    feedback = Feedback(
        "ana",
        "autograd",
        Status.GRADED,
        0,
        3,
        (),
        (),
        True,
        (
            QuestionFeedback("grad", "The `grad` of <b>x</b> & `y`", 2, 0, (), ()),
            QuestionFeedback("odd", "`<script>alert(1)</script>`", 1, 0, (), ()),
        ),
    )
    lead = pages.feedback_lead(replace(attempt(1), feedback=feedback), "../")
    assert "The <code>grad</code> of &lt;b&gt;x&lt;/b&gt; &amp; <code>y</code>" in lead
    assert "<code>&lt;script&gt;alert(1)&lt;/script&gt;</code>" in lead  # code, still escaped
    assert "`" not in lead
    assert "<script>" not in lead


def test_once_every_attempt_is_used_the_page_says_so_and_has_no_form():
    policy = ServicePolicy(attempts=3)
    record = student_records(policy, ["ana"], [attempt(1), attempt(2), attempt(3)])[0]
    spent = refusal(policy, [SUBMITTED] * 3, SUBMITTED)
    page = pages.student_page(record, "autograd", policy, None, "csrf", refused=spent)
    assert "Submit attempt" not in page
    assert "<h2>No attempts left</h2>" in page
    assert "You have used all 3 attempts this assignment allows; your best attempt counts." in page
    assert "<form" not in page
    assert "3 of 3 attempts used" in page
    # an autograder error uses up no attempt: the form stays open for the third
    errored = student_records(policy, ["ana"], [attempt(1), attempt(2), attempt(3, status="autograder_error")])[0]
    assert "Submit attempt 4" in pages.student_page(errored, "autograd", policy, None, "csrf")
    one = ServicePolicy(attempts=1)
    assert refusal(one, [SUBMITTED], SUBMITTED).message == "you have used the one attempt allowed for this assignment"
    used = pages.student_page(student_records(one, ["ana"], [attempt(1)])[0], "autograd", one, None, "csrf")
    assert "all 1 attempt this assignment allows" in used
    assert "1 of 1 attempt used" in used


def test_a_success_is_told_apart_from_a_refusal_by_its_words_as_well_as_its_colour():
    done = pages.gradebook_page("autograd", [], 0, "plan", "csrf", [], "gradebook.db", "Recorded 1 student <b>.")
    assert "<div class=done id=banner role=status><strong>Done:</strong> Recorded 1 student &lt;b&gt;.</div>" in done
    failed = pages.gradebook_page(
        "autograd", [], 0, "plan", "csrf", [], "gradebook.db", "Nothing recorded: x.", ok=False
    )
    assert "<div class=error id=banner role=alert><strong>Not done:</strong> Nothing recorded: x.</div>" in failed
    assert "var(--ok)" in done.split(".done {")[1].split("}")[0]  # green, not the warning's orange
    record = student_records(ServicePolicy(), ["ana"], [])[0]
    refused = pages.student_page(record, "autograd", ServicePolicy(), None, "csrf", "the <upload> was empty.")
    assert (
        "<div class=error id=banner role=alert><strong>Not submitted:</strong> the &lt;upload&gt; was empty.</div>"
        in refused
    )


def test_counts_are_pluralised_as_written():
    policy = ServicePolicy(attempts=1)
    records = student_records(policy, ["ana"], [attempt(1)])
    page = pages.dashboard_page(records, "autograd", policy, "v", None, {"ana": (1, 1)})
    assert "1 graded attempt</div>" in page
    assert "<div>1 student; updates" in page
    assert "1 attempt each" in page
    assert "1 student had attempts end in an autograder error" in page
    assert not re.search(r"\b1 (students|attempts|questions|answers)\b", page)
    empty = pages.gradebook_page("autograd", [], 1, "plan", "csrf", [], "gradebook.db")
    assert "1 student already recorded" in empty


def test_the_dashboard_labels_each_cell_for_a_phone():
    page = pages.dashboard_page(
        student_records(ServicePolicy(), ["ana"], [attempt(1)]), "autograd", ServicePolicy(), "v", None
    )
    assert "<table id=students class=students>" in page
    for label in ("attempts", '"counted score"', '"last status"', '"integrity findings"', '"autograder errors"'):
        assert f"<td data-label={label}>" in page
    assert "table.students thead { display: none; }" in page
