"""The adversarial suite's fixtures: both sandbox modes, a session's warm pool, the baseline's scores (the pieces
they share with the tests are in tests/support/adversarial.py)."""

from __future__ import annotations

import pytest

from tests.support.adversarial import baseline_notebook, fast_config, grade, per_question


@pytest.fixture(scope="session")
def warm_pool():
    from course.sandbox import WarmPool

    with WarmPool(2, fast_config().limits) as pool:
        yield pool


@pytest.fixture(params=["cold", "warm"])
def grader(request):
    """The suite runs in both modes: a fresh sandbox per submission, and the warm pool's forked children."""
    run = request.getfixturevalue("warm_pool").run if request.param == "warm" else None

    def grade_in_mode(notebook, tmp_path, **kwargs):
        return grade(notebook, tmp_path, run=run, **kwargs)

    return grade_in_mode


@pytest.fixture(params=["cold", "warm"])
def sandbox_run(request):
    """run_cells of a cold sandbox, or run of the warm pool."""
    if request.param == "warm":
        return request.getfixturevalue("warm_pool").run
    from course.sandbox import run_cells

    return run_cells


@pytest.fixture(scope="session")
def baseline(tmp_path_factory):
    graded, _ = grade(baseline_notebook(), tmp_path_factory.mktemp("baseline"))
    assert graded.status == "graded"
    # 57 points minus the four wrong values: net_dL_dw 1, w2_dL_dw 2, accumulated_grads 1, cubic_grad 3
    assert graded.feedback.score == 50
    return per_question(graded)
