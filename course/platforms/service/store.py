"""The service's storage, through SQLAlchemy: SQLite in the course folder by default, PostgreSQL by URL.

Students (a hash of their token, never the token), instructors (the same), and attempts: the notebook's
bytes, when it came, its status, score and feedback. An attempt is committed before the student hears
of it, and its results are written only by the one grading run that claimed it, so an acknowledged
attempt is graded exactly once even across a crash (see `claim_next`, `record`, `requeue_interrupted`).

Only storing an attempt waits for the disk (fsync) before it returns. Claiming an attempt and recording its
results are committed without waiting: a killed server loses neither (they are in the operating system's
hands when the commit returns), and should the machine itself lose power the moment after, the attempt is
still stored, as queued or being graded, and is graded again at the next start, once.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Column,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    bindparam,
    func,
    select,
    text,
    update,
)
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, OperationalError, SQLAlchemyError

from course.core.errors import CourseError, TokenRetired
from course.core.status import GRADING_GIVES, Status
from course.core.text import safe_text
from course.pipeline.feedback_model import Feedback, FeedbackError
from course.pipeline.submission import student_id_problem
from course.platforms.service.engines import held_sentence, open_engines, writing
from course.platforms.service.migrations import head, migrate
from course.platforms.service.migrations.at_head import check_at_head
from course.platforms.service.policy import Refusal, ServicePolicy, refusal
from course.platforms.service.schedule import Queued

QUEUED, GRADING = "queued", "grading"
# The PostgreSQL advisory lock (one bigint key) under which a process migrates the database (migrations/): two
# processes starting at once would otherwise both create or alter its tables, and one fail.
SCHEMA_LOCK = 0x6167000000000003
TOKEN_BYTES = 32

# The tables as this code reads and writes them. A database gets them from the revisions in migrations/, never
# from `create_all`: a change here is a new revision there (CONTRIBUTING.md), and test_migrations checks they agree.
metadata = MetaData()
students = Table(
    "students",
    metadata,
    Column("student_id", String(100), primary_key=True),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("lms", Text, nullable=False, default="{}"),  # the roster's LMS columns, for the Canvas export
)
instructors = Table(
    "instructors",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("token_hash", String(64), nullable=False, unique=True),
)
attempts = Table(
    "attempts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("student_id", String(100), ForeignKey("students.student_id"), nullable=False, index=True),
    Column("assignment", String(100), nullable=False),
    Column("number", Integer, nullable=False),  # 1, 2, ... per student and assignment
    Column("submitted_at", DateTime, nullable=False),  # naive UTC, as nbgrader keeps times
    Column("status", String(20), nullable=False, index=True),
    Column("score", Float),
    Column("raw_score", Float),
    Column("late_penalty", Float),
    Column("max_score", Float),
    Column("integrity", Text),  # JSON list: what the grader saw (instructor only)
    Column("graded_at", DateTime),
    Column("seconds", Float),
    Column("results_written", Integer, nullable=False, default=0),  # how many grading runs recorded results
    # The large values last: SQLite keeps a row's columns in order, and reaching a column stored after a large one
    # reads every page of it. With the notebook and the feedback in the middle, listing a student's 20 attempts
    # (their scores) read 20 MB; now it reads the small columns only. (A database made before keeps its order.)
    Column("feedback", Text),  # the feedback JSON the feedback page is rendered from
    Column("notebook", LargeBinary, nullable=False),
    UniqueConstraint("student_id", "assignment", "number"),
)
# Tokens that no longer open anything, kept by their hash so that their links can say why (410, access.py) rather
# than "not found": a student's revoked token (it stays their row's token_hash until they get a new one), a
# student's replaced token, an instructor's replaced token (student_id NULL). Made by revision 0002 (migrations/).
retired_tokens = Table(
    "retired_tokens",
    metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("student_id", String(100), ForeignKey("students.student_id"), nullable=True),  # NULL: an instructor's
    Column("reason", String(20), nullable=False),  # REVOKED or REPLACED
    Column("retired_at", DateTime, nullable=False),  # naive UTC
)
REVOKED, REPLACED = "revoked", "replaced"


settings = Table(
    "settings",
    metadata,
    Column("name", String(50), primary_key=True),
    Column("value", Text, nullable=False),
)


TOKEN_HASH = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class TokenRow:
    """A student's row as `serve tokens` reads it (checked: Store.token_rows)."""

    student_id: str
    token_hash: str
    lms: dict[str, str]
    revoked: bool


def _lms_column(student_id: str, value: Any) -> dict[str, str]:
    """A row's LMS columns as this package writes them (a JSON object of strings), or CourseError naming the row."""
    try:
        lms = json.loads(value)
    except (TypeError, ValueError):
        lms = None
    if not (isinstance(lms, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in lms.items())):
        raise CourseError(
            f"the service's database: the lms column of student {safe_text(str(student_id), 120)!r} "
            "is not a JSON object of text: mend that row, or run serve tokens with the roster again"
        )
    return lms


def hash_token(token: str) -> str:
    """A token's SHA-256 (tokens are 256 random bits, so a fast hash is enough: nothing to brute-force)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def new_token() -> str:
    """A secret token, never starting with '-': students pass it as `submit --token <token>`, where argparse would
    read one that does as an option ("expected one argument")."""
    while True:
        token = secrets.token_urlsafe(TOKEN_BYTES)
        if not token.startswith("-"):
            return token


def now_utc() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


@dataclass(frozen=True)
class Attempt:
    id: int
    student_id: str
    assignment: str
    number: int
    submitted_at: datetime
    status: str
    score: float | None
    max_score: float | None
    late_penalty: float | None
    feedback: Feedback | None
    integrity: list[str]
    seconds: float | None
    results_written: int

    @property
    def done(self) -> bool:
        return self.status not in (QUEUED, GRADING)

    def recorded(self, results: GradedAttempt) -> Attempt:
        """This attempt as the store holds it once `results` are recorded."""
        return replace(
            self,
            status=results.status,
            score=results.score,
            max_score=results.max_score,
            late_penalty=results.late_penalty,
            feedback=results.feedback,
            integrity=list(results.integrity),
            seconds=results.seconds,
            results_written=self.results_written + 1,
        )


@dataclass(frozen=True)
class GradedAttempt:
    """What one grading run found for an attempt: the worker builds it, the store records it (Store.record)."""

    status: str
    score: float
    raw_score: float
    late_penalty: float
    max_score: float
    feedback: Feedback
    integrity: tuple[str, ...]
    seconds: float

    def row_values(self) -> dict[str, Any]:
        """The attempts row's columns these results fill (graded_at: the time of the call)."""
        return {
            "status": self.status,
            "score": self.score,
            "raw_score": self.raw_score,
            "late_penalty": self.late_penalty,
            "max_score": self.max_score,
            "feedback": json.dumps(self.feedback.to_json()),
            "integrity": json.dumps(list(self.integrity)),
            "graded_at": now_utc(),
            "seconds": self.seconds,
        }


def _status(row: Any) -> str:
    """A row's status as this package writes it (queued, grading, or what grading gave), or CourseError naming it."""
    if row.status in (QUEUED, GRADING):
        return str(row.status)
    try:
        given = Status.read(row.status)
    except ValueError:
        given = None
    if given not in GRADING_GIVES:  # `missing` is a grades row's: no attempt is ever stored as one
        raise CourseError(
            f"the service's database: attempt {row.id}'s status {safe_text(str(row.status), 60)!r} is "
            f"not one of {', '.join((QUEUED, GRADING, *GRADING_GIVES))}: mend that row"
        )
    return given


def _feedback(attempt_id: int, text: str) -> Feedback:
    """A row's feedback document, read back as input: a FeedbackError (a CourseError) naming the row when it is
    not one grading writes, as for a status (_status); the pages say so with a 503, never a 500."""
    where = f"the service's database: attempt {attempt_id}'s feedback"
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        raise FeedbackError(f"{where} is not JSON this service wrote: mend that row") from None
    return Feedback.from_json(data, where=where, then="mend that row")


def attempt_from_row(row: Any) -> Attempt:
    """One stored row of `attempts` as an Attempt, its status and feedback read back as the input they are."""
    feedback = row._mapping.get("feedback")
    return Attempt(
        row.id,
        row.student_id,
        row.assignment,
        row.number,
        row.submitted_at,
        _status(row),
        row.score,
        row.max_score,
        row.late_penalty,
        _feedback(row.id, feedback) if feedback else None,
        json.loads(row.integrity) if row.integrity else [],
        row.seconds,
        row.results_written,
    )


RESULT_COLUMNS = (
    "status",
    "score",
    "raw_score",
    "late_penalty",
    "max_score",
    "feedback",
    "integrity",
    "graded_at",
    "seconds",
)  # what a grading run records
SUMMARY_COLUMNS = [c for c in attempts.c if c.name != "notebook"]
LIST_COLUMNS = [c for c in SUMMARY_COLUMNS if c.name != "feedback"]  # a class's worth of attempts, feedback apart


# Given the queued attempts (in order of arrival), the students of the attempts being graded and the time: the id
# of the attempt to claim, or None (see course/platforms/service/schedule.py).
Pick = Callable[[list[Queued], list[str], datetime], int | None]


def database_url(url: str | None, course_root: Path) -> str:
    return url or f"sqlite:///{course_root / 'service.db'}"


def shown_url(url: str | None, course_root: Path) -> str:
    """The database's URL as it may be printed: its password hidden."""
    full = database_url(url, course_root)
    try:
        return make_url(full).render_as_string(hide_password=True)
    except ArgumentError:
        return "(an unreadable URL)"


class Store:
    """The service's database. With `assignment`, every attempt it reads, claims or requeues is that
    assignment's: servers of different assignments can share one database without seeing each other's work."""

    def __init__(self, url: str, assignment_name: str | None = None) -> None:
        self.assignment = assignment_name
        # The same notebook's autograder errors count from this process's start: an instructor who mended our
        # fault restarts the service, and a student's notebook refused for those errors is taken again.
        self.started = now_utc()
        self.engine, self._unsynced, sqlite = open_engines(url)
        # Transactions that write take SQLite's write lock first (engines.py); PostgreSQL's begin as the others do.
        self._writes, self._unsynced_writes = writing(self.engine), writing(self._unsynced)
        where = self.engine.url.render_as_string(hide_password=True)
        began = time.monotonic()
        try:
            self._migrate(where)
        except OperationalError as error:
            held = held_sentence(where, error, time.monotonic() - began) if sqlite else None
            raise CourseError(held or f"cannot open the service's database: {error.orig}") from None
        # Attempts are counted under this lock within a process, and under the student's row lock across the
        # processes of a PostgreSQL database (`submit`).
        self._submit_lock = threading.Lock()
        self._build_statements()

    def _build_statements(self) -> None:
        """The statements every upload runs, built once."""
        # Once, here: SQLAlchemy caches their compiled form by their shape, so each upload only binds values.
        self._by_id = {
            feedback: self._mine(
                select(*(SUMMARY_COLUMNS if feedback else LIST_COLUMNS)).where(attempts.c.id == bindparam("attempt_id"))
            )
            for feedback in (True, False)
        }
        self._by_number = {
            feedback: self._mine(
                select(*(SUMMARY_COLUMNS if feedback else LIST_COLUMNS)).where(
                    attempts.c.student_id == bindparam("student_id"), attempts.c.number == bindparam("number")
                )
            )
            for feedback in (True, False)
        }  # the unique (student, assignment, number) key's index
        self.queue_statement = self._mine(
            select(attempts.c.id, attempts.c.student_id, attempts.c.submitted_at, attempts.c.status)
            .where(attempts.c.status.in_((QUEUED, GRADING)))
            .order_by(attempts.c.id)
        )
        self.claim_statement = (
            update(attempts)
            .where(attempts.c.id == bindparam("attempt_id"), attempts.c.status == QUEUED)
            .values(status=GRADING)
        )
        self.claimed_statement = select(*LIST_COLUMNS, attempts.c.notebook).where(
            attempts.c.id == bindparam("attempt_id")
        )
        self._record = (
            update(attempts)
            .where(attempts.c.id == bindparam("attempt_id"), attempts.c.status == GRADING)
            .values(
                {
                    **{name: bindparam(f"new_{name}") for name in RESULT_COLUMNS},
                    "results_written": attempts.c.results_written + 1,
                }
            )
        )
        # A student's token, and whether it is revoked (its hash among the retired ones): one indexed lookup each.
        self._token = (
            select(students.c.student_id, students.c.token_hash, retired_tokens.c.reason)
            .select_from(students.outerjoin(retired_tokens, retired_tokens.c.token_hash == students.c.token_hash))
            .where(students.c.token_hash == bindparam("digest"))
        )

    def _migrate(self, where: str) -> None:
        """The database brought to this code's schema (migrations/) and checked against it (migrations/at_head.py),
        by one process at a time: of processes opening it at once, the first migrates under the database's own lock
        (PostgreSQL: an advisory lock; SQLite: its write lock, taken by BEGIN IMMEDIATE before the version is read:
        engines.py) and the others wait for it and then find it done."""
        try:
            with self._writes.begin() as db:
                if db.dialect.name == "postgresql":  # held until the transaction ends, whatever ends it
                    db.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK})
                migrate(db, where)
                check_at_head(db, where, head(), metadata)
        except OperationalError:
            raise  # the database cannot be reached or is busy: said by __init__
        except SQLAlchemyError as error:  # the whole migration is one transaction: nothing of it is left
            raise CourseError(
                f"the service's database {where}: bringing it to this version's schema failed and "
                f"changed nothing ({safe_text(str(getattr(error, 'orig', error)), 300)}): check that "
                "its user may create and alter tables"
            ) from None

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        with self._writes.begin() as connection:
            yield connection

    @contextmanager
    def begin_unsynced(self) -> Iterator[Connection]:
        with self._unsynced_writes.begin() as connection:
            if connection.dialect.name == "postgresql":
                connection.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")
            yield connection

    def close(self) -> None:
        self.engine.dispose()
        self._unsynced.dispose()

    # ------------------------------------------------------------------ tokens
    def set_student(self, student_id: str, token: str, lms: dict[str, str]) -> None:
        """Add the student, or give them a new token (the old one stops working, and its link says it was
        replaced; a revoked student can use the new one)."""
        with self.begin() as db:
            values = {"token_hash": hash_token(token), "lms": json.dumps(lms, sort_keys=True)}
            row = db.execute(select(students.c.token_hash).where(students.c.student_id == student_id)).first()
            if row is None:
                db.execute(students.insert().values(student_id=student_id, **values))
                return
            self._retire(db, [row.token_hash], student_id, REPLACED)
            db.execute(update(students).where(students.c.student_id == student_id).values(**values))

    def add_students(
        self,
        new: dict[str, tuple[str, dict[str, str]]],
        *,
        lms: dict[str, dict[str, str]] | None = None,
        instructor: str | None = None,
    ) -> None:
        """Students who have no row yet, each with (token, LMS columns); new LMS columns for students who have one
        (their tokens left as they are); with `instructor`, the one instructor token (`replace_instructors`). One
        transaction: all or none. A student added meanwhile (another `serve tokens` at the same time) fails the
        whole with IntegrityError."""
        with self.begin() as db:
            for student_id, (token, columns) in new.items():
                db.execute(
                    students.insert().values(
                        student_id=student_id, token_hash=hash_token(token), lms=json.dumps(columns, sort_keys=True)
                    )
                )
            for student_id, columns in (lms or {}).items():
                db.execute(
                    update(students)
                    .where(students.c.student_id == student_id)
                    .values(lms=json.dumps(columns, sort_keys=True))
                )
            if instructor is not None:
                self._replace_instructors(db, instructor)

    def rotate_students(self, tokens: dict[str, str]) -> None:
        """A new token for each of these students (who have a row), in one transaction: their old ones stop working
        and say they were replaced (a revoked one keeps saying revoked); the new ones work, revoked or not."""
        with self.begin() as db:
            for student_id, token in tokens.items():
                row = db.execute(
                    select(students.c.token_hash).where(students.c.student_id == student_id).with_for_update()
                ).first()
                if row is None:
                    raise CourseError(f"{student_id!r} has no token in the service's database: nothing changed")
                self._retire(db, [row.token_hash], student_id, REPLACED)
                db.execute(
                    update(students).where(students.c.student_id == student_id).values(token_hash=hash_token(token))
                )

    def revoke_students(self, student_ids: list[str]) -> list[str]:
        """These students' tokens stop working (their links say they were revoked), in one transaction; their rows
        and attempts stay. Returns those revoked now (not before). CourseError: one has no row (nothing changed)."""
        revoked = []
        with self.begin() as db:
            for student_id in student_ids:
                row = db.execute(
                    select(students.c.token_hash).where(students.c.student_id == student_id).with_for_update()
                ).first()
                if row is None:
                    raise CourseError(f"{student_id!r} has no token in the service's database: nothing changed")
                if self._retire(db, [row.token_hash], student_id, REVOKED):
                    revoked.append(student_id)
        return revoked

    def _retire(self, db: Connection, digests: list[str], student_id: str | None, reason: str) -> int:
        """Keep these token hashes as retired (one retired already keeps its first reason); how many were not."""
        known: set[str] = (
            set(
                db.execute(
                    select(retired_tokens.c.token_hash).where(retired_tokens.c.token_hash.in_(digests))
                ).scalars()
            )
            if digests
            else set()
        )
        fresh = [digest for digest in digests if digest not in known]
        if fresh:
            db.execute(
                retired_tokens.insert(),
                [
                    {"token_hash": digest, "student_id": student_id, "reason": reason, "retired_at": now_utc()}
                    for digest in fresh
                ],
            )
        return len(fresh)

    def add_instructor(self, token: str) -> None:
        with self.begin() as db:
            db.execute(instructors.insert().values(token_hash=hash_token(token)))

    def replace_instructors(self, token: str) -> int:
        """The one instructor token from now on: every earlier one stops working (its link says it was replaced).
        Returns how many were replaced."""
        with self.begin() as db:
            return self._replace_instructors(db, token)

    def _replace_instructors(self, db: Connection, token: str) -> int:
        if db.dialect.name == "postgresql":  # two rotations at once must not leave two tokens
            db.execute(text("LOCK TABLE instructors IN EXCLUSIVE MODE"))
        old: list[str] = list(db.execute(select(instructors.c.token_hash)).scalars())
        self._retire(db, old, None, REPLACED)
        db.execute(instructors.delete())
        db.execute(instructors.insert().values(token_hash=hash_token(token)))
        return len(old)

    def instructor_count(self) -> int:
        with self.engine.connect() as db:
            return int(db.execute(select(func.count()).select_from(instructors)).scalar_one())

    def student_for(self, token: str | None) -> str | None:
        """The student whose token this is (and not revoked), or None."""
        if not token:
            return None
        with self.engine.connect() as db:
            return self._holder(db, token)

    def _holder(self, db: Connection, token: str) -> str | None:
        """`student_for` read in `db`'s transaction. The hash found is compared again in constant time."""
        digest = hash_token(token)
        row = db.execute(self._token, {"digest": digest}).first()
        if row is None or row.reason is not None:
            return None
        return row.student_id if hmac.compare_digest(row.token_hash, digest) else None

    def retired(self, token: str | None, *, instructor: bool = False) -> str | None:
        """Why a token that opens nothing once did: REVOKED or REPLACED (a student's, or with `instructor` an
        instructor's), or None when it never was a token here. Anything else the row says reads as REVOKED."""
        if not token:
            return None
        digest = hash_token(token)
        owner = retired_tokens.c.student_id.is_(None) if instructor else retired_tokens.c.student_id.is_not(None)
        with self.engine.connect() as db:
            row = db.execute(
                select(retired_tokens.c.token_hash, retired_tokens.c.reason).where(
                    retired_tokens.c.token_hash == digest, owner
                )
            ).first()
        if row is None or not hmac.compare_digest(row.token_hash, digest):
            return None
        return REPLACED if row.reason == REPLACED else REVOKED

    def is_instructor(self, token: str | None) -> bool:
        if not token:
            return False
        digest = hash_token(token)
        with self.engine.connect() as db:
            row = db.execute(select(instructors.c.token_hash).where(instructors.c.token_hash == digest)).first()
        return row is not None and hmac.compare_digest(row.token_hash, digest)

    def token_rows(self) -> dict[str, TokenRow]:
        """Every student's row as `serve tokens` needs it, in the database's order, each checked: a row that is
        not what this package writes stops the command, naming it, rather than being rewritten."""
        with self.engine.connect() as db:
            rows = db.execute(
                select(students.c.student_id, students.c.token_hash, students.c.lms, retired_tokens.c.reason)
                .select_from(students.outerjoin(retired_tokens, retired_tokens.c.token_hash == students.c.token_hash))
                .order_by(students.c.student_id)
            ).all()
        found: dict[str, TokenRow] = {}
        for row in rows:
            problem = student_id_problem(row.student_id) if isinstance(row.student_id, str) else "not text"
            if problem or not (isinstance(row.token_hash, str) and TOKEN_HASH.fullmatch(row.token_hash)):
                raise CourseError(
                    f"the service's database: the students row {safe_text(str(row.student_id), 120)!r} "
                    f"is not one serve tokens wrote ({problem or 'its token_hash is not a SHA-256'}): "
                    "mend or remove that row"
                )
            found[row.student_id] = TokenRow(
                row.student_id, row.token_hash, _lms_column(row.student_id, row.lms), row.reason is not None
            )
        return found

    def students(self) -> dict[str, dict[str, str]]:
        with self.engine.connect() as db:
            return {row.student_id: _lms_column(row.student_id, row.lms) for row in db.execute(select(students))}

    def secret(self, name: str) -> bytes:
        """A server-side random secret (the CSRF key), made once and kept in the database. Made by whichever
        request comes first: one that loses the race reads the winner's (it answered 500 before)."""
        try:
            with self.begin() as db:
                row = db.execute(select(settings.c.value).where(settings.c.name == name)).first()
                if row:
                    return bytes.fromhex(row.value)
                value = secrets.token_hex(32)
                db.execute(settings.insert().values(name=name, value=value))
                return bytes.fromhex(value)
        except IntegrityError:
            with self.engine.connect() as db:
                return bytes.fromhex(db.execute(select(settings.c.value).where(settings.c.name == name)).one().value)

    # ------------------------------------------------------------------ attempts
    def submit(
        self, student_id: str, assignment_name: str, notebook: bytes, policy: ServicePolicy, token: str | None = None
    ) -> Attempt | Refusal:
        """Store a new attempt (committed when this returns), or say why the policy refuses it; TokenRetired (nothing
        stored) when `token`, the upload's, no longer opens the student's link."""
        with self._submit_lock, self.begin() as db:
            # The student's row, locked until the commit: another process's upload of theirs waits for this one
            # to be counted (PostgreSQL; SQLite has one process, and no row locks).
            db.execute(select(students.c.student_id).where(students.c.student_id == student_id).with_for_update())
            rows = list(
                db.execute(
                    select(
                        attempts.c.submitted_at, attempts.c.status, func.length(attempts.c.notebook).label("size")
                    ).where(attempts.c.student_id == student_id, attempts.c.assignment == assignment_name)
                )
            )
            # An attempt that ended as an autograder error (our failure) uses up no attempt, and the first few no
            # cooldown either (policy.py: FREE_AUTOGRADER_ERRORS); it keeps its number. Its notebook is stored all
            # the same, and counts towards what the student stores. The same bytes are not taken again once they
            # failed SAME_NOTEBOOK_ERRORS times since this process started (a restart after a mend takes them).
            earlier = [row.submitted_at for row in rows if row.status != Status.AUTOGRADER_ERROR]
            errors = [row.submitted_at for row in rows if row.status == Status.AUTOGRADER_ERROR]
            same = self._same_notebook_errors(db, student_id, assignment_name, notebook) if errors else 0
            number = len(rows) + 1
            now = now_utc()
            refused = refusal(
                policy,
                earlier,
                now,
                stored=sum(row.size or 0 for row in rows),
                size=len(notebook),
                errors=errors,
                same_errors=same,
            )
            if refused:
                return refused
            attempt_id = self._insert_attempt(db, student_id, assignment_name, number, now, notebook)
            # The token again, after the insert, in its transaction: a revoke or rotation committed while the body
            # arrived rolls it back; one not yet committed waits for this commit (SQLite: this transaction holds the
            # write lock from its BEGIN IMMEDIATE; PostgreSQL: the student's row, locked above, as `serve tokens` does).
            if token is not None and self._holder(db, token) != student_id:
                raise TokenRetired(f"the token of {student_id} was revoked or replaced while their upload arrived")
        # Committed: the attempt as stored (not read back; these are the values just written).
        return Attempt(
            attempt_id, student_id, assignment_name, number, now, QUEUED, None, None, None, None, [], None, 0
        )

    def _same_notebook_errors(self, db: Connection, student_id: str, assignment_name: str, notebook: bytes) -> int:
        """How many of the student's attempts of these very bytes failed as autograder errors since `started`."""
        return int(
            db.execute(
                select(func.count()).where(
                    attempts.c.student_id == student_id,
                    attempts.c.assignment == assignment_name,
                    attempts.c.status == Status.AUTOGRADER_ERROR,
                    attempts.c.submitted_at >= self.started,
                    func.length(attempts.c.notebook) == len(notebook),
                    attempts.c.notebook == notebook,
                )
            ).scalar_one()
        )

    def _insert_attempt(
        self, db: Connection, student_id: str, assignment_name: str, number: int, now: datetime, notebook: bytes
    ) -> int:
        """The new queued attempt inserted in `submit`'s transaction (uncommitted); its id."""
        inserted = db.execute(
            attempts.insert().values(
                student_id=student_id,
                assignment=assignment_name,
                number=number,
                submitted_at=now,
                notebook=notebook,
                status=QUEUED,
                results_written=0,
            )
        ).inserted_primary_key
        assert inserted is not None  # noqa: S101 - an insert has a key
        return int(inserted[0])

    def _mine(self, query: Any) -> Any:
        """The query kept to this store's assignment (when it has one)."""
        return query.where(attempts.c.assignment == self.assignment) if self.assignment is not None else query

    def stored_bytes(self, student_id: str) -> int:
        """What the student's attempts' notebooks take (the storage cap's measure: `submit`)."""
        with self.engine.connect() as db:
            return int(
                db.execute(
                    self._mine(
                        select(func.coalesce(func.sum(func.length(attempts.c.notebook)), 0)).where(
                            attempts.c.student_id == student_id
                        )
                    )
                ).scalar_one()
            )

    def attempt(self, attempt_id: int, *, feedback: bool = True) -> Attempt | None:
        """One attempt (None: no such attempt of this store's assignment); without its feedback unless asked."""
        if not 0 < attempt_id < 2**63:  # beyond the database's integers: no such attempt
            return None
        with self.engine.connect() as db:
            row = db.execute(self._by_id[feedback], {"attempt_id": attempt_id}).first()
        return attempt_from_row(row) if row else None

    def attempt_numbered(self, student_id: str, number: int, *, feedback: bool = True) -> Attempt | None:
        """A student's attempt by its number (1, 2, ..., as their pages show it), in one query; None: they have no
        attempt of that number."""
        if not 0 < number < 2**31:  # beyond the column's integers: no such attempt
            return None
        with self.engine.connect() as db:
            row = db.execute(self._by_number[feedback], {"student_id": student_id, "number": number}).first()
        return attempt_from_row(row) if row else None

    def attempts_of(self, student_id: str | None = None, *, feedback: bool = True) -> list[Attempt]:
        """Attempts in order (of one student, or all); without their feedback unless asked for."""
        query = self._mine(select(*(SUMMARY_COLUMNS if feedback else LIST_COLUMNS)).order_by(attempts.c.id))
        if student_id is not None:
            query = query.where(attempts.c.student_id == student_id)
        with self.engine.connect() as db:
            return [attempt_from_row(row) for row in db.execute(query)]

    def feedback_of(self, attempt_ids: list[int]) -> dict[int, Feedback]:
        if not attempt_ids:
            return {}
        with self.engine.connect() as db:
            rows = db.execute(
                self._mine(select(attempts.c.id, attempts.c.feedback).where(attempts.c.id.in_(attempt_ids)))
            )
            return {row.id: _feedback(row.id, row.feedback) for row in rows if row.feedback}

    def notebook_of(self, attempt_id: int) -> bytes:
        """The notebook an attempt was submitted with (issue 28: recorded into nbgrader's submitted/)."""
        with self.engine.connect() as db:
            row = db.execute(self._mine(select(attempts.c.notebook).where(attempts.c.id == attempt_id))).first()
        if row is None:
            raise CourseError(f"attempt {attempt_id} is not in the service's database")
        return bytes(row.notebook)

    def autograder_errors(self) -> dict[str, tuple[int, int]]:
        """Per student with any: (their attempts that ended in an autograder error, the most of them with one and
        the same notebook), for the instructor's dashboard."""
        query = self._mine(
            select(attempts.c.student_id, func.count().label("n"))
            .where(attempts.c.status == Status.AUTOGRADER_ERROR)
            .group_by(attempts.c.student_id, attempts.c.notebook)
        )
        found: dict[str, tuple[int, int]] = {}
        with self.engine.connect() as db:
            for row in db.execute(query):
                errors, same = found.get(row.student_id, (0, 0))
                found[row.student_id] = (errors + row.n, max(same, row.n))
        return found

    def version(self) -> str:
        """Changes whenever an attempt is added or graded (the dashboard polls it)."""
        with self.engine.connect() as db:
            row = db.execute(
                self._mine(select(func.count(), func.max(attempts.c.id), func.max(attempts.c.graded_at)))
            ).one()
        return f"{row[0]}-{row[1]}-{row[2]}"

    def queue_in(self, db: Connection) -> tuple[list[Queued], list[str]]:
        """The queue as it stands in the caller's transaction: the queued attempts, oldest first, and the students
        of the attempts being graded."""
        rows = db.execute(self.queue_statement).all()
        queued = [Queued(row.id, row.student_id, row.submitted_at) for row in rows if row.status == QUEUED]
        return queued, [row.student_id for row in rows if row.status == GRADING]

    def claim_next(self, pick: Pick | None = None) -> tuple[Attempt, bytes] | None:
        """A queued attempt, now marked as being graded by the caller (None: nothing queued, or nothing `pick`
        lets start now): the one `pick` chooses, or the oldest. One transaction: the queue as it is, the
        claim, and the claimed attempt with its notebook."""
        while True:
            with self.begin_unsynced() as db:
                queued, grading = self.queue_in(db)
                if not queued:
                    return None
                chosen = queued[0].id if pick is None else pick(queued, grading, now_utc())
                if chosen is None:
                    return None
                if db.execute(self.claim_statement, {"attempt_id": chosen}).rowcount:
                    row = db.execute(self.claimed_statement, {"attempt_id": chosen}).one()
                    return attempt_from_row(row), row.notebook

    def record(self, attempt_id: int, results: GradedAttempt) -> bool:
        """Write the results of the grading run that claimed the attempt; False when it was not being graded."""
        with self.begin_unsynced() as db:
            return self.record_in(db, attempt_id, results)

    def record_in(self, db: Connection, attempt_id: int, results: GradedAttempt) -> bool:
        """`record`, in the caller's transaction (shared.py records and releases its claim in one)."""
        values = results.row_values()
        return (
            db.execute(
                self._record, {"attempt_id": attempt_id, **{f"new_{name}": value for name, value in values.items()}}
            ).rowcount
            == 1
        )

    @property
    def shared(self) -> bool:
        """Whether many serve processes may share this database (PostgreSQL: course/platforms/service/shared.py)."""
        return self.engine.dialect.name == "postgresql"

    def give_back(self, attempt_id: int) -> None:
        """An attempt this process claimed but could not record (the database away at that moment): back in the
        queue, to be graded again (its results were never written)."""
        with self.begin() as db:
            db.execute(
                self._mine(update(attempts).where(attempts.c.id == attempt_id, attempts.c.status == GRADING)).values(
                    status=QUEUED
                )
            )

    def requeue_interrupted(self) -> int:
        """At start: attempts a stopped server was grading go back to the queue (none had results written)."""
        with self.begin() as db:
            return db.execute(
                self._mine(update(attempts).where(attempts.c.status == GRADING)).values(status=QUEUED)
            ).rowcount
