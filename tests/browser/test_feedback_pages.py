"""The feedback page and the class summary, as a student and an instructor see them in Chromium."""

from __future__ import annotations

import shutil

import pytest

from course.batch import grade_batch
from course.config import load_config
from helpers import ROOT, copy_course

from .conftest import screenshot

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("graded") / "course"
    copy_course(root)
    shutil.copytree(ROOT / "tests" / "samples" / "submitted", root / "submitted")
    grade_batch(load_config(root), [], root / "out")
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


def test_feedback_page_is_readable_on_a_phone(graded, browser):
    context = browser.new_context(viewport={"width": 375, "height": 740}, device_scale_factor=2, is_mobile=True)
    page = context.new_page()
    page.goto((graded / "feedback" / "bob" / "autograd" / "autograd.html").as_uri())
    page_width = page.evaluate("document.documentElement.scrollWidth")
    assert page_width <= 375, "the page itself must not scroll sideways; wide tables scroll inside their card"
    font = page.evaluate("parseFloat(getComputedStyle(document.body).fontSize)")
    assert font >= 14
    page.locator("#q-w2_net").scroll_into_view_if_needed()
    screenshot(page, "feedback-bob-phone")
    context.close()


def test_class_summary_page(graded, page):
    page.goto((graded / "class-summary-autograd.html").as_uri())
    text = page.locator("main").inner_text()
    assert "6 students" in text
    assert "Score distribution" in text
    assert "Most common misconceptions" in text
    rows = page.locator("section:has-text('Questions') tbody tr")
    assert rows.count() == 11
    screenshot(page, "class-summary", full_page=True)
    assert page.console_errors == []
