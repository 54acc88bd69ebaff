"""Item analysis (course/term/item_analysis.py, item_exports.py): exact counts, grouping within the tolerance
and only among students with the same numbers, discrimination against a value computed by hand, blanks, the slip
search's bounds, the exports' shape and spreadsheet safety, and the section of the class summary's page."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from course.core.answers import describe
from course.core.config import load_config
from course.pipeline.assignment import load_course_assignment
from course.pipeline.feedback_model import Feedback
from course.pipeline.slips import GATE_IGNORED, Slip
from course.pipeline.variants import numbers_for
from course.term.item_analysis import ItemSettings, analyse_items, item_settings, point_biserial, read_shown
from course.term.item_exports import (
    MAX_GROUPS_SHOWN,
    MAX_STUDENTS_SHOWN,
    analysis_csv,
    analysis_json,
    item_analysis_path,
    write_item_analysis,
)
from course.term.summary import class_summary
from course.term.summary_page import render_summary_html
from tests.support.helpers import ROOT

TORCH = {"a": 2.0, "b": -0.5}


def _value(name: str, given: Any, *, points: float = 1) -> dict[str, Any]:
    """An answer's feedback entry: `given` is the student's plain value (shown as describe() shows it), "missing",
    or ("wrong_form", ...) for a value of the wrong form."""
    if given == "missing":
        return _entry(name, None, "missing", False, points)
    if isinstance(given, tuple):
        return _entry(name, None, given[0], False, points)
    right = given == TORCH[name]
    return _entry(name, describe(given), "value", right, points)


def _entry(name: str, yours: str | None, status: str, correct: bool, points: float) -> dict[str, Any]:
    return {
        "name": name,
        "your_value": yours,
        "torch_value": describe(TORCH[name]),
        "status": status,
        "correct": correct,
        "points": points,
        "earned": points if correct else 0,
        "explanation": "",
    }


def _feedback(
    student: str, a: Any, b: Any, *, extra: float = 0, status: str = "graded", rules: tuple[str, ...] = ()
) -> Feedback:
    """One student: answers a and b of question q1 (1 point each), plus `extra` points of question q2."""
    values = [_value("a", a), _value("b", b)]
    earned = sum(v["earned"] for v in values)
    notes = [{"id": rule, "value": "a", "diagnosis": "d", "idea": "i"} for rule in rules]
    return Feedback.from_json(
        {
            "student_id": student,
            "assignment": "autograd",
            "status": status,
            "score": earned + extra,
            "max_score": 12,
            "messages": [],
            "cell_errors": [],
            "questions": [
                {"id": "q1", "title": "Q1", "points": 2, "earned": earned, "values": values, "misconceptions": notes},
                {"id": "q2", "title": "Q2", "points": 10, "earned": extra, "values": [], "misconceptions": []},
            ],
        }
    )


CLASS = [
    _feedback("ann", 2.0, -0.5, extra=9),
    _feedback("ben", 2.0, 0.5, extra=7),
    _feedback("cat", 4.0, "missing", extra=3),
    _feedback("dan", 4.0000001, 0.5, extra=2),  # within 1e-6 of 4: the same wrong value as cat's
    _feedback("eve", 3.99, ("wrong_form",), extra=1),  # not within it: a wrong value of its own
    _feedback("fay", "missing", -0.5, extra=5),
    _feedback("gus", 2.0, -0.5, extra=0, status="failed"),  # not counted
]


def _item(analysis, answer: str):
    return next(item for item in analysis.answers if item.answer == answer)


def test_counts_blanks_and_wrong_values_grouped_within_the_tolerance():
    analysis = analyse_items(CLASS, "autograd", ItemSettings(tolerance=1e-6))
    assert analysis.students == 6  # gus failed: not counted
    a = _item(analysis, "a")
    assert (a.students, a.right, a.blanks, a.other_wrong) == (6, 2, 1, 0)
    assert a.share_right == pytest.approx(2 / 6, abs=1e-6)
    assert [(w.shown, w.count, w.students) for w in a.wrong_values] == [
        ("4", 2, ("cat", "dan")),  # the most common first; its most common text shown
        ("3.99", 1, ("eve",)),
    ]
    assert a.wrong_values[0].value == 4
    b = _item(analysis, "b")
    assert (b.right, b.blanks, b.other_wrong) == (2, 1, 1)  # eve's wrong form has no value to group
    assert [(w.value, w.count, w.students) for w in b.wrong_values] == [(0.5, 2, ("ben", "dan"))]
    # A wider tolerance puts eve's 3.99 with 4 (and 4.0000001): the grading's tolerance decides, not ours.
    wide = _item(analyse_items(CLASS, "autograd", ItemSettings(tolerance=0.02)), "a")
    assert [(w.count, w.students) for w in wide.wrong_values] == [(3, ("cat", "dan", "eve"))]


def test_discrimination_is_the_point_biserial_against_the_rest_of_the_score():
    analysis = analyse_items(CLASS, "autograd", ItemSettings())
    # a: right for ann and ben; the rest of the score is the score less a's points.
    rest = {"ann": 1 + 9, "ben": 0 + 7, "cat": 0 + 3, "dan": 0 + 2, "eve": 0 + 1, "fay": 1 + 5}
    right = {"ann", "ben"}
    n = len(rest)
    mean = sum(rest.values()) / n
    sd = math.sqrt(sum((r - mean) ** 2 for r in rest.values()) / n)
    m1 = sum(rest[s] for s in right) / 2
    m0 = sum(r for s, r in rest.items() if s not in right) / 4
    by_hand = (m1 - m0) / sd * math.sqrt(2 / 6 * 4 / 6)
    assert _item(analysis, "a").discrimination == pytest.approx(by_hand, abs=1e-6)
    assert 0.5 < by_hand < 1  # the strong students got it right: it separates the class
    everyone = [_feedback(s, 2.0, -0.5, extra=e) for s, e in (("x", 1), ("y", 5))]
    assert _item(analyse_items(everyone, "autograd"), "a").discrimination is None  # undefined, not 0
    assert point_biserial([(True, 3.0), (False, 3.0)]) is None  # the same rest of the score: undefined
    assert point_biserial([(True, 5.0), (False, 1.0)]) == 1.0


def test_a_shown_value_is_parsed_only_as_plain_numbers():
    assert read_shown("0.25") == (True, 0.25)
    assert read_shown("-3") == (True, -3)
    assert read_shown("1e-05") == (True, 1e-05)
    assert read_shown("[1, -0.5]") == (True, [1, -0.5])
    assert read_shown("None") == (True, None)
    assert read_shown("True") == (True, True)
    for text in ("nan", "inf", "-inf", "__import__('os')", "'4'", "[1, x]", "1_000", "4 ", "(4)", "9" * 30, "[" * 5000):
        assert read_shown(text) == (False, None), text


def test_unparseable_values_are_groups_of_their_own_text():
    odd = [
        Feedback.from_json(
            {
                **_feedback(s, 1.0, -0.5).to_json(),
                "questions": [
                    {
                        "id": "q1",
                        "title": "Q1",
                        "points": 2,
                        "earned": 0,
                        "values": [_entry("a", text, "value", False, 1)],
                        "misconceptions": [],
                    }
                ],
            }
        )
        for s, text in (("p", "nan"), ("q", "nan"), ("r", "'4'"), ("s", "4"))
    ]
    a = _item(analyse_items(odd, "autograd"), "a")
    assert [(w.shown, w.count, w.parsed) for w in a.wrong_values] == [
        ("nan", 2, False),
        ("'4'", 1, False),
        ("4", 1, True),
    ]
    data = analysis_json(analyse_items(odd, "autograd"))
    assert [(w["value"], w["shown"]) for w in data["answers"][0]["wrong_values"]] == [
        (None, "nan"),
        (None, "'4'"),
        (4, "4"),
    ]


NUMBERS = {"ann": {"x": 1}, "ben": {"x": 1}, "cat": {"x": 2}, "dan": {"x": 2}, "eve": {"x": 1}, "fay": {"x": 2}}


def test_with_variants_wrong_values_are_grouped_only_among_the_same_numbers():
    # ben and dan both gave 0.5 for b, but with different numbers: two groups, each with its numbers.
    analysis = analyse_items(CLASS, "autograd", ItemSettings(numbers=lambda s: NUMBERS[s]))
    assert analysis.variants
    b = _item(analysis, "b")
    assert sorted((w.students, dict(w.numbers or {})) for w in b.wrong_values) == [
        (("ben",), {"x": 1}),
        (("dan",), {"x": 2}),
    ]
    a = _item(analysis, "a")
    assert next((w.students, dict(w.numbers or {})) for w in a.wrong_values) == (("cat", "dan"), {"x": 2})
    same = analyse_items(CLASS, "autograd", ItemSettings(numbers=lambda s: {"x": 1}))
    assert not same.variants
    assert [w.students for w in _item(same, "b").wrong_values] == [("ben", "dan")]
    assert analysis_json(same)["answers"][1]["wrong_values"][0]["numbers"] is None  # nothing to tell apart


class Recorder:
    def __init__(self, slip: Slip | None = None, fail: bool = False) -> None:
        self.calls: list[tuple[str, str, dict, Any]] = []
        self.slip, self.fail = slip, fail

    def __call__(self, question: str, answer: str, numbers: Mapping[str, Any], value: Any) -> Slip | None:
        self.calls.append((question, answer, dict(numbers), value))
        if self.fail:
            raise RuntimeError("a search of ours that broke")
        return self.slip


def test_the_slip_search_is_asked_per_shared_group_with_its_numbers_and_bounded():
    slip = Slip(GATE_IGNORED, "h = relu(z)", "the ReLU's gate ignored on the way back, at h = relu(z)")
    # One set of numbers for the class: only the values two or more students share are searched, most common first.
    explain = Recorder(slip)
    analysis = analyse_items(CLASS, "autograd", ItemSettings(numbers=lambda s: {"x": 1}, explain=explain))
    assert explain.calls == [("q1", "a", {"x": 1}, 4), ("q1", "b", {"x": 1}, 0.5)]
    assert _item(analysis, "a").wrong_values[0].slip == slip
    assert _item(analysis, "a").wrong_values[1].slip is None  # eve alone: not searched
    assert (analysis.explained, analysis.unexplained_left) == (2, 0)
    # With variants, values are shared only among the same numbers: each is searched with its own numbers, and
    # the students a slip explains are counted together over their groups.
    explain = Recorder(slip)
    analysis = analyse_items(CLASS, "autograd", ItemSettings(numbers=lambda s: NUMBERS[s], explain=explain))
    assert explain.calls[0] == ("q1", "a", {"x": 2}, 4)  # cat's and dan's: the most common first
    rest = sorted((q, a, tuple(n.items()), v) for q, a, n, v in explain.calls[1:])
    assert rest == [("q1", "a", (("x", 1),), 3.99), ("q1", "b", (("x", 1),), 0.5), ("q1", "b", (("x", 2),), 0.5)]
    slips = {item["answer"]: item["slips"] for item in analysis_json(analysis)["answers"]}
    assert [(s["kind"], s["count"], s["students"]) for s in slips["a"]] == [(GATE_IGNORED, 3, ["cat", "dan", "eve"])]
    assert [(s["count"], s["students"]) for s in slips["b"]] == [(2, ["ben", "dan"])]
    rows = list(csv.DictReader(io.StringIO(analysis_csv(analysis_json(analysis)))))
    found = next(r for r in rows if r["row"] == "slip" and r["answer"] == "a")
    assert (found["count"], found["who"], found["slip"], found["slip_where"]) == (
        "3",
        "cat, dan, eve",
        GATE_IGNORED,
        "h = relu(z)",
    )
    # An author's rule, named in the feedback, comes first: that group is not searched.
    ruled = [*CLASS[:2], _feedback("cat", 4.0, "missing", rules=("doubled",)), *CLASS[3:]]
    explain = Recorder(slip)
    analysis = analyse_items(ruled, "autograd", ItemSettings(numbers=lambda s: {}, explain=explain))
    a = _item(analysis, "a").wrong_values[0]
    assert (a.rule, a.slip) == ("doubled", None)
    assert [call[1] for call in explain.calls] == ["b"]  # ben's and dan's 0.5, with the class's one set of numbers
    # Bounded: at most max_explained groups; a search that raises leaves its group unexplained.
    explain = Recorder(fail=True)
    analysis = analyse_items(CLASS, "autograd", ItemSettings(numbers=lambda s: {}, explain=explain), max_explained=1)
    assert len(explain.calls) == 1
    assert (analysis.explained, analysis.unexplained_left) == (1, 1)
    assert all(w.slip is None for item in analysis.answers for w in item.wrong_values)
    # Without the students' numbers there is nothing to search with: nobody is asked.
    explain = Recorder(slip)
    assert analyse_items(CLASS, "autograd", ItemSettings(explain=explain)).explained == 0
    assert explain.calls == []


def test_a_student_whose_numbers_cannot_be_had_stays_apart():
    def numbers(student: str) -> dict:
        if student == "dan":
            raise OSError("the secret is gone")
        return {"x": 1}

    a = _item(analyse_items(CLASS, "autograd", ItemSettings(numbers=numbers, explain=Recorder())), "a")
    assert sorted(w.students for w in a.wrong_values) == [("cat",), ("dan",), ("eve",)]


def _big_class(students: int) -> list[Feedback]:
    return [_feedback(f"s{i:03d}", 100.0 + i % 30, 0.5, extra=i % 7) for i in range(students)]


def test_exports_are_bounded_stable_and_spreadsheet_safe(tmp_path):
    hostile = Feedback.from_json(
        {
            **_feedback("=HYPERLINK(1)", 1.0, -0.5).to_json(),
            "questions": [
                {
                    "id": "q1",
                    "title": "Q1",
                    "points": 2,
                    "earned": 0,
                    "values": [_entry("a", "=cmd|' /C calc'!A0", "value", False, 1)],
                    "misconceptions": [],
                }
            ],
        }
    )
    data = write_item_analysis(tmp_path, analyse_items([*_big_class(120), hostile], "autograd"))
    assert json.loads(item_analysis_path(tmp_path, "autograd", ".json").read_text()) == data
    assert data["schema"] == "autograd-course/item-analysis"
    assert data["version"] == 1
    a = data["answers"][0]
    assert set(a) == {
        "question", "answer", "students", "right", "blanks", "other_wrong", "wrong", "share_right",
        "discrimination", "wrong_values", "wrong_values_left_out", "slips",
    }  # fmt: skip
    assert len(a["wrong_values"]) == MAX_GROUPS_SHOWN
    assert a["wrong_values_left_out"] == 31 - MAX_GROUPS_SHOWN
    b = data["answers"][1]
    assert b["wrong_values"][0]["count"] == 120
    assert len(b["wrong_values"][0]["students"]) == MAX_STUDENTS_SHOWN
    assert b["wrong_values"][0]["students_left_out"] == 120 - MAX_STUDENTS_SHOWN
    text = item_analysis_path(tmp_path, "autograd", ".csv").read_text()
    assert text == analysis_csv(data)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["row"] for r in rows].count("answer") == 2
    assert len(rows) == 2 + MAX_GROUPS_SHOWN + 1
    # The hostile student's value and name, in a small class where they are listed:
    text = analysis_csv(analysis_json(analyse_items([*CLASS, hostile], "autograd")))
    rows = list(csv.DictReader(io.StringIO(text)))
    hostile_row = next(r for r in rows if "calc" in r["wrong_value"])
    assert hostile_row["wrong_value"].startswith("'=")
    assert hostile_row["who"].startswith("'=")
    assert all(not cell.startswith(("=", "+", "@")) for r in rows for cell in r.values())
    assert next(r for r in rows if r["wrong_value"] == "-0.5" or r["wrong_value"] == "0.5")  # numbers stay numbers


def test_the_summary_page_shows_the_analysis_escaped():
    hostile = Feedback.from_json(
        {
            **_feedback("<b>mallory</b>", 1.0, -0.5).to_json(),
            "questions": [
                {
                    "id": "q1",
                    "title": "Q1",
                    "points": 2,
                    "earned": 0,
                    "values": [_entry("a", "'<script>alert(1)</script>'", "value", False, 1)],
                    "misconceptions": [],
                }
            ],
        }
    )
    feedback = [*CLASS, hostile]
    summary = class_summary(feedback, page="autograd.html")
    summary["item_analysis"] = analysis_json(analyse_items(feedback, "autograd"))
    page = render_summary_html(summary, "autograd")
    assert "<section class=card id=item-analysis>" in page
    assert 'href="#item-analysis"' in page
    assert "<caption>Item analysis by answer</caption>" in page
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>mallory" not in page
    assert "&lt;b&gt;mallory&lt;/b&gt;" in page
    assert '<a href="feedback/cat/autograd/autograd.html">cat</a>' in page  # who gave 4, linked
    slip = Slip(GATE_IGNORED, "h", "the gate <ignored>")
    settings = ItemSettings(numbers=lambda s: {}, explain=Recorder(slip))
    summary["item_analysis"] = analysis_json(analyse_items(feedback, "autograd", settings))
    page = render_summary_html(summary, "autograd")
    assert "<strong>2 students: the gate &lt;ignored&gt;</strong> (a slip found from their values)" in page
    without = render_summary_html(class_summary(CLASS), "autograd")
    assert "item-analysis" not in without  # a summary made without it (an older JSON) still renders


def test_the_graded_sample_class_has_its_item_analysis_beside_its_grades(graded_sample_class):
    root, _ = graded_sample_class
    assert (root / "grades-autograd.csv").is_file()
    data = json.loads((root / "item-analysis-autograd.json").read_text(encoding="utf-8"))
    assert data["students"] == 5  # frank's notebook could not be read: not counted
    answers = {item["answer"]: item for item in data["answers"]}
    assert len(answers) == len(data["answers"]) == 41  # every answer of the assignment, once

    def wrong(answer: str) -> list[tuple[str, int, list[str], str | None]]:
        return [(w["shown"], w["count"], w["students"], w["rule"]) for w in answers[answer]["wrong_values"]]

    # The sample class's known wrong answers (tests/samples/submitted): bob's sign slip and his forgotten x,
    # erin's zeros, each with its count, who, and the author's rule that named it.
    assert wrong("slope_at_minus_2") == [("0", 1, ["erin"], None), ("4", 1, ["bob"], "sign_slip")]
    assert wrong("net_dL_dw") == [("6", 1, ["bob"], "forgot_times_x")]
    assert wrong("closed_dL_dw") == [("2", 1, ["bob"], "gradient_through_closed_relu")]
    assert wrong("accumulated_grads") == [
        ("0", 1, ["erin"], None),
        ("[6, 6, 6]", 1, ["bob"], "accumulation_overwrites"),
    ]
    assert wrong("slope_at_0") == []
    slope = answers["slope_at_minus_2"]
    assert (slope["students"], slope["right"], slope["blanks"], slope["wrong"]) == (5, 2, 1, 2)
    assert 0 < slope["discrimination"] <= 1
    rows = list(csv.DictReader(io.StringIO((root / "item-analysis-autograd.csv").read_text(encoding="utf-8"))))
    assert [r["row"] for r in rows].count("answer") == 41
    bob = next(r for r in rows if r["answer"] == "net_dL_dw" and r["row"] == "wrong")
    assert (bob["wrong_value"], bob["count"], bob["who"], bob["rule"]) == ("6", "1", "bob", "forgot_times_x")
    summary = json.loads((root / "class-summary-autograd.json").read_text(encoding="utf-8"))
    assert summary["item_analysis"] == data  # the summary's page shows the very same
    assert "id=item-analysis>" in (root / "class-summary-autograd.html").read_text(encoding="utf-8")


def test_item_settings_give_each_student_the_numbers_they_were_graded_with(monkeypatch):
    config = replace(load_config(ROOT), variants=True, tolerance=1e-3)
    monkeypatch.setenv(config.variant_secret_env, "a course secret for the tests")
    assignment = load_course_assignment(config, "autograd")
    settings = item_settings(config, assignment)
    assert settings.tolerance == 1e-3
    assert settings.numbers is not None
    alice = settings.numbers("alice")
    assert alice == numbers_for(config, assignment.content, "alice", assignment.default_params)
    assert alice != settings.numbers("bob")  # their own, as graded
    plain = item_settings(replace(config, variants=False), assignment)
    assert plain.numbers is not None
    assert plain.numbers("alice") == plain.numbers("bob") == assignment.default_params
