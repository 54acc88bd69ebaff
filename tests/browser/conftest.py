"""Real-browser tests: Debian's chromium driven by Playwright (its own browser downloads are not used)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from helpers import ROOT

ARTIFACTS = Path(os.environ.get("AUTOGRAD_ARTIFACTS", ROOT / "test-artifacts")) / "browser"
CHROMIUM = os.environ.get("CHROMIUM", shutil.which("chromium") or shutil.which("chromium-browser") or "")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]


def _skip_reason() -> str | None:
    if not CHROMIUM:
        return "no chromium on this machine (apt-get install chromium); browser tests skipped"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture(scope="session")
def browser():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
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
