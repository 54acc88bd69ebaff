"""The class summary an instructor reads after grading: score distribution, per-question success, and
the most common misconceptions. Built from the feedback of every graded student in the output folder."""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from course.render import CSS, course_text_html

BUCKETS = 10


def read_class_feedback(out_dir: Path, assignment: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Every student's feedback.json under out_dir, and the students whose file could not be read (said in
    the summary, never silently left out)."""
    feedback, unreadable = [], []
    for path in sorted((out_dir / "feedback").glob(f"*/{assignment}/feedback.json")):
        try:
            feedback.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            unreadable.append(path.parent.parent.name)
    return feedback, unreadable


def class_summary(feedback: list[dict[str, Any]], *, missing: Sequence[str] = (),
                  unreadable: Sequence[str] = ()) -> dict[str, Any]:
    """Plain data: counts, a histogram of scores, per-question success and misconception counts; `missing`
    are the roster's students who submitted nothing, `unreadable` those whose feedback file could not be
    read (neither is counted in the score statistics)."""
    if not feedback:
        return {"students": 0, "statuses": {}, "histogram": [], "questions": [], "misconceptions": [],
                "missing": list(missing), "unreadable": list(unreadable)}
    max_score = max(f["max_score"] for f in feedback)
    histogram = [0] * BUCKETS
    for student in feedback:
        bucket = min(BUCKETS - 1, int(BUCKETS * student["score"] / max_score)) if max_score else 0
        histogram[bucket] += 1
    questions = []
    for index, question in enumerate(feedback[0]["questions"]):
        earned = [f["questions"][index]["earned"] for f in feedback if len(f["questions"]) > index]
        full = sum(1 for e in earned if e == question["points"])
        questions.append({
            "id": question["id"], "title": question["title"], "points": question["points"],
            "full_marks": full, "success_rate": full / len(earned), "mean": sum(earned) / len(earned),
        })
    seen: Counter[str] = Counter()
    examples: dict[str, dict[str, str]] = {}
    for student in feedback:
        for question in student["questions"]:
            for diagnosis in question["misconceptions"]:
                seen[diagnosis["id"]] += 1
                examples.setdefault(diagnosis["id"], {"diagnosis": diagnosis["diagnosis"], "idea": diagnosis["idea"],
                                                      "question": question["title"]})
    return {
        "students": len(feedback),
        "max_score": max_score,
        "mean_score": sum(f["score"] for f in feedback) / len(feedback),
        "statuses": dict(Counter(f["status"] for f in feedback)),
        "histogram": [
            {"from": max_score * i / BUCKETS, "to": max_score * (i + 1) / BUCKETS, "students": n}
            for i, n in enumerate(histogram)
        ],
        "questions": questions,
        "misconceptions": [{"id": key, "students": count, **examples[key]} for key, count in seen.most_common()],
        "missing": list(missing),
        "unreadable": list(unreadable),
    }


def render_summary_html(summary: dict[str, Any], assignment: str) -> str:
    e = html.escape
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        '<meta name=viewport content="width=device-width, initial-scale=1">',
        f"<title>Class summary: {e(assignment)}</title><style>{CSS}",
        ".bar { background: #1a73e8; height: 1rem; border-radius: 2px; }</style></head><body><main>",
        f"<header class=summary><div>Class summary, assignment <strong>{e(assignment)}</strong></div>",
    ]
    missing = summary.get("missing", [])
    missing_html = (f"<section class=card><h2>Did not submit ({len(missing)})</h2><p>{e(', '.join(missing))}</p>"
                    "</section>") if missing else ""
    unreadable = summary.get("unreadable", [])
    if unreadable:
        missing_html += (f'<section class=card><div class="note">The feedback of {len(unreadable)} student'
                         f'{"s" if len(unreadable) != 1 else ""} could not be read and is not counted here: '
                         f"{e(', '.join(unreadable))}. Grade them again.</div></section>")
    if not summary["students"]:
        parts.append(f"<div>No graded submissions yet.</div></header>{missing_html}</main></body></html>")
        return "\n".join(parts)
    statuses = ", ".join(f"{n} {e(s.replace('_', ' '))}" for s, n in sorted(summary["statuses"].items()))
    parts.append(f"<div class=score>{summary['students']} students</div><div>mean score "
                 f"{summary['mean_score']:.1f} / {summary['max_score']:g}; {statuses}</div></header>")
    parts.append(missing_html)
    widest = max(b["students"] for b in summary["histogram"]) or 1
    parts.append("<section class=card><h2>Score distribution</h2><div class=table-wrap><table><thead><tr>"
                 "<th>score</th><th>students</th><th></th></tr></thead><tbody>")
    for bucket in summary["histogram"]:
        width = 100 * bucket["students"] / widest
        parts.append(f"<tr><td>{bucket['from']:.1f}–{bucket['to']:.1f}</td><td>{bucket['students']}</td>"
                     f'<td style="width:60%"><div class=bar style="width:{width:.0f}%"></div></td></tr>')
    parts.append("</tbody></table></div></section>")
    parts.append("<section class=card><h2>Questions</h2><div class=table-wrap><table><thead><tr><th>question</th>"
                 "<th>full marks</th><th>mean points</th></tr></thead><tbody>")
    for question in summary["questions"]:
        parts.append(f"<tr><td>{course_text_html(question['title'])}</td><td>{100 * question['success_rate']:.0f}% "
                     f"({question['full_marks']})</td><td>{question['mean']:.2f} / {question['points']:g}</td></tr>")
    parts.append("</tbody></table></div></section>")
    parts.append("<section class=card><h2>Most common misconceptions</h2>")
    if not summary["misconceptions"]:
        parts.append("<p>None recognised.</p>")
    for item in summary["misconceptions"][:10]:
        parts.append(f'<div class="misconception"><strong>{item["students"]} student'
                     f'{"s" if item["students"] != 1 else ""}</strong> ({course_text_html(item["question"])}): '
                     f'{e(item["diagnosis"])}'
                     f'<div class=idea>The idea: {e(item["idea"])}</div></div>')
    parts.append("</section>")
    parts.append(_integrity_html(summary.get("integrity", {})))
    parts.append("</main></body></html>")
    return "\n".join(parts)


def _integrity_html(integrity: dict[str, list[str]]) -> str:
    """What the grader saw in submissions that tried to game it: for the instructor; scores are unaffected."""
    e = html.escape
    parts = ["<section class=card><h2>Integrity report (instructor only)</h2>"]
    if not integrity:
        parts.append("<p>Nothing seen: no submission patched torch or builtins, defined a rigged number type, "
                     "edited a locked cell or came personalised for someone else.</p></section>")
        return "".join(parts)
    parts.append("<p>None of this changed a score (the grader recomputes every reference itself) and none of it "
                 "is in the students' feedback.</p><div class=table-wrap><table><thead><tr><th>student</th>"
                 "<th>what was seen</th></tr></thead><tbody>")
    for student, findings in integrity.items():
        items = "".join(f"<li>{e(str(finding))}</li>" for finding in findings)
        parts.append(f"<tr><td>{e(str(student))}</td><td><ul>{items}</ul></td></tr>")
    parts.append("</tbody></table></div></section>")
    return "".join(parts)
