"""A student's HTML run in the instructor's browser: formgrader's page for a submission (`/formgrader/submissions/
<id>/`, in the instructor's Jupyter session) rendered a script in the student's markdown cell, and so did the
feedback `nbgrader generate_feedback` renders from autograded/.

Every way a notebook carries markup is tried at once: a script, an event handler and a `javascript:` link in
markdown, a raw cell marked as HTML, the outputs of a code cell (text/html, application/javascript,
image/svg+xml), an attachment, a cell tag written to break out of its attribute. Each payload, if it runs, adds
`pwned` to the page's title. The test loads the real pages in Chromium (Debian's), waits until the submission's
cells are shown and the page has loaded, and asserts that no payload ran, that none is in the page as markup, and
that the student's text is still there to read."""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course.cli import main
from tests.support.adversarial import baseline_notebook
from tests.support.helpers import ROOT, copy_course, formgrader_server, write

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LAST_CELL = "end_of_the_notebook = 1"  # shown by formgrader in any version: what the page is waited for


def payload(where: str) -> str:
    return f"document.title += '|pwned-{where}'"


SVG = (
    f"""<svg xmlns="http://www.w3.org/2000/svg" onload="{payload("svg")}">"""
    f"<script>{payload('svg-script')}</script></svg>"
)
HOSTILE_CELLS = [
    {
        "cell_type": "markdown",
        "metadata": {},
        "source": (
            f"My answer.\n\n<script>{payload('markdown-script')}</script>\n\n"
            f'<img src="x" onerror="{payload("markdown-img")}">\n\n'
            f'<details open ontoggle="{payload("markdown-details")}"><summary>s</summary></details>\n\n'
            f"[see this](javascript:{payload('markdown-link')})\n"
        ),
    },
    {
        "cell_type": "raw",
        "metadata": {"raw_mimetype": "text/html", "format": "text/html"},
        "source": f'<script>{payload("raw-script")}</script><img src="x" onerror="{payload("raw-img")}">',
    },
    {
        "cell_type": "code",
        "execution_count": 1,
        "source": "from IPython.display import HTML",
        "metadata": {"tags": [f'"><script>{payload("tag")}</script>']},
        "outputs": [
            {
                "output_type": "display_data",
                "metadata": {},
                "data": {
                    "text/html": f"<script>{payload('html-output')}</script>"
                    f'<img src=x onerror="{payload("html-output-img")}">',
                    "application/javascript": payload("javascript-output"),
                    "image/svg+xml": SVG,
                    "text/plain": "<IPython.core.display.HTML object>",
                },
            }
        ],
    },
    {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": LAST_CELL},
]
# An attachment: a markdown cell that shows it made nbconvert stop (autograded/ kept the cell, not its attachments):
# formgrader's page was an error and generate_feedback failed for the student. trudy sends it with the rest.
ATTACHMENT = {
    "cell_type": "markdown",
    "metadata": {},
    "source": "![chart](attachment:chart.svg)",
    "attachments": {"chart.svg": {"image/svg+xml": base64.b64encode(SVG.encode()).decode()}},
}
STUDENTS = {"mallory": HOSTILE_CELLS, "trudy": [ATTACHMENT, *HOSTILE_CELLS]}
# What must be shown as text: the student's words are still there for the instructor to read.
SHOWN = ("My answer.", f"<script>{payload('markdown-script')}</script>")

# Anything in the notebook's part of the page that is markup a student could have brought.
MARKUP_FOUND = """(root) => {
  const found = [];
  for (const element of root.querySelectorAll('*')) {
    const tag = element.tagName.toLowerCase();
    if (['script', 'iframe', 'object', 'embed', 'svg', 'details'].includes(tag)) found.push(tag);
    for (const attribute of element.attributes) {
      if (attribute.name.toLowerCase().startsWith('on')) found.push(tag + '[' + attribute.name + ']');
      if (/^\\s*(javascript|vbscript|data:text)/i.test(attribute.value)) found.push(tag + '[' + attribute.name + ']');
    }
  }
  return found;
}"""


@pytest.fixture(scope="module")
def graded_course(tmp_path_factory):
    from tests.support.browser import require_browser

    require_browser()
    root = tmp_path_factory.mktemp("formgrader") / "course"
    copy_course(root)
    shutil.copy(ROOT / "nbgrader_config.py", root)
    for student, cells in STUDENTS.items():
        notebook = baseline_notebook()
        notebook["cells"] += cells
        folder = root / "submitted" / student / "autograd"
        write(notebook, folder / "autograd.ipynb")
        (folder / "timestamp.txt").write_text("2026-11-20 09:00:00.000000 UTC")
    assert main(["--course", str(root), "grade", "--quiet"]) == 0
    return root


@pytest.fixture(scope="module")
def formgrader(graded_course):
    with formgrader_server(graded_course) as running:
        yield running


@pytest.fixture
def page(browser):  # the session's one chromium (tests/conftest.py): a second sync Playwright in a process fails
    context = browser.new_context()
    try:
        yield context.new_page()
    finally:
        context.close()


def assert_no_student_markup_ran(page, container: str) -> None:
    page.wait_for_load_state("load")  # after every image's error and every inline script and handler
    notebook = page.locator(container).first  # (formgrade's page nests nbconvert's container in its own)
    assert "pwned" not in page.title()
    assert notebook.evaluate(MARKUP_FOUND) == []
    text = notebook.inner_text()
    for shown in SHOWN:
        assert shown in text  # the student's cell is on the page, as text: the test saw it, not an empty page


@pytest.mark.parametrize("student", list(STUDENTS))
def test_formgraders_page_runs_no_script_of_the_students(graded_course, formgrader, page, student):
    from nbgrader.api import Gradebook

    url, token = formgrader
    with Gradebook(f"sqlite:///{graded_course / 'gradebook.db'}") as gradebook:
        submission = gradebook.find_submission_notebook("autograd", "autograd", student).id
    # Nothing leaves the machine (formgrade's page asks a CDN for MathJax): the page loads in the same time always.
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(url) else route.abort())
    page.goto(f"{url}/formgrader/submissions/{submission}/?token={token}")
    page.locator("#notebook-container").get_by_text(LAST_CELL).first.wait_for(timeout=60_000)
    assert_no_student_markup_ran(page, "#notebook-container")


@pytest.mark.parametrize("student", list(STUDENTS))
def test_nbgraders_generate_feedback_renders_no_script_of_the_students(graded_course, page, tmp_path, student):
    course = tmp_path / "course"  # generate_feedback replaces feedback/: a copy, so the formgrader test is unaffected
    shutil.copytree(graded_course, course)
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "nbgrader"),
            "generate_feedback",
            "autograd",
            "--force",
            f"--student={student}",
        ],
        cwd=course,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    feedback = course / "feedback" / student / "autograd" / "autograd.html"
    assert "end_of_the_notebook" in feedback.read_text()  # nbgrader's rendering of autograded/, not our own page
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    page.goto(feedback.as_uri())
    page.get_by_text(LAST_CELL).first.wait_for(timeout=60_000)
    assert_no_student_markup_ran(page, "#notebook-container")
