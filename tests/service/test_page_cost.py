"""A page costs what it shows: the service's pages and the API read no feedback they do not display, what is
rendered from a feedback document (large, for a notebook of many raising cells) is rendered off the event loop,
and one student's pages are paced (service.pages_in_flight, service.pages_per_minute) while others are answered.

In process: the real app, store (SQLite) and grader (its warm pool is never started: nothing here is graded), with
attempts written into the store as a grading run records them. What is read is the SQL the store sends."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import event

from course.core.config import load_config
from course.pipeline.feedback_model import Feedback
from course.platforms.service import access, instructor_pages, pages, student_pages
from course.platforms.service.app import create_app
from course.platforms.service.edge import PageGate
from course.platforms.service.run import make_service
from course.platforms.service.store import GradedAttempt, new_token
from tests.support.helpers import submitted_notebook
from tests.support.service import Client, course_for_service, notebook_bytes

ATTEMPTS = 20


def large_feedback(student: str, errors: int = 2000) -> dict:
    """About 1 MB: what a notebook of 2000 raising cells made before a feedback's errors were capped (as old
    attempts in a database still hold)."""
    return {
        "student_id": student,
        "assignment": "autograd",
        "status": "graded",
        "score": 1.0,
        "max_score": 57.0,
        "messages": [],
        "reveals_torch_values": False,
        "questions": [],
        "cell_errors": [{"cell": f"cell {i}", "error": "ZeroDivisionError: " + "x" * 480} for i in range(errors)],
    }


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    root = course_for_service(tmp_path_factory.mktemp("pages") / "course")
    service = make_service(load_config(root), jobs=1)
    service.tokens = {"mallory": new_token(), "alice": new_token(), "instructor": new_token()}  # type: ignore[attr-defined]
    service.store.set_student("mallory", service.tokens["mallory"], {})
    service.store.set_student("alice", service.tokens["alice"], {})
    service.store.add_instructor(service.tokens["instructor"])
    for _ in range(ATTEMPTS):
        attempt = service.store.submit("mallory", "autograd", b'{"cells": []}', service.policy)
        claimed, _ = service.store.claim_next()
        assert claimed.id == attempt.id
        assert service.store.record(
            attempt.id,
            GradedAttempt(
                status="graded",
                score=1.0,
                raw_score=1.0,
                late_penalty=0.0,
                max_score=57.0,
                feedback=Feedback.from_json(large_feedback("mallory")),
                integrity=(),
                seconds=0.1,
            ),
        )
    assert len(json.dumps(large_feedback("mallory"))) > 10**6
    yield service
    service.store.close()


@pytest.fixture
def client(service):
    return Client(create_app(service))


@pytest.fixture
def statements(service):
    """The SQL the store sends while the test runs."""
    sent: list[str] = []

    def seen(connection, cursor, statement, parameters, context, executemany):
        sent.append(statement)

    event.listen(service.store.engine, "before_cursor_execute", seen)
    yield sent
    event.remove(service.store.engine, "before_cursor_execute", seen)


def feedback_read(statements: list[str]) -> list[str]:
    return [s for s in statements if s.lstrip().upper().startswith("SELECT") and "attempts.feedback" in s]


def test_the_student_page_the_api_and_the_dashboard_read_no_feedback(service, client, statements):
    token = service.tokens["mallory"]
    page = client.get(f"/s/{token}/")
    assert page.status_code == 200
    assert page.text.count('<a href="attempts/') == ATTEMPTS
    listing = client.get(f"/i/{service.tokens['instructor']}/students/mallory")
    assert listing.status_code == 200
    dashboard = client.get(f"/i/{service.tokens['instructor']}/")
    assert dashboard.status_code == 200
    last = service.store.attempts_of("mallory", feedback=False)[-1]
    api = client.get(f"/api/submissions/{last.id}", headers={"Authorization": f"Bearer {token}"})
    assert api.status_code == 200
    assert api.json()["score"] == 1.0
    assert statements  # the check below sees what the store sends
    assert feedback_read(statements) == []
    # The feedback page reads the one document it shows, and says what it left out: one query, by the
    # student and the attempt's number (not the student's list of attempts first).
    statements.clear()
    shown = client.get(f"/s/{token}/attempts/{last.number}")
    assert shown.status_code == 200
    assert len(feedback_read(statements)) == 1
    assert len([s for s in statements if "FROM attempts" in s]) == 1, statements
    assert client.get(f"/s/{token}/attempts/{ATTEMPTS + 1}").status_code == 404
    assert client.get(f"/s/{token}/attempts/{2**40}").status_code == 404


def test_feedback_pages_and_the_class_summary_are_rendered_off_the_event_loop(service, client, monkeypatch):
    rendered: list[tuple[str, bool]] = []

    def on_the_loop() -> bool:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return False
        return True

    def spy(name, real):
        def rendering(*args, **kwargs):
            rendered.append((name, on_the_loop()))
            return real(*args, **kwargs)

        return rendering

    monkeypatch.setattr(student_pages, "render_html", spy("feedback", student_pages.render_html))
    monkeypatch.setattr(instructor_pages, "render_summary_html", spy("summary", instructor_pages.render_summary_html))
    last = service.store.attempts_of("mallory", feedback=False)[-1].number
    assert client.get(f"/s/{service.tokens['mallory']}/attempts/{last}").status_code == 200
    assert client.get(f"/i/{service.tokens['instructor']}/students/mallory/attempts/{last}").status_code == 200
    assert client.get(f"/i/{service.tokens['instructor']}/summary").status_code == 200
    assert rendered == [("feedback", False), ("feedback", False), ("summary", False)]


def test_one_students_pages_beyond_their_pace_are_refused_while_another_students_are_answered(
    service, client, monkeypatch, caplog
):
    """Two of mallory's page loads held in rendering: the third of theirs, and their API read, are answered 429
    with why and when to retry, while alice's page and upload are answered; once the two are done, mallory's pages
    are answered again."""
    monkeypatch.setattr(service, "page_gate", PageGate(in_flight=2, per_minute=120))  # the defaults, unused
    monkeypatch.setattr(service, "wait_seconds", 0)  # alice's upload is acknowledged (202) without its grading
    monkeypatch.setattr(access, "PAGE_REFUSAL_SECONDS", 0)  # refusals at once (the delay: the benchmark's)
    rendering, finish = threading.Semaphore(0), threading.Event()
    real = pages.student_page

    def held(record, *args, **kwargs):
        if record.student_id == "mallory":
            rendering.release()
            assert finish.wait(120)
        return real(record, *args, **kwargs)

    monkeypatch.setattr(pages, "student_page", held)
    mallory, alice = service.tokens["mallory"], service.tokens["alice"]
    caplog.set_level(logging.WARNING, logger="course.platforms.service.app")
    with ThreadPoolExecutor(4) as requests:
        try:
            loading = [requests.submit(client.get, f"/s/{mallory}/") for _ in range(2)]
            for _ in loading:
                assert rendering.acquire(timeout=120)
            third = requests.submit(client.get, f"/s/{mallory}/").result(timeout=120)
            assert third.status_code == 429
            assert "at most 2 at once and 120 a minute" in third.text
            assert third.headers["retry-after"] == "1"
            last = service.store.attempts_of("mallory", feedback=False)[-1].id
            api = requests.submit(
                client.get, f"/api/submissions/{last}", {"Authorization": f"Bearer {mallory}"}
            ).result(timeout=120)
            assert api.status_code == 429
            assert "wait 1 s, then reload" in api.json()["error"]
            assert api.json()["retry_after"] == 1
            assert "refused pages of mallory" in caplog.text
            other = requests.submit(client.get, f"/s/{alice}/").result(timeout=120)
            assert other.status_code == 200
            assert "autograd: alice" in other.text
            upload = requests.submit(
                client.get,
                "/api/submissions",
                {"Authorization": f"Bearer {alice}", "Content-Type": "application/json"},
                method="POST",
                body=notebook_bytes(submitted_notebook()),
            ).result(timeout=120)
            assert upload.status_code == 202, upload.text
            assert upload.json()["student_id"] == "alice"
        finally:
            finish.set()
        assert [future.result(timeout=120).status_code for future in loading] == [200, 200]
    assert client.get(f"/s/{mallory}/").status_code == 200


def test_the_page_gate_paces_a_student_after_a_burst_and_each_student_apart():
    now = [0.0]
    gate = PageGate(in_flight=2, per_minute=120, burst=20, clock=lambda: now[0])
    for _ in range(20):
        assert gate.enter("mallory") is None
        gate.leave("mallory")
    assert gate.enter("mallory") == pytest.approx(0.5)  # 120 a minute: one more every half second
    assert gate.enter("alice") is None  # another student's pace is their own
    now[0] += 0.5
    assert gate.enter("mallory") is None
    assert gate.enter("mallory") is not None  # the next half second's not yet come
    now[0] += 60
    assert gate.enter("mallory") is None  # a second in flight (the one above was never left)
    assert gate.enter("mallory") == 1.0  # a third at once: refused however much allowance is left
    assert "(at most 2 at once and 120 a minute); wait 1 s, then reload" in gate.refusal(1.0)
