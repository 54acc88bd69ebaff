"""An acknowledged submission is never lost: SIGKILL the server while it grades, start it again, and every
acknowledged attempt is graded exactly once."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import create_engine, text

from tests.support.helpers import add_cell, submitted_notebook
from tests.support.service import Server, course_for_service, notebook_bytes

pytestmark = pytest.mark.slow

STUDENTS = [f"s{index}" for index in range(6)]


def _rows(root) -> list:
    engine = create_engine(f"sqlite:///{root / 'service.db'}")
    try:
        with engine.connect() as db:
            return list(
                db.execute(text("SELECT id, student_id, status, score, results_written FROM attempts ORDER BY id"))
            )
    finally:
        engine.dispose()


def test_sigkill_mid_grading_then_restart_grades_every_acknowledged_attempt_exactly_once(tmp_path):
    root = course_for_service(tmp_path / "course")
    server = Server(root, wait=0.2, jobs=1)
    server.issue_tokens(STUDENTS)
    server.start()
    slow = notebook_bytes(add_cell(submitted_notebook(), "import time\ntime.sleep(2)"))
    acknowledged = {}
    try:
        for student in STUDENTS:
            reply = server.submit(student, slow)
            assert reply.status in (200, 202), reply.text
            acknowledged[reply.json["id"]] = student
        scratch = root / "service-work" / "autograd"  # the server's work files, not /tmp
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # kill while one attempt is being graded
            if any(server.get(s, i).json["status"] == "grading" for i, s in acknowledged.items()):
                break
            time.sleep(0.05)
        else:
            raise AssertionError("no attempt was ever being graded")
        server.kill()
        assert list(scratch.iterdir()) == []  # attempts are graded from the stored bytes: no file to leave behind
        before = _rows(root)
        assert {row.id for row in before} == set(acknowledged)  # stored before they were acknowledged
        assert any(row.status == "grading" for row in before)  # one was cut off mid-grading
        assert any(row.status == "queued" for row in before)

        server.start()
        for attempt_id, student in acknowledged.items():
            graded = server.wait_graded(student, attempt_id, timeout=180)
            assert (graded["status"], graded["score"]) == ("graded", 57)
        assert list(scratch.iterdir()) == []  # nothing left behind
    finally:
        server.stop()
    after = _rows(root)
    assert [row.id for row in after] == sorted(acknowledged)
    assert all(row.results_written == 1 for row in after), [tuple(row) for row in after]
    assert "interrupted by the last stop are graded again" in server.log.read_text()


def test_a_database_away_for_a_moment_stops_no_grading_thread(tmp_path):
    """The queue cannot be read for a while (here its table is renamed away and back; a database server
    restarting, or a lock held past the busy timeout, does the same): the grading threads say so and carry
    on, and the next upload is graded."""
    root = course_for_service(tmp_path / "course")
    server = Server(root, wait=0.2, jobs=1)
    server.issue_tokens(["alice"])
    server.start()
    engine = create_engine(f"sqlite:///{root / 'service.db'}")
    try:
        with engine.begin() as db:
            db.execute(text("ALTER TABLE attempts RENAME TO attempts_away"))
        deadline = time.monotonic() + 60
        while (
            "could not look at the queue" not in server.log.read_text()
            and "no such table" not in server.log.read_text()
        ):
            assert time.monotonic() < deadline, server.log.read_text()
            time.sleep(0.1)
        with engine.begin() as db:
            db.execute(text("ALTER TABLE attempts_away RENAME TO attempts"))
        reply = server.submit("alice", notebook_bytes(submitted_notebook()))
        assert reply.status in (200, 202), reply.text
        assert server.wait_graded("alice", reply.json["id"])["status"] == "graded"
        assert "Exception in thread" not in server.log.read_text()
    finally:
        engine.dispose()
        server.stop()
