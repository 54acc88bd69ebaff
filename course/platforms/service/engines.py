"""The service database's SQLAlchemy engines, and how a SQLite one waits for another process (issue 56).

Several processes open one SQLite database: `serve` and its workers, `serve tokens` beside them, a second `serve`
started by mistake. SQLite lets one write at a time; the others must wait for the lock, not fail at once:
- every connection waits up to BUSY_SECONDS for a lock (the driver's own busy timeout, set as the connection
  opens, before its first statement: the switch to write-ahead logging takes the write lock too, and a
  connection that waited only the driver's default 5 s there failed while another process migrated, under load);
- a transaction that writes takes the write lock with its first statement (BEGIN IMMEDIATE), not at its first
  write: one that has read first and then finds another process's write in between cannot wait (SQLite answers
  "database is locked" at once, whatever the busy timeout), so a migration that decides from what it reads, a
  `serve tokens` that reads the students and then writes, and a grader's claim would each fail after a few
  milliseconds. Readers (`Engine.connect`) keep a plain deferred BEGIN: with write-ahead logging they never wait.
Past BUSY_SECONDS, `held_sentence` says which database was held and how long the process waited.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, OperationalError

from course.core.errors import CourseError
from course.core.files import private_sqlite

BUSY_SECONDS = 30  # how long a SQLite connection waits for another process's lock before it says so
WRITES = "autograd_writes"  # the execution option of an engine whose transactions write (BEGIN IMMEDIATE)

# A database server that does not answer is said within 10 s, not waited for, and one that vanished is noticed
# by TCP keepalives within about a minute. (The other way round, PostgreSQL's own tcp_keepalives_* settings end
# the session of a serve process whose machine vanished, and so free its claims: shared.py, docs/service.md.)
POSTGRES_CONNECT = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}


def open_engines(url: str) -> tuple[Engine, Engine, bool]:
    """The engines on `url`: the one whose commits wait for the disk, the one whose commits need not (on
    PostgreSQL the same one: its transactions say so themselves), and whether the database is SQLite."""
    try:
        backend = make_url(url).get_backend_name()
        if backend != "sqlite":
            # A database server may drop idle connections: each is checked when taken from the pool. A SQLite
            # file has no server to go away, and the check would be one more statement per request.
            connect = POSTGRES_CONNECT if backend == "postgresql" else {}
            engine = create_engine(url, pool_pre_ping=True, connect_args=connect)
            return engine, engine, False
        synced = create_engine(url, connect_args={"timeout": BUSY_SECONDS})
    except (ArgumentError, ImportError) as error:
        raise CourseError(f"the service's database URL cannot be used: {error}") from None
    # Notebooks and token hashes: the grader's user only, from the first byte (and its -wal file).
    private_sqlite(synced.url.database)
    unsynced = create_engine(url, connect_args={"timeout": BUSY_SECONDS})
    for engine, pragmas in ((synced, _sqlite_pragmas), (unsynced, _sqlite_unsynced_pragmas)):
        event.listen(engine, "connect", pragmas)
        event.listen(engine, "begin", _sqlite_begin)
    return synced, unsynced, True


def writing(engine: Engine) -> Engine:
    """`engine` (sharing its connections) for transactions that write: on SQLite they take the write lock first."""
    return engine.execution_options(**{WRITES: True})


def held_sentence(where: str, error: OperationalError, waited: float) -> str | None:
    """The sentence for a SQLite database another process held past BUSY_SECONDS (None: `error` is another)."""
    if "locked" not in str(error.orig) and "busy" not in str(error.orig):
        return None
    return (
        f"the service's database {where} is held by another process (a serve or serve tokens migrating or "
        f"writing it): this one waited {waited:.0f} s for it (the limit is {BUSY_SECONDS} s); try again once that "
        "process is done, or stop the one that holds it"
    )


def _sqlite_begin(connection: Connection) -> None:
    # The driver begins no transaction of its own (isolation_level None, below): this is every transaction's BEGIN.
    immediate = connection.get_execution_options().get(WRITES)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def _sqlite_pragmas(connection: Any, _record: Any) -> None:
    # Transactions are begun by _sqlite_begin only: pysqlite's own would begin at the first write, too late to wait.
    connection.isolation_level = None
    cursor = connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={BUSY_SECONDS * 1000}")  # as the driver's timeout, before any statement
    _write_ahead(cursor)  # readers never wait for the grader's writes
    cursor.execute("PRAGMA synchronous=FULL")  # a commit is on disk before the student hears of it
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _write_ahead(cursor: Any) -> None:
    """Write-ahead logging, waiting for other processes as the busy timeout would. A database made in SQLite's
    rollback mode (an earlier version's, or one made by another tool) is switched by the first connection to ask:
    the switch reads the database and then writes its header, and a writer in between (another process switching
    it, or writing) answers "database is locked" at once, which no busy timeout waits for; so it is asked again
    until BUSY_SECONDS have passed. (Once in write-ahead mode, asking again only reads.)"""
    deadline = time.monotonic() + BUSY_SECONDS
    pause = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def _sqlite_unsynced_pragmas(connection: Any, record: Any) -> None:
    _sqlite_pragmas(connection, record)
    cursor = connection.cursor()
    # With write-ahead logging, a commit is whole or absent after any crash either way; NORMAL only leaves the
    # last commits to the operating system's next flush instead of waiting for the disk.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
