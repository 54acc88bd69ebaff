"""Scores -> feedback a student learns from: per value explanations, chain tables, misconceptions.

`build_feedback` makes one plain, JSON-ready dict; `render_html` turns it into a self-contained page.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any

from course.answers import VALUE, describe, is_number
from course.judge import QuestionResult, ValueResult
from course.misconceptions import diagnose


@dataclass(frozen=True)
class ChainStep:
    """One step of the backward walk: the gradient `gradient` arrives via the node `node`."""

    node: str
    local: str
    forward: str | None
    gradient: str
    upstream: str | None


CHAINS: dict[str, tuple[ChainStep, ...]] = {
    "tiny_net": (
        ChainStep("L = (a − target)²", "∂L/∂a = 2(a − target)", "net_loss", "net_dL_da", None),
        ChainStep("a = ReLU(h)", "∂a/∂h = 1 if h > 0, else 0", "net_a", "net_dL_dh", "net_dL_da"),
        ChainStep("h = w·x + b (to w)", "∂h/∂w = x", "net_h", "net_dL_dw", "net_dL_dh"),
        ChainStep("h = w·x + b (to b)", "∂h/∂b = 1", "net_h", "net_dL_db", "net_dL_dh"),
    ),
    "w2_net": (
        ChainStep("L = (out − 2)²", "∂L/∂out = 2(out − 2)", "w2_loss", "w2_dL_dout", None),
        ChainStep("out = w2·a (to w2)", "∂out/∂w2 = a", "w2_out", "w2_dL_dw2", "w2_dL_dout"),
        ChainStep("out = w2·a (to a)", "∂out/∂a = w2", "w2_out", "w2_dL_da", "w2_dL_dout"),
        ChainStep("a = ReLU(h)", "∂a/∂h = 1 if h > 0, else 0", None, "w2_dL_dh", "w2_dL_da"),
        ChainStep("h = w·x + b (to w)", "∂h/∂w = x", None, "w2_dL_dw", "w2_dL_dh"),
        ChainStep("h = w·x + b (to b)", "∂h/∂b = 1", None, "w2_dL_db", "w2_dL_dh"),
    ),
}


def _shown(result: ValueResult | None) -> str:
    if result is None:
        return "—"
    if result.status == VALUE:
        return describe(result.student)
    return result.detail or result.status


def _local_value(values: dict[str, ValueResult], step: ChainStep) -> str:
    """torch's local derivative at this node: the gradient leaving it over the gradient arriving."""
    leaving = values[step.gradient].expected if step.gradient in values else None
    arriving = values[step.upstream].expected if step.upstream in values else 1.0
    if not (is_number(leaving) and is_number(arriving)) or arriving == 0:
        return "—"
    return describe(leaving / arriving)


def chain_table(question_id: str, values: dict[str, ValueResult], reveal: bool) -> dict[str, Any] | None:
    """The backward walk node by node; torch's numbers (forward, local derivative, gradient) only if `reveal`."""
    steps = CHAINS.get(question_id)
    if not steps or not all(step.gradient in values for step in steps):
        return None
    rows, first_wrong = [], None
    for index, step in enumerate(steps):
        forward = values.get(step.forward) if step.forward else None
        gradient = values[step.gradient]
        ok = gradient.correct and (forward is None or forward.correct)
        if not ok and first_wrong is None:
            first_wrong = index
        rows.append({
            "node": step.node,
            "local_derivative": step.local,
            "torch_local_derivative": _local_value(values, step) if reveal else None,
            "forward": step.forward,
            "your_forward": _shown(forward) if forward else "—",
            "torch_forward": (describe(forward.expected) if forward else "—") if reveal else None,
            "gradient": step.gradient,
            "your_gradient": _shown(gradient),
            "torch_gradient": describe(gradient.expected) if reveal else None,
            "correct": ok,
        })
    return {"rows": rows, "first_wrong": first_wrong}


def _value_entry(result: ValueResult, reveal: bool) -> dict[str, Any]:
    """One answer: the student's value, torch's (only if `reveal`), points and the reasoning."""
    torch_value = describe(result.expected) if result.status != "function" else "torch's slope at each point"
    entry: dict[str, Any] = {
        "name": result.name,
        "your_value": _shown(result) if result.status == VALUE else None,
        "torch_value": torch_value if reveal else None,
        "status": result.status,
        "correct": result.correct,
        "points": result.points,
        "earned": result.earned,
        "explanation": ("Matches torch. " if result.correct else "") + result.hint,
    }
    if result.detail:
        entry["detail"] = result.detail
        wrong = [p for p in result.probes if not p.correct]
        if reveal and wrong:
            entry["detail"] += f"; torch's slope at x = {describe(wrong[0].x)} is {describe(wrong[0].expected)}"
    if result.hand_work_note:
        entry["hand_work_note"] = ("This value was computed with torch in your code rather than written down "
                                   "from your own derivation.")
    if result.probes:
        entry["probes"] = [
            {"x": p.x, "yours": p.error or describe(p.student), "torch": describe(p.expected) if reveal else None,
             "correct": p.correct}
            for p in result.probes
        ]
    return entry


def question_entry(question: QuestionResult, diagnoses: list, reveal: bool = True) -> dict[str, Any]:
    values = {value.name: value for value in question.values}
    entry: dict[str, Any] = {
        "id": question.id,
        "title": question.title,
        "points": question.points,
        "earned": question.earned,
        "values": [_value_entry(v, reveal) for v in question.values],
        "misconceptions": [
            {"id": d.id, "value": d.value, "diagnosis": d.message, "idea": d.idea} for d in diagnoses
        ],
    }
    if question.error:
        entry["error"] = ("The autograder could not score this question (a problem on our side, not in your "
                          "notebook). Your instructor has been told; you do not need to do anything.")
    table = chain_table(question.id, values, reveal)
    if table:
        entry["chain_table"] = table
    return entry


def build_feedback(student_id: str, assignment: str, questions: tuple[QuestionResult, ...], *, status: str,
                   messages: list[str], cell_errors: list[dict[str, str]],
                   reveal_torch_values: bool = True) -> dict[str, Any]:
    """The complete feedback of one submission as plain data (what feedback.json holds). Without
    `reveal_torch_values` it holds no torch value at all: verdicts, chain-table verdicts and notes only."""
    diagnoses = diagnose(questions)
    entries = [question_entry(q, diagnoses.get(q.id, []), reveal_torch_values) for q in questions]
    return {
        "student_id": student_id,
        "assignment": assignment,
        "status": status,
        "score": round(sum(q.earned for q in questions), 6),
        "max_score": sum(q.points for q in questions),
        "messages": messages,
        "cell_errors": cell_errors,
        "reveals_torch_values": reveal_torch_values,
        "questions": entries,
    }


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
  table.values td[data-label]::before { content: attr(data-label) ": "; color: var(--muted); }
}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _points(value: float) -> str:
    return f"{value:g}" if math.isfinite(value) else "?"


def _value_rows(values: list[dict[str, Any]], reveal: bool) -> str:
    rows = []
    for v in values:
        mark = '<span class="ok">✓</span>' if v["correct"] else '<span class="bad">✗</span>'
        yours = v["your_value"] if v["your_value"] is not None else v.get("detail", v["status"])
        extra = ""
        if v.get("detail") and v["your_value"] is not None:
            extra += f"<div>{_e(v['detail'])}</div>"
        if v.get("status") == "function" and v.get("detail"):
            extra += f"<div>{_e(v['detail'])}</div>"
        if v.get("hand_work_note"):
            extra += f'<div class="note">{_e(v["hand_work_note"])}</div>'
        torch = f"<td class=num data-label=torch>{_e(v['torch_value'])}</td>" if reveal else ""
        rows.append(
            f"<tr><td><code>{_e(v['name'])}</code></td><td class=num data-label='your value'>{_e(yours)}</td>"
            f"{torch}<td data-label=points>{mark} {_points(v['earned'])}/{_points(v['points'])}</td>"
            f"<td>{_e(v['explanation'])}{extra}</td></tr>"
        )
    torch_head = "<th>torch</th>" if reveal else ""
    return ("<div class=table-wrap><table class=values><thead><tr><th>answer</th><th>your value</th>"
            f"{torch_head}<th>points</th><th>explanation</th></tr></thead><tbody>" + "".join(rows)
            + "</tbody></table></div>")


def _chain_html(table: dict[str, Any], reveal: bool) -> str:
    rows = []
    for index, row in enumerate(table["rows"]):
        css = ' class="first-wrong"' if index == table["first_wrong"] else ""
        mark = '<span class="ok">✓</span>' if row["correct"] else '<span class="bad">✗</span>'
        if reveal:
            rows.append(
                f"<tr{css}><td>{_e(row['node'])}</td><td class=num>{_e(row['your_forward'])}</td>"
                f"<td class=num>{_e(row['torch_forward'])}</td><td>{_e(row['local_derivative'])} "
                f"= <span class=num>{_e(row['torch_local_derivative'])}</span></td>"
                f"<td class=num>{_e(row['your_gradient'])}</td><td class=num>{_e(row['torch_gradient'])}</td>"
                f"<td>{mark}</td></tr>"
            )
        else:
            rows.append(
                f"<tr{css}><td>{_e(row['node'])}</td><td class=num>{_e(row['your_forward'])}</td>"
                f"<td>{_e(row['local_derivative'])}</td><td class=num>{_e(row['your_gradient'])}</td>"
                f"<td>{mark}</td></tr>"
            )
    caption = ("Your chain matches torch at every node." if table["first_wrong"] is None else
               "Your chain first breaks at the highlighted node; every gradient behind it inherits the error.")
    head = ("<th>node</th><th>your forward value</th><th>torch forward</th><th>local derivative (torch)</th>"
            "<th>your gradient</th><th>torch gradient</th><th></th>") if reveal else (
            "<th>node</th><th>your forward value</th><th>local derivative</th><th>your gradient</th><th></th>")
    return ('<h3>Chain table (backward pass, right to left)</h3>'
            f'<p>{_e(caption)}</p><div class=table-wrap><table class="chain">'
            f"<thead><tr>{head}</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")


def render_html(feedback: dict[str, Any]) -> str:
    """A self-contained page (no scripts, no network) a student can open from disk or a phone."""
    reveal = feedback.get("reveals_torch_values", True)
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        '<meta name=viewport content="width=device-width, initial-scale=1">',
        f"<title>Feedback: {_e(feedback['assignment'])} — {_e(feedback['student_id'])}</title>",
        f"<style>{CSS}</style></head><body><main>",
        f"<header class=summary><div>Feedback for <strong>{_e(feedback['student_id'])}</strong>, "
        f"assignment <strong>{_e(feedback['assignment'])}</strong></div>",
        f"<div class=score>{_points(feedback['score'])} / {_points(feedback['max_score'])}</div>",
    ]
    for message in feedback["messages"]:
        parts.append(f'<div class="note">{_e(message)}</div>')
    if not reveal:
        parts.append("<p>This feedback says which answers are right, not what torch computes: work out the ones "
                     "marked ✗ again from the chain table and the notes.</p>")
    parts.append("</header>")
    for question in feedback["questions"]:
        parts.append(f'<section class=card id="q-{_e(question["id"])}"><h2><span>{_e(question["title"])}</span>'
                     f'<span class=points>{_points(question["earned"])} / {_points(question["points"])}</span></h2>')
        if question.get("error"):
            parts.append(f'<div class="error">{_e(question["error"])}</div>')
        parts.append(_value_rows(question["values"], reveal))
        if question.get("chain_table"):
            parts.append(_chain_html(question["chain_table"], reveal))
        for diagnosis in question["misconceptions"]:
            parts.append(f'<div class="misconception"><strong>A common slip:</strong> {_e(diagnosis["diagnosis"])}'
                         f'<div class=idea>The idea: {_e(diagnosis["idea"])}</div></div>')
        parts.append("</section>")
    if feedback["cell_errors"]:
        parts.append("<section class=card><h2>Errors your notebook reported</h2>"
                     "<p>What your code raised while it ran, as your notebook reported it:</p><ul>")
        for error in feedback["cell_errors"]:
            hint = f"<div class=idea>{_e(error['hint'])}</div>" if error.get("hint") else ""
            parts.append(f"<li>{_e(error['cell'])}: <code>{_e(error['error'])}</code>{hint}</li>")
        parts.append("</ul></section>")
    parts.append("</main></body></html>")
    return "\n".join(parts)
