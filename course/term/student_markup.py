"""A submission's own markup made inert before nbgrader's tools render it for the instructor.

formgrader's page (`/formgrader/submissions/<id>/`) and `nbgrader generate_feedback` render the autograded
notebook with nbconvert, in the instructor's browser and Jupyter session; their templates render a markdown cell
with `markdown2html` and no sanitiser (they replace nbconvert's markdown block, so `HTMLExporter.sanitize_html`
does not reach it): a `<script>` in a student's markdown cell ran there. Sanitising the source (nbconvert's
`SanitizeHTML`, bleach) is not enough either: markdown makes HTML of its own that no source sanitiser sees, such
as `[x](javascript:...)`, and it garbles code spans (`&lt;`). So the rule is the plain one:

- a markdown or raw cell whose type and text are a release cell's is the instructor's and stays as it is;
- any other non-code cell is the student's text and is shown as that text, in a fenced block: nbconvert
  highlights a fence with Pygments, which escapes every character, and a fence longer than any run of backticks
  in the text cannot be closed from inside it. Its attachments go (they are the student's files);
- a code cell keeps its source (nbconvert highlights it, escaped) and loses its outputs and attachments: what the
  autograded notebook shows under a cell is our result only (`text/html`, `image/svg+xml` or
  `application/javascript` outputs of the student's run never reach formgrader).

Nothing here parses HTML or markdown: it decides by the cell's type and an exact comparison with the release.
"""

from __future__ import annotations

import re
from typing import Any

LABEL = "*The student's text, shown as written (autograd-course does not render a student's markup):*"
_BACKTICKS = re.compile(r"`+")


def inert_submission(submitted: dict[str, Any] | None, release: dict[str, Any]) -> dict[str, Any] | None:
    """`submitted` with every cell made inert as the module says (a new notebook: neither argument is changed;
    cells that need nothing are shared). None stays None (the release stands in for an unreadable submission)."""
    if submitted is None:
        return None
    return {**submitted, "cells": inert_cells(submitted["cells"], release)}


def inert_cells(cells: list[dict[str, Any]], release: dict[str, Any]) -> list[dict[str, Any]]:
    """Each cell made inert as the module says, judged by the type it has here: a cell whose type was changed
    after the student's notebook was read (nbgrader_layout gives a matched cell the release's type) is judged
    by the type nbgrader's tools will render it as."""
    instructor = {
        (_kind(cell), _text(cell.get("source")))
        for cell in release.get("cells", [])
        if isinstance(cell, dict) and _kind(cell) != "code"
    }
    return [_inert(cell, instructor) for cell in cells]


def literal_markdown(text: str) -> str:
    """Markdown that shows `text` character for character and renders none of it."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{LABEL}\n\n{fence}text\n{text}\n{fence}\n"


def _inert(cell: dict[str, Any], instructor: set[tuple[str, str]]) -> dict[str, Any]:
    kind = _kind(cell)
    kept = {key: value for key, value in cell.items() if key not in ("outputs", "attachments")}
    if kind == "code":
        return kept
    text = _text(cell.get("source"))
    if (kind, text) in instructor:
        return kept
    # a raw cell too: nbconvert renders one as HTML unless its format says otherwise; shown as text, it is neither
    return {**kept, "cell_type": "markdown", "source": literal_markdown(text)}


def _kind(cell: dict[str, Any]) -> str:
    kind = cell.get("cell_type")
    return kind if kind in ("code", "markdown") else "raw"


def _text(source: Any) -> str:
    if isinstance(source, list):
        return "".join(part for part in source if isinstance(part, str))
    return source if isinstance(source, str) else ""
