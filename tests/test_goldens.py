"""What a student and Gradescope are shown, compared whole against committed golden files.

bob (tests/samples) makes the classic slips, so his feedback exercises every part: values, chain tables,
misconception notes, revealed and verdicts-only. The function answer is called at the course's own points (fixed
per course: course/pipeline/probes.py, so these files also hold the points a course without a secret uses) and the run's
timings and sandbox level are normalised, so the files change only when what is shown changes.
After an intended change: `.venv/bin/python -m pytest tests/test_goldens.py --update-goldens`, then read
the diff before committing it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course.core.config import load_config
from course.pipeline.assignment import load_assignment
from course.pipeline.discovery import SubmissionRef
from course.pipeline.grading import grade_submission
from course.pipeline.render import render_html
from course.platforms.gradescope import to_results
from tests.support.helpers import ROOT

pytestmark = pytest.mark.slow

GOLDENS = ROOT / "tests" / "goldens"
BOB = ROOT / "tests" / "samples" / "submitted" / "bob" / "autograd" / "autograd.ipynb"


def _normalised_results(results: dict) -> dict:
    results = {**results, "execution_time": 0}
    results["extra_data"] = {**results.get("extra_data", {}), "sandbox": "<level>"}
    return results


@pytest.fixture(scope="module")
def bob_graded():
    config = load_config(ROOT)
    assignment = load_assignment(config.source_notebook(), "autograd")
    return {
        reveal: grade_submission(SubmissionRef("bob", BOB), assignment, config, reveal_torch_values=reveal)
        for reveal in (True, False)
    }


def _outputs(graded) -> dict[str, str]:
    return {
        "feedback.json": json.dumps(graded.feedback.to_json(), indent=2, ensure_ascii=False, sort_keys=True) + "\n",
        "feedback.html": render_html(graded.feedback) + "\n",
        "results.json": json.dumps(
            _normalised_results(to_results(graded, 0.0)), indent=2, ensure_ascii=False, sort_keys=True
        )
        + "\n",
    }


@pytest.mark.parametrize("reveal", [True, False], ids=["torch-values", "verdicts"])
@pytest.mark.parametrize("kind", ["feedback.json", "feedback.html", "results.json"])
def test_what_bob_is_shown_matches_the_golden_file(bob_graded, reveal, kind, update_goldens):
    produced = _outputs(bob_graded[reveal])[kind]
    golden: Path = GOLDENS / f"bob.{'torch-values' if reveal else 'verdicts'}.{kind}"
    if update_goldens:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(produced, encoding="utf-8")
    assert golden.exists(), f"{golden} is missing: run pytest tests/test_goldens.py --update-goldens"
    assert produced == golden.read_text(encoding="utf-8"), (
        f"{golden.name} changed; if intended, run pytest tests/test_goldens.py --update-goldens and review the diff"
    )
