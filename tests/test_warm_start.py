"""`grade` starts the class's warm workers before it imports the grading machinery (course/term/warm_start.py), and the
batch grades on those workers rather than starting its own. Real pools, real sandbox."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from course.core.config import load_config
from course.core.errors import SelfTestError
from course.term.batch import grade_course
from course.term.warm_start import early_workers
from tests.support.helpers import ROOT, SAMPLE_SCORES

pytestmark = pytest.mark.slow

SAMPLES = ROOT / "tests" / "samples" / "submitted"


def test_the_workers_start_before_the_grading_machinery_is_imported(tmp_path):
    """In a fresh interpreter, as the command runs: when the first pool starts, the batch (the judge, the records,
    nbgrader's bridge) is not imported yet, so the workers' torch import runs beside those imports."""
    script = textwrap.dedent(
        f"""
        import sys
        import course.sandbox.pool as pool
        from course.cli import main
        started = []
        real = pool.WarmPool.__init__
        def noting(self, *args, **kwargs):  # the real start, noted: what was imported when it began
            started.append("course.term.batch" in sys.modules)
            real(self, *args, **kwargs)
        pool.WarmPool.__init__ = noting
        code = main(["grade", {str(SAMPLES)!r}, "--out", {str(tmp_path / "out")!r}, "--quiet"])
        print("STARTED", started, code)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert "STARTED [False] 0" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]


def test_the_batch_grades_on_the_workers_it_is_given(tmp_path):
    config = load_config(ROOT)
    with early_workers(config, [SAMPLES], None, 2, sharded=False) as early:
        assert early is not None
        assert early.assignment_name == "autograd"  # the one assignment the submissions' layout names
        (summary,) = grade_course(config, [SAMPLES], tmp_path / "out", jobs=2, workers=early)
        assert {g.student_id: g.feedback.score for g in summary.graded} == SAMPLE_SCORES
        assert early.pool.alive  # the caller's to close, not the batch's
    # Proof that the runs went to the pool given, not to one the batch started: given a pool that is closed, the
    # self-test cannot run and nobody is graded.
    with pytest.raises(SelfTestError, match="the self-test failed, so nothing was graded"):
        grade_course(config, [SAMPLES], tmp_path / "again", jobs=2, workers=early, self_test=True)


@pytest.mark.parametrize(
    ("jobs", "sharded", "paths"),
    [
        pytest.param(0, False, [SAMPLES], id="cold runs"),
        pytest.param(2, True, [SAMPLES], id="a shard"),
        pytest.param(2, False, [ROOT / "tests" / "samples" / "no-such-folder"], id="no such folder"),
    ],
)
def test_no_workers_are_started_early_where_that_is_not_cheap_to_know(jobs, sharded, paths):
    with early_workers(load_config(ROOT), paths, None, jobs, sharded=sharded) as early:
        assert early is None
