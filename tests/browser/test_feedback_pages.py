"""The feedback page and the class summary, as a student and an instructor see them in Chromium."""

from __future__ import annotations

import re
import shutil

import pytest
from playwright.sync_api import expect

from course.core.config import load_config
from course.term.batch import grade_batch
from course.term.charts import MAX_BARS
from course.term.roster import Student
from tests.support.browser import screenshot
from tests.support.helpers import ROOT, copy_course

pytestmark = pytest.mark.browser

PHONE = {"viewport": {"width": 375, "height": 740}, "device_scale_factor": 2, "is_mobile": True}
DESKTOP = {"viewport": {"width": 1280, "height": 900}}
SAMPLES = ("alice", "bob", "carol", "dave", "erin", "frank")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The sample class graded with a roster that also names zoe, who submitted nothing."""
    root = tmp_path_factory.mktemp("graded") / "course"
    copy_course(root)
    shutil.copytree(ROOT / "tests" / "samples" / "submitted", root / "submitted")
    roster = [Student(student) for student in (*SAMPLES, "zoe")]
    grade_batch(load_config(root), [], root / "out", roster=roster)
    return root / "out"


def test_feedback_page_renders_with_the_chain_table(graded, page):
    page.goto((graded / "feedback" / "bob" / "autograd" / "autograd.html").as_uri())
    assert page.locator(".score").inner_text() == "45 / 57"
    assert page.locator("section.card").count() == 11
    chain = page.locator("#q-tiny_net table.chain")
    assert chain.is_visible()
    first_wrong = chain.locator("tr.first-wrong")
    assert first_wrong.count() == 1
    assert "h = w·x + b (to w)" in first_wrong.inner_text()
    assert "A common slip" in page.locator("#q-accumulation").inner_text()
    chain.scroll_into_view_if_needed()
    screenshot(page, "feedback-bob-desktop", full_page=True)
    assert page.console_errors == []


def _inside(box: dict, width: float) -> bool:
    return box["x"] >= 0 and box["x"] + box["width"] <= width


@pytest.mark.parametrize("view", ["torch-values", "verdicts"])
def test_chain_table_on_a_phone_shows_verdicts_and_gradients_first(graded, browser, view):
    """At 375 px every node of every chain table is a card: its verdict beside its name, the gradients
    right under them, all inside the screen (no sideways scrolling to find where the chain broke)."""
    context = browser.new_context(**PHONE)
    page = context.new_page()
    url = (
        (graded / "feedback" / "bob" / "autograd" / "autograd.html")
        if view == "torch-values"
        else ROOT / "tests" / "goldens" / "bob.verdicts.feedback.html"
    ).as_uri()
    page.goto(url)
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    assert page.evaluate("parseFloat(getComputedStyle(document.body).fontSize)") >= 14
    gradients = ["your gradient", "torch gradient"] if view == "torch-values" else ["your gradient"]
    tables = page.locator("table.chain")
    assert tables.count() >= 2
    for t in range(tables.count()):
        table = tables.nth(t)
        table.scroll_into_view_if_needed()
        wrap = table.locator("xpath=..")
        assert wrap.evaluate("w => w.scrollWidth <= w.clientWidth"), "the chain table must not scroll sideways"
        rows = table.locator("tbody tr")
        for r in range(rows.count()):
            row = rows.nth(r)
            mark, first = row.locator("td.mark"), row.locator("td.first")
            assert mark.inner_text() in ("✓", "✗")
            assert [first.nth(i).get_attribute("data-label") for i in range(first.count())] == gradients
            node = row.locator("td").first.bounding_box()
            for cell in (mark, *(first.nth(i) for i in range(first.count()))):
                assert cell.is_visible()
                box = cell.bounding_box()
                assert _inside(box, 375), f"{cell.inner_text()!r} at {box} is off the screen"
            assert abs(mark.bounding_box()["y"] - node["y"]) < 4  # the verdict on the node's line
            assert first.first.bounding_box()["y"] >= node["y"] + node["height"] - 1  # gradients right under it
            later = row.locator("td:not(.first):not(.mark)").nth(1)  # the forward value
            assert first.first.bounding_box()["y"] < later.bounding_box()["y"]
    broken = page.locator("#q-tiny_net tr.first-wrong")
    assert broken.locator("td.mark").inner_text() == "✗"
    assert broken.locator("td.first").first.inner_text() == "6"
    if view == "torch-values":
        assert broken.locator("td.first").nth(1).inner_text() == "12"
    broken.scroll_into_view_if_needed()
    screenshot(page, f"feedback-bob-phone-{view}")
    context.close()


@pytest.fixture(params=["desktop", "phone"])
def summary_page(request, graded, browser):
    context = browser.new_context(**(DESKTOP if request.param == "desktop" else PHONE))
    page = context.new_page()
    page.console_errors = []
    page.on("console", lambda message: message.type == "error" and page.console_errors.append(message.text))
    page.on("pageerror", lambda error: page.console_errors.append(str(error)))
    page.goto((graded / "class-summary-autograd.html").as_uri())
    page.width = request.param
    yield page
    context.close()


def test_class_summary_counts_the_unread_apart(summary_page):
    page = summary_page
    header = page.locator("header.summary").inner_text()
    assert "7 students" in header  # the whole class...
    assert "5 counted in the score statistics" in header  # frank's upload is no notebook, zoe submitted nothing
    assert "mean score 32.6 / 57, median 45" in header
    assert "Not counted in these numbers: 1 could not be read, 1 did not submit" in header
    assert "frank" in page.locator("#not-counted-failed").inner_text()
    assert "zoe" in page.locator("#not-counted-missing").inner_text()
    assert page.locator("#questions tbody tr").count() == 11
    who = page.locator("#misconceptions .misconception", has_text="You gave the same gradient at every step")
    assert who.locator(".names a").all_inner_texts() == ["bob"]
    assert page.console_errors == []


def test_class_summary_histogram_has_whole_point_bins(summary_page):
    page = summary_page
    histogram = page.locator("#distribution svg.histogram")
    expect(histogram).to_be_visible()
    labels = histogram.locator("text.bin-label").all_text_contents()
    assert len(labels) == 20
    assert all(re.fullmatch(r"\d+(–\d+)?", label) for label in labels), labels
    assert labels[0] == "0–2"
    assert labels[-1] == "57"
    counts = {
        label: int(histogram.locator("g.bin").nth(i).get_attribute("data-students")) for i, label in enumerate(labels)
    }
    assert {label: n for label, n in counts.items() if n} == {"0–2": 1, "3–5": 1, "45–47": 1, "57": 2}
    box = histogram.bounding_box()
    assert _inside(box, 375 if page.width == "phone" else 1280)
    font = histogram.locator("text.bin-label").first.evaluate("t => t.getBoundingClientRect().height")
    assert font >= 10, "the bins' labels must stay readable"
    histogram.scroll_into_view_if_needed()
    screenshot(page, f"class-summary-histogram-{page.width}")
    screenshot(page, f"class-summary-{page.width}", full_page=True)


def _sort_keys(page, header: str) -> list[float]:
    index = [t.strip(" ▲▼") for t in page.locator("table.students thead th").all_inner_texts()].index(header)
    return [
        float(v)
        for v in page.locator(f"table.students tbody tr td:nth-child({index + 1})").evaluate_all(
            "cells => cells.map(c => c.dataset.sort)"
        )
    ]


def test_class_summary_sorts_by_a_click_on_a_column(summary_page):
    page = summary_page
    names = page.locator("table.students tbody tr td:first-child")
    assert names.all_inner_texts() == [*SAMPLES, "zoe"]
    score = page.locator("table.students thead th", has_text="score")
    score.locator("button").click()
    expect(score).to_have_attribute("aria-sort", "ascending")
    keys = _sort_keys(page, "score")
    assert keys == sorted(keys)
    assert keys[0] == -1  # the students not counted (no score) first
    assert names.all_inner_texts()[-2:] in (["alice", "dave"], ["dave", "alice"])
    score.locator("button").click()
    expect(score).to_have_attribute("aria-sort", "descending")
    keys = _sort_keys(page, "score")
    assert keys == sorted(keys, reverse=True)
    assert names.all_inner_texts()[:2] in (["alice", "dave"], ["dave", "alice"])
    student = page.locator("table.students thead th", has_text="student")
    student.locator("button").click()
    student.locator("button").click()
    expect(student).to_have_attribute("aria-sort", "descending")
    assert names.all_inner_texts() == ["zoe", *reversed(SAMPLES)]
    table = page.locator("table.students")
    table.scroll_into_view_if_needed()
    visible = [c for c in page.locator("table.students thead th").all() if c.is_visible()]
    for cell in visible:
        assert _inside(cell.bounding_box(), 375 if page.width == "phone" else 1280)
    assert len(visible) == (4 if page.width == "phone" else 4 + 11)  # a phone leaves the per-question points out
    screenshot(page, f"class-summary-students-{page.width}")
    assert page.console_errors == []


def test_every_student_link_opens_their_feedback_page(summary_page, graded):
    page = summary_page
    links = page.locator("main section a").evaluate_all("links => links.map(a => [a.textContent, a.href])")
    students = {text for text, _ in links}
    assert students == set(SAMPLES)  # zoe has no feedback page to open
    for anchor in page.locator("header nav a").evaluate_all("links => links.map(a => a.hash)"):
        assert page.locator(anchor).count() == 1
    for student, href in links:
        page.goto(href)
        expect(page.locator("header.summary")).to_contain_text(f"Feedback for {student}, assignment autograd")
        anchor = href.partition("#")[2]
        if anchor:
            assert page.locator(f"#{anchor}").count() == 1, href


def test_class_summary_is_a_plain_table_without_its_script(graded, browser):
    context = browser.new_context(java_script_enabled=False, **DESKTOP)
    page = context.new_page()
    page.goto((graded / "class-summary-autograd.html").as_uri())
    heads = page.locator("table.students thead th")
    assert heads.locator("button").count() == 0
    assert heads.all_inner_texts()[:4] == ["student", "status", "score", "slips"]
    assert page.locator("table.students tbody tr td:first-child").all_inner_texts() == [*SAMPLES, "zoe"]
    context.close()


def test_class_summary_charts_fit_the_screen_and_say_what_they_show(summary_page):
    """Each answer's share right: visible, inside the screen (no sideways scrolling on a phone), named by its
    <title> and <desc>, its labels readable, and its numbers as a table behind "The numbers as a table"."""
    page = summary_page
    width = 375 if page.width == "phone" else 1280
    figure = page.locator("#charts figure#chart-answers")
    figure.scroll_into_view_if_needed()
    svg = figure.locator("svg")
    expect(svg).to_be_visible()
    expect(svg).to_have_attribute("role", "img")
    expect(svg).to_have_accessible_name("Each answer's share right")
    expect(svg).to_have_accessible_description(re.compile(r"^\d+ bars: "))
    assert _inside(svg.bounding_box(), width)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    bars = int(svg.get_attribute("data-bars"))
    assert svg.locator("rect.bar").count() == bars
    label = svg.locator("text").first.evaluate("t => t.getBoundingClientRect().height")
    assert label >= 10, "the bars' labels must stay readable"
    caption = figure.locator("figcaption")
    expect(caption).to_contain_text("the hardest first")
    table = figure.locator("table")
    expect(table).to_be_hidden()  # behind its summary until opened
    figure.locator("summary", has_text="The numbers as a table").click()
    expect(table).to_be_visible()
    answers = table.locator("tbody tr").count()
    assert answers == 41  # the sample assignment's answers, all in the table; the chart draws at most MAX_BARS
    assert bars == min(answers, MAX_BARS)
    expect(caption).to_contain_text(f"{answers - bars} more bars are not drawn: the table lists them.")
    assert re.fullmatch(r"\d+% \(\d+/5\)", table.locator("tbody tr td").nth(1).inner_text())  # of the 5 counted
    assert _inside(figure.bounding_box(), width)
    screenshot(page, f"class-summary-charts-{page.width}")
    assert page.console_errors == []
