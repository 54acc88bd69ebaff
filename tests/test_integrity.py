"""The instructor's integrity report: what a submission did to game the grader, seen statically."""

from __future__ import annotations

import copy

from course.pipeline.handwork import parse_cells
from course.pipeline.integrity import review
from course.pipeline.submission import read_submission
from tests.support.helpers import RELEASE_NOTEBOOK, ROOT, add_cell, load, submitted_notebook, write

ERIN = ROOT / "tests" / "samples" / "submitted" / "erin" / "autograd" / "autograd.ipynb"


def read(path, assignment, student="erin"):
    return read_submission(path, student, assignment, params=assignment.default_params, max_bytes=2**26, max_cells=2000)


def test_patching_torch_and_builtins_and_a_rigged_float_are_seen(assignment):
    findings = _review(read(ERIN, assignment), "erin")
    text = "\n".join(findings)
    for seen in (
        "patches torch.allclose = ...",
        "patches torch.Tensor.item = ...",
        "patches builtins.abs = ...",
        "patches builtins.isinstance = ...",
        "defines a rigged number type, class AlwaysEqual(float) overriding __eq__, __sub__",
    ):
        assert seen in text


def test_an_honest_notebook_shows_nothing(assignment, tmp_path):
    path = write(submitted_notebook(), tmp_path / "alice" / "autograd" / "autograd.ipynb")
    assert _review(read(path, assignment, "alice"), "alice") == ()


def test_an_edited_locked_cell_and_setattr_on_torch_are_seen(assignment, tmp_path):
    notebook = submitted_notebook()
    for cell in notebook["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "form_tiny_net":
            cell["source"] = "pass  # nothing to check here\n"
    notebook = add_cell(notebook, "import torch\nsetattr(torch, 'allclose', lambda *a, **k: True)\n")
    path = write(notebook, tmp_path / "mallory" / "autograd" / "autograd.ipynb")
    findings = _review(read(path, assignment, "mallory"), "mallory")
    assert any(f.startswith("edited the locked cell form_tiny_net") for f in findings)
    assert any(f.endswith("patches setattr(torch, ...)") for f in findings)


def test_a_notebook_personalised_for_someone_else_is_seen(assignment, tmp_path):
    notebook = copy.deepcopy(load(RELEASE_NOTEBOOK))
    for cell in notebook["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "numbers":
            cell["metadata"]["autograd_course"] = {"student_id": "alice"}
    path = write(notebook, tmp_path / "bob" / "autograd" / "autograd.ipynb")
    assert _review(read(path, assignment, "bob"), "bob") == (
        "submitted a notebook personalised for 'alice' (graded with 'bob''s numbers)",
    )


def _review(submission, graded_as: str):
    return review(submission, graded_as, parse_cells(submission.cells))
