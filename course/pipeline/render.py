"""Views of one feedback model (the `course.pipeline.feedback_model.Feedback` that `feedback.build_feedback` makes): the
HTML page and Gradescope's Markdown.

What a student is shown is decided once, here, as plain tables and notes (`question_view`); each renderer
only lays them out, with its one escaping rule: `html.escape` for the page, `text.markdown_text` for
Markdown. Text that came from the student's notebook is never markup in either.
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass, field
from typing import Any

from course.core.text import markdown_text
from course.pipeline.feedback_model import AnswerFeedback, ChainTable, Feedback, MisconceptionNote, QuestionFeedback

# ----------------------------------------------------------------------------- the view: tables and notes


@dataclass(frozen=True)
class Cell:
    text: str
    kind: str = ""  # "num" (a value), "name" (an answer's name), "mark" (✓/✗ and points)
    notes: tuple[tuple[str, str], ...] = ()  # (style, text) lines under the text: "" plain, "note", "idea"


@dataclass(frozen=True)
class Table:
    kind: str  # "values" or "chain"
    head: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    highlighted: int | None = None  # the row where a chain first breaks
    title: str = ""
    caption: str = ""
    first: tuple[int, ...] = ()  # the columns a phone shows first, under the row's name and verdict


@dataclass(frozen=True)
class QuestionView:
    id: str
    title: str
    score: str
    error: str
    tables: tuple[Table, ...]
    # (diagnosis, the idea it violates); "" diagnosis: the idea alone (verdicts only, see notes_shown)
    slips: tuple[tuple[str, str], ...] = field(default_factory=tuple)


def _points(value: float) -> str:
    return f"{value:g}" if math.isfinite(value) else "?"


def _mark(correct: bool, earned: float | None = None, points: float | None = None) -> Cell:
    text = "✓" if correct else "✗"
    if earned is not None and points is not None:
        text += f" {_points(earned)}/{_points(points)}"
    return Cell(text, "mark")


def _values_table(values: tuple[AnswerFeedback, ...], reveal: bool) -> Table:
    rows = []
    for value in values:
        # Said once, in one place: a missing value's cell says why there is none; a function's cell says
        # "function" and what the grader found at its points goes under the explanation.
        if value.your_value is None and value.status != "function":
            yours, shown_below = value.detail or value.status, ""
        else:
            yours = value.your_value if value.your_value is not None else value.status
            shown_below = value.detail
        notes: list[tuple[str, str]] = [("", shown_below)] if shown_below else []
        if value.hand_work_note:
            notes.append(("note", value.hand_work_note))
        row = [Cell(value.name, "name"), Cell(str(yours), "num")]
        if reveal:
            row.append(Cell(str(value.torch_value), "num"))
        row += [_mark(value.correct, value.earned, value.points), Cell(value.explanation, "", tuple(notes))]
        rows.append(tuple(row))
    head = ("answer", "your value", *(("torch",) if reveal else ()), "points", "explanation")
    return Table("values", head, tuple(rows))


def _chain_table(table: ChainTable, reveal: bool) -> Table:
    rows: list[tuple[Cell, ...]] = []
    for index, row in enumerate(table.rows):
        node = Cell(f"→ {row.node}" if index == table.first_wrong else row.node)
        mark = _mark(row.correct) if row.asked else Cell("")  # torch's number alone: nothing of theirs to mark
        if reveal:
            rows.append(
                (
                    node,
                    Cell(row.your_forward, "num"),
                    Cell(str(row.torch_forward), "num"),
                    Cell(f"{row.local_derivative} (here {row.torch_local_derivative})"),
                    Cell(row.your_gradient, "num"),
                    Cell(str(row.torch_gradient), "num"),
                    mark,
                )
            )
        else:
            rows.append(
                (
                    node,
                    Cell(row.your_forward, "num"),
                    Cell(row.local_derivative),
                    Cell(row.your_gradient, "num"),
                    mark,
                )
            )
    head = (
        (
            "node",
            "your forward value",
            "torch forward",
            "local derivative (torch)",
            "your gradient",
            "torch gradient",
            "",
        )
        if reveal
        else ("node", "your forward value", "local derivative", "your gradient", "")
    )
    caption = (
        "Your chain matches torch at every node."
        if table.first_wrong is None
        else "Your chain first breaks at the node marked →; every gradient behind it inherits the error."
    )
    # On a phone the gradients (yours, and torch's when shown) come first: they show where the chain broke.
    first = (len(head) - 3, len(head) - 2) if reveal else (len(head) - 2,)
    return Table(
        "chain", head, tuple(rows), table.first_wrong, "Chain table (backward pass, right to left)", caption, first
    )


def notes_shown(misconceptions: tuple[MisconceptionNote, ...], reveal: bool) -> tuple[tuple[str, str], ...]:
    """The misconception notes a student is shown, as (diagnosis, idea). With torch's values, every note whole.

    Verdicts only, no note may narrow the answer down (else a student resubmits their way to it): a note's
    diagnosis relates the answer to torch's ("the right size but the wrong sign", "y.grad is None", "twice as
    much") and is left out (""); its idea, the concept the slip violates in the same words for everyone, is
    shown, each idea once per question. A note found from the numbers alone (the sign slip: the answer is
    exactly minus torch's) names no misunderstanding, and its being there tells the sign: it is left out."""
    if reveal:
        return tuple((note.diagnosis, note.idea) for note in misconceptions)
    ideas = [note.idea for note in misconceptions if not note.from_numbers]
    return tuple(("", idea) for idea in dict.fromkeys(ideas))


def question_view(question: QuestionFeedback, reveal: bool) -> QuestionView:
    tables = [_values_table(question.values, reveal)]
    if question.chain_table is not None:
        tables.append(_chain_table(question.chain_table, reveal))
    return QuestionView(
        question.id,
        question.title,
        f"{_points(question.earned)} / {_points(question.points)}",
        question.error,
        tuple(tables),
        notes_shown(question.misconceptions, reveal),
    )


VERDICTS_ONLY = (
    "This feedback says which answers are right, not what torch computes: work out the ones marked ✗ "
    "again from the chain table and the notes."
)
SLIP = "A common slip:"
IDEA_TO_REVISIT = "An idea to revisit:"  # a note shown by its idea alone (verdicts only)
ERRORS_TITLE = "Errors your notebook reported"
ERRORS_INTRO = "What your code raised while it ran, as your notebook reported it:"


# ----------------------------------------------------------------------------- HTML

CSS = """
:root { --ok: #1b7f3b; --bad: #b3261e; --muted: #5f6368; --line: #dadce0; --warn: #fff4e5; }
* { box-sizing: border-box; }
body { font: 16px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0;
       color: #202124; background: #f6f7f9; }
main { max-width: 60rem; margin: 0 auto; padding: 1rem; }
header.summary { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 1rem 1.25rem; }
.score { font-size: 2rem; font-weight: 700; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 1rem 1.25rem; margin: 1rem 0; }
.card h2 { font-size: 1.15rem; margin: 0 0 .5rem; display: flex; justify-content: space-between; gap: 1rem; }
.points { white-space: nowrap; color: var(--muted); }
.table-wrap { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; margin: .5rem 0; font-size: .95rem; }
th, td { border-bottom: 1px solid var(--line); padding: .35rem .5rem; text-align: left; vertical-align: top; }
th { background: #f1f3f4; }
td.num { font-family: ui-monospace, monospace; }
.ok { color: var(--ok); font-weight: 600; }
.bad { color: var(--bad); font-weight: 600; }
tr.first-wrong td { background: #fdecea; }
.note { background: var(--warn); border-left: 4px solid #f29900; padding: .5rem .75rem; margin: .5rem 0; }
.misconception { background: #e8f0fe; border-left: 4px solid #1a73e8; padding: .5rem .75rem; margin: .5rem 0; }
.idea { color: var(--muted); font-style: italic; }
.error { background: #fdecea; border-left: 4px solid var(--bad); padding: .5rem .75rem; }
@media (max-width: 40rem) {
  body { font-size: 15px; } main { padding: .5rem; } th, td { padding: .25rem; }
  /* On a phone each answer becomes a small block: label, value, torch, points, explanation. */
  table.values thead { display: none; }
  table.values, table.values tbody, table.values tr, table.values td { display: block; width: 100%; }
  table.values tr { border-bottom: 1px solid var(--line); padding: .4rem 0; }
  table.values td { border: 0; padding: .1rem 0; }
  td[data-label]::before { content: attr(data-label) ": "; color: var(--muted); font-family: system-ui, sans-serif; }
  /* The chain table: a card per node, its verdict beside its name and the gradients right under them (where
     the chain breaks is what a student looks for), then the forward values and the local derivative. */
  table.chain thead { display: none; }
  table.chain, table.chain tbody { display: block; width: 100%; }
  table.chain tr { display: flex; flex-wrap: wrap; column-gap: 1rem; border-bottom: 1px solid var(--line);
                   padding: .4rem .25rem; }
  table.chain tr.first-wrong { background: #fdecea; }
  table.chain td { border: 0; padding: .1rem 0; flex: 1 1 100%; order: 3; }
  table.chain td:first-child { order: 0; flex: 1 1 calc(100% - 3rem); font-weight: 600; }
  table.chain td.mark { order: 1; flex: 0 0 auto; }
  table.chain td.first { order: 2; flex: 1 1 40%; }
}
"""


def _at_line_start(label: str) -> str:
    """A cell's label ("your answer cell for …", "cell 4") as the start of a list item."""
    return label[:1].upper() + label[1:]


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def course_text_html(text: str) -> str:
    """The course's own text (a question's title, from the instructor's notebook): escaped, with its
    `backticked` names shown as code rather than as literal backticks. Never for a student's text."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", _e(text))


# The grader's words for an answer still as released name code: "still `...`", "returned `...` (replace
# `return ...` with your derivative)". On the page these phrases, and only these, are code. They are matched
# after escaping and replaced by fixed markup, so a notebook's own text (a type's name, an error it raised,
# which reaches a cell through the same detail) stays text, backticks and all: at most it shows the same
# <code>...</code> an honest notebook still as released gets.
CODE_PHRASES = ("`...`", "`return ...`")


def _text_html(text: str) -> str:
    """A cell's text on the page: escaped, with the grader's fixed code phrases shown as code."""
    escaped = _e(text)
    for phrase in CODE_PHRASES:
        escaped = escaped.replace(_e(phrase), f"<code>{_e(phrase[1:-1])}</code>")
    return escaped


def _cell_html(cell: Cell, label: str, first: bool = False) -> str:
    if cell.kind == "mark":
        css = "ok" if cell.text.startswith("✓") else "bad"
        mark, _, rest = cell.text.partition(" ")
        inner = f'<span class="{css}">{_e(mark)}</span>{" " + _e(rest) if rest else ""}'
    elif cell.kind == "name":
        inner = f"<code>{_e(cell.text)}</code>"
    else:
        inner = _text_html(cell.text)
    for style, text in cell.notes:
        inner += f'<div class="{style}">{_text_html(text)}</div>' if style else f"<div>{_text_html(text)}</div>"
    classes = [cell.kind] if cell.kind in ("num", "mark") else []
    classes += ["first"] if first else []
    attributes = (f' class="{" ".join(classes)}"' if classes else "") + (f" data-label='{_e(label)}'" if label else "")
    return f"<td{attributes}>{inner}</td>"


def _label(table: Table, column: int) -> str:
    """What the phone layout calls a cell: the values table names the parts between an answer's name and its
    explanation; the chain table every part but the node's name and its verdict (beside the name)."""
    last = len(table.head) - 1
    if column == 0 or (column == last and (table.kind == "values" or not table.head[column])):
        return ""
    return table.head[column]


def _table_html(table: Table) -> str:
    rows = []
    for index, row in enumerate(table.rows):
        css = ' class="first-wrong"' if index == table.highlighted else ""
        cells = "".join(_cell_html(cell, _label(table, i), i in table.first) for i, cell in enumerate(row))
        rows.append(f"<tr{css}>{cells}</tr>")
    head = "".join(f"<th>{_e(name)}</th>" for name in table.head)
    parts = []
    if table.title:
        parts.append(f"<h3>{_e(table.title)}</h3>")
    if table.caption:
        parts.append(f"<p>{_e(table.caption)}</p>")
    parts.append(
        f"<div class=table-wrap><table class={table.kind}><thead><tr>{head}</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></div>"
    )
    return "".join(parts)


def errors_left_out(feedback: Feedback) -> str:
    """The sentence that stands for the notebook's errors past the first few (feedback.MAX_CELL_ERRORS)."""
    more = feedback.cell_errors_left_out
    return (
        f"… and {more:,} more {'error' if more == 1 else 'errors'} (only the first "
        f"{len(feedback.cell_errors)} are listed: fix those first, later ones often follow from them)."
    )


def render_html(feedback: Feedback, *, lead: str = "") -> str:
    """A self-contained page (no scripts, no network) a student can open from disk or a phone. lead: the
    service's own HTML (already escaped) shown first: when it was submitted, links, the summary."""
    reveal = feedback.reveals_torch_values
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        '<meta name=viewport content="width=device-width, initial-scale=1">',
        f"<title>Feedback: {_e(feedback.assignment)} — {_e(feedback.student_id)}</title>",
        f"<style>{CSS}</style></head><body><main>{lead}",
        f"<header class=summary><div>Feedback for <strong>{_e(feedback.student_id)}</strong>, "
        f"assignment <strong>{_e(feedback.assignment)}</strong></div>",
        f"<div class=score>{_points(feedback.score)} / {_points(feedback.max_score)}</div>",
    ]
    parts += [f'<div class="note">{_e(message)}</div>' for message in feedback.messages]
    if not reveal:
        parts.append(f"<p>{_e(VERDICTS_ONLY)}</p>")
    parts.append("</header>")
    for question in feedback.questions:
        view = question_view(question, reveal)
        parts.append(
            f'<section class=card id="q-{_e(view.id)}"><h2><span>{course_text_html(view.title)}</span>'
            f"<span class=points>{_e(view.score)}</span></h2>"
        )
        if view.error:
            parts.append(f'<div class="error">{_e(view.error)}</div>')
        parts += [_table_html(table) for table in view.tables]
        parts += [
            f'<div class="misconception"><strong>{_e(SLIP)}</strong> {_e(diagnosis)}'
            f"<div class=idea>The idea: {_e(idea)}</div></div>"
            if diagnosis
            else f'<div class="misconception"><strong>{_e(IDEA_TO_REVISIT)}</strong> {_e(idea)}</div>'
            for diagnosis, idea in view.slips
        ]
        parts.append("</section>")
    if feedback.cell_errors:
        parts.append(f"<section class=card><h2>{_e(ERRORS_TITLE)}</h2><p>{_e(ERRORS_INTRO)}</p><ul>")
        for error in feedback.cell_errors:
            hint = f"<div class=idea>{_e(error.hint)}</div>" if error.hint else ""
            parts.append(f"<li>{_e(_at_line_start(error.cell))}: <code>{_e(error.error)}</code>{hint}</li>")
        parts.append("</ul>")
        if feedback.cell_errors_left_out:
            parts.append(f"<p>{_e(errors_left_out(feedback))}</p>")
        parts.append("</section>")
    parts.append("</main></body></html>")
    return "\n".join(parts)


# ----------------------------------------------------------------------------- Markdown (Gradescope)


def _md(value: Any) -> str:
    """Any text in Markdown: every character literal (see course.core.text)."""
    return markdown_text("—" if value is None else value)


def _cell_markdown(cell: Cell) -> str:
    return " ".join([_md(cell.text), *(_md(text) for _, text in cell.notes)])


def _table_markdown(table: Table) -> list[str]:
    lines = []
    if table.title:
        lines += ["", f"**{_md(table.title)}**", ""]
    lines += ["| " + " | ".join(_md(name) for name in table.head) + " |", "|" + "---|" * len(table.head)]
    for index, row in enumerate(table.rows):
        cells = [_cell_markdown(cell) for cell in row]
        if index == table.highlighted:
            cells[0] = f"**{cells[0]}**"
        lines.append("| " + " | ".join(cells) + " |")
    if table.caption:
        lines += ["", _md(table.caption)]
    return lines


def question_markdown(question: QuestionFeedback, reveal: bool) -> str:
    """One question's feedback as Markdown: the same tables and notes as the page."""
    view = question_view(question, reveal)
    lines = [f"**{_md(view.error)}**", ""] if view.error else []
    for table in view.tables:
        lines += _table_markdown(table)
    for diagnosis, idea in view.slips:
        lines += [
            "",
            f"**{_md(SLIP)}** {_md(diagnosis)} *The idea: {_md(idea)}*"
            if diagnosis
            else f"**{_md(IDEA_TO_REVISIT)}** {_md(idea)}",
        ]
    return "\n".join(lines)


def summary_markdown(feedback: Feedback) -> str:
    """The top of results.json: the score, the grader's messages, and the notebook's own errors as its own."""
    lines = [f"**{_points(feedback.score)} / {_points(feedback.max_score)}** points."]
    lines += [_md(message) for message in feedback.messages]
    if not feedback.reveals_torch_values:
        lines.append(_md(VERDICTS_ONLY))
    if feedback.cell_errors:
        lines.append(f"**{_md(ERRORS_TITLE)}.** {_md(ERRORS_INTRO)}")
        lines += [
            f"- {_md(_at_line_start(e.cell))}: {_md(e.error)}" + (f" ({_md(e.hint)})" if e.hint else "")
            for e in feedback.cell_errors
        ]
        if feedback.cell_errors_left_out:
            lines.append(_md(errors_left_out(feedback)))
    return "\n\n".join(lines)
