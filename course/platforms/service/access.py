"""What every request under a personal link passes before its room answers it: the token looked up (a retired
one answered 410 with why, an unknown one 404), a student's pages paced (429 beyond their pace, edge.py), the
form's origin, and a page the service's own records cannot make answered 503 with a sentence, never a bare 500."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

from course.core.errors import CourseError
from course.platforms.service import pages
from course.platforms.service.edge import PAGE_REFUSAL_SECONDS, PAGE_REFUSALS_DELAYED, retry_seconds
from course.platforms.service.state import CLOSE, LOG, Service
from course.platforms.service.store import REPLACED, REVOKED

Handler = Callable[[Request], Awaitable[Response]]


def not_found() -> Response:
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
RETIRED_INSTRUCTOR_LINK = (
    "This dashboard link has been replaced by a newer one (serve tokens --rotate-instructor): "
    "use the token in the newest tokens-instructor.txt."
)


async def _retired_or_not_found(service: Service, token: str, *, instructor: bool = False) -> Response:
    retired = await run_in_threadpool(partial(service.store.retired, token, instructor=instructor))
    if retired is None:
        return not_found()
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
            return await pages_refused(service, student, wait)

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


def same_origin(request: Request) -> bool:
    """A browser's form post names its page's origin; one from another site is refused (with the token)."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host", "")


async def pages_refused(service: Service, student: str, wait: float, *, api: bool = False) -> Response:
    """The 429 of a student's page (or API read) beyond their pace (PageGate), with Retry-After and why; sent
    after PAGE_REFUSAL_SECONDS at most (edge.py: why), holding no place of the student's meanwhile. At most
    PAGE_REFUSALS_DELAYED of a student's wait at once; the others are answered at once and end their connection,
    so that one token never holds more than that many connections with its refusals."""
    assert service.page_gate is not None  # noqa: S101 - set in __post_init__
    headers = {"Retry-After": str(retry_seconds(wait))}
    if service.delayed.get(student, 0) >= PAGE_REFUSALS_DELAYED:
        service.say(
            student,
            "delayed",
            "serve: refused pages of %s at once and closed their connections: %d of "
            "their refusals are being delayed already",
            student,
            PAGE_REFUSALS_DELAYED,
        )
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
        return JSONResponse({"error": sentence, "retry_after": retry_seconds(wait)}, status_code=429, headers=headers)
    return PlainTextResponse(sentence, status_code=429, headers=headers)
