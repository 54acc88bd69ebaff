"""`nbgrader validate` (what JupyterLab's Validate button runs) on the student notebook: it fails while an
answer is missing or of the wrong form, passes a well-formed notebook, and never says whether a value is right."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import CORRECT_CODE, RELEASE_NOTEBOOK, submitted_notebook, write

pytestmark = pytest.mark.slow

FAILED = "VALIDATION FAILED"
PASSED = "Success! Your notebook passes all the tests."


def validate(path: Path) -> str:
    command = [str(Path(sys.executable).parent / "nbgrader"), "validate", str(path)]
    done = subprocess.run(command, cwd=path.parent, capture_output=True, text=True, timeout=300, check=False)
    return done.stdout + done.stderr


def test_the_untouched_release_fails_validation(tmp_path):
    path = tmp_path / "autograd.ipynb"
    shutil.copy(RELEASE_NOTEBOOK, path)
    output = validate(path)
    assert FAILED in output
    assert PASSED not in output
    assert "slope_at_3 is still `...`" in output
    # every problem of the question at once, in sentences, not a traceback through the course's code
    assert "Not ready yet: 3 answers here need your attention." in output
    assert "slope_at_0 is still `...`" in output
    assert "Traceback" not in output
    assert "notebook.py" not in output
    assert "forms.py" not in output


def test_a_tensor_left_as_an_answer_fails_validation(tmp_path):
    answers = {**CORRECT_CODE, "net_dL_dw": "torch.tensor(12.0)"}
    output = validate(write(submitted_notebook(answers), tmp_path / "autograd.ipynb"))
    assert FAILED in output
    assert "net_dL_dw is a tensor" in output


def test_a_well_formed_notebook_passes_whether_or_not_it_is_right(tmp_path):
    wrong_but_well_formed = {
        **CORRECT_CODE,
        "net_dL_dw": "6",
        "accumulated_grads": "[6, 6, 6]",
        "no_grad_requires_grad": "True",
    }
    output = validate(write(submitted_notebook(wrong_but_well_formed), tmp_path / "autograd.ipynb"))
    assert PASSED in output, output
    assert "does not match torch" not in output
