"""A student in JupyterLab: open the released notebook, answer, run everything, read the checks."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.support.browser import screenshot
from tests.support.helpers import copy_course, free_port

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    from tests.support.browser import require_browser

    require_browser()
    root = tmp_path_factory.mktemp("lab") / "course"
    copy_course(root)
    port, token = free_port(), secrets.token_hex(16)
    log = (root.parent / "jupyterlab.log").open("w")
    # Render every cell (JupyterLab 4 otherwise only keeps cells near the viewport in the page).
    settings = root.parent / "lab-settings"
    (settings / "@jupyterlab" / "notebook-extension").mkdir(parents=True)
    (settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings").write_text(
        '{"windowingMode": "none"}'
    )
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(settings), "JUPYTER_CONFIG_DIR": str(root.parent / "cfg")}
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "jupyter"),
            "lab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--allow-root",
            "--ServerApp.disable_check_xsrf=False",
            "--LabApp.news_url=",
            "--LabServerApp.extra_labextensions_path=[]",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=root,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):  # noqa: S310 - loopback
                break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail(f"JupyterLab did not start; see {log.name}")
            time.sleep(0.5)
    yield url, token, root
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
    log.close()


def cell_with(page, text: str):
    return page.locator(".jp-Notebook .jp-Cell").filter(has_text=text).first


def replace_cell_text(page, cell, text: str) -> None:
    editor = cell.locator(".cm-content").first
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(text)


def run_all(page) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()


def test_a_student_answers_and_runs_the_released_notebook(jupyterlab, page):
    url, token, _ = jupyterlab
    page.set_default_timeout(60_000)
    page.goto(f"{url}/lab/tree/release/autograd/autograd.ipynb?token={token}")
    page.locator(".jp-Notebook .jp-Cell").nth(5).wait_for()
    page.locator(".jp-Notebook-ExecutionIndicator, .jp-Toolbar-kernelStatus").first.wait_for()

    # Two answer cells filled through the page: the slopes (well formed) and the graph walk, where one
    # value is still blank. Run All stops at the first failing check, as it does for a student.
    replace_cell_text(
        page, cell_with(page, "slope_at_minus_2 = ..."), "slope_at_3 = 6\nslope_at_minus_2 = -4\nslope_at_0 = 0"
    )
    replace_cell_text(
        page, cell_with(page, "local_slopes = ..."), "forward_values = [9, 18, 19]\nlocal_slopes = ...\ndz_dx = 12"
    )
    run_all(page)

    ok_line = page.locator(".jp-OutputArea-output", has_text="ok   slope_at_minus_2: right form (number)")
    ok_line.first.wait_for(timeout=120_000)
    # Outputs arrive one by one: wait for this one too instead of counting what is there already.
    well_formed = "ok   forward_values: right form (list of 3 numbers)"
    expect(page.locator(".jp-OutputArea-output", has_text=well_formed)).to_have_count(1, timeout=120_000)
    blank = page.locator(
        ".jp-OutputArea-output",
        has_text="- local_slopes is still `...`: replace it with the value you derived by hand.",
    )
    blank.first.wait_for(timeout=120_000)
    blank.first.scroll_into_view_if_needed()
    # The form check speaks in sentences: no traceback through the course's code, no exception name.
    message = blank.first.inner_text()
    assert message.startswith("Not ready yet: one answer here needs your attention.")
    for noise in ("Traceback", "FormError", "AssertionError", "notebook.py", "forms.py", "check_form"):
        assert noise not in message
    screenshot(page, "jupyterlab-public-checks")
    # The hidden tests are not in the student's notebook: the graded cells hold only their comment.
    assert page.locator(".jp-Notebook", has_text="marks.value(").count() == 0


def test_nbgrader_validate_works_on_the_release(jupyterlab, page):
    url, token, _ = jupyterlab
    page.set_default_timeout(60_000)
    page.goto(f"{url}/lab/tree/release/autograd/autograd.ipynb?token={token}")
    page.locator(".jp-Notebook .jp-Cell").nth(5).wait_for()
    validate = page.locator(".jp-Toolbar button, .jp-Toolbar jp-button", has_text="Validate").first
    validate.wait_for()
    validate.click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=180_000)
    dialog.locator(".jp-Dialog-header", has_text="Validat").wait_for(timeout=180_000)
    text = dialog.inner_text()
    screenshot(page, "nbgrader-validate")
    # nbgrader runs the notebook in a kernel and checks its graded cells; their visible part is the public
    # form check, so the untouched release fails, naming the first unanswered value (never a right one).
    assert "Validation Results" in text
    assert "Success! Your notebook passes all the tests." not in text
    assert "slope_at_3 is still `...`" in text
