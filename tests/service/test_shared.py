"""The queue that serve processes share on PostgreSQL (course/platforms/service/shared.py): two stores with sessions of
their own stand for two processes. Fair turns and one attempt in grading per student hold across them, results
are recorded only by the claim's owner, and a process whose session ends gives its claims back."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from course.core.config import load_config
from course.core.errors import CourseError
from course.platforms.service.policy import ServicePolicy
from course.platforms.service.run import make_service
from course.platforms.service.schedule import Scheduler
from course.platforms.service.shared import SharedQueue, owners_alive
from course.platforms.service.store import Store
from tests.support.service import NOW, RESULTS, course_for_service, free_port, queue_of


def test_the_schedulers_state_survives_its_round_trip_through_json():
    scheduler = Scheduler()
    scheduler.graded("mallory", went_long=True)
    queue = queue_of("mallory", "alice", "alice")
    assert scheduler.pick(queue, [], NOW) == 2
    again = Scheduler.from_state(scheduler.state())
    assert again.state() == scheduler.state()
    assert again.pick([q for q in queue if q.id != 2], [], NOW) == scheduler.pick(
        [q for q in queue if q.id != 2], [], NOW
    )


@pytest.mark.slow
def test_processes_sharing_a_postgresql_queue_take_turns_and_give_back_what_a_dead_one_held(postgres_url):
    first, second = Store(postgres_url, "autograd"), Store(postgres_url, "autograd")
    try:
        for student in ("mallory", "alice"):
            first.set_student(student, f"{student}-token", {})
        mallory = [first.submit("mallory", "autograd", b"{}", ServicePolicy()).id for _ in range(3)]
        alice = second.submit("alice", "autograd", b"{}", ServicePolicy()).id
        one, two = SharedQueue(first, "autograd"), SharedQueue(second, "autograd")
        with first.begin() as db:
            assert set(owners_alive(db)) == {one.presence.owner(), two.presence.owner()}

        taken = one.claim()
        assert taken is not None
        assert taken[0].id == mallory[0]
        assert two.claim()[0].id == alice  # mallory's next waits for her first, whichever process asks
        assert two.claim() is None
        with first.begin() as db, pytest.raises(IntegrityError):  # and the database itself refuses it
            db.execute(text("UPDATE attempts SET status = 'grading' WHERE id = :id"), {"id": mallory[1]})

        assert not two.record(mallory[0], "mallory", RESULTS, went_long=False)  # not its claim
        two.give_back(mallory[0])  # nor its to give back: the claim stays the first process's
        assert two.claim() is None
        one.presence.close()  # the first process dies with mallory's first attempt claimed
        assert two.requeue_interrupted() == 1
        again = two.claim()
        assert again is not None
        assert again[0].id == mallory[0]  # back in the queue, claimed by the living process
        assert not one.record(mallory[0], "mallory", RESULTS, went_long=False)  # the dead owner records nothing
        assert two.record(mallory[0], "mallory", RESULTS, went_long=False)
        assert first.attempt(mallory[0]).results_written == 1
        two.close()
    finally:
        first.close()
        second.close()


def test_a_process_that_cannot_reach_postgresql_says_so_and_serves_nothing():
    with pytest.raises(CourseError, match=r"^cannot open the service's database: .*127\.0\.0\.1"):
        Store(f"postgresql+psycopg://autograd@127.0.0.1:{free_port()}/course")


def test_the_health_check_says_why_a_process_cannot_serve(tmp_path):
    root = course_for_service(tmp_path / "course")
    service = make_service(load_config(root), database=f"sqlite:///{tmp_path / 'service.db'}", jobs=1)
    try:
        assert service.healthy() == "the warm pool has no worker"  # not started yet
        with service.store.begin() as db:
            db.execute(text("ALTER TABLE attempts RENAME TO attempts_away"))
        assert service.healthy() == "the database cannot be reached"  # the details in the log only
    finally:
        service.grader.stop()
        service.store.close()
