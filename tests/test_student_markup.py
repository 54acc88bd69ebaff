"""A submission's markup made inert for nbgrader's renderers (course/term/student_markup.py): rendered by nbconvert's
own
markdown filter (what formgrader's template uses), the student's text shows and none of its markup is HTML."""

from __future__ import annotations

import pytest

from course.term.student_markup import LABEL, inert_submission, literal_markdown

RELEASE = {
    "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["## Part 1\n", "<b>instructor's</b>"]},
        {"cell_type": "code", "metadata": {}, "source": "x = ...", "outputs": []},
    ]
}

TEXTS = [
    "<script>alert(1)</script>",
    "```\n<script>alert(1)</script>\n```",  # a fence of the student's own cannot close ours
    "````` <img src=x onerror=alert(1)> `````",
    "~~~\n<script>alert(1)</script>",
    "[x](javascript:alert(1))",
    "<javascript:alert(1)>",
    "</code></pre><script>alert(1)</script>",
]


@pytest.mark.parametrize("text", TEXTS)
def test_the_students_markdown_renders_as_its_text(text):
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    html = markdown2html_mistune(literal_markdown(text))
    assert [tag for tag in ("<script", "<img", "href=") if tag in html] == []
    assert html.count("<pre>") == 1


def test_cells_that_are_the_releases_stay_and_the_rest_become_text():
    submitted = {
        "nbformat": 4,
        "cells": [
            {
                "cell_type": "markdown",
                "metadata": {},
                "source": "## Part 1\n<b>instructor's</b>",
            },  # the release's, joined
            {"cell_type": "markdown", "metadata": {}, "source": "<b>mine</b>", "attachments": {"a.png": {}}},
            {"cell_type": "raw", "metadata": {"raw_mimetype": "text/html"}, "source": ["<i>raw</i>"]},
            {
                "cell_type": "code",
                "metadata": {},
                "source": "x = 1",
                "attachments": {},
                "outputs": [{"output_type": "display_data", "data": {"text/html": "<script>alert(1)</script>"}}],
            },
            {"cell_type": 7, "source": None},
        ],
    }
    before = repr(submitted)
    inert = inert_submission(submitted, RELEASE)
    assert repr(submitted) == before  # the parsed submission is not changed
    kept, mine, raw, code, odd = inert["cells"]
    assert kept == submitted["cells"][0]
    assert (mine["cell_type"], "attachments" in mine) == ("markdown", False)
    assert "```text\n<b>mine</b>\n```" in mine["source"]
    assert (raw["cell_type"], "```text\n<i>raw</i>\n```" in raw["source"]) == ("markdown", True)
    assert (code["source"], "outputs" in code, "attachments" in code) == ("x = 1", False, False)
    assert odd["cell_type"] == "markdown"
    assert inert_submission(None, RELEASE) is None


def test_a_code_cell_written_as_the_releases_markdown_cell_is_inert():
    """nbgrader_layout gives a student's cell matched by grade_id to an unlocked, ungraded release cell the
    release's type: a code cell of `<script>` becomes a markdown cell, and is judged as one."""
    from course.term.nbgrader_layout import autograded_notebook

    notes = {"grade": False, "solution": False, "locked": False, "grade_id": "notes", "schema_version": 3}
    release = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            {"cell_type": "markdown", "id": "notes", "metadata": {"nbgrader": notes}, "source": "Your notes here."}
        ],
    }
    submitted = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            {
                "cell_type": "code",
                "id": "notes",
                "metadata": {"nbgrader": notes},
                "outputs": [],
                "execution_count": None,
                "source": "<script>document.title = 'pwned'</script>",
            }
        ],
    }
    (cell,) = autograded_notebook(release, submitted, ())["cells"]
    assert cell["cell_type"] == "markdown"  # the release's type: the check can fail only through it
    assert cell["source"].startswith(LABEL)
    assert "```text\n<script>" in cell["source"]
