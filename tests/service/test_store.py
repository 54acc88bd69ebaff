"""The service's storage and policies, on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select

from course.core.config import load_config
from course.core.errors import ConfigError
from course.pipeline.assignment import load_course_assignment
from course.pipeline.variants import numbers_for
from course.platforms.service import store as store_module
from course.platforms.service.policy import Refusal, ServicePolicy, attempt_numbers, counted, refusal
from course.platforms.service.results import student_records
from course.platforms.service.store import GRADING, QUEUED, Store, hash_token, new_token
from tests.support.helpers import ROOT
from tests.support.service import RESULTS, course_for_service


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def store(request, tmp_path):
    url = (
        f"sqlite:///{tmp_path / 'service.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    )
    opened = Store(url)
    yield opened
    opened.close()


def test_tokens_are_stored_only_as_hashes_and_found_again(store, tmp_path):
    token = new_token()
    store.set_student("alice", token, {"lms_id": "7"})
    assert store.student_for(token) == "alice"
    assert store.student_for(token[:-1]) is None
    assert store.student_for("") is None
    assert store.student_for(None) is None
    with store.engine.connect() as db:
        rows = list(db.execute(select(store_module.students)))
    assert rows[0].token_hash == hash_token(token)
    assert token not in repr(rows)
    if store.engine.dialect.name == "sqlite":
        assert token.encode() not in (tmp_path / "service.db").read_bytes()
        assert (tmp_path / "service.db").stat().st_mode & 0o077 == 0
    fresh = new_token()
    store.set_student("alice", fresh, {})
    assert store.student_for(token) is None
    assert store.student_for(fresh) == "alice"
    instructor = new_token()
    store.add_instructor(instructor)
    assert store.is_instructor(instructor)
    assert not store.is_instructor(fresh)
    assert store.student_for(instructor) is None


def test_attempts_are_claimed_in_order_and_recorded_once(store):
    store.set_student("alice", new_token(), {})
    store.set_student("bob", new_token(), {})
    policy = ServicePolicy()
    first = store.submit("alice", "autograd", b'{"cells": []}', policy)
    second = store.submit("bob", "autograd", b"{}", policy)
    assert (first.number, second.number, first.status) == (1, 1, QUEUED)
    claimed, notebook = store.claim_next()
    assert (claimed.id, notebook) == (first.id, b'{"cells": []}')
    assert store.attempt(first.id).status == GRADING
    assert store.record(first.id, RESULTS)
    assert not store.record(first.id, RESULTS)  # a second run cannot record the same attempt again
    assert store.attempt(first.id).results_written == 1
    numbered = store.attempt_numbered("alice", 1)  # as the feedback page finds it: one query
    assert (numbered.id, numbered.feedback) == (first.id, RESULTS.feedback)
    assert store.attempt_numbered("alice", 1, feedback=False).feedback is None
    assert [store.attempt_numbered(*key) for key in (("alice", 2), ("carol", 1), ("alice", 0), ("alice", 2**40))] == [
        None
    ] * 4
    claimed, _ = store.claim_next()
    assert claimed.id == second.id
    assert store.claim_next() is None
    assert store.requeue_interrupted() == 1  # the server stopped while bob's attempt was being graded
    assert store.claim_next()[0].id == second.id


def test_an_attempt_that_could_not_be_recorded_is_given_back_to_the_queue(store):
    """The database away when a graded attempt was to be recorded: the worker gives it back (worker._give_back),
    and it is claimed and graded again rather than held in grading until a restart."""
    store.set_student("alice", new_token(), {})
    attempt = store.submit("alice", "autograd", b"{}", ServicePolicy())
    claimed, _ = store.claim_next()
    assert store.claim_next() is None  # held in grading
    store.give_back(claimed.id)
    assert store.attempt(attempt.id).status == QUEUED
    assert store.claim_next()[0].id == attempt.id
    assert store.record(attempt.id, RESULTS)
    store.give_back(attempt.id)  # a recorded attempt stays recorded
    assert store.attempt(attempt.id).results_written == 1
    assert store.attempt(attempt.id).status != QUEUED


def test_concurrent_claims_never_take_the_same_attempt(store):
    store.set_student("alice", new_token(), {})
    ids = [store.submit("alice", "autograd", b"{}", ServicePolicy()).id for _ in range(20)]
    taken: list[int] = []
    lock = threading.Lock()

    def take() -> None:
        while (claimed := store.claim_next()) is not None:
            with lock:
                taken.append(claimed[0].id)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(taken) == ids


def test_the_first_requests_at_once_all_get_the_one_secret(store):
    """The CSRF key is made by the first request that needs it: several at once (a class opening its pages when
    the server has just started) once made all but one answer 500."""
    barrier = threading.Barrier(8)
    got: list[bytes | BaseException] = []

    def ask() -> None:
        barrier.wait()
        try:
            got.append(store.secret("csrf"))
        except BaseException as error:
            got.append(error)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(got)) == 1, got
    assert got[0] == store.secret("csrf")


def test_the_policy_refuses_with_when_to_retry():
    now = datetime(2026, 11, 30, 12, 0, 0)
    policy = ServicePolicy(attempts=3, cooldown_minutes=10)
    assert refusal(policy, [], now) is None
    wait = refusal(policy, [now - timedelta(minutes=4)], now)
    assert wait is not None
    assert wait.retry_after == 360
    assert wait.reopens_at == datetime(2026, 11, 30, 12, 6, 0)
    assert "allowed at 12:06:00 UTC, 6 min 00 s from now (a cooldown of 10 minutes" in wait.message
    one = refusal(replace(policy, cooldown_minutes=1), [now - timedelta(seconds=15)], now)
    assert one is not None
    assert "45 s from now (a cooldown of 1 minute between" in one.message  # not "1 minutes"
    assert refusal(policy, [now - timedelta(minutes=11)], now) is None
    spent = refusal(policy, [now - timedelta(hours=h) for h in (1, 2, 3)], now)
    assert spent is not None
    assert spent.retry_after is None
    assert "all 3 attempts" in spent.message


def test_a_student_cannot_fill_the_database_with_large_notebooks(store, tmp_path):
    """The default policy (no attempt limit, no cooldown) with notebooks at the upload limit: what one student
    stores per assignment is bounded (service.storage_mb), with a sentence; others still submit."""
    for student in ("mallory", "bob"):
        store.set_student(student, new_token(), {})
    policy = ServicePolicy()
    large = b"{" + b" " * (policy.upload_bytes - 2) + b"}"
    answers = [store.submit("mallory", "autograd", large, policy) for _ in range(30)]
    stored = [a for a in answers if not isinstance(a, Refusal)]
    assert len(stored) == 10  # of 2 MB, in the default 20 MB
    refused = answers[len(stored) :]
    assert all(isinstance(r, Refusal) and r.retry_after is None and r.limit == "storage_mb" for r in refused)
    assert refused[0].message.startswith(
        "your attempts at this assignment already take 20.0 MB, and this notebook "
        "(2.0 MB) would pass the limit of 20 MB per student"
    )
    assert not isinstance(store.submit("mallory", "another", large, policy), Refusal)  # per assignment
    assert not isinstance(store.submit("bob", "autograd", large, policy), Refusal)
    assert store.stored_bytes("bob") == len(large)  # what the student's page measures to show the form closed
    if store.engine.dialect.name == "sqlite":
        assert (tmp_path / "service.db").stat().st_size < 2 * 20 * 2**20 + 3 * policy.upload_bytes


def test_an_attempt_that_was_an_autograder_error_uses_up_nothing_and_never_counts(store):
    """Our failure is never the student's: it takes neither an attempt nor a cooldown, and is never the grade."""
    store.set_student("alice", new_token(), {})
    policy = ServicePolicy(attempts=2, cooldown_minutes=60, counts="last")
    first = store.submit("alice", "autograd", b"{}", policy)
    store.claim_next()
    assert store.record(first.id, replace(RESULTS, score=40.0))
    second = store.submit("alice", "autograd", b"{}", policy)
    assert isinstance(second, Refusal)  # the cooldown holds after a graded attempt: the test can fail
    with store.begin() as db:  # the cooldown over, as if an hour had passed
        db.execute(store_module.attempts.update().values(submitted_at=datetime(2020, 1, 1)))
    second = store.submit("alice", "autograd", b"{}", policy)
    store.claim_next()
    assert store.record(second.id, replace(RESULTS, status="autograder_error", score=0.0))
    third = store.submit("alice", "autograd", b"{}", policy)  # neither the limit of 2 nor the cooldown refuses
    assert not isinstance(third, Refusal)
    assert third.number == 3
    records = student_records(policy, ["alice"], store.attempts_of("alice"))
    assert records[0].counted is not None
    assert records[0].counted.id == first.id  # the last *graded* attempt counts, not the autograder error


def test_best_or_last_attempt_counts():
    scores = [(1, 40.0), (2, 57.0), (3, 50.0), (4, 57.0)]
    assert counted(ServicePolicy(counts="best"), scores) == 2  # the first of the best
    assert counted(ServicePolicy(counts="last"), scores) == 4
    assert counted(ServicePolicy(), []) is None


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"attempts": 0}, "service.attempts must be a whole number of at least 1"),
        ({"cooldown_minutes": -1}, "service.cooldown_minutes must be a number of minutes"),
        ({"counts": "first"}, "service.counts must be best or last"),
        ({"upload_kb": 10**9}, "larger than limits.notebook_mb"),
        ({"fresh_numbers_per_attempt": True}, "needs variants: true"),
        ({"atempts": 3}, "unknown key 'atempts'"),
    ],
)
def test_a_bad_policy_is_named_with_its_file_and_key(tmp_path, policy, message):
    root = course_for_service(tmp_path / "course", **policy)
    with pytest.raises(ConfigError, match=r"course\.yaml: service") as error:
        load_config(root)  # the course's settings are checked whole when they are loaded, by every command
    assert message in str(error.value)


def test_a_policy_that_is_not_a_mapping_is_refused(tmp_path):
    path = course_for_service(tmp_path / "course") / "source" / "course.yaml"
    path.write_text(path.read_text() + "\nservice: 3\n")
    with pytest.raises(ConfigError, match="service must be a mapping"):
        load_config(tmp_path / "course")


def test_fresh_numbers_per_attempt_keep_the_first_attempts_release_numbers(monkeypatch):
    monkeypatch.setenv("AUTOGRAD_COURSE_SECRET", "a test secret")
    config = replace(load_config(ROOT), variants=True)
    fresh = ServicePolicy(fresh_numbers_per_attempt=True)
    assignment = load_course_assignment(config, "autograd")
    content, defaults = assignment.content, assignment.default_params
    own = numbers_for(config, content, "alice", defaults)
    assert attempt_numbers(config, fresh, content, "alice", 1, defaults) == own
    later = [attempt_numbers(config, fresh, content, "alice", n, defaults) for n in (2, 3, 4)]
    assert all(numbers != own for numbers in later)
    assert later[0] != later[1]
    assert attempt_numbers(config, fresh, content, "alice", 2, defaults) == later[0]  # same attempt
    assert attempt_numbers(config, ServicePolicy(), content, "alice", 3, defaults) == own


def test_serve_tokens_writes_one_private_token_per_student_and_keeps_only_hashes(tmp_path, capsys):
    from course.cli import main

    root = course_for_service(tmp_path / "course")
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id,name,lms_id\nalice,Alice A,101\nbob,Bob B,102\n", encoding="utf-8")
    out = tmp_path / "tokens.csv"
    assert main(["--course", str(root), "serve", "tokens", str(roster), "--out", str(out)]) == 0
    assert "tokens.csv: 2 new student link(s)" in capsys.readouterr().out
    lines = out.read_text().splitlines()
    assert lines[0] == '"student_id","token","new"'  # every field quoted, as every CSV we write
    rows = [line.strip('"').split('","') for line in lines[1:]]
    assert all(new == "yes" for _, _, new in rows)
    tokens = {student: token for student, token, _ in rows}
    assert list(tokens) == ["alice", "bob"]
    assert len(set(tokens.values())) == 2
    instructor = (tmp_path / "tokens-instructor.txt").read_text().strip()
    for path in (out, tmp_path / "tokens-instructor.txt", root / "service.db"):
        assert path.stat().st_mode & 0o077 == 0, path
    store = Store(f"sqlite:///{root / 'service.db'}")
    try:
        assert store.student_for(tokens["bob"]) == "bob"
        assert store.is_instructor(instructor)
        assert store.students()["alice"] == {"name": "Alice A", "lms_id": "101"}
    finally:
        store.close()
    database = (root / "service.db").read_bytes()
    assert not any(token.encode() in database for token in [*tokens.values(), instructor])
    from nbgrader.api import Gradebook  # the roster's names reach nbgrader's student table (formgrader)

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        assert [(s.id, s.first_name, s.last_name, s.lms_user_id) for s in gradebook.students] == [
            ("alice", "Alice", "A", "101"),
            ("bob", "Bob", "B", "102"),
        ]


def test_serve_and_submit_say_what_is_wrong_in_one_line(tmp_path, capsys):
    from course.cli import main

    root = course_for_service(tmp_path / "course")
    assert (
        main(["--course", str(root), "serve", "tokens", str(tmp_path / "none.csv"), "--out", str(tmp_path / "t.csv")])
        == 1
    )
    assert "cannot read the roster" in capsys.readouterr().err
    notebook = tmp_path / "autograd.ipynb"
    notebook.write_text("{}")
    assert main(["submit", str(notebook), "--server", "ftp://example", "--token", "t"]) == 1
    assert "--server must be an http:// or https:// address" in capsys.readouterr().err
    assert main(["submit", str(notebook), "--server", "http://127.0.0.1:9", "--token", "t"]) == 1
    assert "cannot reach the server http://127.0.0.1:9/api/submissions" in capsys.readouterr().err
    assert main(["submit", str(tmp_path / "missing.ipynb"), "--server", "http://127.0.0.1:9", "--token", "t"]) == 1
    assert "missing.ipynb: cannot read the notebook" in capsys.readouterr().err
    assert main(["--course", str(root), "serve", "--database", "nosuchdb://x"]) == 1
    assert "database URL cannot be used" in capsys.readouterr().err


def test_no_new_token_starts_with_a_dash_that_submit_would_read_as_an_option(tmp_path):
    from course.cli import main

    tokens = [new_token() for _ in range(2000)]  # about 31 of 2000 would start with '-' by chance
    assert not [token for token in tokens if token.startswith("-")]
    assert len(set(tokens)) == len(tokens)
    notebook = tmp_path / "autograd.ipynb"
    notebook.write_text("{}", encoding="utf-8")
    # as a student types it (docs/students.md): each parses as the token, none as an option
    for token in tokens[:50]:
        assert main(["submit", str(notebook), "--server", "ftp://example", "--token", token]) == 1
