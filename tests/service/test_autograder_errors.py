"""An autograder error is our failure, never the student's: it uses none of their attempts. But it is not a free retry
without end either (issue 39): the same notebook that failed SAME_NOTEBOOK_ERRORS times is not taken again, and
after FREE_AUTOGRADER_ERRORS of a student's autograder errors each further one starts a cooldown (at least
ERROR_COOLDOWN_MINUTES); the instructor sees them on the dashboard and in the server's log.

The store on SQLite and PostgreSQL; the app in process (its warm pool never started: an attempt's results are
written into the store as a grading run that failed on our side records them)."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from course.core.config import load_config
from course.core.status import Status
from course.pipeline.feedback_model import Feedback
from course.platforms.service import store as store_module
from course.platforms.service.app import create_app
from course.platforms.service.policy import (
    ERROR_COOLDOWN_MINUTES,
    FREE_AUTOGRADER_ERRORS,
    SAME_NOTEBOOK_ERRORS,
    Refusal,
    ServicePolicy,
)
from course.platforms.service.run import make_service
from course.platforms.service.store import Attempt, GradedAttempt, Store, new_token
from tests.support.helpers import submitted_notebook
from tests.support.service import Client, course_for_service, notebook_bytes

FAILED_ON_OUR_SIDE = GradedAttempt(
    status="autograder_error",
    score=0.0,
    raw_score=0.0,
    late_penalty=0.0,
    max_score=57.0,
    integrity=(),
    seconds=0.1,
    feedback=Feedback("alice", "autograd", Status.AUTOGRADER_ERROR, 0.0, 57.0, (), (), True, ()),
)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def store(request, tmp_path):
    url = (
        f"sqlite:///{tmp_path / 'service.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    )
    opened = Store(url)
    opened.set_student("alice", new_token(), {})
    yield opened
    opened.close()


def fails_on_our_side(store: Store, attempt: Attempt | Refusal) -> Attempt:
    assert isinstance(attempt, Attempt), attempt
    claimed = store.claim_next()
    assert claimed is not None
    assert claimed[0].id == attempt.id
    assert store.record(attempt.id, FAILED_ON_OUR_SIDE)
    return attempt


def test_the_same_notebook_that_failed_twice_is_not_taken_again(store):
    policy = ServicePolicy(attempts=1)
    notebook = b'{"cells": [], "the": "same bytes"}'
    for _ in range(SAME_NOTEBOOK_ERRORS):  # our failure: free, and the same bytes may be tried again
        fails_on_our_side(store, store.submit("alice", "autograd", notebook, policy))
    again = store.submit("alice", "autograd", notebook, policy)
    assert isinstance(again, Refusal), again
    assert again.limit == "autograder_errors"
    assert again.message.startswith(
        f"this very notebook could not be graded {SAME_NOTEBOOK_ERRORS} times because "
        "of a fault on our side, not yours (none of those used an attempt)"
    )
    assert len(store.attempts_of("alice")) == SAME_NOTEBOOK_ERRORS  # not stored: nothing to grade, nothing used
    assert store.autograder_errors() == {"alice": (SAME_NOTEBOOK_ERRORS, SAME_NOTEBOOK_ERRORS)}
    changed = store.submit("alice", "autograd", notebook + b" ", policy)  # another notebook: taken, no attempt used
    assert isinstance(changed, Attempt), changed
    assert changed.number == SAME_NOTEBOOK_ERRORS + 1


def test_autograder_errors_are_no_stream_of_free_attempts(store):
    """With no cooldown and one attempt, a student whose every upload fails on our side (a notebook that makes our
    grader fail, say) gets FREE_AUTOGRADER_ERRORS of them and one more, then one each cooldown; none uses an
    attempt, so their one graded attempt is still theirs."""
    policy = ServicePolicy(attempts=1)
    for index in range(FREE_AUTOGRADER_ERRORS + 1):
        fails_on_our_side(store, store.submit("alice", "autograd", b'{"cells": [], "n": %d}' % index, policy))
    held = store.submit("alice", "autograd", b'{"cells": [], "n": "next"}', policy)
    assert isinstance(held, Refusal), held
    assert held.limit == "autograder_errors"
    assert held.retry_after is not None
    assert ERROR_COOLDOWN_MINUTES * 60 - 60 < held.retry_after <= ERROR_COOLDOWN_MINUTES * 60
    assert held.message.startswith(
        f"{FREE_AUTOGRADER_ERRORS + 1} of your uploads could not be graded because of a "
        "fault on our side, not yours (none used an attempt"
    )
    with store.begin() as db:  # the cooldown over
        db.execute(
            store_module.attempts.update().values(
                submitted_at=datetime.now() - timedelta(minutes=ERROR_COOLDOWN_MINUTES + 1)
            )
        )
    graded = store.submit("alice", "autograd", b'{"cells": [], "n": "next"}', policy)
    assert isinstance(graded, Attempt), graded  # the one attempt allowed is still the student's
    claimed = store.claim_next()
    assert claimed is not None
    assert store.record(graded.id, replace(FAILED_ON_OUR_SIDE, status="graded", score=30.0))
    spent = store.submit("alice", "autograd", b'{"cells": [], "n": "after"}', policy)
    assert isinstance(spent, Refusal)
    assert "you have used the one attempt allowed" in spent.message


@pytest.fixture
def service(tmp_path):
    root = course_for_service(tmp_path / "course")
    service = make_service(load_config(root), jobs=1, wait_seconds=0.01)
    service.tokens = {"alice": new_token(), "instructor": new_token()}  # type: ignore[attr-defined]
    service.store.set_student("alice", service.tokens["alice"], {})
    service.store.add_instructor(service.tokens["instructor"])
    yield service
    service.store.close()


def test_the_student_is_told_and_the_instructor_sees_it(service, caplog):
    client, token = Client(create_app(service)), service.tokens["alice"]
    notebook = notebook_bytes(submitted_notebook())

    def upload(body: bytes = notebook):
        return client.get(
            "/api/submissions",
            {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            method="POST",
            body=body,
        )

    for _ in range(SAME_NOTEBOOK_ERRORS):
        sent = upload()
        assert sent.status_code == 202, sent.text  # stored; its grading run fails on our side
        fails_on_our_side(service.store, service.store.attempt(sent.json()["id"]))
    with caplog.at_level(logging.WARNING, logger="course.platforms.service.app"):
        refused = upload()
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"].startswith(
        "this very notebook could not be graded 2 times because of a fault on our side"
    )
    assert "serve: refused an upload of alice after their autograder errors" in caplog.text
    assert token not in caplog.text
    dashboard = client.get(f"/i/{service.tokens['instructor']}/")
    assert dashboard.status_code == 200
    assert "<strong>2</strong> (one notebook 2×: not taken again)</td>" in dashboard.text
    assert "1 student had attempts end in an autograder error: our failure, not theirs" in dashboard.text
    for index in range(FREE_AUTOGRADER_ERRORS + 1 - SAME_NOTEBOOK_ERRORS):  # other notebooks, failing too
        changed = json.loads(notebook)
        changed["metadata"]["n"] = index
        sent = upload(notebook_bytes(changed))
        assert sent.status_code == 202, sent.text
        fails_on_our_side(service.store, service.store.attempt(sent.json()["id"]))
    page = client.get(f"/s/{token}/")  # the student's page says why the form is closed, and until when
    assert "could not be graded because of a fault on our side, not yours" in page.text
    assert "<button type=submit disabled>" in page.text


def test_a_restart_after_a_mend_takes_the_refused_notebook_again(store):
    """The instructor mends our fault and restarts the service: the notebook refused for its autograder errors is
    taken again (its errors still show on the dashboard)."""
    policy = ServicePolicy(attempts=1)
    notebook = b'{"cells": [], "the": "same bytes"}'
    for _ in range(SAME_NOTEBOOK_ERRORS):
        fails_on_our_side(store, store.submit("alice", "autograd", notebook, policy))
    assert isinstance(store.submit("alice", "autograd", notebook, policy), Refusal)
    restarted = Store(store.engine.url.render_as_string(hide_password=False))
    try:
        again = restarted.submit("alice", "autograd", notebook, policy)
        assert isinstance(again, Attempt), again
        assert restarted.autograder_errors() == {"alice": (SAME_NOTEBOOK_ERRORS, SAME_NOTEBOOK_ERRORS)}
    finally:
        restarted.close()
