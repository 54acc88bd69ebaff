"""The ASGI application (Starlette): the routes of every room, wired, and the middleware around them. The rooms:

api.py               the JSON API (POST /api/submissions, GET /api/submissions/<id>) and /healthz
student_pages.py     the student's pages behind their personal link, /s/<token>/...
instructor_pages.py  the instructor's dashboard behind theirs, /i/<token>/...
uploads.py           receiving an upload (body, notebook, checks, the attempt stored), refusals as values
access.py            what a request under a link passes first: its token, its pace, retired links' 410
state.py             the running service's state (`Service`), shared by them all
middleware.py        the security headers on every response
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.routing import Route

from course.platforms.service.api import get_submission, health, item_analysis, post_submission
from course.platforms.service.instructor_pages import (
    class_summary_page,
    dashboard,
    dashboard_charts,
    dashboard_js,
    dashboard_version,
    export_csv,
    export_gradebook,
    gradebook_preview,
    instructor_attempt,
    instructor_student,
)
from course.platforms.service.middleware import SecurityHeaders
from course.platforms.service.state import Service
from course.platforms.service.student_pages import (
    favicon,
    student_attempt,
    student_home,
    student_notebook,
    student_upload,
)

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
    Route("/i/{token}/charts", dashboard_charts, methods=["GET"]),
    Route("/i/{token}/students/{student_id}", instructor_student, methods=["GET"]),
    Route("/i/{token}/students/{student_id}/attempts/{number:int}", instructor_attempt, methods=["GET"]),
    Route("/i/{token}/export/{format}.csv", export_csv, methods=["GET"]),
    Route("/i/{token}/api/item-analysis", item_analysis, methods=["GET"]),
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
