"""The code cells of an assignment's release that a warm pool's workers compile before they fork (WarmPool's
`compiled`), read without the grading machinery: `grade` starts its workers with them before it imports the rest
(course/term/warm_start.py)."""

from __future__ import annotations

import json
from pathlib import Path

from course.pipeline.assignment import HIDDEN_BEGIN, SOLUTION_BEGIN, cell_text, is_text

PRIVATE_MARKS = (SOLUTION_BEGIN, HIDDEN_BEGIN)  # a cell that holds either is no text to hand every student's child


def released_code_cells(release_notebook: Path) -> tuple[str, ...]:
    """The code cells of an assignment's release (`release_notebook`), as students were given them: what a warm pool's
    workers compile before they fork (WarmPool's `compiled`). Every child can read what its worker holds, so a cell
    that still marks a solution or hidden tests (a release made by hand, say) is left out: public text only.
    Nothing where the release is not at hand (a Gradescope bundle) or cannot be read: the self-test says why, and
    each run compiles its cells itself."""
    try:
        cells = json.loads(release_notebook.read_text(encoding="utf-8"))["cells"]
        texts = [cell_text(cell) for cell in cells if cell["cell_type"] == "code" and is_text(cell["source"])]
    except (OSError, ValueError, KeyError, TypeError):
        return ()
    return tuple(text for text in texts if not any(mark in text for mark in PRIVATE_MARKS))
