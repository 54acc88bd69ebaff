"""The ASGI application (Starlette): the HTTP contract of the submission API, the student's pages behind
their personal link, the instructor's dashboard behind theirs.

API (tools and `autograd-course submit`):
  POST /api/submissions        Authorization: Bearer <student token>; the notebook as the body
                               (application/json) or as multipart field `notebook`. 200 with
                               {id, student_id, status, score, max_score, feedback_url} once graded (waits up
                               to `wait_seconds`, then 202 with status queued); 401, 413, 429 (+ Retry-After).
  GET  /api/submissions/<id>   the same JSON (same token; another student's id is 404).
Pages (the token is the personal link): /s/<token>/ (upload, history), /s/<token>/attempts/<n> (attempt n
of the student, 1, 2, ...: "being graded", then its feedback page), /s/<token>/notebook (the notebook for
the next attempt); /i/<token>/ the dashboard, /i/<token>/export/gradebook (recording into the term's record).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import tempfile
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers, UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from course import term_record
from course.config import CourseConfig
from course.errors import CourseError
from course.release import personalise
from course.render import render_html
from course.service import pages
from course.service.edge import (
    EDGE_ANSWERED,
    LOG_EVERY_SECONDS,
    PAGE_REFUSAL_SECONDS,
    PAGE_REFUSALS_DELAYED,
    PAGE_THREADS,
    SPOOL_BYTES,
    UPLOAD_RETRY_SECONDS,
    UPLOADS_IN_FLIGHT,
    Edge,
    PageGate,
    retry_seconds,
)
from course.service.policy import Refusal, ServicePolicy, attempt_numbers, refusal
from course.service.results import (
    StudentRecord,
    counted_attempts,
    grades_csv,
    lms_csv,
    lms_left_out,
    student_records,
    summary_of,
)
from course.service.store import REPLACED, REVOKED, Attempt, Store, now_utc
from course.service.worker import Grader
from course.status import Status
from course.summary_page import SORT_SCRIPT, render_summary_html
from course.text import safe_text, whole_number

WAIT_SECONDS = 30.0
SHARED_POLL_SECONDS = 0.5  # how often a waiting upload looks at the database when processes share it
CSRF_MAX_AGE = 12 * 3600
# The upload form's answer is a redirect to the student's page (post-redirect-get: a reload never posts the form
# again), carrying why the upload was not submitted as a note the server signed for that student: shown for this
# long after it (reloads included), at most this many characters, never a text the URL alone makes up.
NOTE_MAX_AGE = 600
NOTE_CHARS = 1000
NOTE_BYTES = 3 * NOTE_CHARS  # the note's text as UTF-8, at most: its base64 and the rest fit note_text's bound
MULTIPART_SLACK = 64 * 1024  # the form's own bytes around the notebook
DRAIN_LIMIT = 16 * 2**20  # an oversized body is read (and dropped) up to this much before 413, so the client hears it
# The class summary's one inline script (it sorts the student table) is allowed by its hash, nothing else inline.
SUMMARY_SCRIPT = "'sha256-" + base64.b64encode(hashlib.sha256(SORT_SCRIPT.encode("utf-8")).digest()).decode() + "'"
SECURITY_HEADERS = {
    "Content-Security-Policy": f"default-src 'none'; style-src 'unsafe-inline'; script-src 'self' {SUMMARY_SCRIPT}; "
                               "connect-src 'self'; "
                               "img-src 'self' data:; form-action 'self'; frame-src 'self'; frame-ancestors 'self'; "
                               "base-uri 'none'",
    # The personal link is a secret: never sent on to another site. (Not no-referrer: with it, Chromium sends
    # `Origin: null` on the form's own posts, which the CSRF check refuses.)
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


LOG = logging.getLogger(__name__)  # the instructor's: what a limit refused, never a token
CLOSE = {"Connection": "close"}  # an answer given before the body was read ends the connection with it


class TooLarge(Exception):
    pass


class TooSlow(Exception):
    pass


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
        default_factory=lambda: ThreadPoolExecutor(PAGE_THREADS, thread_name_prefix="pages"))

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
                return await asyncio.wait_for(asyncio.shield(future),
                                              min(left, SHARED_POLL_SECONDS) if self.store.shared else left)
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

    def _say(self, student: str, kind: str, message: str, *args: object) -> None:
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
            self._say(student, "uploads", "serve: refused an upload of %s: %d of theirs in progress", student,
                      UPLOADS_IN_FLIGHT)
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
            self._say(student, "pages", "serve: refused pages of %s: over service.pages_in_flight (%d at once) or "
                      "service.pages_per_minute (%d a minute)", student, gate.in_flight, gate.per_minute)
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
        return [replace(r, counted=replace(r.counted, feedback=counted.get(r.counted.id)))
                if r.counted is not None else r for r in records]

    def record_of(self, student_id: str) -> StudentRecord:
        """One student's attempts, without their feedback (their pages show scores and links only)."""
        return student_records(self.policy, [student_id], self.store.attempts_of(student_id, feedback=False))[0]

    def feedback_page(self, student: str, number: int, *, instructor: bool = False) -> str | None:
        """The feedback page of a student's attempt by its number (or the page saying it is being graded), read
        and rendered on the calling thread, never the event loop: a feedback document may be large, and only
        this one is read. None: the student has no attempt of that number."""
        attempt = self.store.attempt_numbered(student, number)
        if attempt is None:
            return None
        back = f"../../{quote(attempt.student_id)}" if instructor else "../"
        if not attempt.done or attempt.feedback is None:
            return pages.waiting_page(attempt, back, instructor=instructor)
        return render_html(attempt.feedback, lead=pages.feedback_lead(attempt, back, instructor=instructor))

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
        if (len(note) > 4 * NOTE_BYTES // 3 + 100 or not _seconds(issued)
                or not 0 <= time.time() - int(issued) <= NOTE_MAX_AGE or not mac.isascii()
                or not hmac.compare_digest(mac, self._csrf_mac(f"note:{student}", f"{issued}.{payload}"))):
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


def _json_error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def submission_json(attempt: Attempt, token: str) -> dict[str, Any]:
    """The contract's JSON: `id` is the service's (the API's URLs), `attempt` the student's own number (1, 2, ...:
    what their page, the feedback URL and the dashboard call it)."""
    return {"id": attempt.id, "attempt": attempt.number, "student_id": attempt.student_id, "status": attempt.status,
            "score": attempt.score if attempt.done else None, "max_score": attempt.max_score,
            "feedback_url": f"/s/{token}/attempts/{attempt.number}"}


async def _read_body(request: Request, limit: int, seconds: float, folder: Path) -> bytes:
    """The body, read within `seconds` (TooSlow) and at most `limit` bytes (TooLarge). It waits in a file in
    `folder` past SPOOL_BYTES, so a stalled upload holds little memory; it is read back once complete."""
    length = request.headers.get("content-length", "")
    too_large = length.isdigit() and int(length) > limit
    size = 0
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES, mode="w+b", dir=str(folder)) as spool:
        try:
            async with asyncio.timeout(seconds):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        too_large = True
                    if too_large:
                        if size > DRAIN_LIMIT:
                            break
                        continue
                    spool.write(chunk)
        except TimeoutError:
            raise TooSlow from None
        if too_large:
            raise TooLarge
        spool.seek(0)
        return spool.read() if size <= SPOOL_BYTES else await run_in_threadpool(spool.read)


async def _form(headers: Headers, body: bytes, limit: int) -> dict[str, Any]:
    async def stream() -> AsyncGenerator[bytes, None]:
        yield body

    parser = MultiPartParser(headers, stream(), max_files=2, max_fields=10, max_part_size=limit)
    form = await parser.parse()
    return {key: value for key, value in form.multi_items()}


async def _notebook_field(form: dict[str, Any]) -> bytes | None:
    value = form.get("notebook")
    if isinstance(value, UploadFile):
        return await value.read()
    return value.encode("utf-8") if isinstance(value, str) else None


def _notebook_problem(notebook: bytes) -> str:
    """Why this upload is not a notebook at all ("" when it may be one; the grader reads it properly)."""
    try:
        data = json.loads(notebook)
    except RecursionError:
        return "the upload is not a Jupyter notebook (.ipynb): its JSON is nested too deeply"
    except (ValueError, UnicodeDecodeError):
        return "the upload is not a Jupyter notebook (.ipynb): it is not JSON"
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        return "the upload is not a Jupyter notebook (.ipynb): it has no list of cells"
    return ""


def _accept(service: Service, student: str, notebook: bytes) -> str | Attempt | Refusal:
    """Why the upload is refused before it is stored (not a notebook at all, or not one the grader can read as
    the assignment's: a refused upload uses up no attempt, the 400 says why), or the policy's refusal, or the
    attempt as stored (committed). Blocking: the request's one trip to a worker thread for all of it."""
    problem = _notebook_problem(notebook)
    if problem:
        return problem
    problem = service.grader.upload_problem(student, notebook)
    if problem:
        return f"the upload cannot be graded: {problem}"
    return service.store.submit(student, service.assignment, notebook, service.policy)


async def _accept_upload(service: Service, student: str, notebook: bytes) -> str | Attempt | Refusal:
    accepted = await run_in_threadpool(_accept, service, student, notebook)
    if isinstance(accepted, Attempt):
        service.grader.wake()
    elif isinstance(accepted, Refusal) and accepted.limit == "autograder_errors":
        LOG.warning("serve: refused an upload of %s after their autograder errors (the dashboard lists them): %s",
                    student, accepted.message.split(":")[0])
    elif isinstance(accepted, Refusal) and accepted.limit:
        LOG.warning("serve: refused an upload of %s: service.%s reached (%s)", student, accepted.limit,
                    accepted.message.split(":")[0])
    return accepted


async def _receive_notebook(service: Service, request: Request) -> tuple[bytes, dict[str, Any]] | Response:
    """The uploaded notebook and the form's other fields (none for a JSON body), or the error response."""
    limit = service.policy.upload_bytes
    try:
        body = await _read_body(request, limit + MULTIPART_SLACK, service.edge.body_seconds, service.grader.scratch)
    except TooLarge:
        return _json_error(413, f"the notebook is larger than the limit of {service.policy.upload_kb} KB; clear "
                                "its outputs (Edit > Clear Outputs of All Cells) and submit again")
    except ClientDisconnect:  # nobody hears this; the upload's place is given back as the request ends
        return _json_error(400, "the upload was interrupted", CLOSE)
    except TooSlow:
        LOG.warning("serve: cut off an upload whose body took over %g s (serve --body-seconds)",
                    service.edge.body_seconds)
        return _json_error(408, f"the notebook did not arrive within {service.edge.body_seconds:g} s; submit again "
                                "(on a slow connection, clear its outputs first: Edit > Clear Outputs of All Cells)",
                           CLOSE)
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    fields: dict[str, Any] = {}
    if kind == "multipart/form-data":
        try:
            fields = await _form(request.headers, body, limit + 1)
            notebook = await _notebook_field(fields)
        except MultiPartException as problem:
            return _json_error(400, f"the form could not be read: {problem.message}")
        if notebook is None:
            return _json_error(400, "the form has no field named notebook")
    elif kind in ("application/json", "application/x-ipynb+json"):
        notebook = body
    else:
        return _json_error(415, "send the notebook as the body (Content-Type: application/json) or as the "
                                "multipart form field notebook")
    if len(notebook) > limit:
        return _json_error(413, f"the notebook is larger than the limit of {service.policy.upload_kb} KB")
    return notebook, fields


def _busy_message() -> str:
    return (f"you have {UPLOADS_IN_FLIGHT} uploads in progress already; wait for their feedback, then submit "
            "again")


def _busy() -> JSONResponse:
    return JSONResponse({"error": _busy_message(), "retry_after": UPLOAD_RETRY_SECONDS}, status_code=429,
                        headers={"Retry-After": str(UPLOAD_RETRY_SECONDS), **CLOSE})


def _refused(refused: Refusal) -> JSONResponse:
    headers = {"Retry-After": str(max(1, int(refused.retry_after + 0.999)))} if refused.retry_after else None
    return JSONResponse({"error": refused.message, "retry_after": refused.retry_after}, status_code=429,
                        headers=headers)


# --------------------------------------------------------------------------------------------- the API


async def _api_student(request: Request) -> tuple[Service, str, str] | Response:
    """(service, token, student id) of an API request, or the 401 for a missing or unknown bearer token."""
    service: Service = request.app.state.service
    token = _bearer(request)
    student = await run_in_threadpool(service.store.student_for, token)
    if student is None or token is None:
        retired = await run_in_threadpool(service.store.retired, token)
        if retired is not None:  # RFC 6750's invalid_token, saying why
            return JSONResponse({"error": RETIRED_LINK[retired], "token": retired}, status_code=401,
                                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
        return _json_error(401, "a valid student token is needed: Authorization: Bearer <token>",
                           {"WWW-Authenticate": "Bearer"})
    return service, token, student


async def post_submission(request: Request) -> Response:
    caller = await _api_student(request)
    if isinstance(caller, Response):
        return caller
    service, token, student = caller
    with service.upload_slot(student) as free:
        return await _post_submission(request, service, token, student) if free else _busy()


async def _post_submission(request: Request, service: Service, token: str, student: str) -> Response:
    received = await _receive_notebook(service, request)
    if isinstance(received, Response):
        return received
    accepted = await _accept_upload(service, student, received[0])
    if isinstance(accepted, str):
        return _json_error(400, accepted)
    if isinstance(accepted, Refusal):
        return _refused(accepted)
    attempt = await service.wait_for(accepted)
    return JSONResponse(submission_json(attempt, token), status_code=200 if attempt.done else 202)


async def get_submission(request: Request) -> Response:
    caller = await _api_student(request)
    if isinstance(caller, Response):
        return caller
    service, token, student = caller
    with service.page_slot(student) as wait:
        if wait is not None:
            return await _pages_refused(service, student, wait, api=True)
        attempt = await service.on_page_thread(partial(service.store.attempt, request.path_params["attempt_id"],
                                                       feedback=False))  # the JSON links to the feedback
    if attempt is None or attempt.student_id != student:
        return _json_error(404, "no such submission of yours")
    return JSONResponse(submission_json(attempt, token))


async def _pages_refused(service: Service, student: str, wait: float, *, api: bool = False) -> Response:
    """The 429 of a student's page (or API read) beyond their pace (PageGate), with Retry-After and why; sent
    after PAGE_REFUSAL_SECONDS at most (edge.py: why), holding no place of the student's meanwhile. At most
    PAGE_REFUSALS_DELAYED of a student's wait at once; the others are answered at once and end their connection,
    so that one token never holds more than that many connections with its refusals."""
    assert service.page_gate is not None  # noqa: S101 - set in __post_init__
    headers = {"Retry-After": str(retry_seconds(wait))}
    if service.delayed.get(student, 0) >= PAGE_REFUSALS_DELAYED:
        service._say(student, "delayed", "serve: refused pages of %s at once and closed their connections: %d of "
                     "their refusals are being delayed already", student, PAGE_REFUSALS_DELAYED)
        headers.update(CLOSE)
    else:
        service.delayed[student] = service.delayed.get(student, 0) + 1
        try:
            await asyncio.sleep(min(wait, PAGE_REFUSAL_SECONDS))
        finally:
            service.delayed[student] -= 1
            if not service.delayed[student]:
                del service.delayed[student]
    sentence = service.page_gate.refusal(wait)
    if api:
        return JSONResponse({"error": sentence, "retry_after": retry_seconds(wait)}, status_code=429,
                            headers=headers)
    return PlainTextResponse(sentence, status_code=429, headers=headers)


# --------------------------------------------------------------------------------------------- students

Handler = Callable[[Request], Awaitable[Response]]


def _not_found() -> Response:
    return PlainTextResponse("Not found. Check the link you were given.", status_code=404)


# What a link whose token no longer works answers (serve tokens --revoke, --rotate, --rotate-instructor): 410 Gone
# and why, rather than "not found" (a student sent a new link should know to use it). Only the holder of the token,
# 256 random bits, can see it.
RETIRED_LINK = {
    REVOKED: "This link has been revoked by the course staff: it no longer opens your page or takes uploads. The "
             "attempts you submitted are kept. Ask your instructor if you think this is a mistake.",
    REPLACED: "This link has been replaced by a newer one: use the latest link your instructor sent you. The "
              "attempts you submitted are kept and shown there.",
}
RETIRED_INSTRUCTOR_LINK = ("This dashboard link has been replaced by a newer one (serve tokens --rotate-instructor): "
                           "use the token in the newest tokens-instructor.txt.")


async def _retired_or_not_found(service: Service, token: str, *, instructor: bool = False) -> Response:
    retired = await run_in_threadpool(partial(service.store.retired, token, instructor=instructor))
    if retired is None:
        return _not_found()
    return PlainTextResponse(RETIRED_INSTRUCTOR_LINK if instructor else RETIRED_LINK[retired], status_code=410)


def student_route(handler: Callable[[Request, Service, str], Awaitable[Response]]) -> Handler:
    """A route under the student's personal link; its pages (GET) paced per student (Service.page_slot), its
    form's posts by the uploads' own bounds."""
    async def route(request: Request) -> Response:
        service: Service = request.app.state.service
        student = await run_in_threadpool(service.store.student_for, request.path_params["token"])
        if student is None:
            return await _retired_or_not_found(service, request.path_params["token"])
        if request.method not in ("GET", "HEAD"):
            return await _unless_unreadable(handler(request, service, student), instructor=False)
        with service.page_slot(student) as wait:  # a refused one holds no place while it is answered
            if wait is None:
                return await _unless_unreadable(handler(request, service, student), instructor=False)
            return await _pages_refused(service, student, wait)
    return route


def instructor_route(handler: Callable[[Request, Service], Awaitable[Response]]) -> Handler:
    async def route(request: Request) -> Response:
        service: Service = request.app.state.service
        if not await run_in_threadpool(service.store.is_instructor, request.path_params["token"]):
            return await _retired_or_not_found(service, request.path_params["token"], instructor=True)
        return await _unless_unreadable(handler(request, service), instructor=True)
    return route


async def _unless_unreadable(answer: Awaitable[Response], *, instructor: bool) -> Response:
    """A page's answer, or, where the service's records read back are not as it wrote them (a row of the database
    mended by hand, say: CourseError names it), a page saying so with 503: our records, never the reader's doing,
    and never a bare 500."""
    try:
        return await answer
    except CourseError as problem:
        LOG.error("a page could not be made from the service's records: %s", problem)
        return HTMLResponse(pages.records_unreadable_page(str(problem), instructor=instructor), status_code=503)


def _same_origin(request: Request) -> bool:
    """A browser's form post names its page's origin; one from another site is refused (with the token)."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host", "")


def _refusal_now(service: Service, record: StudentRecord) -> Refusal | None:
    """What the policy would answer to an attempt now (the store asks the same when one arrives)."""
    earlier = [a.submitted_at for a in record.attempts if a.status != Status.AUTOGRADER_ERROR]
    errors = [a.submitted_at for a in record.attempts if a.status == Status.AUTOGRADER_ERROR]
    stored = service.store.stored_bytes(record.student_id) if record.attempts else 0
    return refusal(service.policy, earlier, now_utc(), stored=stored, errors=errors)


async def _student_page(service: Service, student: str, message: str = "", status: int = 200, *,
                        page_thread: bool = False) -> Response:
    def make() -> str:  # read and rendered off the event loop (a student may have many attempts)
        record = service.record_of(student)
        note = ""
        if service.policy.fresh_numbers_per_attempt:
            note = f" (with fresh numbers for attempt {len(record.attempts) + 1}: answer with the numbers it shows)"
        return pages.student_page(record, service.assignment, service.policy, service.grader.due,
                                  service.csrf_token(f"student:{student}"), message, note,
                                  _refusal_now(service, record))

    # A page asked for on the pages' threads; one answering an upload on the uploads' (edge.py says why).
    html = await (service.on_page_thread(make) if page_thread else run_in_threadpool(make))
    return HTMLResponse(html, status_code=status)


@student_route
async def student_home(request: Request, service: Service, student: str) -> Response:
    note = request.query_params.get("note", "")
    return await _student_page(service, student, service.note_text(student, note) if note else "", page_thread=True)


def _noted(service: Service, student: str, message: str, headers: dict[str, str] | None = None) -> Response:
    """The form's answer when nothing was submitted: 303 to the student's page, which says why (a reload of it
    never posts the notebook again)."""
    said = message if message.endswith(".") else f"{message}."
    return RedirectResponse(f"./?note={service.note(student, said)}", status_code=303, headers=headers)


@student_route
async def student_upload(request: Request, service: Service, student: str) -> Response:
    refused_csrf = "the form was out of date or came from another page: reload this page and submit again"
    if not _same_origin(request):  # another site's post (no student's reload): refused before its body is read
        return await _student_page(service, student, f"{refused_csrf}.", 403)
    with service.upload_slot(student) as free:
        if not free:
            return _noted(service, student, _busy_message(), CLOSE)
        return await _student_upload(request, service, student, refused_csrf)


async def _student_upload(request: Request, service: Service, student: str, refused_csrf: str) -> Response:
    received = await _receive_notebook(service, request)
    if isinstance(received, Response):
        message = json.loads(bytes(received.body)).get("error", "the upload was refused")
        return _noted(service, student, message, CLOSE if received.headers.get("connection") == "close"
                      else None)
    notebook, fields = received
    csrf = fields.get("csrf")
    if not isinstance(csrf, str) or not service.csrf_ok(f"student:{student}", csrf):
        return _noted(service, student, refused_csrf)
    accepted = await _accept_upload(service, student, notebook)
    if isinstance(accepted, str):
        return _noted(service, student, accepted)
    if isinstance(accepted, Refusal):
        return _noted(service, student, accepted.message)
    # At once to the attempt's own page: it says "being graded" and shows the feedback when it is ready.
    return RedirectResponse(f"attempts/{accepted.number}", status_code=303)


@student_route
async def student_attempt(request: Request, service: Service, student: str) -> Response:
    page = await service.on_page_thread(partial(service.feedback_page, student, request.path_params["number"]))
    return _not_found() if page is None else HTMLResponse(page)


@student_route
async def student_notebook(request: Request, service: Service, student: str) -> Response:
    def make() -> bytes:
        config, grader = service.config, service.grader
        template_path = config.release_template(grader.settings.name)
        if not config.variants:
            return config.release_notebook(grader.settings.name).read_bytes()
        if not template_path.is_file():
            raise CourseError(f"{template_path} is missing: run autograd-course release (variants: true needs it "
                              "to personalise each student's notebook)")
        following = len(service.store.attempts_of(student, feedback=False)) + 1
        params = attempt_numbers(config, service.policy, grader.assignment.content, student, following,
                                 grader.assignment.default_params)
        notebook = personalise(json.loads(template_path.read_text(encoding="utf-8")), params, student,
                               grader.assignment.content)
        return (json.dumps(notebook, indent=1, ensure_ascii=False) + "\n").encode("utf-8")

    try:
        body = await service.on_page_thread(make)
    except (CourseError, OSError) as problem:
        return PlainTextResponse(f"Your notebook cannot be made right now ({problem}); tell your instructor.",
                                 status_code=503)
    name = service.grader.settings.notebook
    return Response(body, media_type="application/x-ipynb+json",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})


# --------------------------------------------------------------------------------------------- instructors


@instructor_route
async def dashboard(request: Request, service: Service) -> Response:
    def make() -> str:  # a class's worth of rows: made off the event loop, from the attempts without feedback
        records = service.records(feedback=False)
        try:
            left_out = lms_left_out(service.config, service.grader.settings, records)
        except CourseError:  # a term row grading could not have written: the export itself says which, and where
            left_out = []
        return pages.dashboard_page(records, service.assignment, service.policy, service.store.version(),
                                    service.grader.due, service.store.autograder_errors(), left_out)

    return HTMLResponse(await run_in_threadpool(make))


@instructor_route
async def dashboard_version(request: Request, service: Service) -> Response:
    return PlainTextResponse(await run_in_threadpool(service.store.version))


@instructor_route
async def class_summary_page(request: Request, service: Service) -> Response:
    def make() -> str:  # every counted feedback of the class: read, summarised and rendered off the event loop
        return render_summary_html(summary_of(service.records()), service.assignment)

    return HTMLResponse(await run_in_threadpool(make))


@instructor_route
async def instructor_student(request: Request, service: Service) -> Response:
    student = request.path_params["student_id"]
    if student not in await run_in_threadpool(service.store.students):
        return _not_found()
    return HTMLResponse(await run_in_threadpool(
        lambda: pages.instructor_student_page(service.record_of(student), service.assignment)))


@instructor_route
async def instructor_attempt(request: Request, service: Service) -> Response:
    page = await run_in_threadpool(service.feedback_page, request.path_params["student_id"],
                                   request.path_params["number"], instructor=True)
    return _not_found() if page is None else HTMLResponse(page)


@instructor_route
async def export_csv(request: Request, service: Service) -> Response:
    fmt = request.path_params["format"]
    assignment = service.grader.assignment

    def make() -> str:
        records = service.records()
        if fmt == "grades":
            with tempfile.TemporaryDirectory(prefix="export-", dir=service.grader.scratch) as folder:
                return grades_csv(records, assignment, Path(folder)).read_text(encoding="utf-8")
        return lms_csv(fmt, records, service.store.students(), assignment, service.config,
                       service.grader.settings)

    if fmt not in ("grades", "canvas", "moodle"):
        return _not_found()
    try:
        text = await run_in_threadpool(make)
    except CourseError as problem:
        return PlainTextResponse(f"Cannot export: {problem}", status_code=409)
    return Response(text, media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{fmt}-{service.assignment}.csv"'})


def _question_cells(service: Service) -> dict[str, str]:
    return {q.id: q.test_cell_id for q in service.grader.assignment.questions}


def _gradebook_page(service: Service, message: str = "", status: int = 200) -> Response:
    """The preview of recording into the term's record (who changes, from what to what, why), the form that
    confirms it, and the recordings made so far (the last one can be undone). Blocking."""
    config, settings = service.config, service.grader.settings
    counted = counted_attempts(service.records())
    try:
        changes = term_record.plan(config, settings, counted)
        history = [recording for recording, _ in term_record.recordings(config, settings.name)]
        differs = term_record.differences(config, settings, changes, service.store.notebook_of)
    except CourseError as problem:  # the term's record read back is not as we wrote it: said, not a 500
        return HTMLResponse(pages.gradebook_unavailable_page(service.assignment, str(problem), message),
                            status_code=409)
    return HTMLResponse(pages.gradebook_page(service.assignment, changes, len(counted) - len(changes),
                                             term_record.digest(changes), service.csrf_token("instructor"),
                                             history, str(config.root / "gradebook.db"), message, differs,
                                             ok=status < 400),
                        status_code=status)


FORM_FIELDS = 5  # the instructor's forms' own fields (csrf, plan, replace_term, undo), besides one tick a student
TICK = "student"  # the recording form's field, once for each ticked student


async def _instructor_form(request: Request, service: Service) -> tuple[dict[str, str], list[str]] | Response:
    """The form's fields and its ticks (every `student` field, in order), or the response refusing it. Bounded
    before anything is read into a field: one tick per student of the class at most, 4 KB a field."""
    students = len(await run_in_threadpool(service.store.students))
    try:
        form = await request.form(max_files=0, max_fields=FORM_FIELDS + students, max_part_size=4096)
    except HTTPException as problem:  # over a bound: said in a sentence, not Starlette's bare 400
        return PlainTextResponse(f"Nothing recorded: the form is larger than this class's ({students} students) "
                                 f"could be ({problem.detail}); reload the preview and submit it again.",
                                 status_code=413)
    csrf = form.get("csrf")
    if not _same_origin(request) or not isinstance(csrf, str) or not service.csrf_ok("instructor", csrf):
        return PlainTextResponse("The form was out of date or came from another page: reload the dashboard.",
                                 status_code=403)
    ticks = [value for value in form.getlist(TICK) if isinstance(value, str)]
    return {key: value for key, value in form.items() if isinstance(value, str) and key != TICK}, ticks


def _ticked(changes: list[term_record.Change], ticks: list[str]) -> list[term_record.Change] | str:
    """The changes of the ticked students, or why the ticks are refused (a duplicate, a student with nothing to
    record, none at all), in a sentence. A tick is text from a form: shown escaped and bounded."""
    def shown(names: list[str]) -> list[str]:
        return [safe_text(name, 100, one_line=True) for name in names]

    repeated = shown(sorted(tick for tick, count in Counter(ticks).items() if count > 1))
    if repeated:
        return f"the form ticks {_some(repeated)} more than once; reload the preview and tick again"
    listed = {change.student_id for change in changes}
    unknown = shown([tick for tick in ticks if tick not in listed])
    if unknown:
        return (f"the form ticks {_some(unknown)}, who {'is' if len(unknown) == 1 else 'are'} not in the preview "
                "(nothing to record, or not a student of this class); reload the preview and tick again")
    if not ticks:
        return "no student was ticked; tick the students to record"
    ticked = set(ticks)
    return [change for change in changes if change.student_id in ticked]


def _some(names: list[str], most: int = 5) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


@instructor_route
async def gradebook_preview(request: Request, service: Service) -> Response:
    return await run_in_threadpool(_gradebook_page, service)


@instructor_route
async def export_gradebook(request: Request, service: Service) -> Response:
    parsed = await _instructor_form(request, service)
    if isinstance(parsed, Response):
        return parsed
    form, ticks = parsed

    def run() -> Response:
        # One recording (or undo) at a time across every serve process on this course's folder, the plan made
        # again under the lock (term_record.exclusive).
        with term_record.exclusive(service.config, service.grader.settings.name):
            return undo(form["undo"]) if "undo" in form else record()

    def record() -> Response:
        config, settings = service.config, service.grader.settings
        changes = term_record.plan(config, settings, counted_attempts(service.records()))
        if form.get("plan") != term_record.digest(changes):
            return _gradebook_page(service, "Nothing recorded: what would change is not what the preview you "
                                            "confirmed showed (new attempts, or a term grade since). Check it "
                                            "again below.", 409)
        if not changes:
            return _gradebook_page(service, "Nothing to record: nbgrader's gradebook already holds every counted "
                                            "attempt. Nothing was changed.")
        chosen = _ticked(changes, ticks)
        if isinstance(chosen, str):
            return _gradebook_page(service, f"Nothing recorded: {chosen}.", 409)
        try:
            done = term_record.record(config, settings, _question_cells(service),
                                      service.grader.assignment.max_score, chosen, service.store.notebook_of,
                                      replace_term=form.get("replace_term") == "yes")
        except CourseError as problem:
            return _gradebook_page(service, f"Nothing recorded: {problem}.", 409)
        if done is None:
            return _gradebook_page(service, "Nothing to record: nbgrader's gradebook already holds every counted "
                                            "attempt. Nothing was changed.")
        refused = (f" Not recorded: {done.refused_text}; their records are as they were." if done.refused
                   else "")
        left = sorted({c.student_id for c in changes} - {c.student_id for c in chosen})
        unticked = f" Not ticked, left exactly as they are: {', '.join(left)}." if left else ""
        students = f"{len(done.students)} student{'s' if len(done.students) != 1 else ''}"
        return _gradebook_page(service, f"Recorded {students} ({', '.join(done.students)}) as "
                                        f"{done.label}: formgrader, nbgrader export and grades-"
                                        f"{settings.name}.csv now show their counted attempts.{refused}{unticked}")

    def undo(number: str) -> Response:
        try:
            undone = term_record.undo(service.config, service.grader.settings, tuple(_question_cells(service)),
                                      -1 if (numbered := whole_number(number)) is None else numbered)
        except CourseError as problem:
            return _gradebook_page(service, f"Nothing undone: {problem}.", 409)
        left = (f" Left as they are: {undone.refused_text}." if undone.refused else "")
        if not undone.undone:  # a student could not be put back: the recording stands, to be undone again
            back = f"the records of {', '.join(undone.students)} are back; " if undone.students else ""
            return _gradebook_page(service, f"Undid part of {undone.label}: {back}not everyone could be put back."
                                            f"{left} It stays open: undo it again once that is fixed.", 409)
        if not undone.students:
            return _gradebook_page(service, f"Put nothing back from {undone.label}: every record it wrote has "
                                            f"changed since.{left} It is closed, so the one before it can be "
                                            "undone.")
        return _gradebook_page(service, f"Undid {undone.label}: the records of {', '.join(undone.students)} are "
                                        f"back as they were before it.{left}")

    return await run_in_threadpool(run)


async def health(request: Request) -> Response:
    """200 "ok" when this process can serve (its database answers and its warm pool has workers), else 503 and
    why: the readiness and liveness probes of the Kubernetes Deployment (autograder/k8s-serve.yaml)."""
    problem = await run_in_threadpool(request.app.state.service.healthy)
    return PlainTextResponse(problem or "ok", status_code=503 if problem else 200)


async def favicon(request: Request) -> Response:
    return Response(status_code=204)


async def dashboard_js(request: Request) -> Response:
    return Response(pages.DASHBOARD_JS, media_type="text/javascript")


# --------------------------------------------------------------------------------------------- the app


class SecurityHeaders:
    """Pure ASGI middleware: the same protective headers on every response."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (scope.get("state") or {}).get(EDGE_ANSWERED):
            return  # the edge has answered it already (over TOKEN_REQUESTS_IN_FLIGHT) and closed its connection

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [(name.lower().encode(), value.encode()) for name, value in SECURITY_HEADERS.items()
                            if name.lower().encode() not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


ROUTES = [
    Route("/api/submissions", post_submission, methods=["POST"]),
    Route("/api/submissions/{attempt_id:int}", get_submission, methods=["GET"]),
    Route("/s/{token}/", student_home, methods=["GET"]),
    Route("/s/{token}/upload", student_upload, methods=["POST"]),
    Route("/s/{token}/attempts/{number:int}", student_attempt, methods=["GET"]),
    Route("/s/{token}/notebook", student_notebook, methods=["GET"]),
    Route("/i/{token}/", dashboard, methods=["GET"]),
    Route("/i/{token}/version", dashboard_version, methods=["GET"]),
    Route("/i/{token}/summary", class_summary_page, methods=["GET"]),
    Route("/i/{token}/students/{student_id}", instructor_student, methods=["GET"]),
    Route("/i/{token}/students/{student_id}/attempts/{number:int}", instructor_attempt, methods=["GET"]),
    Route("/i/{token}/export/{format}.csv", export_csv, methods=["GET"]),
    Route("/i/{token}/export/gradebook", gradebook_preview, methods=["GET"]),
    Route("/i/{token}/export/gradebook", export_gradebook, methods=["POST"]),
    Route("/static/dashboard.js", dashboard_js, methods=["GET"]),
    Route("/favicon.ico", favicon, methods=["GET"]),
    Route("/healthz", health, methods=["GET"]),
]


def create_app(service: Service) -> Any:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        service.loop = asyncio.get_running_loop()
        service.grader.listeners.append(service.graded)
        # Started on the server's own (main) thread, not a worker thread of the thread pool: bubblewrap's
        # --die-with-parent follows the thread that started it, and the pool's threads end when idle, which
        # would kill every warm worker (and the students' runs in them) at once.
        service.grader.start()
        try:
            yield
        finally:
            await run_in_threadpool(service.grader.stop)
            service.page_threads.shutdown(wait=False)

    app = Starlette(routes=ROUTES, lifespan=lifespan)
    app.state.service = service
    return SecurityHeaders(app)
