"""The instructor's pages behind their dashboard link:

GET  /i/<token>/                           the dashboard (every student, live: static/dashboard.js polls
                                           /i/<token>/version)
GET  /i/<token>/summary                    the class summary
GET  /i/<token>/charts                     the class's charts (the dashboard's script puts them in place)
GET  /i/<token>/students/<id>[/attempts/<n>]  a student's attempts, and each attempt's feedback
GET  /i/<token>/export/{grades,canvas,moodle,item-analysis}.csv  the exports
GET  /i/<token>/api/item-analysis          the item analysis of the counted attempts, as JSON (api.py)
GET  /i/<token>/export/gradebook           the preview of recording into the term's record; POST records or
                                           undoes (a form with its CSRF token, one tick a student)
"""

from __future__ import annotations

import tempfile
from collections import Counter
from functools import partial
from pathlib import Path

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response

from course.core.errors import CourseError
from course.core.text import safe_text, whole_number
from course.platforms.service import charts_view, pages
from course.platforms.service.access import instructor_route, not_found, same_origin
from course.platforms.service.results import (
    AnalysisBusy,
    analysis_if_free,
    counted_attempts,
    grades_csv,
    item_analysis_of,
    lms_csv,
    lms_left_out,
    summary_of,
)
from course.platforms.service.state import Service
from course.platforms.service.student_pages import feedback_page
from course.term import term_record
from course.term.item_exports import analysis_csv, analysis_json
from course.term.summary_page import render_summary_html


@instructor_route
async def dashboard(request: Request, service: Service) -> Response:
    def make() -> str:  # a class's worth of rows: made off the event loop, from the attempts without feedback
        records = service.records(feedback=False)
        try:
            left_out = lms_left_out(service.config, service.grader.settings, records)
        except CourseError:  # a term row grading could not have written: the export itself says which, and where
            left_out = []
        return pages.dashboard_page(
            records,
            service.assignment,
            service.policy,
            service.store.version(),
            service.grader.due,
            service.store.autograder_errors(),
            left_out,
        )

    return HTMLResponse(await run_in_threadpool(make))


@instructor_route
async def dashboard_version(request: Request, service: Service) -> Response:
    return PlainTextResponse(await run_in_threadpool(service.store.version))


@instructor_route
async def class_summary_page(request: Request, service: Service) -> Response:
    def make() -> str:  # every counted feedback of the class: read, summarised and rendered off the event loop
        version = service.store.version()  # before the records: an analysis is never labelled newer than it is
        records = service.records()
        analysis = analysis_if_free(records, service.grader.assignment, service.config, version)
        summary = summary_of(records, None if analysis is None else analysis_json(analysis))
        return render_summary_html(summary, service.assignment, analysis=analysis)

    return HTMLResponse(await run_in_threadpool(make))


@instructor_route
async def dashboard_charts(request: Request, service: Service) -> Response:
    def make() -> str:  # the counted attempts' feedback and each first attempt's: read and drawn off the event loop
        version = service.store.version()
        records = service.records()
        known = {r.counted.id for r in records if r.counted is not None}
        first = service.store.feedback_of([i for i in charts_view.first_attempts(records).values() if i not in known])
        analysis = analysis_if_free(records, service.grader.assignment, service.config, version)
        return charts_view.charts_page(service.assignment, charts_view.charts_section(records, first, analysis))

    return HTMLResponse(await run_in_threadpool(make))


@instructor_route
async def instructor_student(request: Request, service: Service) -> Response:
    student = request.path_params["student_id"]
    if student not in await run_in_threadpool(service.store.students):
        return not_found()
    return HTMLResponse(
        await run_in_threadpool(lambda: pages.instructor_student_page(service.record_of(student), service.assignment))
    )


@instructor_route
async def instructor_attempt(request: Request, service: Service) -> Response:
    page = await run_in_threadpool(
        partial(
            feedback_page, service, request.path_params["student_id"], request.path_params["number"], instructor=True
        )
    )
    return not_found() if page is None else HTMLResponse(page)


ITEM_ANALYSIS = "item-analysis"  # export/item-analysis.csv: the CSV `grade` writes as item-analysis-<assignment>.csv


@instructor_route
async def export_csv(request: Request, service: Service) -> Response:
    fmt = request.path_params["format"]
    assignment = service.grader.assignment

    def make() -> str:
        version = service.store.version()
        records = service.records()
        if fmt == "grades":
            with tempfile.TemporaryDirectory(prefix="export-", dir=service.grader.scratch) as folder:
                return grades_csv(records, assignment, Path(folder)).read_text(encoding="utf-8")
        if fmt == ITEM_ANALYSIS:
            return analysis_csv(analysis_json(item_analysis_of(records, assignment, service.config, version=version)))
        return lms_csv(fmt, records, service.store.students(), assignment, service.config, service.grader.settings)

    if fmt not in ("grades", "canvas", "moodle", ITEM_ANALYSIS):
        return not_found()
    try:
        text = await run_in_threadpool(make)
    except AnalysisBusy:
        return PlainTextResponse(
            "Another item analysis is being made: try again in a few seconds.",
            status_code=503,
            headers={"Retry-After": "5"},
        )
    except CourseError as problem:
        return PlainTextResponse(f"Cannot export: {problem}", status_code=409)
    return Response(
        text,
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{fmt}-{service.assignment}.csv"'},
    )


def _question_cells(service: Service) -> dict[str, str]:
    return {q.id: q.test_cell_id for q in service.grader.assignment.questions}


def _gradebook_page(service: Service, message: str = "", status: int = 200) -> Response:
    """The preview of recording into the term's record (who changes, from what to what, why), the form that
    confirms it, and the recordings made so far (the last one can be undone). Blocking."""
    config, settings = service.config, service.grader.settings
    counted = counted_attempts(service.records(), service.policy)
    try:
        changes = term_record.plan(config, settings, counted)
        history = [recording for recording, _ in term_record.recordings(config, settings.name)]
        differs = term_record.differences(config, settings, changes, service.store.notebook_of)
    except CourseError as problem:  # the term's record read back is not as we wrote it: said, not a 500
        return HTMLResponse(
            pages.gradebook_unavailable_page(service.assignment, str(problem), message), status_code=409
        )
    return HTMLResponse(
        pages.gradebook_page(
            service.assignment,
            changes,
            len(counted) - len(changes),
            term_record.digest(changes),
            service.csrf_token("instructor"),
            history,
            str(config.root / "gradebook.db"),
            message,
            differs,
            ok=status < 400,
        ),
        status_code=status,
    )


FORM_FIELDS = 5  # the instructor's forms' own fields (csrf, plan, replace_term, undo), besides one tick a student
TICK = "student"  # the recording form's field, once for each ticked student


async def _instructor_form(request: Request, service: Service) -> tuple[dict[str, str], list[str]] | Response:
    """The form's fields and its ticks (every `student` field, in order), or the response refusing it. Bounded
    before anything is read into a field: one tick per student of the class at most, 4 KB a field."""
    students = len(await run_in_threadpool(service.store.students))
    try:
        form = await request.form(max_files=0, max_fields=FORM_FIELDS + students, max_part_size=4096)
    except HTTPException as problem:  # over a bound: said in a sentence, not Starlette's bare 400
        return PlainTextResponse(
            f"Nothing recorded: the form is larger than this class's ({students} students) "
            f"could be ({problem.detail}); reload the preview and submit it again.",
            status_code=413,
        )
    csrf = form.get("csrf")
    if not same_origin(request) or not isinstance(csrf, str) or not service.csrf_ok("instructor", csrf):
        return PlainTextResponse(
            "The form was out of date or came from another page: reload the dashboard.", status_code=403
        )
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
        return (
            f"the form ticks {_some(unknown)}, who {'is' if len(unknown) == 1 else 'are'} not in the preview "
            "(nothing to record, or not a student of this class); reload the preview and tick again"
        )
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
    """Record the ticked students of the confirmed preview in nbgrader's gradebook, or undo a recording."""
    parsed = await _instructor_form(request, service)
    if isinstance(parsed, Response):
        return parsed
    form, ticks = parsed

    def run() -> Response:
        # One recording (or undo) at a time across every serve process on this course's folder, the plan made
        # again under the lock (term_record.exclusive).
        with term_record.exclusive(service.config, service.grader.settings.name):
            return _undo_recording(service, form["undo"]) if "undo" in form else _record_ticked(service, form, ticks)

    return await run_in_threadpool(run)


_NOTHING_TO_RECORD = "Nothing to record: nbgrader's gradebook already holds every counted attempt. Nothing was changed."


def _record_ticked(service: Service, form: dict[str, str], ticks: list[str]) -> Response:
    """The recording step: the plan made again and checked against the preview confirmed, the ticked changes
    written to nbgrader's gradebook, and the page saying what was (and was not) recorded."""
    config, settings = service.config, service.grader.settings
    changes = term_record.plan(config, settings, counted_attempts(service.records(), service.policy))
    if form.get("plan") != term_record.digest(changes):
        return _gradebook_page(
            service,
            "Nothing recorded: what would change is not what the preview you "
            "confirmed showed (new attempts, or a term grade since). Check it "
            "again below.",
            409,
        )
    if not changes:
        return _gradebook_page(service, _NOTHING_TO_RECORD)
    chosen = _ticked(changes, ticks)
    if isinstance(chosen, str):
        return _gradebook_page(service, f"Nothing recorded: {chosen}.", 409)
    try:
        done = term_record.record(
            config,
            settings,
            _question_cells(service),
            service.grader.assignment.max_score,
            chosen,
            service.store.notebook_of,
            replace_term=form.get("replace_term") == "yes",
        )
    except CourseError as problem:
        return _gradebook_page(service, f"Nothing recorded: {problem}.", 409)
    if done is None:
        return _gradebook_page(service, _NOTHING_TO_RECORD)
    return _gradebook_page(service, _recorded_text(done, changes, chosen, settings.name))


def _recorded_text(
    done: term_record.Recording,
    changes: list[term_record.Change],
    chosen: list[term_record.Change],
    assignment_name: str,
) -> str:
    """What a recording did, for the page: who was recorded, who was refused and who was left unticked."""
    refused = f" Not recorded: {done.refused_text}; their records are as they were." if done.refused else ""
    left = sorted({c.student_id for c in changes} - {c.student_id for c in chosen})
    unticked = f" Not ticked, left exactly as they are: {', '.join(left)}." if left else ""
    students = f"{len(done.students)} student{'s' if len(done.students) != 1 else ''}"
    return (
        f"Recorded {students} ({', '.join(done.students)}) as "
        f"{done.label}: formgrader, nbgrader export and grades-"
        f"{assignment_name}.csv now show their counted attempts.{refused}{unticked}"
    )


def _undo_recording(service: Service, number: str) -> Response:
    """The undo step: recording `number` put back, and the page saying how much of it was."""
    try:
        undone = term_record.undo(
            service.config,
            service.grader.settings,
            tuple(_question_cells(service)),
            -1 if (numbered := whole_number(number)) is None else numbered,
        )
    except CourseError as problem:
        return _gradebook_page(service, f"Nothing undone: {problem}.", 409)
    left = f" Left as they are: {undone.refused_text}." if undone.refused else ""
    if not undone.undone:  # a student could not be put back: the recording stands, to be undone again
        back = f"the records of {', '.join(undone.students)} are back; " if undone.students else ""
        return _gradebook_page(
            service,
            f"Undid part of {undone.label}: {back}not everyone could be put back."
            f"{left} It stays open: undo it again once that is fixed.",
            409,
        )
    if not undone.students:
        return _gradebook_page(
            service,
            f"Put nothing back from {undone.label}: every record it wrote has "
            f"changed since.{left} It is closed, so the one before it can be "
            "undone.",
        )
    return _gradebook_page(
        service,
        f"Undid {undone.label}: the records of {', '.join(undone.students)} are back as they were before it.{left}",
    )


async def dashboard_js(request: Request) -> Response:
    return Response(pages.DASHBOARD_JS, media_type="text/javascript")
