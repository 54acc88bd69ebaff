"""Families 3 and 4: escaping the process and exhausting resources.

Every attack cell comes after the honest answers. The grader must stay up, stop within the limits plus a
small margin, grade the answers set before the attack, and name any limit that was hit.
"""

from __future__ import annotations

import shutil

import pytest

from course.term.batch import grade_batch
from tests.support.adversarial import fast_config, needs_bwrap, per_question, with_cell
from tests.support.helpers import ROOT, copy_course

# alone under pytest-xdist (tests/conftest.py): its runs give way, and another worker's load would starve them
pytestmark = [pytest.mark.slow, pytest.mark.alone]

CELL_SECONDS, SUBMISSION_SECONDS = 4, 25
MARGIN = 10  # start-up (torch import) plus the grace period, well above what it takes here

ESCAPES = {
    "sys.exit": ("import sys\nsys.exit(0)", None),
    "os._exit": ("import os\nos._exit(0)", None),
    "KeyboardInterrupt": ("raise KeyboardInterrupt", None),
    "SystemExit from finally": ("try:\n    pass\nfinally:\n    raise SystemExit(3)", None),
    "kill own process": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", None),
    "segfault via ctypes": ("import ctypes\nctypes.string_at(0)", None),
    "thread left running": (
        "import threading\nthreading.Thread(target=lambda: [0 for _ in iter(int, 1)]).start()",
        None,
    ),
    "child process left running": ("import subprocess\nsubprocess.Popen(['sleep', '600'])", None),
    "atexit handler": ("import atexit, os\natexit.register(lambda: os._exit(9))", None),
    "endless loop": ("while True:\n    pass", "cell_seconds"),
    "sleep past the limit": ("import time\ntime.sleep(600)", "cell_seconds"),
    "memory bomb": ("block = bytearray(50 * 1024 ** 3)", None),
    "huge tensor": ("big = torch.zeros(100_000, 100_000)", None),
    "gigabytes of output": ("while True:\n    print('x' * 10_000)", None),
    "deep recursion": ("def down(n):\n    return down(n + 1)\ndown(0)", None),
    "deep recursion with a raised limit": (
        "import sys\nsys.setrecursionlimit(10 ** 7)\ndef down(n):\n    return down(n + 1)\ndown(0)",
        None,
    ),
    "huge file": ("with open('big.bin', 'wb') as f:\n    f.write(b'0' * (1024 ** 3))", None),
}

CONTAINED_ONLY_WITH_BWRAP = {
    "signal to the parent": ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)", None),
    "daemonising": (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        while True:\n            time.sleep(1)\n    os._exit(0)",
        None,
    ),
    "fork bomb": (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        "cell_seconds",
    ),
    "forking until refused": (
        "import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(600)\n        os._exit(0)",
        None,
    ),
    "filling /tmp": (
        "n = 0\nwhile True:\n    with open(f'/tmp/fill{n}', 'wb') as f:\n"
        "        f.write(b'0' * 8 * 1024 ** 2)\n    n += 1",
        None,
    ),
}


# A limit that shows only in an error the notebook itself reported is named beside that error (a hint in
# the notebook's own errors), never in the grader's voice: the text came from the student's process.
LIMIT_HINTS = {
    "memory bomb": "the memory limit (2048 MB)",
    "huge tensor": "the memory limit (2048 MB)",
    "huge file": "the limit on the size of a file (16 MB)",
    "forking until refused": "the limit on processes and threads (32)",
    "filling /tmp": "the limit on scratch space (64 MB)",
}


def _check(name, code, limit, baseline, tmp_path, grader):
    graded, seconds = grader(with_cell(code), tmp_path)
    assert per_question(graded) == baseline, name
    if name in LIMIT_HINTS:
        hints = [error.get("hint", "") for error in graded.feedback.to_json()["cell_errors"]]
        assert any(LIMIT_HINTS[name] in hint for hint in hints), graded.feedback.to_json()["cell_errors"]
        assert not any(LIMIT_HINTS[name] in m for m in graded.feedback.messages)
    assert seconds < SUBMISSION_SECONDS + MARGIN
    if limit == "cell_seconds":
        assert graded.status == "timed_out"
        assert any(f"limit of {CELL_SECONDS} s per cell" in m for m in graded.feedback.messages)
    return graded


@pytest.mark.parametrize("name", list(ESCAPES))
def test_escapes_and_exhaustion_are_contained(name, baseline, tmp_path, grader):
    code, limit = ESCAPES[name]
    graded = _check(name, code, limit, baseline, tmp_path, grader)
    if name == "gigabytes of output":
        # With torch imported the flood ends at the memory limit (the printed text is retained in the
        # process), otherwise at the cell time limit; either way it is named.
        said = [*graded.feedback.messages, *(e.hint for e in graded.feedback.cell_errors)]
        assert any(
            "printed more than 10240 KB" in m or "memory limit" in m or "limit of 4 s per cell" in m for m in said
        ), said


@needs_bwrap
@pytest.mark.parametrize("name", list(CONTAINED_ONLY_WITH_BWRAP))
def test_attacks_that_need_the_namespace_sandbox(name, baseline, tmp_path, grader):
    code, limit = CONTAINED_ONLY_WITH_BWRAP[name]
    _check(name, code, limit, baseline, tmp_path, grader)


def test_the_batch_goes_on_after_a_hostile_submission(tmp_path):
    root = tmp_path / "course"
    copy_course(root)
    submitted = root / "submitted"
    from tests.support.helpers import write

    write(with_cell("while True:\n    pass"), submitted / "a-looper" / "autograd" / "autograd.ipynb")
    write(with_cell("import os\nos._exit(1)"), submitted / "b-exiter" / "autograd" / "autograd.ipynb")
    shutil.copytree(ROOT / "tests" / "samples" / "submitted" / "alice", submitted / "c-alice")
    config = fast_config()
    from dataclasses import replace

    summary = grade_batch(replace(config, root=root), [], root / "out")
    statuses = {g.student_id: (g.status, g.feedback.score) for g in summary.graded}
    assert statuses == {"a-looper": ("timed_out", 50), "b-exiter": ("graded", 50), "c-alice": ("graded", 57)}
