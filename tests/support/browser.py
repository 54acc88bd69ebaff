"""What the real-browser tests share: Debian's chromium driven by Playwright (its own browser downloads are
not used)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.support.helpers import ROOT, require_tool

ARTIFACTS = Path(os.environ.get("AUTOGRAD_ARTIFACTS", ROOT / "test-artifacts")) / "browser"
CHROMIUM = os.environ.get("CHROMIUM", shutil.which("chromium") or shutil.which("chromium-browser") or "")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def require_browser() -> None:
    """Chromium and Playwright are here, or the test ends (helpers.require_tool: skipped, failed under CI)."""
    if not CHROMIUM:
        require_tool("chromium", "the browser tests drive Debian's chromium (apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        require_tool("playwright", "the browser tests drive chromium with it (pip install -e '.[test]')")


def screenshot(page, name: str, **kwargs) -> Path:
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), **kwargs)
    return path
