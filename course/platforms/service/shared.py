"""Many `serve` processes on one PostgreSQL database: the queue, the fair turns and the claims live in the
database, so any number of processes, on one machine or many, behind one load balancer, grade one queue.

- **Claims are serialised per assignment** by a transaction-level advisory lock (`pg_advisory_xact_lock`): a
  claim reads the queue as it is (every process's attempts in grading included), picks with the scheduler of
  course/platforms/service/schedule.py, whose state (turns, who went long) is read from and written back to the
  database in the same transaction, and marks the attempt as being graded. So "one attempt in grading per
  student" and the fair turns hold across processes; a partial unique index makes the first an invariant
  of the database itself. (A claim is one short transaction per grading run; graders wait for it far less
  than for the run itself, so one lock per assignment costs nothing a course would notice.)
- **A claim names its process** (`claims.owner`), and every live process holds a session-level advisory lock
  on its own id for its whole life. When a process dies (SIGKILL, a lost machine), PostgreSQL ends its
  session and the lock goes with it; the next claim by any process puts that process's attempts back in
  the queue. No lease to tune, no clock to trust. (A machine that vanishes without closing its connections
  is noticed by TCP keepalives, which the store's connections ask for.)
- **Results are recorded only by the claim's owner**, in the transaction that removes the claim: a process
  that lost its session (and so its claims) meanwhile records nothing, and the attempt is graded once, by
  whoever claimed it next.

SQLite keeps the single-process design (store.py, worker.py): its claims and turns stay in the process. This
module is the store's companion and uses its queue (`Store.queue_in`), its statements (`claim_statement`,
`claimed_statement`) and its unsynced transactions (`Store.begin_unsynced`).
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import zlib

from sqlalchemy import Column, DateTime, ForeignKey, Integer, String, Table, Text, delete, select, text, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, OperationalError

from course.core.errors import CourseError
from course.platforms.service.schedule import Scheduler
from course.platforms.service.store import (
    GRADING,
    QUEUED,
    SCHEMA_LOCK,
    Attempt,
    GradedAttempt,
    Store,
    attempt_from_row,
    attempts,
    metadata,
    now_utc,
)

log = logging.getLogger(__name__)

# The first key of this project's advisory locks (PostgreSQL advisory locks are keyed by two int4s); the
# second is a process's id (LIVE) or an assignment's (QUEUE).
LIVE = 0x61670001  # held by every live serve process, on its own id, for its whole life
QUEUE = 0x61670002  # taken for the length of a claim, on the assignment's key

# Made by revision 0003 (migrations/).
claims = Table(
    "claims",
    metadata,
    Column("attempt_id", Integer, ForeignKey("attempts.id"), primary_key=True),
    Column("owner", Integer, nullable=False, index=True),  # the id of the process grading it
    Column("claimed_at", DateTime, nullable=False),
)
turns = Table(
    "grading_turns",
    metadata,
    Column("assignment", String(100), primary_key=True),
    Column("state", Text, nullable=False),  # the scheduler's state (schedule.py), as JSON
)

# "One attempt in grading per student", held by the database whatever a process does.
ONE_IN_GRADING = (
    f"CREATE UNIQUE INDEX IF NOT EXISTS attempts_one_in_grading ON attempts (student_id, assignment) "
    f"WHERE status = '{GRADING}'"
)
# Claims of this assignment whose process is gone: its session, and so its LIVE lock, has ended. (Only the
# assignment whose claim lock is held: two assignments' clean-ups never touch the same rows.)
_DEAD_CLAIMS = text("""
    DELETE FROM claims USING attempts
    WHERE claims.attempt_id = attempts.id AND attempts.assignment = :assignment AND claims.owner NOT IN (
        SELECT objid::bigint FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND classid::bigint = :live AND objsubid = 2
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))
    RETURNING claims.attempt_id""")
# ...and their attempts back in the queue, with any in grading that no claim names (left by an older version).
_BACK_TO_QUEUE = text("""
    UPDATE attempts SET status = :queued
    WHERE status = :grading AND assignment = :assignment
      AND (id = ANY(:dead) OR NOT EXISTS (SELECT 1 FROM claims WHERE attempt_id = attempts.id))""")


def assignment_key(assignment_name: str) -> int:
    """A stable int4 for the assignment's claim lock (a collision only makes two assignments take turns)."""
    return zlib.crc32(assignment_name.encode("utf-8")) & 0x7FFFFFFF


class Presence:
    """This process's liveness in the database: a connection of its own holding a session advisory lock on a
    random id, for as long as the process lives. `owner()` checks the connection and, should it have been
    lost (the database restarted, say), takes a new one with a new id: the old id's claims are then the
    dead process's, returned to the queue by whoever claims next."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._connection: Connection | None = None
        self._owner = 0
        self.owner()

    def owner(self) -> int:
        with self._lock:
            if self._connection is not None:
                try:
                    self._connection.exec_driver_sql("SELECT 1")
                    return self._owner
                except DBAPIError:
                    self._drop()
            connection = self._store.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            try:
                while True:
                    owner = 1 + secrets.randbelow(2**31 - 2)
                    if connection.execute(
                        text("SELECT pg_try_advisory_lock(:live, :owner)"), {"live": LIVE, "owner": owner}
                    ).scalar():
                        break
            except BaseException:
                connection.close()
                raise
            self._connection, self._owner = connection, owner
            return owner

    def _drop(self) -> None:
        if self._connection is not None:
            try:
                self._connection.invalidate()
                self._connection.close()
            except DBAPIError:
                pass
        self._connection = None

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                try:  # its lock released before it goes back to the pool (which keeps session locks)
                    self._connection.execute(
                        text("SELECT pg_advisory_unlock(:live, :owner)"), {"live": LIVE, "owner": self._owner}
                    )
                finally:
                    self._connection.close()
                self._connection = None


def _scheduler(db: Connection, assignment_name: str) -> Scheduler:
    state = db.execute(select(turns.c.state).where(turns.c.assignment == assignment_name)).scalar()
    return Scheduler.from_state(json.loads(state)) if state else Scheduler()


def _save(db: Connection, assignment_name: str, scheduler: Scheduler) -> None:
    state = json.dumps(scheduler.state(), separators=(",", ":"))
    if not db.execute(turns.update().where(turns.c.assignment == assignment_name).values(state=state)).rowcount:
        db.execute(turns.insert().values(assignment=assignment_name, state=state))


class SharedQueue:
    """The queue of one assignment, shared by every serve process on the database (see the module)."""

    def __init__(self, store: Store, assignment_name: str) -> None:
        self.store, self.assignment = store, assignment_name
        self.key = assignment_key(assignment_name)
        try:
            with store.begin() as db:  # the tables are the store's (migrations/, revision 0003); the rule is ours
                db.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK})
                db.exec_driver_sql(ONE_IN_GRADING)
            self.presence = Presence(store)
        except OperationalError as error:
            raise CourseError(f"cannot open the service's database: {error.orig}") from None

    def _hold(self, db: Connection) -> None:
        """The assignment's claim lock, until the transaction ends."""
        db.execute(text("SELECT pg_advisory_xact_lock(:queue, :key)"), {"queue": QUEUE, "key": self.key})

    def _return_dead(self, db: Connection) -> int:
        dead = [row.attempt_id for row in db.execute(_DEAD_CLAIMS, {"live": LIVE, "assignment": self.assignment})]
        return db.execute(
            _BACK_TO_QUEUE, {"dead": dead, "queued": QUEUED, "grading": GRADING, "assignment": self.assignment}
        ).rowcount

    def requeue_interrupted(self) -> int:
        """At start: the attempts of processes that are gone go back to the queue (never another live one's)."""
        with self.store.begin() as db:
            self._hold(db)
            return self._return_dead(db)

    def claim(self) -> tuple[Attempt, bytes] | None:
        """The next attempt in the fair order across every process (None: none may start now), claimed for
        this process; its notebook with it."""
        owner = self.presence.owner()
        with self.store.begin_unsynced() as db:
            self._hold(db)
            returned = self._return_dead(db)
            if returned:
                log.info(
                    f"a process that stopped was grading {returned} attempt{'s' if returned != 1 else ''}: "
                    "back in the queue"
                )
            queued, grading = self.store.queue_in(db)
            if not queued:
                return None
            scheduler = _scheduler(db, self.assignment)
            chosen = scheduler.pick(queued, grading, now_utc())
            _save(db, self.assignment, scheduler)  # the turns it took note of, even when nothing may start
            if chosen is None:
                return None
            db.execute(self.store.claim_statement, {"attempt_id": chosen})
            db.execute(claims.insert().values(attempt_id=chosen, owner=owner, claimed_at=now_utc()))
            row = db.execute(self.store.claimed_statement, {"attempt_id": chosen}).one()
            return attempt_from_row(row), row.notebook

    def record(self, attempt_id: int, student_id: str, results: GradedAttempt, *, went_long: bool) -> bool:
        """Record a graded attempt's results, if this process's claim on it still stands (False: it does not;
        another process has it now). What the run cost goes into the student's turns in the same transaction."""
        with self.store.begin_unsynced() as db:
            self._hold(db)
            mine = delete(claims).where(claims.c.attempt_id == attempt_id, claims.c.owner == self.presence.owner())
            if not db.execute(mine).rowcount:
                return False
            scheduler = _scheduler(db, self.assignment)
            scheduler.graded(student_id, went_long=went_long)
            _save(db, self.assignment, scheduler)
            return self.store.record_in(db, attempt_id, results)

    def give_back(self, attempt_id: int) -> None:
        """An attempt this process claimed but could not record: back in the queue, if its claim is still this
        process's (otherwise another process has it already)."""
        with self.store.begin_unsynced() as db:
            self._hold(db)
            mine = delete(claims).where(claims.c.attempt_id == attempt_id, claims.c.owner == self.presence.owner())
            if db.execute(mine).rowcount:
                db.execute(
                    update(attempts)
                    .where(attempts.c.id == attempt_id, attempts.c.status == GRADING)
                    .values(status=QUEUED)
                )

    def close(self) -> None:
        self.presence.close()


def owners_alive(db: Connection) -> list[int]:
    """The ids of the serve processes alive on this database (for tests and the curious)."""
    return [
        row[0]
        for row in db.execute(
            text(
                "SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND classid::bigint = :live "
                "AND objsubid = 2 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ),
            {"live": LIVE},
        )
    ]


__all__ = ["LIVE", "QUEUE", "Presence", "SharedQueue", "assignment_key", "claims", "owners_alive", "turns"]
