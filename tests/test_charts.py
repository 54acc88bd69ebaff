"""The class's pictures (issue 43): plain inline SVG charts, each with its <title>, <desc>, caption and table, bounded
in what they draw; the item analysis's charts drawn from hand-built `ItemAnalysis` values; the first-against-counted
pairs from hand-built feedback; the class summary's sections."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from typing import ClassVar

import pytest

from course.pipeline.feedback_model import Feedback
from course.pipeline.slips import GATE_IGNORED, Slip
from course.term.charts import (
    LABEL_CHARS,
    MAX_BARS,
    MAX_POINTS,
    Bar,
    Pair,
    Point,
    bar_chart,
    paired_chart,
    scatter_chart,
)
from course.term.class_charts import (
    difficulty_discrimination_chart,
    first_and_counted,
    improvement_chart,
    item_analysis_html,
    top_slips_chart,
)
from course.term.item_analysis import AnswerItem, ItemAnalysis, WrongValue
from course.term.summary import class_summary
from course.term.summary_page import render_summary_html


class _Parsed(HTMLParser):
    """The tags, ids and text of a fragment, and any tag closed out of order (HTML's void tags aside)."""

    VOID: ClassVar[set[str]] = {"meta", "br", "input", "img", "link", "hr", "col", "wbr"}

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.problems: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag):
        if not self.open or self.open[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.open[-1:]}")
        else:
            self.open.pop()

    def handle_data(self, data):
        self.text.append(data)


def parsed(fragment: str) -> _Parsed:
    parser = _Parsed()
    parser.feed(fragment)
    parser.close()
    assert parser.problems == []
    assert parser.open == []
    return parser


def tags(fragment: str, name: str) -> list[dict[str, str | None]]:
    return [attrs for tag, attrs in parsed(fragment).tags if tag == name]


def assert_accessible(fragment: str) -> None:
    """role=img, labelled by its own <title> and <desc>, a caption and the numbers as a table."""
    (svg,) = tags(fragment, "svg")
    assert svg["role"] == "img"
    ids = {attrs.get("id") for _, attrs in parsed(fragment).tags}
    assert svg["aria-labelledby"] in ids  # its name: the <title>
    assert svg["aria-describedby"] in ids  # its description: the <desc>
    assert re.search(r"<title id=\"[^\"]+-title\">[^<]+</title><desc id=\"[^\"]+-desc\">[^<]+</desc>", fragment)
    assert len(tags(fragment, "figcaption")) == 1
    assert len(tags(fragment, "table")) == 1


def test_a_bar_chart_draws_each_share_against_the_whole_with_its_number():
    chart = bar_chart(
        "c", "Shares", [Bar("a", 0.5, "50% (1/2)"), Bar("b", 1.0, "100%"), Bar("c", 0.0, "0%")], caption="Three."
    )
    assert_accessible(chart)
    bars = [float(attrs["width"] or 0) for attrs in tags(chart, "rect") if attrs["class"] == "bar"]
    tracks = [float(attrs["width"] or 0) for attrs in tags(chart, "rect") if attrs["class"] == "track"]
    assert bars == [tracks[0] / 2, tracks[0], 1.5]  # an empty bar still shows where it is
    assert "50% (1/2)" in parsed(chart).text
    assert re.findall(r"<td>([^<]*)</td>", chart) == ["a", "50% (1/2)", "b", "100%", "c", "0%"]


def test_a_bar_chart_draws_at_most_its_cap_and_cuts_long_labels_keeping_them_whole_in_titles():
    long = "the gradient of the loss with respect to the weight of the hidden layer's second unit"
    bars = [Bar(f"{i} {long}", i / 40, f"{i}") for i in range(MAX_BARS + 7)]
    chart = bar_chart("many", "Many", bars, caption="Many bars.")
    assert_accessible(chart)
    assert tags(chart, "svg")[0]["data-bars"] == str(MAX_BARS)
    assert len([a for a in tags(chart, "rect") if a.get("class") == "bar"]) == MAX_BARS
    assert "7 more bars are not drawn: the table lists them." in chart
    assert len(re.findall(r"<tr><td>", chart)) == MAX_BARS + 7  # the table has them all
    drawn = re.findall(r"<text x=0 y=\d+>([^<]*)</text>", chart)
    assert all(len(label) <= LABEL_CHARS and label.endswith("…") for label in drawn)
    assert f"<title>0 {long}: 0</title>" in html.unescape(chart)


def test_a_paired_chart_tells_its_series_apart_by_pattern_and_words_not_colour():
    chart = paired_chart(
        "imp",
        "First against counted",
        [Pair("Q1", 0.25, 0.75, "25% (1)", "75% (3)")],
        names=("first", "counted"),
        caption="One pair.",
    )
    assert_accessible(chart)
    (before,) = [a for a in tags(chart, "rect") if a.get("class") == "before"]
    assert before["fill"] == "url(#imp-hatch)"
    assert any(tag == "pattern" and attrs["id"] == "imp-hatch" for tag, attrs in parsed(chart).tags)
    words = parsed(chart).text
    assert words.count("first") >= 1
    assert words.count("counted") >= 1
    assert [a["width"] for a in tags(chart, "rect") if a.get("class") in ("before", "bar")] == ["52.5", "157.5"]


def test_a_scatter_marks_weak_points_by_shape_and_clamps_what_falls_outside():
    points = [Point("strong", 0.5, 0.6), Point("weak", 0.9, 0.1), Point("wild", 2.0, -3.0)]
    chart = scatter_chart("s", "Scatter", points, x_name="share right", y_name="discrimination", caption="Three.")
    assert_accessible(chart)
    groups = [a["data-weak"] for a in tags(chart, "g") if a.get("class") == "point"]
    assert groups == ["no", "yes", "yes"]
    assert len(tags(chart, "circle")) == 1
    assert len([a for a in tags(chart, "path") if a.get("class") == "point"]) == 2  # triangles, not only a colour
    svg = tags(chart, "svg")[0]
    width, height = (float(v) for v in (svg["viewbox"] or "").split()[2:])
    for circle in tags(chart, "circle"):
        assert 0 <= float(circle["cx"] or 0) <= width
        assert 0 <= float(circle["cy"] or 0) <= height
    for path in (a for a in tags(chart, "path") if a.get("class") == "point"):
        numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", path["d"] or "")]
        assert all(0 <= n <= max(width, height) for n in numbers)  # the wild point drawn at the edge
    many = scatter_chart(
        "m", "M", [Point(str(i), 0.5, 0.5) for i in range(MAX_POINTS + 3)], x_name="x", y_name="y", caption="Many."
    )
    assert tags(many, "svg")[0]["data-points"] == str(MAX_POINTS)
    assert "3 more points are not drawn" in many


def _item(question: str, answer: str, right: int, discrimination: float | None, wrong=()) -> AnswerItem:
    return AnswerItem(question, answer, 10, right, 0, right / 10, discrimination, tuple(wrong))


GATE = Slip(GATE_IGNORED, "h = relu(z)", "the ReLU's gate ignored on the way back, at h = relu(z)")
ANALYSIS = ItemAnalysis(
    "autograd",
    10,
    (
        _item("tiny_net", "w_grad", 3, 0.55, [WrongValue(12.0, 5, ("a", "b", "c", "d", "e"), GATE)]),
        _item("cubic", "grad", 8, 0.05, [WrongValue(-3.0, 2, ("f", "g"), rule="sign_slip")]),
        _item("chain", "dx", 6, -0.3, [WrongValue(7.5, 3, ("h", "i", "j")), WrongValue(1.0, 1, ("k",))]),
        _item("easy", "x", 10, None),
    ),
)


def test_difficulty_against_discrimination_draws_each_defined_answer_and_names_the_rest():
    chart = difficulty_discrimination_chart(ANALYSIS)
    assert_accessible(chart)
    assert tags(chart, "svg")[0]["data-points"] == "3"
    assert [a["data-weak"] for a in tags(chart, "g") if a.get("class") == "point"] == ["no", "yes", "yes"]
    assert "Not drawn (everyone or nobody right, so no discrimination): easy · x." in chart
    rows = re.findall(r"<tr>((?:<td>[^<]*</td>)+)</tr>", chart)
    assert rows[0] == "<td>1</td><td>tiny_net · w_grad</td><td>30%</td><td>0.55</td><td>separates well</td>"
    assert "the wrong way" in rows[2]


def test_top_slips_are_the_shared_wrong_values_most_common_first_with_what_explains_each():
    chart = top_slips_chart(ANALYSIS)
    assert_accessible(chart)
    rows = [tuple(map(html.unescape, row)) for row in re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td>", chart)]
    assert rows == [
        ("tiny_net · w_grad = 12.0", "the ReLU's gate ignored on the way back, at h = relu(z)"),
        ("chain · dx = 7.5", "unexplained"),
        ("cubic · grad = -3.0", "rule sign_slip"),
    ]  # a value one student gave is no slip of the class
    notes = [html.unescape(t) for t in re.findall(r"<text class=muted x=0 y=\d+>([^<]*)</text>", chart)]
    assert notes == ["the ReLU's gate ignored on the way back, at h =…", "unexplained", "rule sign_slip"]  # whole above
    assert "2 of 3 explained by a rule or a slip found" in chart
    assert re.findall(r"<text x=276 y=\d+>([^<]*)</text>", chart) == ["5 students", "3 students", "2 students"]
    assert "a, b" not in chart  # counts, never who
    nothing = top_slips_chart(ItemAnalysis("autograd", 10, (_item("easy", "x", 10, None),)))
    assert "No wrong value was given by 2 or more students." in nothing
    assert "Nothing to draw yet." in nothing


def test_a_students_value_is_escaped_once_and_bounded_in_every_chart():
    hostile = "<script>alert(1)</script>&" + "9" * 500
    analysis = ItemAnalysis(
        "autograd<b>",
        4,
        (
            AnswerItem(
                "q<i>", "a\"'<", 4, 1, 0, 0.25, 0.4, (WrongValue(hostile, 3, ("<b>eve</b>", "x", "y"), rule="r<u>"),)
            ),
        ),
    )
    page = item_analysis_html(analysis)
    found = parsed(page)
    assert {tag for tag, _ in found.tags} <= {
        "section",
        "h2",
        "figure",
        "svg",
        "title",
        "desc",
        "g",
        "text",
        "rect",
        "line",
        "circle",
        "path",
        "figcaption",
        "details",
        "summary",
        "div",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "p",
    }
    assert "<script" not in page
    assert "<b>" not in page
    assert "<i>" not in page
    assert "<u>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&amp;" in page
    assert "&amp;lt;" not in page  # once, not twice
    assert "eve" not in page  # who gave it is not drawn
    assert max(len(text) for text in found.text) <= 500  # a 500-digit value is cut, in the chart and its table


def _answer(name: str, correct: bool) -> dict:
    return {
        "name": name,
        "your_value": "1",
        "torch_value": "1",
        "status": "value",
        "correct": correct,
        "points": 1,
        "earned": 1 if correct else 0,
        "explanation": "",
    }


def _feedback(student: str, q1: bool, q2: bool) -> Feedback:
    def question(qid: str, right: bool) -> dict:
        return {
            "id": qid,
            "title": f"Question {qid}",
            "points": 1,
            "earned": 1 if right else 0,
            "values": [_answer("grad", right)],
            "misconceptions": [],
        }

    return Feedback.from_json(
        {
            "student_id": student,
            "assignment": "autograd",
            "status": "graded",
            "score": q1 + q2,
            "max_score": 2,
            "messages": [],
            "cell_errors": [],
            "questions": [question("q1", q1), question("q2", q2)],
        }
    )


def test_first_against_counted_counts_each_student_in_both_or_neither():
    first = [_feedback("ann", False, False), _feedback("ben", True, False), _feedback("cy", False, True)]
    counted = [_feedback("ann", True, False), _feedback("ben", True, True), _feedback("dee", True, True)]
    pairs = first_and_counted(first, counted)  # cy has no counted attempt, dee no first: neither is in it
    assert pairs == [
        Pair("Question q1", 0.5, 1.0, "50% (1)", "100% (2)"),
        Pair("Question q2", 0.0, 0.5, "0% (0)", "50% (1)"),
    ]
    assert first_and_counted([], counted) == []
    chart = improvement_chart(pairs, 2)
    assert_accessible(chart)
    assert "over the 2 students with a counted attempt" in chart


@pytest.mark.parametrize("with_analysis", [False, True])
def test_the_class_summary_draws_each_answers_share_and_the_item_analysis_in_their_own_sections(with_analysis):
    klass = [_feedback("ann", True, False), _feedback("ben", True, True), _feedback("<b>cy</b>", False, False)]
    blank = klass[2].to_json()
    blank["questions"][1]["values"][0].update(status="missing", your_value=None)  # cy left q2 blank
    klass[2] = Feedback.from_json(blank)
    summary = class_summary(klass)
    assert summary["answers"] == [
        {"question": "q1", "title": "Question q1", "answer": "grad", "right": 2, "blank": 0, "students": 3},
        {"question": "q2", "title": "Question q2", "answer": "grad", "right": 1, "blank": 1, "students": 3},
    ]
    page = render_summary_html(summary, "autograd", analysis=ANALYSIS if with_analysis else None)
    section = page.split("<section class=card id=charts>")[1].split("</section>")[0]
    assert_accessible(section)
    assert re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td>", section) == [
        ("grad · Question q2", "33% (1/3)", "1"),  # the hardest first
        ("grad · Question q1", "67% (2/3)", "0"),
    ]
    assert "1 answer left blank by someone: the table says by how many." in section
    assert "<desc>Students per score: 0: 1 student; 1: 1 student; 2: 1 student.</desc>" in page  # the histogram's
    assert ("id=item-charts" in page) is with_analysis
    ids = re.findall(r"""\bid=["']?([\w-]+)""", page)
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)  # each anchor names one element
    assert ('id="chart-slips"' in page) is with_analysis
    assert "<b>cy" not in page
