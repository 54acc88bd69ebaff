"""A page costs what it shows: the service's pages and the API read no feedback they do not display, and what is
rendered from a feedback document (large, for a notebook of many raising cells) is rendered off the event loop.

In process: the real app, store (SQLite) and grader (its warm pool is never started: nothing here is graded), with
attempts written into the store as a grading run records them. What is read is the SQL the store sends."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from sqlalchemy import event

from course.config import load_config
from course.service import app as app_module
from course.service.app import create_app
from course.service.run import make_service
from course.service.store import new_token

from .conftest import course_for_service

ATTEMPTS = 20


def large_feedback(student: str, errors: int = 2000) -> dict:
    """About 1 MB: what a notebook of 2000 raising cells made before a feedback's errors were capped (as old
    attempts in a database still hold)."""
    return {"student_id": student, "assignment": "autograd", "status": "graded", "score": 1.0, "max_score": 57.0,
            "messages": [], "reveals_torch_values": False, "questions": [],
            "cell_errors": [{"cell": f"cell {i}", "error": "ZeroDivisionError: " + "x" * 480} for i in range(errors)]}


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    root = course_for_service(tmp_path_factory.mktemp("pages") / "course")
    service = make_service(load_config(root), jobs=1)
    service.tokens = {"mallory": new_token(), "instructor": new_token()}  # type: ignore[attr-defined]
    service.store.set_student("mallory", service.tokens["mallory"], {})
    service.store.add_instructor(service.tokens["instructor"])
    for _ in range(ATTEMPTS):
        attempt = service.store.submit("mallory", "autograd", b'{"cells": []}', service.policy)
        claimed, _ = service.store.claim_next()
        assert claimed.id == attempt.id
        assert service.store.record(attempt.id, status="graded", score=1.0, raw_score=1.0, late_penalty=0.0,
                                    max_score=57.0, feedback=large_feedback("mallory"), integrity=[], seconds=0.1)
    assert len(json.dumps(large_feedback("mallory"))) > 10**6
    yield service
    service.store.close()


@dataclass
class Answer:
    status_code: int
    text: str

    def json(self) -> dict:
        return json.loads(self.text)


@dataclass
class Client:
    """GET requests straight into the ASGI app (its lifespan, which would start the warm pool, is not run)."""

    app: object

    def get(self, path: str, headers: dict[str, str] | None = None) -> Answer:
        # A thread of its own for the event loop: the browser tests' Playwright, alive for the whole session,
        # keeps a loop running in this one.
        with ThreadPoolExecutor(1) as thread:
            return thread.submit(asyncio.run, self._get(path, headers or {})).result()

    async def _get(self, path: str, headers: dict[str, str]) -> Answer:
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
                 "headers": [(b"host", b"127.0.0.1"), *((k.lower().encode(), v.encode()) for k, v in headers.items())],
                 "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 80)}
        sent: list[dict] = []

        async def receive() -> dict:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict) -> None:
            sent.append(message)

        await self.app(scope, receive, send)  # type: ignore[operator]
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return Answer(sent[0]["status"], body.decode("utf-8"))


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

    monkeypatch.setattr(app_module, "render_html", spy("feedback", app_module.render_html))
    monkeypatch.setattr(app_module, "render_summary_html", spy("summary", app_module.render_summary_html))
    last = service.store.attempts_of("mallory", feedback=False)[-1].number
    assert client.get(f"/s/{service.tokens['mallory']}/attempts/{last}").status_code == 200
    assert client.get(f"/i/{service.tokens['instructor']}/students/mallory/attempts/{last}").status_code == 200
    assert client.get(f"/i/{service.tokens['instructor']}/summary").status_code == 200
    assert rendered == [("feedback", False), ("feedback", False), ("summary", False)]
