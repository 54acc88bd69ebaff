"""Kernel objects outside RLIMIT_AS drawn from a pool the whole machine shares, and capabilities.

Both modes (a cold sandbox per submission and the warm pool's forked children): a student holds no capability
in any set, and the pseudo-terminals a notebook can open come from a small pool of its run's own, so it cannot
leave another student's run (or the host) without one.
"""

from __future__ import annotations

import errno
import os
import secrets
import signal
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from course.core.config import Limits
from course.pipeline.submission import Cell
from course.sandbox.limits import PTYS
from tests.support.adversarial import per_question, with_cell

pytestmark = pytest.mark.slow

LIMITS = Limits(cell_seconds=20, submission_seconds=40)
ALL_CLEAR = "0" * 16

CAPABILITIES = (
    "def capabilities():\n"
    "    with open('/proc/self/status') as status:\n"
    "        return [line.split()[0] + line.split()[1] for line in status if line.startswith('Cap')]\n"
    "import subprocess\n"
    "executed = subprocess.run(['cat', '/proc/self/status'], capture_output=True, text=True).stdout\n"
    "result = capabilities() + [line.split()[0] + line.split()[1] for line in executed.splitlines()\n"
    "                           if line.startswith('Cap')]\n"
)


def test_the_student_holds_no_capability_in_any_set(sandbox_run):
    """The warm pool's children once kept the worker's SETUID, SETGID, SETPCAP and SYS_ADMIN in their inheritable
    set (setuid from root empties every set but that one); a cold run's were already empty."""
    run = sandbox_run([Cell(0, "attack", CAPABILITIES)], ("result",), {}, LIMITS)
    sets = run.answers["result"].value
    assert sets is not None, run.output[-2000:]
    # Read by the student's process and by a program it executed: five sets each, all empty.
    names = ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"]
    assert sets == [name + ALL_CLEAR for name in names] * 2


# Opens pseudo-terminals until refused (at most 64: enough to pass any small bound, and few enough that the test
# itself takes almost nothing from the machine's pool when there is none), then holds them, named, until the
# grader has checked its neighbours and sends SIGUSR1. The name is the test's own: a run of this test beside it
# (the other mode, in another pytest worker) holds pseudo-terminals too, and must not be taken for this one.
def pty_holder(name: str) -> str:
    return (
        "import ctypes, os, signal\n"
        "held, refused = [], 0\n"
        "while len(held) < 64:\n"
        "    try:\n"
        "        held.append(os.openpty())\n"
        "    except OSError as error:\n"
        "        refused = error.errno\n"
        "        break\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])\n"
        f"ctypes.CDLL(None).prctl(15, {name.encode()!r}, 0, 0, 0)  # PR_SET_NAME: what the grader waits for\n"
        f"released = signal.sigtimedwait([signal.SIGUSR1], {LIMITS.cell_seconds - 2:g}) is not None\n"
        "result = [len(held), refused, released]\n"
    )


PTY_USER = "import os\nresult = len(os.openpty())"


def _holder(running: Future, name: str) -> int:
    """The pid of the process that holds its pseudo-terminals, once it holds them all (its name says so)."""
    deadline = time.monotonic() + LIMITS.cell_seconds
    while time.monotonic() < deadline and not running.done():
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and (entry / "comm").read_text().strip() == name:
                    return int(entry.name)
            except OSError:  # ended while looked at
                continue
        time.sleep(0.05)
    output = running.result().output[-2000:] if running.done() else ""
    raise AssertionError(f"the sandbox never held its pseudo-terminals: {output}")


def test_pseudo_terminals_come_from_a_small_pool_of_the_runs_own(sandbox_run):
    """bubblewrap's /dev gives each sandbox a devpts instance of its own, but every instance except the host's
    draws on one machine-wide pool (kernel.pty.max less kernel.pty.reserve): a notebook held 3 071 of them and
    another student's run could not open one. Each run now has a private instance of at most PTYS."""
    master, slave = os.openpty()  # the target exists: this machine gives the grader a pseudo-terminal
    os.close(master)
    os.close(slave)
    with ThreadPoolExecutor(1) as threads:
        name = f"pty-{secrets.token_hex(4)}"
        running = threads.submit(sandbox_run, [Cell(0, "attack", pty_holder(name))], ("result",), {}, LIMITS)
        pid = _holder(running, name)
        try:
            # While it holds every one it could open, the host and another student's run still get theirs.
            master, slave = os.openpty()
            os.close(master)
            os.close(slave)
            neighbour = sandbox_run([Cell(0, "neighbour", PTY_USER)], ("result",), {}, LIMITS)
            assert neighbour.answers["result"].value == 2, neighbour.output[-2000:]
        finally:
            os.kill(pid, signal.SIGUSR1)
        run = running.result()
    assert run.answers["result"].value == [PTYS, errno.ENOSPC, True], run.output[-2000:]


def test_a_notebook_past_the_pseudo_terminal_bound_is_told_which_limit(grader, baseline, tmp_path):
    """ENOSPC from openpty reads like a full /tmp: the hint beside the notebook's error names both."""
    graded, _ = grader(with_cell("import os\nheld = [os.openpty() for _ in range(64)]"), tmp_path)
    assert per_question(graded) == baseline
    hints = [error.get("hint", "") for error in graded.feedback.to_json()["cell_errors"]]
    assert any(f"on pseudo-terminals ({PTYS})" in hint for hint in hints), graded.feedback.to_json()["cell_errors"]
