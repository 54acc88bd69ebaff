"""The submission service in Chromium: a student uploads through the form and reads the feedback; the
instructor's dashboard updates by itself when another attempt is graded."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.support.browser import screenshot
from tests.support.helpers import CORRECT_CODE, ROOT, add_cell, submitted_notebook, write
from tests.support.service import Server, course_for_service, notebook_bytes

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    # A cooldown: after an attempt the form closes, saying until when.
    root = course_for_service(tmp_path_factory.mktemp("service-browser") / "course", cooldown_minutes=30)
    server = Server(root, jobs=1)
    server.issue_tokens(["alice", "bob", "carol", LONG_ID, "erin", "fay"])
    server.start()
    yield server
    server.stop()


LONG_ID = "dave.okonkwo-lindqvist@example.edu"  # a real roster's id: an email
PHONE = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2, "is_mobile": True, "has_touch": True}


@pytest.mark.parametrize(("student", "device"), [("alice", "desktop"), ("carol", "phone")])
def test_a_student_uploads_waits_reads_the_feedback_and_is_told_when_to_return(
    running, browser, page, student, device, tmp_path, request
):
    """upload -> at once the attempt's page, "being graded" -> its feedback (summary, time, links) -> back
    -> the form closed by the cooldown, with the time it reopens."""
    if device == "phone":
        phone = browser.new_context(**PHONE)
        request.addfinalizer(phone.close)
        page = phone.new_page()
    slow = add_cell(submitted_notebook({**CORRECT_CODE, "cubic_grad": "0"}), "import time\ntime.sleep(3)")
    notebook = write(slow, tmp_path / "autograd.ipynb")
    page.goto(f"{running.url}/s/{running.tokens[student]}/")
    main = page.locator("main")
    assert "No attempts yet." in main.inner_text()
    assert "30 minutes between attempts" in page.locator("#policy").inner_text()
    page.locator("input[name=notebook]").set_input_files(str(notebook))
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url(re.compile(r".*/attempts/1$"), timeout=30_000)  # at once, not once graded
    assert re.search(r"Queued|Being graded", page.locator("#progress").inner_text())
    screenshot(page, f"service-being-graded-{device}")
    page.locator("#attempt-summary").wait_for(timeout=120_000)  # the page refreshes itself into the feedback
    summary = page.locator("#attempt-summary").inner_text()
    assert "Attempt 1, submitted" in summary
    assert "54 / 57" in summary
    revisit = page.locator("#attempt-summary ul.revisit a")
    assert revisit.count() == 1
    screenshot(page, f"service-feedback-{device}")
    target = revisit.first.get_attribute("href")
    assert target == "#q-cubic"
    revisit.first.click()  # a jump link to the question to revisit
    assert page.url.endswith(target)
    page.get_by_role("link", name="back to your attempts").click()
    page.wait_for_url(re.compile(r".*/s/[^/]+/$"))
    closed = page.locator("#closed").inner_text()
    assert re.search(r"the next attempt is allowed at \d\d:\d\d:\d\d UTC, 29 min \d\d s from now", closed), closed
    assert page.get_by_role("button", name="Submit").is_disabled()
    row = page.locator("table tbody tr").first
    assert "54 / 57" in row.inner_text()
    link = row.get_by_role("link", name="attempt 1")
    box, width = link.bounding_box(), page.viewport_size["width"]
    assert box is not None
    assert box["x"] + box["width"] <= width  # the attempt's link is on screen, even on a phone
    screenshot(page, f"service-refused-{device}", full_page=True)
    assert getattr(page, "console_errors", []) == []


def test_the_dashboard_updates_as_attempts_are_graded(running, page):
    page.goto(f"{running.url}/i/{running.instructor}/")
    count = page.locator("#graded-count")
    before = int(count.inner_text().split()[0])
    assert "30 minutes between attempts" in page.locator("#policy").inner_text()
    reply = running.submit("bob", notebook_bytes(submitted_notebook()))
    assert reply.status == 200
    # no reload by the test: the page's own poller notices the new attempt
    page.locator("#graded-count", has_text=re.compile(rf"^{before + 1} graded attempts?$")).wait_for(timeout=30_000)
    row = page.locator("#students tr", has_text="bob")
    assert "57 / 57" in row.inner_text()
    screenshot(page, "service-dashboard", full_page=True)
    assert page.console_errors == []


def test_a_refused_upload_lands_on_the_students_page_and_a_reload_posts_nothing(running, page):
    """Post-redirect-get: the notebook of another assignment is refused with whose notebook it is, on the student's
    own page (not on /upload), and reloading that page sends no form again and uses no attempt."""
    page.goto(f"{running.url}/s/{running.tokens[LONG_ID]}/")
    page.locator("input[name=notebook]").set_input_files(str(ROOT / "release" / "training" / "training.ipynb"))
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url(re.compile(r".*/s/[^/]+/\?note=[^&]+$"))
    banner = page.locator("#banner")
    assert banner.get_attribute("role") == "alert"
    said = banner.inner_text()
    assert said.startswith(
        "Not submitted: the upload cannot be graded: this is the notebook of assignment "
        "'training'; this page takes assignment 'autograd'"
    ), said
    posts: list[str] = []
    page.on("request", lambda sent: sent.method == "POST" and posts.append(sent.url))
    page.reload()
    page.locator("#banner").wait_for()
    assert posts == []
    assert "No attempts yet." in page.locator("main").inner_text()
    screenshot(page, "service-refused-upload")
    assert page.console_errors == []


def test_the_dashboard_fits_a_phone(running, browser, request):
    """At 390 px each student is a card of labelled cells: nothing is cut off or needs a sideways scroll."""
    phone = browser.new_context(**PHONE)
    request.addfinalizer(phone.close)
    page = phone.new_page()
    page.goto(f"{running.url}/i/{running.instructor}/")
    row = page.locator("#students tbody tr", has_text=LONG_ID)
    row.wait_for()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    for cell in row.locator("td").all():
        if cell.inner_text().strip():
            box = cell.bounding_box()
            assert box is not None
            assert box["x"] >= 0
            assert box["x"] + box["width"] <= 390, cell.inner_text()
    label = row.locator("td[data-label='counted score']").evaluate("td => getComputedStyle(td, '::before').content")
    assert label == '"counted score: "'  # each value under its label (what the hidden header said)
    screenshot(page, "service-dashboard-phone", full_page=True)


def _charts_inside(page, width: int) -> None:
    """The class's charts drawn, inside the screen, each named and described, with its numbers as a table."""
    section = page.locator("#class-charts")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    figures = section.locator("figure.chart")
    assert figures.count() == 2  # each answer's share right, first against counted attempt
    for figure in (*figures.all(), section.locator("svg.histogram")):
        figure.scroll_into_view_if_needed()
        expect(figure).to_be_visible()
        box = figure.bounding_box()
        assert box is not None
        assert box["x"] >= 0
        assert box["x"] + box["width"] <= width
    for svg in figures.locator("svg").all():
        expect(svg).to_have_attribute("role", "img")
        expect(svg).to_have_accessible_name(re.compile(r"\w"))
        expect(svg).to_have_accessible_description(re.compile(r"\w"))
    assert figures.locator("table").count() == 2


def test_the_dashboards_charts_follow_the_graded_attempts(running, page):
    """The charts come in place of their placeholder, and are drawn again, by the dashboard's own reload, once
    another attempt is graded: no reload by the test, no fixed wait."""
    page.goto(f"{running.url}/i/{running.instructor}/")
    drawn = page.locator("#class-charts[data-students]")
    drawn.wait_for(timeout=30_000)
    before = int(drawn.get_attribute("data-students"))
    reply = running.submit("erin", notebook_bytes(submitted_notebook()))
    assert reply.status == 200
    after = page.locator(f"#class-charts[data-students='{before + 1}']")
    after.wait_for(timeout=120_000)
    expect(after).to_contain_text(f"Over the counted attempts of {before + 1} student")
    _charts_inside(page, 1280)
    improvement = page.locator("#chart-improvement")
    expect(improvement.locator("rect.before")).to_have_count(improvement.locator("rect.bar").count())
    expect(improvement).to_contain_text("first")
    expect(improvement).to_contain_text("counted")
    screenshot(page, "service-dashboard-charts", full_page=True)
    assert page.console_errors == []


def test_the_dashboards_charts_fit_a_phone(running, browser, request):
    phone = browser.new_context(**PHONE)
    request.addfinalizer(phone.close)
    page = phone.new_page()
    page.goto(f"{running.url}/i/{running.instructor}/")
    drawn = page.locator("#class-charts[data-students]")
    drawn.wait_for(timeout=30_000)
    if drawn.get_attribute("data-students") == "0":  # run on its own: a graded attempt to draw first
        assert running.submit("fay", notebook_bytes(submitted_notebook())).status == 200
        page.locator("#class-charts[data-students='1']").wait_for(timeout=120_000)
    _charts_inside(page, 390)
    screenshot(page, "service-dashboard-charts-phone", full_page=True)
