"""The submission service in Chromium: a student uploads through the form and reads the feedback; the
instructor's dashboard updates by itself when another attempt is graded."""

from __future__ import annotations

import re

import pytest

from helpers import CORRECT_CODE, submitted_notebook, write
from service.conftest import Server, course_for_service, notebook_bytes

from .conftest import screenshot

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    server = Server(course_for_service(tmp_path_factory.mktemp("service-browser") / "course"), jobs=1)
    server.issue_tokens(["alice", "bob"])
    server.start()
    yield server
    server.stop()


def test_a_student_uploads_and_reads_the_feedback(running, page, tmp_path):
    notebook = write(submitted_notebook({**CORRECT_CODE, "cubic_grad": "0"}), tmp_path / "autograd.ipynb")
    page.goto(f"{running.url}/s/{running.tokens['alice']}/")
    assert "No attempts yet." in page.locator("main").inner_text()
    page.locator("input[name=notebook]").set_input_files(str(notebook))
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url(re.compile(r".*/attempts/\d+$"), timeout=120_000)
    assert page.locator(".score").first.inner_text() == "54 / 57"
    assert "cubic" in page.locator("main").inner_text().lower()
    screenshot(page, "service-feedback", full_page=True)
    page.go_back()
    page.reload()
    history = page.locator("table tbody tr")
    assert history.count() == 1
    assert "54 / 57" in history.first.inner_text()
    assert page.console_errors == []


def test_the_dashboard_updates_as_attempts_are_graded(running, page):
    page.goto(f"{running.url}/i/{running.instructor}/")
    count = page.locator("#graded-count")
    before = int(count.inner_text().split()[0])
    assert page.frame_locator("iframe").locator("main").inner_text()  # the class summary is there
    reply = running.submit("bob", notebook_bytes(submitted_notebook()))
    assert reply.status == 200
    # no reload by the test: the page's own poller notices the new attempt
    page.locator("#graded-count", has_text=f"{before + 1} graded attempts").wait_for(timeout=30_000)
    row = page.locator("#students tr", has_text="bob")
    assert "57 / 57" in row.inner_text()
    screenshot(page, "service-dashboard", full_page=True)
    assert page.console_errors == []
