"""The service's own HTML: the student's page (upload form, attempt history) and the instructor's dashboard.
The feedback page itself is `render.render_html`, the class summary `summary_page.render_summary_html`.
Everything shown is escaped; the only script is the dashboard's poller, served from /static."""

from __future__ import annotations

import html
from datetime import datetime

from course.grading import ERROR as AUTOGRADER_ERROR
from course.render import CSS
from course.service.policy import ServicePolicy
from course.service.results import StudentRecord
from course.service.store import Attempt

e = html.escape
EXTRA_CSS = """
form.upload { display: flex; gap: .75rem; flex-wrap: wrap; align-items: center; }
button { font: inherit; padding: .4rem 1rem; border-radius: 4px; border: 1px solid var(--line); cursor: pointer; }
.counted { font-weight: 600; }
iframe { width: 100%; height: 70vh; border: 1px solid var(--line); border-radius: 6px; }
"""


def _page(title: str, body: str, *, refresh: bool = False, script: str = "", data: str = "") -> str:
    meta = "<meta http-equiv=refresh content=2>" if refresh else ""
    scripts = f'<script src="{script}" defer></script>' if script else ""
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
            f'<meta name=viewport content="width=device-width, initial-scale=1">{meta}'
            f"<title>{e(title)}</title><style>{CSS}{EXTRA_CSS}</style>{scripts}</head>"
            f"<body{data}><main>{body}</main></body></html>")


def _when(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC"


def _score(attempt: Attempt) -> str:
    if not attempt.done:
        return "being graded…"
    return f"{attempt.score:g} / {attempt.max_score:g}" if attempt.score is not None else "—"


def _policy_lines(policy: ServicePolicy, used: int, due: datetime | None) -> str:
    allowed = f"{used} of {policy.attempts} attempts used" if policy.attempts else f"{used} attempts so far (no limit)"
    lines = [allowed, f"your {'best' if policy.counts == 'best' else 'last'} attempt counts"]
    if policy.cooldown_minutes:
        lines.append(f"{policy.cooldown_minutes:g} minutes between attempts")
    if due is not None:
        lines.append(f"due {_when(due)}")
    return "; ".join(lines)


def attempts_table(attempts: list[Attempt], counted: Attempt | None, link: str) -> str:
    if not attempts:
        return "<p>No attempts yet.</p>"
    rows = []
    for attempt in reversed(attempts):
        mark = " class=counted" if counted is not None and attempt.id == counted.id else ""
        feedback = f'<a href="{e(link)}{attempt.id}">feedback</a>' if attempt.done else ""
        rows.append(f"<tr{mark}><td>{attempt.number}</td><td>{_when(attempt.submitted_at)}</td>"
                    f"<td>{e(attempt.status.replace('_', ' '))}</td><td>{_score(attempt)}</td><td>{feedback}</td></tr>")
    return ("<div class=table-wrap><table><thead><tr><th>attempt</th><th>submitted</th><th>status</th><th>score</th>"
            f"<th></th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


def student_page(record: StudentRecord, assignment: str, policy: ServicePolicy, due: datetime | None, csrf: str,
                 message: str = "", notebook_note: str = "") -> str:
    pending = any(not a.done for a in record.attempts)
    counted = ""
    if record.counted is not None:
        counted = f"<div class=score>{_score(record.counted)}</div><div>counted: attempt {record.counted.number}</div>"
    note = f'<div class="note" role=alert>{e(message)}</div>' if message else ""
    used = sum(a.status != AUTOGRADER_ERROR for a in record.attempts)  # our failures use up no attempt
    body = (f"<header class=summary><div>Assignment <strong>{e(assignment)}</strong>, "
            f"<strong>{e(record.student_id)}</strong></div>{counted}"
            f"<div>{e(_policy_lines(policy, used, due))}</div></header>{note}"
            "<section class=card><h2>Submit your notebook</h2>"
            '<form class=upload method=post action="upload" enctype="multipart/form-data">'
            '<input type=file name=notebook accept=".ipynb,application/json" required>'
            f'<input type=hidden name=csrf value="{e(csrf)}"><button type=submit>Submit</button></form>'
            f'<p><a href="notebook" download>Download your notebook</a>{e(notebook_note)}</p></section>'
            f"<section class=card><h2>Your attempts</h2>{attempts_table(record.attempts, record.counted, 'attempts/')}"
            "</section>")
    return _page(f"{assignment}: {record.student_id}", body, refresh=pending)


def waiting_page(attempt: Attempt) -> str:
    body = (f"<header class=summary><div>Attempt {attempt.number} is {e(attempt.status)}: this page shows its "
            'feedback as soon as it is graded.</div></header><p><a href="../">back to your attempts</a></p>')
    return _page("Being graded", body, refresh=True)


def dashboard_page(records: list[StudentRecord], assignment: str, policy: ServicePolicy, version: str,
                   csrf: str) -> str:
    rows = []
    for record in records:
        last = record.attempts[-1] if record.attempts else None
        rows.append(f'<tr><td><a href="students/{e(record.student_id)}">{e(record.student_id)}</a></td>'
                    f"<td>{len(record.attempts)}</td>"
                    f"<td>{_score(record.counted) if record.counted else '—'}</td>"
                    f"<td>{e(last.status.replace('_', ' ')) if last else 'nothing submitted'}</td>"
                    f"<td>{len(record.integrity) or ''}</td></tr>")
    graded = sum(1 for r in records for a in r.attempts if a.done)
    body = (f"<header class=summary><div>Dashboard, assignment <strong>{e(assignment)}</strong></div>"
            f"<div class=score id=graded-count>{graded} graded attempts</div>"
            f"<div>{len(records)} students; the {policy.counts} attempt counts; updates as attempts arrive</div>"
            "</header>"
            '<section class=card><h2>Export</h2><p><a href="export/grades.csv">grades CSV</a> · '
            '<a href="export/canvas.csv">Canvas CSV</a> · <a href="export/moodle.csv">Moodle CSV</a></p>'
            '<form method=post action="export/gradebook">'
            f'<input type=hidden name=csrf value="{e(csrf)}">'
            "<button type=submit>Record the counted scores in nbgrader's gradebook</button></form></section>"
            "<section class=card><h2>Students</h2><div class=table-wrap><table id=students><thead><tr>"
            "<th>student</th><th>attempts</th><th>counted score</th><th>last status</th><th>integrity findings</th>"
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div></section>"
            '<section class=card><h2>Class summary</h2><iframe title="class summary" src="summary"></iframe></section>')
    return _page(f"Dashboard: {assignment}", body, script="../../static/dashboard.js",
                 data=f' data-version="{e(version)}"')


def instructor_student_page(record: StudentRecord, assignment: str) -> str:
    integrity = "".join(f"<li>{e(finding)}</li>" for finding in record.integrity)
    body = (f"<header class=summary><div>Assignment <strong>{e(assignment)}</strong>, "
            f"<strong>{e(record.student_id)}</strong></div></header>"
            f"<section class=card><h2>Attempts</h2>{attempts_table(record.attempts, record.counted, '../attempts/')}"
            "</section><section class=card><h2>Integrity (instructor only)</h2>"
            f"{'<ul>' + integrity + '</ul>' if integrity else '<p>Nothing seen.</p>'}</section>"
            '<p><a href="../">back to the dashboard</a></p>')
    return _page(f"{assignment}: {record.student_id}", body)


DASHBOARD_JS = """\
// Reload the dashboard when an attempt arrives or is graded (the server's version string changes).
(function () {
  const seen = document.body.dataset.version;
  async function poll() {
    try {
      const response = await fetch("version", {cache: "no-store"});
      if (response.ok && (await response.text()) !== seen) { location.reload(); return; }
    } catch (error) { /* the server restarts: try again */ }
    setTimeout(poll, 2000);
  }
  setTimeout(poll, 2000);
})();
"""
