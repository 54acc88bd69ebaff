"""The JSON API (tools and `autograd-course submit`), and the health probe:

POST /api/submissions        Authorization: Bearer <student token>; the notebook as the body
                             (application/json) or as multipart field `notebook`. 200 with
                             {id, student_id, status, score, max_score, feedback_url} once graded (waits up
                             to `wait_seconds`, then 202 with status queued); 401, 413, 429 (+ Retry-After).
GET  /api/submissions/<id>   the same JSON (same token; another student's id is 404).
GET  /i/<instructor token>/api/item-analysis
                             the item analysis of the counted attempts (the JSON `grade` writes as
                             item-analysis-<assignment>.json, docs/grading.md): the instructor's only, like
                             every /i/ route (a student's token is 404); one made at a time per process.
GET  /healthz                200 "ok" when this process can serve, else 503 and why.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from course.platforms.service.access import RETIRED_LINK, instructor_route, pages_refused
from course.platforms.service.results import AnalysisBusy, item_analysis_of
from course.platforms.service.state import CLOSE, Service
from course.platforms.service.store import Attempt
from course.platforms.service.uploads import BUSY, UploadRefused, accept_upload, receive_notebook
from course.term.item_exports import analysis_json


def _json_error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def refused_json(refused: UploadRefused) -> JSONResponse:
    """An upload's refusal as the API's JSON: {"error": its sentence}, and a 429's `retry_after` (null: not by
    waiting) with Retry-After in whole seconds when there is one."""
    content: dict[str, Any] = {"error": refused.message}
    if refused.status == 429:
        content["retry_after"] = refused.retry_after
    headers = {"Retry-After": str(max(1, int(refused.retry_after + 0.999)))} if refused.retry_after else {}
    if refused.close:
        headers.update(CLOSE)
    return JSONResponse(content, status_code=refused.status, headers=headers or None)


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def submission_json(attempt: Attempt, token: str) -> dict[str, Any]:
    """The contract's JSON: `id` is the service's (the API's URLs), `attempt` the student's own number (1, 2, ...:
    what their page, the feedback URL and the dashboard call it)."""
    return {
        "id": attempt.id,
        "attempt": attempt.number,
        "student_id": attempt.student_id,
        "status": attempt.status,
        "score": attempt.score if attempt.done else None,
        "max_score": attempt.max_score,
        "feedback_url": f"/s/{token}/attempts/{attempt.number}",
    }


def _retired_json(retired: str) -> JSONResponse:
    """The 401 of a revoked or replaced token (RFC 6750's invalid_token), saying which (access.RETIRED_LINK)."""
    return JSONResponse(
        {"error": RETIRED_LINK[retired], "token": retired},
        status_code=401,
        headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
    )


async def _api_student(request: Request) -> tuple[Service, str, str] | Response:
    """(service, token, student id) of an API request, or the 401 for a missing or unknown bearer token."""
    service: Service = request.app.state.service
    token = _bearer(request)
    student = await run_in_threadpool(service.store.student_for, token)
    if student is None or token is None:
        retired = await run_in_threadpool(service.store.retired, token)
        if retired is not None:
            return _retired_json(retired)
        return _json_error(
            401, "a valid student token is needed: Authorization: Bearer <token>", {"WWW-Authenticate": "Bearer"}
        )
    return service, token, student


async def post_submission(request: Request) -> Response:
    caller = await _api_student(request)
    if isinstance(caller, Response):
        return caller
    service, token, student = caller
    with service.upload_slot(student) as free:
        return await _post_submission(request, service, token, student) if free else refused_json(BUSY)


async def _post_submission(request: Request, service: Service, token: str, student: str) -> Response:
    received = await receive_notebook(service, request)
    if isinstance(received, UploadRefused):
        return refused_json(received)
    accepted = await accept_upload(service, student, token, received[0])
    if isinstance(accepted, UploadRefused):  # a token retired while the body came is answered as one retired before
        return _retired_json(accepted.code) if accepted.code in RETIRED_LINK else refused_json(accepted)
    attempt = await service.wait_for(accepted)
    return JSONResponse(submission_json(attempt, token), status_code=200 if attempt.done else 202)


async def get_submission(request: Request) -> Response:
    caller = await _api_student(request)
    if isinstance(caller, Response):
        return caller
    service, token, student = caller
    with service.page_slot(student) as wait:
        if wait is not None:
            return await pages_refused(service, student, wait, api=True)
        attempt = await service.on_page_thread(
            partial(service.store.attempt, request.path_params["attempt_id"], feedback=False)
        )  # the JSON links to the feedback
    if attempt is None or attempt.student_id != student:
        return _json_error(404, "no such submission of yours")
    return JSONResponse(submission_json(attempt, token))


@instructor_route
async def item_analysis(request: Request, service: Service) -> Response:
    """The item analysis of the counted attempts, as JSON. It names students and shows their values: behind the
    instructor's token only. Made off the event loop, one at a time (results.item_analysis_of); a request that
    finds one under way for longer than ANALYSIS_WAIT is answered 503 with Retry-After rather than queued."""

    def make() -> dict[str, Any]:
        version = service.store.version()
        analysis = item_analysis_of(service.records(), service.grader.assignment, service.config, version=version)
        return analysis_json(analysis)

    try:
        data = await run_in_threadpool(make)
    except AnalysisBusy:
        return _json_error(503, "another item analysis is being made: try again in a few seconds", {"Retry-After": "5"})
    return JSONResponse(data)


async def health(request: Request) -> Response:
    """200 "ok" when this process can serve (its database answers and its warm pool has workers), else 503 and
    why: the readiness and liveness probes of the Kubernetes Deployment (autograder/k8s-serve.yaml)."""
    problem = await run_in_threadpool(request.app.state.service.healthy)
    return PlainTextResponse(problem or "ok", status_code=503 if problem else 200)
