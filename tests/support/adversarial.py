"""The adversarial suite's shared pieces: a baseline of honest answers and a quick grader."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from course.core.config import DEFAULT_SANDBOX_UID, load_config
from course.pipeline.discovery import SubmissionRef
from course.pipeline.grading import grade_submission
from course.sandbox import choose_isolation
from tests.support.helpers import CORRECT_CODE, ROOT, add_cell, needs_tool, submitted_notebook, write

# Honest hand answers, four of them wrong: a tamper must leave the score exactly where these put it.
WRONG = {"net_dL_dw": "0", "w2_dL_dw": "0", "accumulated_grads": "[0, 0, 0]", "cubic_grad": "0"}
BASELINE_ANSWERS = {**CORRECT_CODE, **WRONG}

ISOLATION = choose_isolation("auto", DEFAULT_SANDBOX_UID, 64)[0]
needs_bwrap = needs_tool(
    "bubblewrap as root",
    ISOLATION == "bwrap",
    f"this attack is only contained with root + bubblewrap (here: {ISOLATION!r}); see SECURITY.md",
)


def fast_config(**limits):
    config = load_config(ROOT)
    return replace(config, limits=replace(config.limits, cell_seconds=4, submission_seconds=25, **limits))


def baseline_notebook() -> dict:
    return submitted_notebook(BASELINE_ANSWERS)


def with_cell(source: str, notebook: dict | None = None, at: int | None = None) -> dict:
    return add_cell(notebook or baseline_notebook(), source, at=at)


def grade(
    notebook: dict | bytes | str, tmp_path: Path, config=None, student: str = "student", assignment=None, run=None
):
    """Grade one notebook through the real pipeline (a cold sandbox, or `run` of a warm pool);
    returns (Graded, seconds)."""
    path = tmp_path / f"{student}.ipynb"
    if isinstance(notebook, bytes):
        path.write_bytes(notebook)
    elif isinstance(notebook, str):
        path.write_text(notebook)
    else:
        write(notebook, path)
    config = config or fast_config()
    from course.pipeline.assignment import load_assignment

    assignment = assignment or load_assignment(config.source_notebook(), "autograd")
    started = time.monotonic()
    graded = grade_submission(SubmissionRef(student, path), assignment, config, run=run)
    return graded, time.monotonic() - started


def per_question(graded) -> dict[str, float]:
    return {q.id: q.earned for q in graded.questions}
