"""The class summary as a page (one view of `summary.class_summary`'s data): self-contained, offline, valid
HTML for the instructor only. Every student's text is escaped once, with `html.escape`; the course's own
question titles go through `render.course_text_html`. A small inline script sorts the student table by a
click on a column header; without it the table is a plain table in student order."""

from __future__ import annotations

import html
from typing import Any

from course.core.status import Status
from course.pipeline.render import CSS, course_text_html
from course.term.class_charts import CHART_CSS, class_charts_html, item_analysis_html
from course.term.item_analysis import ItemAnalysis

HISTOGRAM_CSS = """
svg.histogram { display: block; width: 100%; max-width: 400px; height: auto; }
svg.histogram text { font: 14px system-ui, sans-serif; fill: #202124; }
svg.histogram text.bin-label { fill: var(--muted); }
svg.histogram rect { fill: #1a73e8; }
svg.histogram rect.empty { fill: var(--line); }
"""
SUMMARY_CSS = """
.stats { color: var(--muted); }
header nav { margin-top: .5rem; font-size: .95rem; }
.rate { background: #e8f0fe; height: .5rem; border-radius: 2px; min-width: 4rem; margin-top: .25rem; }
.rate > div { background: #1a73e8; height: 100%; border-radius: 2px; }
.names a, .names span, table.questions td + td { white-space: nowrap; }
table.students td, table.students th { white-space: nowrap; }
table.students th button { font: inherit; font-weight: 700; color: inherit; background: none; border: 0;
                           padding: 0; cursor: pointer; text-align: left; }
table.students th[aria-sort=ascending] button::after { content: " ▲"; }
table.students th[aria-sort=descending] button::after { content: " ▼"; }
tr.not-counted td { color: var(--muted); }
.phone-only { display: none; }
@media (max-width: 40rem) {
  table.students .q { display: none; }
  .phone-only { display: block; color: var(--muted); font-size: .9rem; }
}
"""

# Sorts the student table on a click on a header: numbers by their data-sort value, text by its letters;
# a second click reverses. Ties keep their order (Array.prototype.sort is stable).
SORT_SCRIPT = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  var head = table.tHead.rows[0], body = table.tBodies[0];
  Array.prototype.forEach.call(head.cells, function (th, column) {
    var button = document.createElement("button");
    button.type = "button";
    button.textContent = th.textContent;
    th.textContent = "";
    th.appendChild(button);
    button.addEventListener("click", function () {
      var ascending = th.getAttribute("aria-sort") !== "ascending";
      Array.prototype.forEach.call(head.cells, function (other) { other.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      var numeric = th.classList.contains("number");
      var key = function (row) {
        var cell = row.cells[column];
        var value = cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent;
        return numeric ? parseFloat(value) : value.toLowerCase();
      };
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = key(a), y = key(b), order = x < y ? -1 : (x > y ? 1 : 0);
        return ascending ? order : -order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""

NOT_COUNTED = {
    Status.FAILED: "Could not be read",
    Status.AUTOGRADER_ERROR: "Autograder errors",
}


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _points(value: float | None) -> str:
    return "—" if value is None else f"{round(value, 2):g}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _student(student_id: str, page: str, anchor: str = "") -> str:
    """A student's name, a link to their feedback page when it was written."""
    if not page:
        return f"<span>{_e(student_id)}</span>"
    return f'<a href="{_e(page + (f"#q-{anchor}" if anchor else ""))}">{_e(student_id)}</a>'


def histogram_svg(bins: list[dict[str, Any]], max_score: float) -> str:
    """Horizontal bars, one per whole-point bin, lowest score at the top; each bar's title names its students."""
    row, label_width, bar_width, top = 20, 62, 258, 4
    widest = max((len(b["students"]) for b in bins), default=0) or 1
    height = top * 2 + row * len(bins)
    width = label_width + bar_width + 40
    parts = [
        f'<svg class=histogram viewBox="0 0 {width} {height}" width={width} height={height} role=img '
        f'aria-label="Score distribution over {len(bins)} bins from 0 to {_points(max_score)} points">'
    ]
    filled = [b for b in bins if b["students"]]  # its text alternative: the count in each bin that has any
    parts.append(
        "<desc>Students per score: "
        + (
            "; ".join(
                f"{_e(b['from'] if b['from'] == b['to'] else str(b['from']) + '–' + str(b['to']))}: "
                f"{_plural(len(b['students']), 'student')}"
                for b in filled
            )
            or "none"
        )
        + ".</desc>"
    )
    for index, item in enumerate(bins):
        y = top + index * row
        count = len(item["students"])
        label = f"{item['from']}" if item["from"] == item["to"] else f"{item['from']}–{item['to']}"
        bar = max(bar_width * count / widest, 1.5)  # an empty bin still shows where it is
        names = f": {', '.join(item['students'])}" if count else ""
        parts.append(
            f"<g class=bin data-students={count}><title>{_e(label)} points: {_plural(count, 'student')}"
            f"{_e(names)}</title>"
            f"<text class=bin-label x={label_width - 6} y={y + 15} text-anchor=end>{_e(label)}</text>"
            f"<rect{'' if count else ' class=empty'} x={label_width} y={y + 3} width={bar:.1f} "
            f"height={row - 6} rx=2></rect>"
            f"<text x={label_width + bar + 5:.1f} y={y + 15}>{count or ''}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _header(summary: dict[str, Any], assignment_name: str) -> str:
    counted = summary["students"]
    away = summary["not_counted"]
    everyone = counted + sum(len(away[status]) for status in away)
    # The class as a whole first; the statistics' count beside it, so 5 of a class of 6 is never read as 6.
    parts = [
        f"<header class=summary><div>Class summary, assignment <strong>{_e(assignment_name)}</strong></div>",
        f"<div class=score>{_plural(everyone, 'student')}</div>",
    ]
    if everyone != counted:
        parts.append(f"<div>{counted} counted in the score statistics</div>")
    if counted:
        parts.append(
            f"<div>mean score {summary['mean_score']:.1f} / {_points(summary['max_score'])}, median "
            f"{_points(summary['median_score'])}</div>"
        )
    failed, ours, missing = away[Status.FAILED], away[Status.AUTOGRADER_ERROR], away[Status.MISSING]
    apart = [f"{len(failed)} could not be read"] if failed else []
    apart += [f"{len(ours)} autograder error{'s' if len(ours) != 1 else ''}"] if ours else []
    apart += [f"{len(missing)} did not submit"] if missing else []
    apart += [f"{len(away['unreadable'])} unreadable feedback"] if away["unreadable"] else []
    if apart:
        parts.append(f"<div class=stats>Not counted in these numbers: {', '.join(apart)} (listed below).</div>")
    sections = (
        [
            ("distribution", "distribution"),
            ("questions", "questions"),
            *([("charts", "answers")] if summary.get("answers") else []),
            ("misconceptions", "misconceptions"),
        ]
        if counted
        else []
    )
    sections += [("item-analysis", "item analysis")] if counted and summary.get("item_analysis") else []
    sections += [("students", "students")] if summary["roster"] else []
    sections += [("integrity", "integrity")]
    parts.append("<nav>" + " · ".join(f'<a href="#{anchor}">{name}</a>' for anchor, name in sections) + "</nav>")
    parts.append("</header>")
    return "".join(parts)


def _not_counted_html(summary: dict[str, Any]) -> str:
    away, roster = summary["not_counted"], {s["student_id"]: s for s in summary["roster"]}
    parts = []
    for status, title in NOT_COUNTED.items():
        if away[status]:
            items = "".join(
                f"<li>{_student(sid, roster[sid]['page'])}: {_e(roster[sid]['reason'])}</li>" for sid in away[status]
            )
            parts.append(
                f"<section class=card id=not-counted-{status}><h2>{title} ({len(away[status])})</h2>"
                f"<p>Not counted in the score statistics; their feedback says why.</p><ul>{items}</ul>"
                "</section>"
            )
    if away[Status.MISSING]:
        missing = away[Status.MISSING]
        parts.append(
            f"<section class=card id=not-counted-missing><h2>Did not submit ({len(missing)})</h2>"
            f"<p class=names>{', '.join(_student(sid, '') for sid in missing)}</p></section>"
        )
    if away["unreadable"]:
        count = len(away["unreadable"])
        parts.append(
            f'<section class=card id=not-counted-unreadable><div class="note">The feedback of '
            f"{_plural(count, 'student')} could not be read and is not counted here: "
            f"{_e(', '.join(away['unreadable']))}. Grade them again.</div></section>"
        )
    return "".join(parts)


def _questions_html(summary: dict[str, Any]) -> str:
    parts = [
        "<section class=card id=questions><h2>Questions</h2><p>Full marks: the students (of those counted) "
        "who earned every point of the question.</p><div class=table-wrap><table class=questions><thead><tr>"
        "<th>question</th><th>full marks</th><th>mean points</th></tr></thead><tbody>"
    ]
    for question in summary["questions"]:
        rate = 100 * question["success_rate"]
        parts.append(
            f"<tr><td>{course_text_html(question['title'])}</td><td>{rate:.0f}% "
            f"({question['full_marks']}/{summary['students']})"
            f'<div class=rate><div style="width:{rate:.0f}%"></div></div></td>'
            f"<td>{question['mean']:.2f} / {_points(question['points'])}</td></tr>"
        )
    parts.append("</tbody></table></div></section>")
    return "".join(parts)


def _misconceptions_html(summary: dict[str, Any]) -> str:
    roster = {s["student_id"]: s for s in summary["roster"]}
    parts = ["<section class=card id=misconceptions><h2>Misconceptions</h2>"]
    if not summary["misconceptions"]:
        parts.append("<p>None recognised.</p>")
    for item in summary["misconceptions"]:
        names = ", ".join(
            _student(sid, roster[sid]["page"] if sid in roster else "", item["where"][sid]) for sid in item["students"]
        )
        where = "; ".join(course_text_html(title) for title in item["questions"])
        parts.append(
            f'<div class="misconception"><strong>{_plural(len(item["students"]), "student")}</strong> '
            f"({where}): {_e(item['diagnosis'])}<div class=idea>The idea: {_e(item['idea'])}</div>"
            f"<div class=names>Who: {names}</div></div>"
        )
    parts.append("</section>")
    return "".join(parts)


ITEM_VALUES_SHOWN = 5  # wrong values a row of the item analysis names; the files have the rest


def _discrimination(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}".replace("-", "−")


def _wrong_values_html(item: dict[str, Any], pages: dict[str, str]) -> list[str]:
    """One answer's common wrong values as list items: its slips, its values with who gave them, what is left out."""
    wrong = [
        f"<li><strong>{_plural(slip['count'], 'student')}: {_e(slip['sentence'] or slip['words'])}</strong> "
        "(a slip found from their values)</li>"
        for slip in item["slips"][:ITEM_VALUES_SHOWN]
    ]
    for value in item["wrong_values"][:ITEM_VALUES_SHOWN]:
        names = ", ".join(_student(sid, pages.get(sid, "")) for sid in value["students"])
        if value["students_left_out"]:
            names += f" and {value['students_left_out']} more"
        why = ""
        if value["rule"]:
            why = f" — rule <code>{_e(value['rule'])}</code>"
        elif value["slip"]:
            why = f" — {_e(value['slip']['sentence'] or value['slip']['words'])}"
        numbers = value["numbers"]
        at = f" (numbers {_e(', '.join(f'{k}={v}' for k, v in numbers.items()))})" if numbers else ""
        wrong.append(
            f"<li><code>{_e(value['shown'])}</code>{at}: {_plural(value['count'], 'student')}{why}"
            f"<div class=names>{names}</div></li>"
        )
    more = len(item["wrong_values"]) - min(len(item["wrong_values"]), ITEM_VALUES_SHOWN) + item["wrong_values_left_out"]
    if more > 0:
        wrong.append(f"<li>{_plural(more, 'other wrong value')}</li>")
    if item["other_wrong"]:
        wrong.append(f"<li>{item['other_wrong']} wrong with no value to compare (form, function, unreadable)</li>")
    return wrong


def _item_analysis_html(items: dict[str, Any], pages: dict[str, str]) -> str:
    """The item analysis (course/term/item_exports.py's JSON) as one table, a row an answer: share right,
    discrimination, blanks and its most common wrong values, each with its count, who gave it and the rule or slip
    that explains it. Every value and name shown is the student's text: escaped."""
    parts = [
        "<section class=card id=item-analysis><h2>Item analysis</h2><p>Per answer, of the "
        f"{_plural(items['students'], 'counted student')}: the share right, how well the answer separates the class "
        "(discrimination: the point-biserial correlation of right/wrong with the rest of the score, from −1 to 1; "
        "— when everyone or no one was right), the blanks, and the wrong values students share (equal within the "
        f"grading tolerance, {items['tolerance']:g}"
        + ("; only among students with the same numbers" if items["variants"] else "")
        + "). Its CSV and JSON hold all of it.</p>"
    ]
    if not items["answers"]:
        parts.append("<p>No answers to analyse.</p></section>")
        return "".join(parts)
    parts.append(
        "<div class=table-wrap><table class=items><caption>Item analysis by answer</caption><thead><tr>"
        "<th scope=col>answer</th><th scope=col class=number>right</th><th scope=col class=number>"
        "discrimination</th><th scope=col class=number>blanks</th><th scope=col>common wrong values</th>"
        "</tr></thead><tbody>"
    )
    for item in items["answers"]:
        wrong = _wrong_values_html(item, pages)
        share = 100 * item["share_right"]
        parts.append(
            f"<tr><th scope=row><code>{_e(item['answer'])}</code> ({_e(item['question'])})</th>"
            f"<td class=num data-sort={item['share_right']:g}>{share:.0f}% ({item['right']}/{item['students']})</td>"
            f"<td class=num>{_discrimination(item['discrimination'])}</td>"
            f"<td class=num>{item['blanks']}</td>"
            f"<td>{'<ul>' + ''.join(wrong) + '</ul>' if wrong else 'none'}</td></tr>"
        )
    parts.append("</tbody></table></div></section>")
    return "".join(parts)


def _students_html(summary: dict[str, Any]) -> str:
    questions = summary["questions"]
    late = any(s["late_penalty"] for s in summary["roster"])
    head = [
        "<th>student</th>",
        "<th>status</th>",
        "<th class=number>score</th>",
        *(["<th class=number>late penalty</th>"] if late else []),
        "<th class=number>slips</th>",
        *(f'<th class="number q" title="{_e(q["title"])}">Q{i}</th>' for i, q in enumerate(questions, 1)),
    ]
    parts = [
        "<section class=card id=students><h2>Students</h2><p>Click a column's header to sort by it; each name "
        "opens the student's feedback page.</p><p class=phone-only>The points per question (Q1, Q2, ...) "
        'show on a wider screen.</p><div class=table-wrap><table class="students sortable"><thead><tr>',
        "".join(head),
        "</tr></thead><tbody>",
    ]
    for student in summary["roster"]:
        counted = student["counted"]
        score = (
            f"<td class=num data-sort={student['score']:g}>{_points(student['score'])}</td>"
            if counted
            else "<td class=num data-sort=-1>—</td>"
        )
        cells = [
            f"<td>{_student(student['student_id'], student['page'])}</td>",
            f"<td>{_e(student['status'].replace('_', ' '))}</td>",
            score,
        ]
        if late:
            cells.append(f"<td class=num data-sort={student['late_penalty']:g}>{_points(student['late_penalty'])}</td>")
        slips = student["misconceptions"]
        cells.append(
            f'<td class=num data-sort={len(slips)} title="{_e(", ".join(slips))}">{len(slips)}</td>'
            if counted
            else "<td class=num data-sort=-1>—</td>"
        )
        for question in questions:
            earned = student["questions"].get(question["id"]) if counted else None
            cells.append(
                f'<td class="num q" data-sort={-1 if earned is None else f"{earned:g}"}>{_points(earned)}</td>'
            )
        parts.append(f"<tr{'' if counted else ' class=not-counted'}>{''.join(cells)}</tr>")
    parts.append("</tbody></table></div></section>")
    return "".join(parts)


def _integrity_html(integrity: dict[str, list[str]], pages: dict[str, str]) -> str:
    """What the grader saw in submissions that tried to game it: for the instructor; scores are unaffected."""
    parts = ["<section class=card id=integrity><h2>Integrity report (instructor only)</h2>"]
    if not integrity:
        parts.append(
            "<p>Nothing seen: no submission patched torch or builtins, defined a rigged number type, "
            "edited a locked cell, came personalised for someone else or (with variants) came with the "
            "default numbers.</p></section>"
        )
        return "".join(parts)
    parts.append(
        "<p>None of this changed a score (the grader recomputes every reference itself) and none of it "
        "is in the students' feedback.</p><div class=table-wrap><table><thead><tr><th>student</th>"
        "<th>what was seen</th></tr></thead><tbody>"
    )
    for student, findings in integrity.items():
        items = "".join(f"<li>{_e(finding)}</li>" for finding in findings)
        parts.append(f"<tr><td>{_student(student, pages.get(student, ''))}</td><td><ul>{items}</ul></td></tr>")
    parts.append("</tbody></table></div></section>")
    return "".join(parts)


def render_summary_html(summary: dict[str, Any], assignment_name: str, *, analysis: ItemAnalysis | None = None) -> str:
    """The page; `analysis`: the class's item analysis, drawn in its own section after the questions' (issue 43)."""
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        '<meta name=viewport content="width=device-width, initial-scale=1">',
        f"<title>Class summary: {_e(assignment_name)}</title>",
        f"<style>{CSS}{HISTOGRAM_CSS}{SUMMARY_CSS}{CHART_CSS}</style></head><body><main>",
        _header(summary, assignment_name),
        _not_counted_html(summary),
    ]
    if summary["students"]:
        bins = summary["histogram"]
        width = bins[0]["to"] - bins[0]["from"] + 1 if bins else 1
        unit = "whole points" if width == 1 else f"bars of {width} points"
        parts.append(
            "<section class=card id=distribution><h2>Score distribution</h2><p>Students per score, in "
            f"{unit} (a score counts in the bar holding its whole part). Hover a bar for the names, or sort "
            "the students by score.</p>"
            f"{histogram_svg(summary['histogram'], summary['max_score'])}</section>"
        )
        parts.append(_questions_html(summary))
        parts.append(class_charts_html(summary))
        if analysis is not None:
            parts.append(item_analysis_html(analysis))
        parts.append(_misconceptions_html(summary))
        if summary.get("item_analysis"):
            pages = {student["student_id"]: student["page"] for student in summary["roster"]}
            parts.append(_item_analysis_html(summary["item_analysis"], pages))
    else:
        parts.append("<section class=card><p>No graded submissions yet.</p></section>")
    if summary["roster"]:
        parts.append(_students_html(summary))
    pages = {student["student_id"]: student["page"] for student in summary["roster"]}
    parts.append(_integrity_html(summary.get("integrity", {}), pages))
    parts.append(f"</main><script>{SORT_SCRIPT}</script></body></html>")
    return "\n".join(parts)
