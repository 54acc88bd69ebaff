"""The class summary: whole-point bins, statistics over the submissions that were read, who showed each
misconception, a student table linking every feedback page, every student's text escaped once."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from html.parser import HTMLParser
from typing import ClassVar

import pytest

from course.pipeline.feedback_model import Feedback
from course.term.summary import MAX_BINS, class_summary, feedback_link, read_class_feedback, score_bins
from course.term.summary_page import render_summary_html


def _question(qid: str, points: float, earned: float, slips: tuple[str, ...] = ()) -> dict:
    return {
        "id": qid,
        "title": f"Question `{qid}`",
        "points": points,
        "earned": earned,
        "values": [],
        "misconceptions": [
            {"id": slip, "value": "x", "diagnosis": f"diagnosis of {slip} <b>", "idea": f"idea of {slip}"}
            for slip in slips
        ],
    }


def _feedback(
    student: str,
    score: float,
    status: str = "graded",
    *,
    q1: float = 2,
    slips: tuple[str, ...] = (),
    messages: tuple[str, ...] = (),
) -> Feedback:
    return Feedback.from_json(
        {
            "student_id": student,
            "assignment": "autograd",
            "status": status,
            "score": score,
            "max_score": 10,
            "late_penalty": 0,
            "messages": list(messages),
            "cell_errors": [],
            "questions": [_question("q1", 2, q1, slips), _question("q2", 8, score - q1)],
        }
    )


CLASS = [
    _feedback("alice", 10),
    _feedback("bob", 4.5, q1=0, slips=("sign_slip", "forgot_times_x")),
    _feedback("carol", 7, q1=0, slips=("sign_slip",)),
    _feedback("dave", 3, "timed_out"),
    _feedback("frank", 0, "failed", q1=0, messages=("Your submission could not be graded: not a notebook",)),
    _feedback("gina", 0, "autograder_error", q1=0),
]


def test_an_unreadable_feedback_file_is_said_not_skipped(tmp_path):
    good = _feedback("alice", 3)
    # bob's file is cut short; carol's and dave's are JSON but no feedback grading writes (a question without its
    # points, a score that is text): each is said as unreadable, never a KeyError in the middle of the summary
    carol = good.to_json()
    del carol["questions"][0]["points"]
    dave = {**good.to_json(), "score": "3"}
    for student, text in (
        ("alice", json.dumps(good.to_json())),
        ("bob", '{"half a file'),
        ("carol", json.dumps(carol)),
        ("dave", json.dumps(dave)),
    ):
        path = tmp_path / "feedback" / student / "autograd" / "feedback.json"
        path.parent.mkdir(parents=True)
        path.write_text(text)
    feedback, unreadable = read_class_feedback(tmp_path, "autograd")
    assert [f.student_id for f in feedback] == ["alice"]
    assert unreadable == ["bob", "carol", "dave"]
    summary = class_summary(feedback, unreadable=unreadable)
    assert summary["students"] == 1
    assert summary["unreadable"] == ["bob", "carol", "dave"]
    assert "could not be read and is not counted here: bob" in render_summary_html(summary, "autograd")


@pytest.mark.parametrize(
    ("max_score", "width", "bins"), [(57, 3, 20), (10, 1, 11), (19, 1, 20), (20, 2, 11), (4.5, 1, 5), (0, 1, 1)]
)
def test_bins_are_whole_points_and_few(max_score, width, bins):
    made = score_bins(max_score, [])
    assert len(made) == bins <= MAX_BINS
    assert all(isinstance(b["from"], int) and isinstance(b["to"], int) for b in made)
    assert [b["from"] for b in made] == list(range(0, bins * width, width))
    assert made[-1]["to"] == int(max_score)  # the full score has a bin of its own or shares the last one
    assert all(b["to"] - b["from"] == width - 1 for b in made[:-1])


def test_a_score_counts_in_the_bin_of_its_whole_part():
    made = score_bins(57, [("a", 44.6), ("b", 45), ("c", 57), ("d", 0), ("e", -2), ("f", 56.99), ("g", 60)])
    holding = {name: (b["from"], b["to"]) for b in made for name in b["students"]}
    assert holding == {
        "a": (42, 44),
        "b": (45, 47),
        "c": (57, 57),
        "d": (0, 2),
        "e": (0, 2),
        "f": (54, 56),
        "g": (57, 57),
    }


def test_the_statistics_count_only_submissions_that_were_read():
    summary = class_summary(CLASS, missing=["zoe"], unreadable=["yann"], page="autograd.html")
    assert summary["students"] == 4  # alice, bob, carol, and dave who timed out (his notebook ran)
    assert summary["mean_score"] == pytest.approx((10 + 4.5 + 7 + 3) / 4)
    assert summary["median_score"] == pytest.approx((4.5 + 7) / 2)
    assert summary["not_counted"] == {
        "failed": ["frank"],
        "autograder_error": ["gina"],
        "missing": ["zoe"],
        "unreadable": ["yann"],
    }
    assert sum(len(b["students"]) for b in summary["histogram"]) == 4
    q1 = summary["questions"][0]
    assert (q1["full_marks"], q1["success_rate"], q1["mean"]) == (2, 0.5, 1.0)  # alice and dave of four
    roster = {s["student_id"]: s for s in summary["roster"]}
    assert set(roster) == {"alice", "bob", "carol", "dave", "frank", "gina", "zoe", "yann"}
    assert [sid for sid, s in roster.items() if s["counted"]] == ["alice", "bob", "carol", "dave"]
    assert roster["frank"]["reason"] == "Your submission could not be graded: not a notebook"
    assert roster["bob"]["page"] == "feedback/bob/autograd/autograd.html"
    assert roster["zoe"]["page"] == roster["yann"]["page"] == ""  # no feedback page to open


def test_each_misconception_names_its_students_most_common_first():
    summary = class_summary(CLASS)
    assert [(m["id"], m["students"]) for m in summary["misconceptions"]] == [
        ("sign_slip", ["bob", "carol"]),
        ("forgot_times_x", ["bob"]),
    ]
    assert summary["misconceptions"][0]["where"] == {"bob": "q1", "carol": "q1"}
    assert summary["misconceptions"][0]["questions"] == ["Question `q1`"]


def test_no_submission_at_all_is_a_summary_too():
    summary = class_summary([], missing=["zoe"])
    assert (summary["students"], summary["mean_score"], summary["histogram"]) == (0, None, [])
    page = render_summary_html(summary, "autograd")
    assert "No graded submissions yet." in page
    assert "Did not submit (1)" in page


def test_feedback_links_are_relative_and_encoded():
    assert feedback_link("bob", "autograd", "autograd.html") == "feedback/bob/autograd/autograd.html"
    assert feedback_link("a b/../c", "autograd", "x.html") == "feedback/a%20b%2F..%2Fc/autograd/x.html"


class _WellFormed(HTMLParser):
    """Every element closed in order (void elements aside), ids unique, nothing loaded from elsewhere."""

    VOID: ClassVar[set[str]] = {"meta", "br", "img", "input", "link", "hr", "col", "wbr", "source"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[str] = []
        self.ids: list[str] = []
        self.problems: list[str] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if attributes.get("id"):
            self.ids.append(attributes["id"])
        for name in ("src", "href"):
            if re.match(r"^[a-z]+:|^//", attributes.get(name) or ""):
                self.problems.append(f"{tag} {name}={attributes[name]} leaves the page")
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag):
        if not self.open or self.open[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.open[-1:]}")
        else:
            self.open.pop()


def test_the_page_is_well_formed_offline_and_escapes_student_text_once():
    hostile = _feedback("<b>eve&co</b>", 5, slips=("sign_slip",))
    summary = class_summary([*CLASS, hostile], missing=["zo<e"], page="autograd.html")
    summary["integrity"] = {"<b>eve&co</b>": ["class <Rigged>(float)"]}
    page = render_summary_html(summary, "autograd")
    checker = _WellFormed()
    checker.feed(page)
    checker.close()
    assert checker.problems == []
    assert checker.open == []
    assert len(checker.ids) == len(set(checker.ids))
    assert "<b>eve" not in page
    assert "&lt;b&gt;eve&amp;co&lt;/b&gt;" in page
    assert "&amp;lt;" not in page  # escaped once, not twice
    assert "zo&lt;e" in page
    assert "class &lt;Rigged&gt;(float)" in page
    assert "diagnosis of sign_slip &lt;b&gt;" in page
    assert 'href="feedback/%3Cb%3Eeve%26co%3C%2Fb%3E/autograd/autograd.html#q-q1"' in page
    assert "<code>q1</code>" in page  # the course's own titles show their backticked names as code


def test_the_page_shows_whole_point_bins_and_every_student():
    page = render_summary_html(class_summary(CLASS, missing=["zoe"], page="autograd.html"), "autograd")
    labels = re.findall(r"<text class=bin-label[^>]*>([^<]*)</text>", page)
    assert labels == [str(point) for point in range(11)]
    assert page.count("<g class=bin ") == 11
    rows = re.findall(r"<tr[^>]*><td>(?:<a href=\"([^\"]+)\">|<span>)([^<]+)<", page.split("id=students")[1])
    assert [name for _, name in rows] == ["alice", "bob", "carol", "dave", "frank", "gina", "zoe"]
    assert [link for link, _ in rows][:6] == [
        f"feedback/{s}/autograd/autograd.html" for s in ("alice", "bob", "carol", "dave", "frank", "gina")
    ]
    assert "<div class=score>7 students</div><div>4 counted in the score statistics</div>" in page  # the class
    assert "in whole points (a score" in page
    assert "mean score 6.1 / 10" in page
    assert "Not counted in these numbers: 1 could not be read, 1 autograder error, 1 did not submit" in page


def test_wide_bins_are_named_by_their_width():
    wide = [replace(_feedback("ana", 30), max_score=57)]
    page = render_summary_html(class_summary(wide), "autograd")
    assert "in bars of 3 points (a score" in page  # 58 whole points in at most MAX_BINS bars
    assert "whole points" not in page
