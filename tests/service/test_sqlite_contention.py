"""One SQLite service database opened by many processes at once on a busy machine, while another writes it
(issue 56): `serve` and its workers, `serve tokens` beside them, an earlier `serve` still running. e2fd90b failed
them now and then with "cannot open the service's database: database is locked" (under the README's fast loop,
on a busy 2-core machine): a connection switching a database in SQLite's rollback mode (an earlier version's) to
write-ahead logging that met another's write was answered at once, whatever the busy timeout (and before it, the
switch waited only pysqlite's default 5 s). Now each waits, and in every round eight processes open the database,
one migrates it, and all write, with no failure, while a process per core burns CPU."""

from __future__ import annotations

import multiprocessing
import os
import queue
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from course.core.errors import CourseError
from course.platforms.service.store import Store

PROCESSES, ROUNDS = 8, 20
BURN_SECONDS = 600  # a burner ends by itself after this, should the test's own cleanup never run
HOLD_SECONDS = 0.3  # how long another process holds the write lock as a round's processes open the database
WAIT_SECONDS = 120  # for one round's processes to meet, or one result to come: a hang fails, it does not hang
OLD = Path(__file__).parent / "databases" / "service-b99931e.sql"  # rollback mode, at no revision: migrated


@contextmanager
def busy_machine() -> Iterator[None]:
    """A process per core spinning, for as long as the block runs (and at most BURN_SECONDS), killed after."""
    spin = f"import time\nend = time.monotonic() + {BURN_SECONDS}\nwhile time.monotonic() < end:\n    pass\n"
    burners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 1)]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def open_and_write(index: int, urls: list[str], barrier, results) -> None:
    """One process: in each round, with the others at once and while the test holds the database's write lock,
    open that round's database (a Store: it migrates it or finds it migrated), then write to it as serve tokens
    and serve do (a read, then a write, in one transaction)."""
    from course.platforms.service.store import Store, new_token

    for number, url in enumerate(urls):
        try:
            barrier.wait(WAIT_SECONDS)  # all here: the test takes the write lock
            barrier.wait(WAIT_SECONDS)  # the test holds it: go
            store = Store(url)
            try:
                store.set_student(f"student{index}", new_token(), {})
                store.secret("csrf")
                store.requeue_interrupted()
            finally:
                store.close()
        except BaseException as error:  # every failure is reported by the test
            results.put((number, f"{type(error).__name__}: {error}"))
        else:
            results.put((number, None))


def write_while_they_open(url: str, number: int, barrier) -> None:
    """Another process's write (an earlier serve's, a serve tokens'), held for HOLD_SECONDS as a round's processes
    open the database: in rollback mode as the earlier version left it, else in write-ahead mode."""
    path = url.removeprefix("sqlite:///")
    barrier.wait(WAIT_SECONDS)
    db = sqlite3.connect(path, timeout=WAIT_SECONDS, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO settings (name, value) VALUES (?, 'another process')", (f"writer-{number}",))
        barrier.wait(WAIT_SECONDS)
        time.sleep(HOLD_SECONDS)  # the write's own work: what the others must wait for, not fail at
        db.execute("COMMIT")
    finally:
        db.close()


def databases(folder: Path, start: str) -> list[str]:
    urls = []
    for number in range(ROUNDS):
        path = folder / f"service-{number}.db"
        if start == "b99931e":
            with sqlite3.connect(path) as db:
                db.executescript(OLD.read_text(encoding="utf-8"))
            db.close()
        else:
            Store(f"sqlite:///{path}").close()
        urls.append(f"sqlite:///{path}")
    return urls


def contents(url: str) -> tuple[list[str], list[str], list[str]]:
    engine = create_engine(url)
    with engine.connect() as db:
        versions = [row[0] for row in db.execute(text("SELECT version_num FROM autograd_service_version"))]
        students = sorted(row[0] for row in db.execute(text("SELECT student_id FROM students")))
        settings = sorted(row[0] for row in db.execute(text("SELECT name FROM settings")))
    engine.dispose()
    return versions, students, settings


@pytest.mark.slow
@pytest.mark.alone  # its burners would starve another worker's sandboxed runs, which give way (tests/conftest.py)
@pytest.mark.parametrize("start", ["b99931e", "head"])
def test_eight_processes_opening_one_database_at_once_on_a_busy_machine_all_open_it(tmp_path, start):
    urls = databases(tmp_path, start)
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(PROCESSES + 1), context.Queue()
    workers = [
        context.Process(target=open_and_write, args=(index, urls, barrier, results)) for index in range(PROCESSES)
    ]
    found: list[tuple[int, str | None]] = []
    with busy_machine():
        for worker in workers:
            worker.start()
        try:
            for number, url in enumerate(urls):
                write_while_they_open(url, number, barrier)
            for _ in range(PROCESSES * ROUNDS):
                found.append(results.get(timeout=WAIT_SECONDS))
        except (threading.BrokenBarrierError, queue.Empty):
            found.append((-1, f"a process still opening after {WAIT_SECONDS} s"))
        finally:
            for worker in workers:
                worker.join(WAIT_SECONDS)
                if worker.is_alive():
                    worker.kill()
                    worker.join()
    failures = [f"round {number}: {failure}" for number, failure in found if failure is not None]
    assert failures == [], f"{len(failures)} of {PROCESSES * ROUNDS} failed: {failures[:5]}"
    old_rows = ["alice", "bob"] if start == "b99931e" else []
    for number, url in enumerate(urls):
        assert contents(url) == (
            ["0003"],
            sorted([*old_rows, *(f"student{i}" for i in range(PROCESSES))]),
            ["csrf", f"writer-{number}"],
        )


@pytest.mark.parametrize("mode", ["wal", "delete"])
def test_a_database_held_past_the_deadline_is_named_with_how_long_this_process_waited(tmp_path, monkeypatch, mode):
    """Past the busy deadline (BUSY_SECONDS, shortened here to 1 s) a Store says which database is held and how
    long it waited, in one sentence: in write-ahead mode (its migration's BEGIN IMMEDIATE waited) and in rollback
    mode (the switch to write-ahead logging waited). Fails on e2fd90b: 'database is locked', alone."""
    from course.platforms.service import engines

    url = f"sqlite:///{tmp_path / 'service.db'}"
    Store(url).close()
    held = sqlite3.connect(tmp_path / "service.db", isolation_level=None)
    try:
        held.execute(f"PRAGMA journal_mode={mode}")
        held.execute("BEGIN IMMEDIATE")
        monkeypatch.setattr(engines, "BUSY_SECONDS", 1)
        with pytest.raises(CourseError, match="is held by another process") as refused:
            Store(url)
    finally:
        held.close()
    said = str(refused.value)
    assert str(tmp_path / "service.db") in said, said
    waited = re.search(r"this one waited (\d+) s for it \(the limit is 1 s\)", said)
    assert waited is not None, said
    assert int(waited.group(1)) >= 1, said
