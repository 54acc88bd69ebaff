"""The service's own HTML: the student's page (upload form, attempt history) and the instructor's dashboard.
The feedback page itself is `render.render_html`, the class summary `summary_page.render_summary_html`.
Everything shown is escaped; the only script is the dashboard's poller, served from /static."""

from __future__ import annotations

import html
from datetime import datetime

from course.core.status import Status
from course.core.text import plural
from course.pipeline.render import CSS, course_text_html
from course.platforms.service import charts_view
from course.platforms.service.policy import SAME_NOTEBOOK_ERRORS, Refusal, ServicePolicy, minutes
from course.platforms.service.results import StudentRecord
from course.platforms.service.store import Attempt
from course.term.term_record import Change, Recording

e = html.escape
EXTRA_CSS = """
form.upload { display: flex; gap: .75rem; flex-wrap: wrap; align-items: center; }
button { font: inherit; padding: .4rem 1rem; border-radius: 4px; border: 1px solid var(--line); cursor: pointer; }
.counted { font-weight: 600; }
a.button { display: inline-block; padding: .4rem 1rem; border: 1px solid var(--line); border-radius: 4px; }
ul.revisit { margin: .25rem 0; padding-left: 1.25rem; }
button[disabled], input[disabled] { opacity: .5; cursor: not-allowed; }
.done { background: #e6f4ea; border-left: 4px solid var(--ok); padding: .5rem .75rem; margin: .5rem 0; }
.error { margin: .5rem 0; }
@media (max-width: 40rem) {
  /* On a phone the dashboard's students are cards, each cell under its label: no column is cut off. */
  table.students thead { display: none; }
  table.students, table.students tbody, table.students tr, table.students td { display: block; width: 100%; }
  table.students tr { border-bottom: 1px solid var(--line); padding: .4rem 0; }
  table.students td { border: 0; padding: .1rem 0; overflow-wrap: anywhere; }
  table.students td:first-child { font-weight: 600; }
  table.students td:empty { display: none; }
}
"""


def banner(text: str, *, ok: bool, label: str = "") -> str:
    """A message at the top of a page: a success green with "Done:", a refusal or failure red with its label
    ("Not submitted:", ...). The word says it as well as the colour does (a colour alone is no cue to everyone)."""
    if ok:
        return f"<div class=done id=banner role=status><strong>{e(label or 'Done')}:</strong> {e(text)}</div>"
    return f"<div class=error id=banner role=alert><strong>{e(label or 'Not done')}:</strong> {e(text)}</div>"


def _page(
    title: str,
    body: str,
    *,
    refresh: bool = False,
    script: str = "",
    data: str = "",
    refresh_seconds: int = 2,
    css: str = "",
) -> str:
    meta = f"<meta http-equiv=refresh content={refresh_seconds}>" if refresh else ""
    scripts = f'<script src="{script}" defer></script>' if script else ""
    return (
        f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        f'<meta name=viewport content="width=device-width, initial-scale=1">{meta}'
        f"<title>{e(title)}</title><style>{CSS}{EXTRA_CSS}{css}</style>{scripts}</head>"
        f"<body{data}><main>{body}</main></body></html>"
    )


def gradebook_unavailable_page(assignment_name: str, problem: str, message: str = "") -> str:
    """The recording page when the term's record cannot be read (a file of the history that is not ours, the
    gradebook): what is wrong and where, instead of the preview; `message`: what the last action did."""
    said = banner(message, ok=False) if message else ""
    return _page(
        f"Gradebook: {assignment_name}",
        f"{said}{banner(problem, ok=False, label='Cannot show the recording')}"
        '<p><a href="../">back to the dashboard</a></p>',
    )


def records_unreadable_page(problem: str, *, instructor: bool) -> str:
    """The page when the service's own records cannot be read: what is wrong for the course staff (it names the
    row), and, for a student, only that it is not their doing."""
    if instructor:
        said = banner(
            f"{problem}. The other pages that need this record answer the same until it is mended.",
            ok=False,
            label="The service's records cannot be read",
        )
    else:
        said = banner(
            "the service cannot read its records of your attempts right now. Nothing you did caused "
            "this, and nothing of yours is lost; please tell your instructor.",
            ok=False,
            label="Not available",
        )
    return _page("Not available", said)


def _when(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC"


def _score(attempt: Attempt) -> str:
    if not attempt.done:
        return "being graded…"
    return f"{attempt.score:g} / {attempt.max_score:g}" if attempt.score is not None else "—"


def _policy_lines(policy: ServicePolicy, used: int | None, due: datetime | None, whose: str = "your") -> str:
    """The policy in force, in a sentence (used: the student's attempts so far; None on the dashboard)."""
    if used is None:
        allowed = f"{plural(policy.attempts, 'attempt')} each" if policy.attempts else "any number of attempts"
    else:
        allowed = (
            f"{used} of {plural(policy.attempts, 'attempt')} used"
            if policy.attempts
            else f"{plural(used, 'attempt')} so far (no limit)"
        )
    lines = [allowed, f"{whose} {'best' if policy.counts == 'best' else 'last'} attempt counts"]
    if policy.cooldown_minutes:
        lines.append(f"{minutes(policy.cooldown_minutes)} between attempts")
    lines.append(f"due {_when(due)}" if due is not None else "no due date")
    return "; ".join(lines)


def attempts_table(attempts: list[Attempt], counted: Attempt | None, link: str) -> str:
    if not attempts:
        return "<p>No attempts yet.</p>"
    rows = []
    for attempt in reversed(attempts):
        mark = " class=counted" if counted is not None and attempt.id == counted.id else ""
        # The attempt's own link comes first, so a narrow screen never hides it.
        label = "feedback" if attempt.done else "progress"
        rows.append(
            f'<tr{mark}><td><a href="{e(link)}{attempt.number}">attempt {attempt.number}</a> '
            f"<small>({label})</small></td><td>{_score(attempt)}</td>"
            f"<td>{e(attempt.status.replace('_', ' '))}</td><td>{_when(attempt.submitted_at)}</td></tr>"
        )
    return (
        "<div class=table-wrap><table><thead><tr><th>attempt</th><th>score</th><th>status</th><th>submitted</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def student_page(
    record: StudentRecord,
    assignment_name: str,
    policy: ServicePolicy,
    due: datetime | None,
    csrf: str,
    message: str = "",
    notebook_note: str = "",
    refused: Refusal | None = None,
) -> str:
    """The upload form (with the policy, and closed, saying why and until when, when it refuses an attempt now)
    and the attempts; once every attempt is used, no form at all. message: why the last upload was not
    submitted (the form's answer, carried to this page: student_pages.py, the upload's notes). refused: the policy's
    answer to an attempt now."""
    pending = any(not a.done for a in record.attempts)
    counted = ""
    if record.counted is not None:
        counted = f"<div class=score>{_score(record.counted)}</div><div>counted: attempt {record.counted.number}</div>"
    note = banner(message, ok=False, label="Not submitted") if message else ""
    used = sum(a.status != Status.AUTOGRADER_ERROR for a in record.attempts)  # our failures use up no attempt
    if policy.attempts is not None and used >= policy.attempts:
        # Nothing to submit any more: no heading naming an attempt that cannot be made, and no form.
        submit = (
            f"<section class=card id=submit><h2>No attempts left</h2><p id=closed role=status>You have used "
            f"all {plural(policy.attempts, 'attempt')} this assignment allows; your "
            f"{'best' if policy.counts == 'best' else 'last'} attempt counts.</p></section>"
        )
    else:
        closed, disabled = "", ""
        if refused is not None:
            disabled = " disabled"
            reopens = "; this page opens the form again by itself then" if refused.reopens_at is not None else ""
            closed = f'<p class="note" id=closed role=status>Not open now: {e(refused.message)}{reopens}.</p>'
        submit = (
            f"<section class=card id=submit><h2>Submit attempt {len(record.attempts) + 1}</h2>{closed}"
            '<form class=upload method=post action="upload" enctype="multipart/form-data">'
            f'<input type=file name=notebook accept=".ipynb,application/json" required{disabled}>'
            f'<input type=hidden name=csrf value="{e(csrf)}"><button type=submit{disabled}>Submit</button>'
            f'</form><p><a href="notebook" download>Download your notebook</a>{e(notebook_note)}</p></section>'
        )
    body = (
        f"<header class=summary><div>Assignment <strong>{e(assignment_name)}</strong>, "
        f"<strong>{e(record.student_id)}</strong></div>{counted}"
        f"<div id=policy>{e(_policy_lines(policy, used, due))}</div></header>{note}{submit}"
        f"<section class=card><h2>Your attempts</h2>{attempts_table(record.attempts, record.counted, 'attempts/')}"
        "</section>"
    )
    wait = None
    if refused is not None and refused.retry_after is not None:
        wait = max(2, min(int(refused.retry_after) + 1, 3600))
    return _page(
        f"{assignment_name}: {record.student_id}",
        body,
        refresh=pending or wait is not None,
        refresh_seconds=2 if pending else (wait or 2),
    )


def waiting_page(attempt: Attempt, back_link: str = "../", *, instructor: bool = False) -> str:
    back = "back to the student's attempts" if instructor else "back to your attempts"
    body = (
        f"<header class=summary><div>Attempt {attempt.number} was received {_when(attempt.submitted_at)}.</div>"
        f"<div class=score id=progress role=status>{'Queued' if attempt.status == 'queued' else 'Being graded'}"
        "…</div><div>This page shows its feedback by itself as soon as it is graded, usually within a minute; "
        "you may also leave and come back.</div></header>"
        f'<p><a href="{e(back_link)}">{back}</a></p>'
    )
    return _page(f"Attempt {attempt.number}: being graded", body, refresh=True)


def feedback_lead(attempt: Attempt, back: str, *, instructor: bool = False) -> str:
    """What the service puts above an attempt's feedback: when, links back and onwards, and what to revisit."""
    questions = attempt.feedback.questions if attempt.feedback is not None else ()
    revisit = [q for q in questions if q.earned < q.points]
    links = "".join(
        f'<li><a href="#q-{e(q.id)}">{course_text_html(q.title)}</a> ({q.earned:g} / {q.points:g})</li>'
        for q in revisit
    )
    if revisit:
        todo = f"<div>To revisit ({len(revisit)}):</div><ul class=revisit>{links}</ul>"
    elif questions:
        todo = "<div>Every question is right.</div>"
    else:
        todo = "<div>No question could be graded: the messages below say why.</div>"
    onwards = "" if instructor else f' · <a href="{e(back)}#submit">submit another attempt</a>'
    who = "the student's" if instructor else "your"
    return (
        f"<nav class=card id=attempt-summary><div><strong>Attempt {attempt.number}</strong>, submitted "
        f"{_when(attempt.submitted_at)}: {_score(attempt)}</div>{todo}"
        f'<div><a href="{e(back)}">back to {who} attempts</a>{onwards}</div></nav>'
    )


def _errors_cell(errors: tuple[int, int] | None) -> str:
    """A student's autograder errors on the dashboard: how many, and whether one notebook is no longer taken."""
    if errors is None:
        return ""
    count, same = errors
    held = f" (one notebook {same}×: not taken again)" if same >= SAME_NOTEBOOK_ERRORS else ""
    return f"<strong>{count}</strong>{held}"


def _left_out_note(left_out: list[str] | None, assignment_name: str) -> str:
    """The dashboard's note on students the LMS CSVs leave out, or nothing."""
    return (
        ""
        if not left_out
        else f"<p class=note id=lms-left-out role=status>Left out of the Canvas and Moodle CSVs: "
        f"{e(', '.join(left_out))}. The term's record (grades-{e(assignment_name)}.csv) grades "
        f"{'them' if len(left_out) > 1 else 'this student'}, but nobody here has a link for "
        f"{'them' if len(left_out) > 1 else 'this student'}, so the service has no LMS id to match a row "
        "with (a row without one would put the grade on nobody, or on someone else). Give them links with "
        "<code>autograd-course serve tokens roster.csv</code> (a roster with their LMS ids), or export "
        "the term's record with <code>autograd-course export --roster roster.csv</code>.</p>"
    )


def _dashboard_rows(records: list[StudentRecord], errors: dict[str, tuple[int, int]]) -> list[str]:
    """The dashboard's student table rows, one a student."""
    rows = []
    for record in records:
        last = record.attempts[-1] if record.attempts else None
        # data-label: each cell's column, shown beside it where a phone shows a row as a card
        rows.append(
            f'<tr><td><a href="students/{e(record.student_id)}">{e(record.student_id)}</a></td>'
            f"<td data-label=attempts>{len(record.attempts)}</td>"
            f'<td data-label="counted score">{_score(record.counted) if record.counted else "—"}</td>'
            f'<td data-label="last status">{e(last.status.replace("_", " ")) if last else "nothing submitted"}'
            "</td>"
            f'<td data-label="integrity findings">{len(record.integrity) or ""}</td>'
            f'<td data-label="autograder errors">{_errors_cell(errors.get(record.student_id))}</td></tr>'
        )
    return rows


def _errors_alert(records: list[StudentRecord], errors: dict[str, tuple[int, int]]) -> str:
    """The dashboard's alert on students whose attempts ended in an autograder error, or nothing."""
    failing = sum(1 for student in errors if any(r.student_id == student for r in records))
    return (
        ""
        if not failing
        else f"<p class=note id=autograder-errors role=status>{plural(failing, 'student')} had "
        "attempts end in an autograder error: our failure, not theirs (no attempt used); the server's log has "
        "each one's cause. Their own pages say so; a notebook that failed twice is not taken again.</p>"
    )


def dashboard_page(
    records: list[StudentRecord],
    assignment_name: str,
    policy: ServicePolicy,
    version: str,
    due: datetime | None,
    errors: dict[str, tuple[int, int]] | None = None,
    left_out: list[str] | None = None,
) -> str:
    """The class at a glance; `errors`: per student, their autograder errors (Store.autograder_errors);
    `left_out`: students graded in the term with no link here, whom the LMS CSVs leave out (results.lms_left_out)."""
    errors = errors or {}
    unmatched = _left_out_note(left_out, assignment_name)
    rows = _dashboard_rows(records, errors)
    alert = _errors_alert(records, errors)
    graded = sum(1 for r in records for a in r.attempts if a.done)
    body = (
        f"<header class=summary><div>Dashboard, assignment <strong>{e(assignment_name)}</strong></div>"
        f"<div class=score id=graded-count>{plural(graded, 'graded attempt')}</div>"
        f"<div>{plural(len(records), 'student')}; updates as attempts arrive</div>"
        f"<div id=policy>Policy: {e(_policy_lines(policy, None, due, 'each student’s'))}</div>"
        f"</header>{alert}{charts_view.placeholder()}"
        '<section class=card><h2>Export</h2><p><a href="export/grades.csv">grades CSV</a> '
        "(the service's attempts only) · "
        '<a href="export/canvas.csv">Canvas CSV</a> · <a href="export/moodle.csv">Moodle CSV</a> '
        "(the whole term)</p>"
        '<p id=item-analysis-export><a href="export/item-analysis.csv">item analysis CSV</a> · '
        '<a href="api/item-analysis">as JSON</a> (per answer of the counted attempts: share right, '
        "discrimination, blanks, common wrong values and who gave them; also on the class summary)</p>"
        f"<p id=lms-export>The Canvas and Moodle CSVs hold each student's counted attempt here, or their grade in "
        f"the term's record (grades-{e(assignment_name)}.csv, which <code>autograd-course grade</code> and the "
        "recordings below write) where they have no attempt here, or where their attempt would replace a grade "
        "the term gave (record it first). A student graded nowhere (no attempt here, nothing or missing work in "
        "the term) gets a blank cell, so the LMS keeps what it has: never a 0 for work nobody graded. At the "
        "term's end, <code>autograd-course export --format canvas --roster roster.csv</code> exports the "
        f"term's record alone, missing work as 0.</p>{unmatched}"
        '<p><a class=button href="export/gradebook">Record the counted scores in nbgrader\'s gradebook…</a> '
        "(shows who would change first; nothing is written until you confirm)</p></section>"
        "<section class=card><h2>Students</h2><div class=table-wrap><table id=students class=students><thead><tr>"
        "<th>student</th><th>attempts</th><th>counted score</th><th>last status</th><th>integrity findings</th>"
        f"<th>autograder errors</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div></section>"
        '<section class=card><h2>Class summary</h2><p><a href="summary">open the class summary</a> (its own page, '
        "sortable)</p></section>"
    )
    return _page(
        f"Dashboard: {assignment_name}",
        body,
        script="../../static/dashboard.js",
        data=f' data-version="{e(version)}"',
        css=charts_view.CHARTS_CSS,
    )


def _held(change: Change) -> str:
    held = change.before
    if held is None:
        return "nothing"
    when = f", submitted {_when(held.timestamp)}" if held.timestamp else ""
    return f"{held.score:g}{when} ({e(change.before_source)})"


def _gradebook_preview(changes: list[Change], plan: str, csrf: str, differs: dict[str, str]) -> str:
    """The gradebook page's form of what would change (one tick per student), or that nothing would."""
    rows = "".join(
        f"<tr><td>{e(c.student_id)}</td><td>{_held(c)}</td>"
        f"<td>{c.after.score:g}, attempt {c.after.attempt}, submitted {_when(c.after.submitted_at)}</td>"
        f"<td class=differs>{e(differs.get(c.student_id, ''))}</td><td>{e(c.why)}</td>"
        f'<td><input type=checkbox name=student value="{e(c.student_id)}" checked '
        f'aria-label="record {e(c.student_id)}"></td></tr>'
        for c in changes
    )
    replaced = [c.student_id for c in changes if c.replaces_term_grade]
    if changes:
        confirm = ""
        if replaced:
            confirm = (
                "<p><label><input type=checkbox name=replace_term value=yes> Replace the term's grade "
                f"of the ticked ones among {e(', '.join(replaced))} (kept: it can be undone)</label> "
                "(until recorded, the dashboard's Canvas and Moodle CSVs export their term grade)</p>"
            )
        preview = (
            f'<form method=post action="gradebook"><input type=hidden name=csrf value="{e(csrf)}">'
            f'<input type=hidden name=plan value="{e(plan)}">'
            "<div class=table-wrap><table id=changes><thead><tr><th>student</th><th>the gradebook now</th>"
            "<th>after recording</th><th>against the term's submission</th><th>why</th><th>record</th>"
            f"</tr></thead><tbody>{rows}</tbody></table></div>"
            "<p>Only the ticked students are recorded; an unticked student's record stays exactly as it "
            f"is.</p>{confirm}<button type=submit>Record the ticked students (of {len(changes)})</button>"
            "</form>"
        )
    else:
        preview = "<p id=nothing-new>Nothing to record: the gradebook already holds every counted attempt.</p>"
    return preview


def _gradebook_recordings(history: list[Recording], csrf: str) -> tuple[str, str]:
    """The gradebook page's past recordings as list items, and the form undoing the last standing one."""
    standing = [r for r in history if not r.undone]
    past = "".join(
        f"<li>{e(r.label)}, {e(r.recorded_at)}: {e(', '.join(r.students))}"
        f"{' (not recorded: ' + e(', '.join(sorted(r.refused))) + ')' if r.refused else ''}"
        f"{' (undone)' if r.undone else ''}"
        f"{' (stopped half-way: undo it to put back what it wrote)' if r.stopped else ''}</li>"
        for r in reversed(history)
    )
    undo = ""
    if standing:
        undo = (
            f'<form method=post action="gradebook"><input type=hidden name=csrf value="{e(csrf)}">'
            f'<input type=hidden name=undo value="{standing[-1].number}">'
            f"<button type=submit>Undo {e(standing[-1].label)}</button></form>"
        )
    return past, undo


def gradebook_page(
    assignment_name: str,
    changes: list[Change],
    unchanged: int,
    plan: str,
    csrf: str,
    history: list[Recording],
    gradebook: str,
    message: str = "",
    differs: dict[str, str] | None = None,
    *,
    ok: bool = True,
) -> str:
    """The preview of recording the counted attempts in the term's record (one tick per student, all ticked),
    how each differs from the submission the term holds (`differs`), its confirmation, and undo.
    message: what the last recording (or undo) did, `ok`, or why it did not."""
    differs = differs or {}
    note = banner(message, ok=ok) if message else ""
    preview = _gradebook_preview(changes, plan, csrf, differs)
    past, undo = _gradebook_recordings(history, csrf)
    body = (
        f"<header class=summary><div>Assignment <strong>{e(assignment_name)}</strong>: the counted attempts into "
        "nbgrader's gradebook</div><div>Each student's counted attempt becomes their submission in "
        f"{e(gradebook)}, submitted/, autograded/, feedback/ and grades-{e(assignment_name)}.csv, as "
        "<code>autograd-course grade</code> writes them; what it replaces is kept.</div></header>"
        f"{note}<section class=card><h2>What would change</h2>{preview}"
        f"<p>{plural(unchanged, 'student')} already recorded as they are; students with no graded attempt "
        "keep what the term gave them.</p></section>"
        f"<section class=card><h2>Recordings</h2>{'<ul>' + past + '</ul>' if past else '<p>None yet.</p>'}"
        f"{undo}</section>"
        '<p><a href="../">back to the dashboard</a></p>'
    )
    return _page(f"Gradebook: {assignment_name}", body)


def instructor_student_page(record: StudentRecord, assignment_name: str) -> str:
    integrity = "".join(f"<li>{e(finding)}</li>" for finding in record.integrity)
    body = (
        f"<header class=summary><div>Assignment <strong>{e(assignment_name)}</strong>, "
        f"<strong>{e(record.student_id)}</strong></div></header>"
        "<section class=card><h2>Attempts</h2>"
        f"{attempts_table(record.attempts, record.counted, e(record.student_id) + '/attempts/')}"
        "</section><section class=card><h2>Integrity (instructor only)</h2>"
        f"{'<ul>' + integrity + '</ul>' if integrity else '<p>Nothing seen.</p>'}</section>"
        '<p><a href="../">back to the dashboard</a></p>'
    )
    return _page(f"{assignment_name}: {record.student_id}", body)


DASHBOARD_JS = """\
// Reload the dashboard when an attempt arrives or is graded (the server's version string changes), and put the
// class's charts in place of their placeholder: made apart (GET charts) because they read the counted attempts'
// feedback, which the table does not (charts_view.py). No HTML of it is run: a parsed document's section, moved.
(function () {
  const seen = document.body.dataset.version;
  async function charts() {
    const here = document.getElementById("class-charts");
    if (!here) { return; }
    try {
      const response = await fetch("charts", {cache: "no-store"});
      if (!response.ok) { return; }
      const drawn = new DOMParser().parseFromString(await response.text(), "text/html").getElementById("class-charts");
      if (drawn) { here.replaceWith(document.importNode(drawn, true)); }
    } catch (error) { /* the placeholder's link to the charts stays */ }
  }
  async function poll() {
    try {
      const response = await fetch("version", {cache: "no-store"});
      if (response.ok && (await response.text()) !== seen) { location.reload(); return; }
    } catch (error) { /* the server restarts: try again */ }
    setTimeout(poll, 2000);
  }
  charts();
  setTimeout(poll, 2000);
})();
"""
