"""The class summary an instructor keeps open after grading: the score distribution, who was not counted and
why, per-question success, who showed each misconception, and every student with a link to their feedback.

Built from the feedback of every student in the output folder (`class_summary`, plain data, written as
class-summary-<assignment>.json) and laid out once as a page (`course.term.summary_page`). It names students, so it is
the
instructor's only: nothing of it goes into a student's feedback or Gradescope results.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from course.core.answers import MISSING
from course.core.status import RAN, Status
from course.pipeline.feedback_model import Feedback, FeedbackError

MAX_BINS = 20  # the histogram's bins are whole points wide, as few points as keep it to this many bars


def read_class_feedback(out_dir: Path, assignment_name: str) -> tuple[list[Feedback], list[str]]:
    """Every student's feedback.json under out_dir, and the students whose file could not be read or is not a
    feedback document (said in the summary, never silently left out, never a traceback)."""
    feedback, unreadable = [], []
    for path in sorted((out_dir / "feedback").glob(f"*/{assignment_name}/feedback.json")):
        try:
            feedback.append(Feedback.from_json(json.loads(path.read_text(encoding="utf-8")), where=str(path)))
        except (OSError, ValueError, RecursionError, FeedbackError):  # RecursionError: nested too deep to parse
            unreadable.append(path.parent.parent.name)
    return feedback, unreadable


def feedback_link(student_id: str, assignment_name: str, page: str) -> str:
    """The student's feedback page relative to the summary (both are written into the same output folder)."""
    return "/".join(quote(part, safe="") for part in ("feedback", student_id, assignment_name, page))


def score_bins(max_score: float, scores: Sequence[tuple[str, float]]) -> list[dict[str, Any]]:
    """Whole-point bins from 0 to max_score, each with the students (name, score) whose score is in it:
    `from` and `to` are the first and last whole point of a bin (a score counts in the bin of its whole
    part, so 44.6 is in the bin holding 44); the bins are as narrow as keep their number at most MAX_BINS."""
    top = max(0, math.floor(max_score))
    width = max(1, math.ceil((top + 1) / MAX_BINS))
    bins: list[dict[str, Any]] = [
        {"from": start, "to": min(start + width - 1, top), "students": []} for start in range(0, top + 1, width)
    ]
    for student, score in scores:
        point = min(top, max(0, math.floor(score))) if math.isfinite(score) else 0
        bins[point // width]["students"].append(student)
    return bins


def class_summary(
    feedback: Sequence[Feedback], *, missing: Sequence[str] = (), unreadable: Sequence[str] = (), page: str = ""
) -> dict[str, Any]:
    """Plain data for the page and class-summary-<assignment>.json.

    Only submissions that were read and run (status graded or timed_out) count in the score statistics;
    a notebook that could not be read (failed), an autograder error, a roster student who submitted nothing
    (`missing`) and a feedback file that could not be read (`unreadable`) are each listed apart.
    page: the feedback page's file name (e.g. autograd.html): each student links to
    feedback/<student>/<assignment>/<page>; "" links nobody.
    """
    feedback = sorted(feedback, key=lambda f: f.student_id)
    counted = [f for f in feedback if f.status in RAN]
    max_score = max((float(f.max_score) for f in feedback), default=0.0)
    scores = [float(f.score) for f in counted]
    not_counted = {
        Status.FAILED: [f.student_id for f in feedback if f.status == Status.FAILED],
        Status.AUTOGRADER_ERROR: [f.student_id for f in feedback if f.status == Status.AUTOGRADER_ERROR],
        Status.MISSING: sorted(missing),
        "unreadable": sorted(unreadable),
    }
    return {
        "students": len(counted),
        "max_score": max_score,
        "mean_score": sum(scores) / len(scores) if scores else None,
        "median_score": _median(scores),
        "statuses": {
            status: sum(1 for f in feedback if f.status == status)
            for status in sorted({str(f.status) for f in feedback})
        },
        "histogram": score_bins(max_score, [(f.student_id, float(f.score)) for f in counted]) if counted else [],
        "questions": _question_rows(counted),
        "answers": answer_shares(counted),
        "misconceptions": _misconceptions_seen(counted),
        "not_counted": not_counted,
        "roster": _roster(feedback, not_counted, max_score, page),
        "missing": not_counted[Status.MISSING],
        "unreadable": not_counted["unreadable"],
    }


def _question_rows(counted: Sequence[Feedback]) -> list[dict[str, Any]]:
    """Per question of the first counted feedback: its points, how many earned them all, the share and the mean."""
    questions = []
    template = counted[0].questions if counted else ()
    for index, question in enumerate(template):
        earned = [float(f.questions[index].earned) for f in counted if len(f.questions) > index]
        full = [
            f.student_id for f in counted if len(f.questions) > index and f.questions[index].earned >= question.points
        ]
        questions.append(
            {
                "id": question.id,
                "title": question.title,
                "points": question.points,
                "full_marks": len(full),
                "success_rate": len(full) / len(earned) if earned else 0.0,
                "mean": sum(earned) / len(earned) if earned else 0.0,
            }
        )
    return questions


def _misconceptions_seen(counted: Sequence[Feedback]) -> list[dict[str, Any]]:
    """Each misconception note the class was given: where and whom, the most common first."""
    misconceptions: dict[str, dict[str, Any]] = {}
    for student in counted:
        for question in student.questions:
            for note in question.misconceptions:
                item = misconceptions.setdefault(
                    note.id,
                    {
                        "id": note.id,
                        "diagnosis": note.diagnosis,
                        "idea": note.idea,
                        "questions": [],
                        "students": [],
                        "where": {},
                    },
                )
                if question.title not in item["questions"]:
                    item["questions"].append(question.title)
                if student.student_id not in item["where"]:
                    item["students"].append(student.student_id)
                    item["where"][student.student_id] = question.id
    return sorted(misconceptions.values(), key=lambda item: -len(item["students"]))


def _roster(
    feedback: Sequence[Feedback], not_counted: dict[str, list[str]], max_score: float, page: str
) -> list[dict[str, Any]]:
    """Every student with feedback, then those who submitted nothing and those whose file could not be read."""
    roster = []
    for student in feedback:
        roster.append(
            {
                "student_id": student.student_id,
                "status": student.status,
                "counted": student.status in RAN,
                "score": float(student.score),
                "max_score": float(student.max_score),
                "late_penalty": float(student.penalty),
                "questions": {q.id: float(q.earned) for q in student.questions},
                "misconceptions": sorted(student.misconception_ids()),
                "reason": (student.messages or ("",))[0] if student.status not in RAN else "",
                "page": feedback_link(student.student_id, student.assignment, page) if page else "",
            }
        )
    roster += [
        {
            "student_id": sid,
            "status": status,
            "counted": False,
            "score": 0.0,
            "max_score": max_score,
            "late_penalty": 0.0,
            "questions": {},
            "misconceptions": [],
            "reason": reason,
            "page": "",
        }
        for status, names, reason in (
            (Status.MISSING, not_counted[Status.MISSING], "nothing submitted"),
            ("unreadable", not_counted["unreadable"], "the feedback file could not be read: grade again"),
        )
        for sid in names
    ]
    return roster


def answer_shares(counted: Sequence[Feedback]) -> list[dict[str, Any]]:
    """Each answer of each question, in the assignment's order, across the counted students: how many gave it
    right, how many left it blank (nothing reported), of how many (issue 43: the class summary's bars)."""
    answers: dict[tuple[str, str], dict[str, Any]] = {}
    for student in counted:
        for question in student.questions:
            for value in question.values:
                item = answers.setdefault(
                    (question.id, value.name),
                    {
                        "question": question.id,
                        "title": question.title,
                        "answer": value.name,
                        "right": 0,
                        "blank": 0,
                        "students": 0,
                    },
                )
                item["students"] += 1
                item["right"] += value.correct
                item["blank"] += value.status == MISSING
    return list(answers.values())


def _median(scores: Sequence[float]) -> float | None:
    ordered = sorted(scores)
    if not ordered:
        return None
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
