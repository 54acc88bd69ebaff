"""The running service's state: its course, store, policy and grader, and what it holds between requests (who
waits for which attempt, each student's uploads and pages in progress, the key that signs its forms and notes).
One `Service` per process, on the app's state (`request.app.state.service`): every room that answers requests
(api.py, student_pages.py, instructor_pages.py) is handed it."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from starlette.concurrency import run_in_threadpool

from course.core.config import CourseConfig
from course.core.text import safe_text, whole_number
from course.platforms.service.edge import LOG_EVERY_SECONDS, PAGE_THREADS, UPLOADS_IN_FLIGHT, Edge, PageGate
from course.platforms.service.policy import ServicePolicy
from course.platforms.service.results import StudentRecord, student_records
from course.platforms.service.store import Attempt, Store
from course.platforms.service.worker import Grader

WAIT_SECONDS = 30.0
SHARED_POLL_SECONDS = 0.5  # how often a waiting upload looks at the database when processes share it
CSRF_MAX_AGE = 12 * 3600
# The upload form's answer is a redirect to the student's page (post-redirect-get: a reload never posts the form
# again), carrying why the upload was not submitted as a note the server signed for that student: shown for this
# long after it (reloads included), at most this many characters, never a text the URL alone makes up.
NOTE_MAX_AGE = 600
NOTE_CHARS = 1000
NOTE_BYTES = 3 * NOTE_CHARS  # the note's text as UTF-8, at most: its base64 and the rest fit note_text's bound

# The instructor's: what a limit refused, never a token. Every room of the app writes to this one log under the
# name it always had (a course's logging set-up that names it keeps working).
LOG = logging.getLogger("course.platforms.service.app")
CLOSE = {"Connection": "close"}  # an answer given before the body was read ends the connection with it


@dataclass
class Service:
    config: CourseConfig
    store: Store
    policy: ServicePolicy
    grader: Grader
    wait_seconds: float = WAIT_SECONDS
    edge: Edge = field(default_factory=Edge)
    waiters: dict[int, list[asyncio.Future[Attempt]]] = field(default_factory=dict)
    uploads: dict[str, int] = field(default_factory=dict)  # a student's uploads in progress (on the event loop)
    busy_said: dict[str, float] = field(default_factory=dict)  # when the log last said a student had too many
    delayed: dict[str, int] = field(default_factory=dict)  # a student's refusals being delayed (on the event loop)
    loop: asyncio.AbstractEventLoop | None = None
    csrf_key: bytes | None = None  # read from the database once (it never changes): not a transaction per page
    page_gate: PageGate | None = None  # from the policy (pages_in_flight, pages_per_minute) unless given
    # Students' pages are read and rendered here, never on the threads that acknowledge uploads (edge.py: why).
    page_threads: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(PAGE_THREADS, thread_name_prefix="pages")
    )

    def __post_init__(self) -> None:
        if self.page_gate is None:
            self.page_gate = PageGate(self.policy.pages_in_flight, self.policy.pages_per_minute)

    @property
    def assignment(self) -> str:
        return self.grader.settings.name

    def graded(self, attempt: Attempt) -> None:
        """Called from a grading thread with an attempt as recorded: wake every request waiting for it."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._resolve, attempt)

    def _resolve(self, attempt: Attempt) -> None:
        for future in self.waiters.pop(attempt.id, []):
            if not future.done():
                future.set_result(attempt)

    async def wait_for(self, attempt: Attempt) -> Attempt:
        """The attempt once graded (as its grading run recorded it: nothing is read back), or as it is after
        `wait_seconds` (read without its feedback, which only the feedback page needs)."""
        future: asyncio.Future[Attempt] = asyncio.get_running_loop().create_future()
        self.waiters.setdefault(attempt.id, []).append(future)
        try:
            # Graded before we listened?
            current = await run_in_threadpool(partial(self.store.attempt, attempt.id, feedback=False))
            if current is not None and not current.done:
                current = await self._graded_or_not(attempt.id, future, current)
                if not current.done:  # not graded in time (or not recorded by the run that graded it)
                    current = await run_in_threadpool(partial(self.store.attempt, attempt.id, feedback=False))
        finally:
            listeners = self.waiters.get(attempt.id, [])
            if future in listeners:
                listeners.remove(future)
                if not listeners:
                    self.waiters.pop(attempt.id, None)
        assert current is not None  # noqa: S101 - attempts are never deleted
        return current

    async def _graded_or_not(self, attempt_id: int, future: asyncio.Future[Attempt], current: Attempt) -> Attempt:
        """The attempt once this process's grader records it, or as it is after `wait_seconds`. When processes
        share the database (PostgreSQL), another may grade it: the database is looked at every SHARED_POLL_SECONDS."""
        deadline = time.monotonic() + self.wait_seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return current
            try:
                return await asyncio.wait_for(
                    asyncio.shield(future), min(left, SHARED_POLL_SECONDS) if self.store.shared else left
                )
            except TimeoutError:
                if self.store.shared:
                    found = await run_in_threadpool(partial(self.store.attempt, attempt_id, feedback=False))
                    if found is not None and found.done:
                        return found

    def healthy(self) -> str:
        """Why this process cannot serve now ("" when it can): its database unreachable, or no warm worker."""
        try:
            self.store.version()
        except Exception as error:  # any failure to reach the database is this answer
            # The details (the database's address, say) go to the log, not to whoever asks.
            LOG.warning("serve: the health check cannot reach the database: %s", safe_text(str(error), 2000))
            return "the database cannot be reached"
        pool = self.grader.pool
        if pool is None or not pool.alive:
            return "the warm pool has no worker"
        return ""

    def say(self, student: str, kind: str, message: str, *args: object) -> None:
        """A line in the server's log for the instructor: one per student, kind of refusal and 10 s, however many
        requests are refused."""
        now = time.monotonic()
        if now - self.busy_said.get(f"{kind}:{student}", -LOG_EVERY_SECONDS) >= LOG_EVERY_SECONDS:
            self.busy_said[f"{kind}:{student}"] = now
            LOG.warning(message, *args)

    @contextmanager
    def upload_slot(self, student: str) -> Iterator[bool]:
        """Whether `student` may upload now (fewer than UPLOADS_IN_FLIGHT of theirs in progress); the slot is
        theirs until the block ends. On the event loop only."""
        if self.uploads.get(student, 0) >= UPLOADS_IN_FLIGHT:
            self.say(
                student,
                "uploads",
                "serve: refused an upload of %s: %d of theirs in progress",
                student,
                UPLOADS_IN_FLIGHT,
            )
            yield False
            return
        self.uploads[student] = self.uploads.get(student, 0) + 1
        try:
            yield True
        finally:
            self.uploads[student] -= 1
            if not self.uploads[student]:
                del self.uploads[student]

    @contextmanager
    def page_slot(self, student: str) -> Iterator[float | None]:
        """None when `student`'s page (or API read) is answered now, holding one of their places until the block
        ends; else the seconds they are to wait (the page gate's pace: PageGate)."""
        gate = self.page_gate
        assert gate is not None  # noqa: S101 - set in __post_init__
        wait = gate.enter(student)
        if wait is not None:
            self.say(
                student,
                "pages",
                "serve: refused pages of %s: over service.pages_in_flight (%d at once) or "
                "service.pages_per_minute (%d a minute)",
                student,
                gate.in_flight,
                gate.per_minute,
            )
            yield wait
            return
        try:
            yield None
        finally:
            gate.leave(student)

    async def on_page_thread(self, work: Callable[[], Any]) -> Any:
        """`work()` (reading and rendering a student's page) on the pages' own threads."""
        return await asyncio.get_running_loop().run_in_executor(self.page_threads, work)

    def records(self, *, feedback: bool = True) -> list[StudentRecord]:
        """Every student's attempts, none with its feedback; with `feedback`, the counted attempts carry theirs
        (for the class summary and the exports: the scores per question). A page reads no feedback it does not
        show: a student's ~1 MB documents were once parsed at every reload of a page that shows only scores."""
        records = student_records(self.policy, list(self.store.students()), self.store.attempts_of(feedback=False))
        if not feedback:
            return records
        counted = self.store.feedback_of([r.counted.id for r in records if r.counted is not None])
        return [
            replace(r, counted=replace(r.counted, feedback=counted.get(r.counted.id))) if r.counted is not None else r
            for r in records
        ]

    def record_of(self, student_id: str) -> StudentRecord:
        """One student's attempts, without their feedback (their pages show scores and links only)."""
        return student_records(self.policy, [student_id], self.store.attempts_of(student_id, feedback=False))[0]

    # ----------------------------------------------------------------- CSRF (the HTML forms)
    def csrf_token(self, who: str) -> str:
        issued = str(int(time.time()))
        return f"{issued}.{self._csrf_mac(who, issued)}"

    def csrf_ok(self, who: str, token: str) -> bool:
        issued, _, mac = token.partition(".")
        if not _seconds(issued) or time.time() - int(issued) > CSRF_MAX_AGE:
            return False
        return mac.isascii() and hmac.compare_digest(mac, self._csrf_mac(who, issued))  # (non-ASCII: a TypeError)

    # ----------------------------------------------------------------- the form's answers (post-redirect-get)
    def note(self, student: str, message: str) -> str:
        """`message` as the signed value of the student page's `note` parameter: only this server makes one,
        for this student's page, and it is shown for NOTE_MAX_AGE seconds."""
        text = safe_text(message, NOTE_CHARS)
        while len(text.encode("utf-8")) > NOTE_BYTES:  # 1 000 characters of 4 bytes each would not fit `note_text`
            text = text[: -max(1, (len(text.encode("utf-8")) - NOTE_BYTES) // 4)]
        issued = str(int(time.time()))
        payload = base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii").rstrip("=")
        return f"{issued}.{payload}.{self._csrf_mac(f'note:{student}', f'{issued}.{payload}')}"

    def note_text(self, student: str, note: str) -> str:
        """The message of a note made by `note` for this student, still fresh ("" for anything else: what the
        URL says is shown only when this server said it)."""
        issued, _, rest = note.partition(".")
        payload, _, mac = rest.partition(".")
        if (
            len(note) > 4 * NOTE_BYTES // 3 + 100
            or not _seconds(issued)
            or not 0 <= time.time() - int(issued) <= NOTE_MAX_AGE
            or not mac.isascii()
            or not hmac.compare_digest(mac, self._csrf_mac(f"note:{student}", f"{issued}.{payload}"))
        ):
            return ""
        try:
            return base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)).decode("utf-8")
        except ValueError:  # (binascii.Error and UnicodeDecodeError are ValueErrors): not one of ours
            return ""

    def _csrf_mac(self, who: str, issued: str) -> str:
        if self.csrf_key is None:
            self.csrf_key = self.store.secret("csrf")
        return hmac.new(self.csrf_key, f"{who}|{issued}".encode(), hashlib.sha256).hexdigest()


def _seconds(text: str) -> bool:
    """Whether `text` is a time this server wrote (whole seconds since 1970): digits, and few enough that the
    arithmetic with it cannot overflow (a float holds no integer of 400 digits) nor `int` refuse it ("²" is a
    digit to `isdigit`): either was a 500."""
    return whole_number(text) is not None
