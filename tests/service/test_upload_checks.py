"""Inputs that must get an answer, never a 500: a notebook nested too deeply, an attempt id past the
database's integers, one assignment's server asked about another assignment's attempts, and a course folder
the service cannot keep its work files in; and a start clears what a killed server left there."""

from __future__ import annotations

import pytest

from course.core.config import load_config
from course.core.errors import CourseError
from course.platforms.service.policy import ServicePolicy
from course.platforms.service.run import make_service
from course.platforms.service.store import Store
from course.platforms.service.uploads import notebook_problem
from course.platforms.service.worker import SCRATCH
from tests.support.service import course_for_service


def test_a_deeply_nested_upload_is_refused_with_a_message():
    assert notebook_problem(b"[" * 100_000 + b"]" * 100_000) == (
        "the upload is not a Jupyter notebook (.ipynb): its JSON is nested too deeply"
    )
    nested = b'{"cells": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert "nested too deeply" in notebook_problem(nested)


def test_an_attempt_id_beyond_the_databases_integers_is_no_attempt(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'service.db'}")
    assert store.attempt(2**63) is None
    assert store.attempt(2**64 + 5) is None
    assert store.attempt(0) is None


def test_servers_of_two_assignments_sharing_a_database_see_only_their_own(tmp_path):
    url = f"sqlite:///{tmp_path / 'service.db'}"
    Store(url).set_student("alice", "a-token", {})
    autograd, training = Store(url, "autograd"), Store(url, "training")
    first = training.submit("alice", "training", b"{}", ServicePolicy())
    assert autograd.claim_next() is None  # the autograd server never grades a training attempt
    assert autograd.attempt(first.id) is None
    assert autograd.attempts_of("alice") == []
    assert [a.id for a in training.attempts_of("alice")] == [first.id]
    claimed = training.claim_next()
    assert claimed is not None
    assert claimed[0].id == first.id
    assert autograd.requeue_interrupted() == 0  # nor puts another server's running attempt back in the queue
    assert training.requeue_interrupted() == 1


def test_a_course_folder_the_service_cannot_keep_its_work_files_in_is_said_before_it_starts(tmp_path):
    root = course_for_service(tmp_path / "course")
    (root / SCRATCH).write_text("a file where the service's folder would go\n")
    with pytest.raises(
        CourseError,
        match=r"cannot make .*service-work/autograd, where the service keeps its work "
        r"files \(uploads as they arrive\): .*; the service needs to write in the "
        r"course folder",
    ):
        make_service(load_config(root), database="sqlite://", jobs=1)


def test_a_start_clears_what_a_killed_server_left_behind(tmp_path):
    root = course_for_service(tmp_path / "course")
    leftover = root / SCRATCH / "autograd" / "attempt-7" / "alice" / "autograd" / "autograd.ipynb"
    leftover.parent.mkdir(parents=True)
    leftover.write_text("{}")
    service = make_service(load_config(root), database="sqlite://", jobs=1)
    assert service.grader.scratch == root / SCRATCH / "autograd"
    assert list(service.grader.scratch.iterdir()) == []
    assert service.grader.scratch.stat().st_mode & 0o077 == 0
    service.grader.stop()


def test_a_second_server_of_the_same_assignment_is_refused_while_the_first_runs(tmp_path):
    """On SQLite it would clear the first server's attempts in grading and take from the same queue: the refusal
    names PostgreSQL, where many processes are welcome (test_scale_out.py)."""
    root = course_for_service(tmp_path / "course")
    first = make_service(load_config(root), database="sqlite://", jobs=1)
    (first.grader.scratch / "attempt-3").mkdir()  # the first server at work
    with pytest.raises(
        CourseError,
        match=r"another `autograd-course serve` of assignment 'autograd' is running on "
        r"this course \(it holds .*service-work/autograd.lock\); a SQLite "
        r"database serves one process: stop it first, or run every process on "
        r"one PostgreSQL database \(--database postgresql\+psycopg://...\)",
    ):
        make_service(load_config(root), database="sqlite://", jobs=1)
    assert (first.grader.scratch / "attempt-3").is_dir()
    first.grader.stop()
    make_service(load_config(root), database="sqlite://", jobs=1).grader.stop()  # once it has stopped: fine


def test_a_service_folder_that_is_a_symbolic_link_is_refused(tmp_path):
    root = course_for_service(tmp_path / "course")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("not the service's\n")
    (root / SCRATCH).mkdir()
    (root / SCRATCH / "autograd").symlink_to(elsewhere)
    with pytest.raises(CourseError, match=r"service-work/autograd is a symbolic link"):
        make_service(load_config(root), database="sqlite://", jobs=1)
    assert (elsewhere / "keep.txt").read_text() == "not the service's\n"
