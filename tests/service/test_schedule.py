"""The order queued attempts are graded in: fair between students, honest work first (schedule.py), the
store claiming in that order, and a running service keeping one student's burst from holding up another."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, text

from course.platforms.service.policy import ServicePolicy
from course.platforms.service.schedule import SUSPECT_WAIT_SECONDS, Queued, Scheduler
from course.platforms.service.store import GRADING, Store, new_token
from tests.support.helpers import add_cell, submitted_notebook
from tests.support.service import NOW, Server, course_for_service, notebook_bytes, queue_of


def test_one_student_uploading_many_takes_turns_with_the_others():
    scheduler = Scheduler()
    queue = queue_of("mallory", "mallory", "mallory", "mallory", "alice", "bob")
    first = scheduler.pick(queue, [], NOW)
    assert first == 1
    # while mallory's first attempt is graded, her others wait and everyone else goes in order of arrival
    rest = [q for q in queue if q.id != first]
    second = scheduler.pick(rest, ["mallory"], NOW)
    third = scheduler.pick([q for q in rest if q.id != second], ["mallory", "alice"], NOW)
    assert (second, third) == (5, 6)
    assert scheduler.pick([q for q in queue if q.id in (2, 3, 4)], ["mallory"], NOW) is None


def _drain(scheduler: Scheduler, queue: list[Queued]) -> list[str]:
    """The order the queue is graded in, one attempt at a time."""
    order = []
    while queue:
        chosen = scheduler.pick(queue, [], NOW)
        order.append(next(q.student_id for q in queue if q.id == chosen))
        queue = [q for q in queue if q.id != chosen]
    return order


def test_students_with_many_queued_take_turns_and_newcomers_join_at_the_back():
    scheduler = Scheduler()
    assert _drain(scheduler, queue_of("mallory", "mallory", "mallory", "alice", "alice", "alice")) == [
        "mallory",
        "alice",
        "mallory",
        "alice",
        "mallory",
        "alice",
    ]
    assert scheduler.pick(queue_of("bob", first=10), [], NOW) == 10
    # bob's next joins the queue while his first is graded; dave's is taken meanwhile
    assert scheduler.pick(queue_of("bob", "dave", first=11), ["bob"], NOW) == 12
    # carol, never served, arrives after bob's next joined: she does not jump ahead of him
    assert scheduler.pick([Queued(11, "bob", NOW), Queued(13, "carol", NOW)], [], NOW) == 11


def test_a_student_whose_last_attempt_went_long_waits_behind_the_others_for_a_while():
    scheduler = Scheduler()
    scheduler.graded("mallory", went_long=True)
    queue = queue_of("mallory", "alice")
    assert scheduler.pick(queue, [], NOW) == 2  # mallory came first, but her last attempt went long
    assert scheduler.pick(queue[:1], [], NOW) == 1  # nobody else waiting: no grading run stays idle
    scheduler.graded("mallory", went_long=True)
    later = NOW + timedelta(seconds=SUSPECT_WAIT_SECONDS + 1)
    queue = [Queued(3, "mallory", NOW), Queued(4, "alice", later)]
    assert scheduler.pick(queue, [], later) == 3  # she has waited long enough: taken in her turn
    scheduler.graded("mallory", went_long=False)
    assert scheduler.pick(queue_of("mallory", "alice", first=5), [], NOW) == 5  # in turn again


def test_the_store_claims_in_the_schedulers_order(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'service.db'}", "autograd")
    for student in ("mallory", "alice"):
        store.set_student(student, new_token(), {})
    ids = [
        store.submit(student, "autograd", b"{}", ServicePolicy()).id
        for student in ("mallory", "mallory", "mallory", "alice")
    ]
    scheduler = Scheduler()
    claimed = store.claim_next(scheduler.pick)
    assert claimed is not None
    assert claimed[0].id == ids[0]
    assert store.attempt(ids[0]).status == GRADING
    claimed = store.claim_next(scheduler.pick)
    assert claimed is not None
    assert claimed[0].id == ids[3]  # alice's, before mallory's second
    assert store.claim_next(scheduler.pick) is None  # mallory's next waits for her first
    assert store.claim_next() is not None  # (the store's own order would take it)
    store.close()


@pytest.mark.slow
def test_a_student_uploading_many_at_once_does_not_hold_up_another(tmp_path):
    """mallory fires four slow uploads, two at a time (a third in flight is answered 429: test_edge.py), each
    queued after 0.2 s; alice's one upload, sent while mallory's first is graded, is graded before mallory's
    next: first come, first served would have graded all of mallory's first."""
    server = Server(course_for_service(tmp_path / "course"), wait=0.2, jobs=1)
    server.issue_tokens(["mallory", "alice"])
    server.start()
    try:
        slow = notebook_bytes(add_cell(submitted_notebook(), "import time\ntime.sleep(1.5)"))
        with ThreadPoolExecutor(2) as pool:
            replies = list(pool.map(lambda _: server.submit("mallory", slow), range(4)))
        assert all(reply.status in (200, 202) for reply in replies), [reply.text for reply in replies]
        mallorys = sorted(reply.json["id"] for reply in replies)
        deadline = time.monotonic() + 120
        while server.get("mallory", mallorys[0]).json["status"] == "queued":
            assert time.monotonic() < deadline, "mallory's first upload was never graded"
            time.sleep(0.05)
        reply = server.submit("alice", notebook_bytes(submitted_notebook()))
        assert reply.status in (200, 202), reply.text
        server.wait_graded("alice", reply.json["id"])
        for attempt_id in mallorys:
            server.wait_graded("mallory", attempt_id)
    finally:
        server.stop()
    engine = create_engine(f"sqlite:///{server.root / 'service.db'}")
    with engine.connect() as db:
        order = [row.student_id for row in db.execute(text("SELECT student_id FROM attempts ORDER BY graded_at"))]
    engine.dispose()
    assert order.index("alice") <= 1, order  # behind mallory's first at most, never behind her others
