"""Real-browser tests: Debian's chromium driven by Playwright (its own browser downloads are not used)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from helpers import ROOT, require_tool

ARTIFACTS = Path(os.environ.get("AUTOGRAD_ARTIFACTS", ROOT / "test-artifacts")) / "browser"
CHROMIUM = os.environ.get("CHROMIUM", shutil.which("chromium") or shutil.which("chromium-browser") or "")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]


def require_browser() -> None:
    """Chromium and Playwright are here, or the test ends (helpers.require_tool: skipped, failed under CI)."""
    if not CHROMIUM:
        require_tool("chromium", "the browser tests drive Debian's chromium (apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        require_tool("playwright", "the browser tests drive chromium with it (pip install -e '.[test]')")


@pytest.fixture(scope="session")
def browser():
    require_browser()
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.console_errors = []
    page.on("console", lambda message: message.type == "error" and page.console_errors.append(message.text))
    page.on("pageerror", lambda error: page.console_errors.append(str(error)))
    yield page
    context.close()


def screenshot(page, name: str, **kwargs) -> Path:
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), **kwargs)
    return path
