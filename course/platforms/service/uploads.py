"""Receiving an upload, for the API and the student's form alike: its body read within its bounds (size, time,
spooled to disk), the notebook found in it (a JSON body or the form's `notebook` field), checked as a notebook
and as this assignment's, and stored as an attempt when the policy allows one.

What refuses an upload is an `UploadRefused` (the status the API answers, a code word, the student's sentence),
never a response: the API renders it as JSON (api.py), the student's form as the note on their page
(student_pages.py), each in its own medium.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import ClientDisconnect, Request

from course.core.errors import TokenRetired
from course.platforms.service.edge import SPOOL_BYTES, UPLOAD_RETRY_SECONDS, UPLOADS_IN_FLIGHT
from course.platforms.service.policy import Refusal
from course.platforms.service.state import LOG, Service
from course.platforms.service.store import REVOKED, Attempt

MULTIPART_SLACK = 64 * 1024  # the form's own bytes around the notebook
DRAIN_LIMIT = 16 * 2**20  # an oversized body is read (and dropped) up to this much before 413, so the client hears it


@dataclass(frozen=True)
class UploadRefused:
    """Why an upload was not taken (nothing stored, no attempt used): the HTTP status the API answers with it, a
    code word for it (tests and logs), and the sentence the student reads."""

    status: int
    code: str
    message: str
    retry_after: float | None = None  # a 429's: seconds until it may be taken (None: not by waiting)
    close: bool = False  # answered before its body was read to the end: the connection ends with the answer


# One student's uploads in progress are at most UPLOADS_IN_FLIGHT (Service.upload_slot).
BUSY = UploadRefused(
    429,
    "busy",
    f"you have {UPLOADS_IN_FLIGHT} uploads in progress already; wait for their feedback, then submit again",
    UPLOAD_RETRY_SECONDS,
    close=True,
)


class TooLarge(Exception):
    pass


class TooSlow(Exception):
    pass


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


def notebook_problem(notebook: bytes) -> str:
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


async def receive_notebook(service: Service, request: Request) -> tuple[bytes, dict[str, Any]] | UploadRefused:
    """The uploaded notebook and the form's other fields (none for a JSON body), or why it was not received."""
    limit = service.policy.upload_bytes
    try:
        body = await _read_body(request, limit + MULTIPART_SLACK, service.edge.body_seconds, service.grader.scratch)
    except TooLarge:
        return UploadRefused(
            413,
            "too_large",
            f"the notebook is larger than the limit of {service.policy.upload_kb} "
            "KB; clear its outputs (Edit > Clear Outputs of All Cells) and submit "
            "again",
        )
    except ClientDisconnect:  # nobody hears this; the upload's place is given back as the request ends
        return UploadRefused(400, "interrupted", "the upload was interrupted", close=True)
    except TooSlow:
        LOG.warning(
            "serve: cut off an upload whose body took over %g s (serve --body-seconds)", service.edge.body_seconds
        )
        return UploadRefused(
            408,
            "too_slow",
            f"the notebook did not arrive within {service.edge.body_seconds:g} s; "
            "submit again (on a slow connection, clear its outputs first: Edit > "
            "Clear Outputs of All Cells)",
            close=True,
        )
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    fields: dict[str, Any] = {}
    if kind == "multipart/form-data":
        try:
            fields = await _form(request.headers, body, limit + 1)
            notebook = await _notebook_field(fields)
        except MultiPartException as problem:
            return UploadRefused(400, "bad_form", f"the form could not be read: {problem.message}")
        if notebook is None:
            return UploadRefused(400, "no_notebook", "the form has no field named notebook")
    elif kind in ("application/json", "application/x-ipynb+json"):
        notebook = body
    else:
        return UploadRefused(
            415,
            "media_type",
            "send the notebook as the body (Content-Type: application/json) or as the multipart form field notebook",
        )
    if len(notebook) > limit:
        return UploadRefused(
            413, "too_large", f"the notebook is larger than the limit of {service.policy.upload_kb} KB"
        )
    return notebook, fields


def _accept(service: Service, student: str, token: str, notebook: bytes) -> Attempt | Refusal | UploadRefused:
    """Why the upload is refused before it is stored (not a notebook at all, or not one the grader can read as
    the assignment's: a refused upload uses up no attempt, the 400 says why), or the policy's refusal, or the
    attempt as stored (committed). Blocking: the request's one trip to a worker thread for all of it."""
    problem = notebook_problem(notebook)
    if problem:
        return UploadRefused(400, "not_a_notebook", problem)
    problem = service.grader.upload_problem(student, notebook)
    if problem:
        return UploadRefused(400, "not_gradable", f"the upload cannot be graded: {problem}")
    try:
        return service.store.submit(student, service.assignment, notebook, service.policy, token)
    except TokenRetired:  # revoked or rotated while the body arrived (it may take --body-seconds)
        retired = service.store.retired(token) or REVOKED
        LOG.warning("serve: refused an upload of %s: its token was %s while its body arrived", student, retired)
        # The rooms answer it as any retired token, with access.RETIRED_LINK's sentence.
        return UploadRefused(410, retired, f"your link was {retired} while the notebook arrived: nothing was stored")


async def accept_upload(service: Service, student: str, token: str, notebook: bytes) -> Attempt | UploadRefused:
    """The attempt as stored (its grading woken), or why the notebook was not taken: not a notebook, not this
    assignment's, `token` (the upload's) revoked or replaced since its headers came (410, as `code` REVOKED or
    REPLACED: nothing stored), or the policy's refusal (429: the policy's bound reached, as `code`, or "policy")."""
    accepted = await run_in_threadpool(_accept, service, student, token, notebook)
    if isinstance(accepted, Attempt):
        service.grader.wake()
        return accepted
    if isinstance(accepted, UploadRefused):
        return accepted
    if accepted.limit == "autograder_errors":
        LOG.warning(
            "serve: refused an upload of %s after their autograder errors (the dashboard lists them): %s",
            student,
            accepted.message.split(":")[0],
        )
    elif accepted.limit:
        LOG.warning(
            "serve: refused an upload of %s: service.%s reached (%s)",
            student,
            accepted.limit,
            accepted.message.split(":")[0],
        )
    return UploadRefused(429, accepted.limit or "policy", accepted.message, accepted.retry_after)
