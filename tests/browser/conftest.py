"""Real-browser tests: Debian's chromium driven by Playwright (its own browser downloads are not used)."""

from __future__ import annotations

import pytest

# `browser`, the session's one chromium: tests/conftest.py (one Playwright per process: a second sync_playwright()
# while the first runs fails, and under pytest-xdist a worker may run this folder before tests/adversarial's).


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.console_errors = []
    page.on("console", lambda message: message.type == "error" and page.console_errors.append(message.text))
    page.on("pageerror", lambda error: page.console_errors.append(str(error)))
    yield page
    context.close()
