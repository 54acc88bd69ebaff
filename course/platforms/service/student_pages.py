"""The student's pages behind their personal link:

GET  /s/<token>/                  their page: the upload form (closed, saying why, when the policy refuses an
                                  attempt now) and their attempts
POST /s/<token>/upload            the form's upload: a redirect (post-redirect-get) to the attempt's page, or
                                  to their page with a signed note saying why nothing was submitted
GET  /s/<token>/attempts/<n>      attempt n (1, 2, ...): "being graded", then its feedback page
GET  /s/<token>/notebook          the notebook for their next attempt (personalised with variants)
"""

from __future__ import annotations

import json
from functools import partial
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from course.authoring.release import personalise
from course.core.errors import CourseError
from course.core.status import Status
from course.pipeline.render import render_html
from course.platforms.service import pages
from course.platforms.service.access import RETIRED_LINK, not_found, same_origin, student_route
from course.platforms.service.policy import Refusal, attempt_numbers, refusal
from course.platforms.service.results import StudentRecord
from course.platforms.service.state import CLOSE, Service
from course.platforms.service.store import now_utc
from course.platforms.service.uploads import BUSY, UploadRefused, accept_upload, receive_notebook


def _refusal_now(service: Service, record: StudentRecord) -> Refusal | None:
    """What the policy would answer to an attempt now (the store asks the same when one arrives)."""
    earlier = [a.submitted_at for a in record.attempts if a.status != Status.AUTOGRADER_ERROR]
    errors = [a.submitted_at for a in record.attempts if a.status == Status.AUTOGRADER_ERROR]
    stored = service.store.stored_bytes(record.student_id) if record.attempts else 0
    return refusal(service.policy, earlier, now_utc(), stored=stored, errors=errors)


async def _student_page(
    service: Service, student: str, message: str = "", status: int = 200, *, page_thread: bool = False
) -> Response:
    def make() -> str:  # read and rendered off the event loop (a student may have many attempts)
        record = service.record_of(student)
        note = ""
        if service.policy.fresh_numbers_per_attempt:
            note = f" (with fresh numbers for attempt {len(record.attempts) + 1}: answer with the numbers it shows)"
        return pages.student_page(
            record,
            service.assignment,
            service.policy,
            service.grader.due,
            service.csrf_token(f"student:{student}"),
            message,
            note,
            _refusal_now(service, record),
        )

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


def _refused_note(service: Service, student: str, refused: UploadRefused) -> Response:
    """The form's answer to an upload that was not taken: its sentence on the student's page (the connection
    closed with it when its body was not read to the end)."""
    return _noted(service, student, refused.message, CLOSE if refused.close else None)


@student_route
async def student_upload(request: Request, service: Service, student: str) -> Response:
    refused_csrf = "the form was out of date or came from another page: reload this page and submit again"
    if not same_origin(request):  # another site's post (no student's reload): refused before its body is read
        return await _student_page(service, student, f"{refused_csrf}.", 403)
    with service.upload_slot(student) as free:
        if not free:
            return _refused_note(service, student, BUSY)
        return await _student_upload(request, service, student, refused_csrf)


async def _student_upload(request: Request, service: Service, student: str, refused_csrf: str) -> Response:
    received = await receive_notebook(service, request)
    if isinstance(received, UploadRefused):
        return _refused_note(service, student, received)
    notebook, fields = received
    csrf = fields.get("csrf")
    if not isinstance(csrf, str) or not service.csrf_ok(f"student:{student}", csrf):
        return _noted(service, student, refused_csrf)
    accepted = await accept_upload(service, student, request.path_params["token"], notebook)
    if isinstance(accepted, UploadRefused):  # a link retired while the body came answers as one retired before
        if accepted.code in RETIRED_LINK:
            return PlainTextResponse(RETIRED_LINK[accepted.code], status_code=410)
        return _refused_note(service, student, accepted)
    # At once to the attempt's own page: it says "being graded" and shows the feedback when it is ready.
    return RedirectResponse(f"attempts/{accepted.number}", status_code=303)


def feedback_page(service: Service, student: str, number: int, *, instructor: bool = False) -> str | None:
    """The feedback page of a student's attempt by its number (or the page saying it is being graded), read
    and rendered on the calling thread, never the event loop: a feedback document may be large, and only
    this one is read. None: the student has no attempt of that number. The instructor's view of it too."""
    attempt = service.store.attempt_numbered(student, number)
    if attempt is None:
        return None
    back = f"../../{quote(attempt.student_id)}" if instructor else "../"
    if not attempt.done or attempt.feedback is None:
        return pages.waiting_page(attempt, back, instructor=instructor)
    return render_html(attempt.feedback, lead=pages.feedback_lead(attempt, back, instructor=instructor))


@student_route
async def student_attempt(request: Request, service: Service, student: str) -> Response:
    page = await service.on_page_thread(partial(feedback_page, service, student, request.path_params["number"]))
    return not_found() if page is None else HTMLResponse(page)


@student_route
async def student_notebook(request: Request, service: Service, student: str) -> Response:
    def make() -> bytes:
        config, grader = service.config, service.grader
        template_path = config.release_template(grader.settings.name)
        if not config.variants:
            return config.release_notebook(grader.settings.name).read_bytes()
        if not template_path.is_file():
            raise CourseError(
                f"{template_path} is missing: run autograd-course release (variants: true needs it "
                "to personalise each student's notebook)"
            )
        following = len(service.store.attempts_of(student, feedback=False)) + 1
        params = attempt_numbers(
            config, service.policy, grader.assignment.content, student, following, grader.assignment.default_params
        )
        notebook = personalise(
            json.loads(template_path.read_text(encoding="utf-8")), params, student, grader.assignment.content
        )
        return (json.dumps(notebook, indent=1, ensure_ascii=False) + "\n").encode("utf-8")

    try:
        body = await service.on_page_thread(make)
    except (CourseError, OSError) as problem:
        return PlainTextResponse(
            f"Your notebook cannot be made right now ({problem}); tell your instructor.", status_code=503
        )
    name = service.grader.settings.notebook
    return Response(
        body, media_type="application/x-ipynb+json", headers={"Content-Disposition": f'attachment; filename="{name}"'}
    )


async def favicon(request: Request) -> Response:
    """No icon (a browser asks for one with every page): an empty answer, not a 404 in the log."""
    return Response(status_code=204)
