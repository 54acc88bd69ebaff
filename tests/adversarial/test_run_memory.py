"""Memory multiplied (issue 39): a run forks children that each fill about 1 GiB.

RLIMIT_AS bounds one process; a run may have `processes` of them. The run's memory, all its processes together,
must stay within `limits.memory_mb`: the run ends, named as the memory limit (the student's outcome, never an
autograder error), the warm pool goes on, and the peak the grader's side measures from outside (the proportional
set size of every process of the sandbox's uids, sampled while it runs) stays under the limit plus a small slack.
On b99931e the same run held 3.2 GiB against 2 GiB until its cell's time limit ended it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from course.core.config import DEFAULT_SANDBOX_UID
from course.sandbox import Cell
from course.sandbox.uids import descendants
from tests.support.adversarial import ISOLATION, fast_config, needs_bwrap, per_question, with_cell

# alone under pytest-xdist (tests/conftest.py): its runs give way, and another worker's load would starve them
pytestmark = [pytest.mark.slow, pytest.mark.alone]

# memory_mb 2048; time limits far above what the attack needs alone, so that under load (the children fill slowly)
# the run still ends at its memory limit: the test waits for that outcome.
CONFIG = replace(fast_config(), limits=replace(fast_config().limits, cell_seconds=30, submission_seconds=60))
LIMITS = CONFIG.limits
MIB = 1024 * 1024
# What the grader's side may see above the limit: a warm child's share of the pages it still shares with its worker
# (charged to the worker, not the run) and of the libraries it maps; between two looks of the accounting supervisor,
# what the run allocates meanwhile. Far below what the attack holds without a bound (three children of ~1 GiB).
SLACK = 256 * MIB
# The limit counts what the notebook's processes allocate once the sandbox is ready (memory.py, count_from_ready):
# the interpreter's, IPython's and torch's start, which every run has, is not the notebook's. Seen from outside here
# as a proportional set size of about 150 MiB (a warm child's share) to 370 MiB (a cold run's).
START = 400 * MIB
BOUND = LIMITS.memory_mb * MIB + START + SLACK  # still far below the 3.1-3.2 GiB the attack held without a bound

# Three children each fill ~1 GiB (each alone within RLIMIT_AS) and hold it; the parent waits for them.
FORK_AND_FILL = """import os, time
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        block = b'x' * (1000 * 1024 ** 2)
        time.sleep(60)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
result = 1
"""


def _pss(pid: int) -> int:
    with contextlib.suppress(OSError, ValueError):
        with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
            for line in rollup:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    return 0


def _sandboxed(pid: int) -> bool:
    with contextlib.suppress(OSError, ValueError):
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"Uid:"):
                    return DEFAULT_SANDBOX_UID <= int(line.split()[1]) < DEFAULT_SANDBOX_UID + 64
    return False


class PeakWatcher:
    """The most the sandboxed processes below this test held at once (the sum of their proportional set sizes),
    sampled from outside while the block runs."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            held = sum(_pss(pid) for pid in descendants(os.getpid()) if _sandboxed(pid))
            self.peak = max(self.peak, held)
            self._stop.wait(0.01)

    def __enter__(self) -> PeakWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


def _run_cgroups() -> list[str]:
    """This process's run cgroups still there (none once every run has ended)."""
    from course.sandbox.memory import RUN_PREFIX, hierarchy

    found = hierarchy()
    if found is None:
        return []
    return [p.name for p in found.parent.iterdir() if p.name.startswith(f"{RUN_PREFIX}{os.getpid()}-")]


def _attack_is_bounded(sandbox_run) -> None:
    with PeakWatcher() as watcher:
        result = sandbox_run([Cell(0, "attack", FORK_AND_FILL)], ("result",), {}, LIMITS)
    assert watcher.peak > 0  # the watcher saw the run (a check that can fail)
    assert watcher.peak <= BOUND, f"the run held {watcher.peak // MIB} MiB"
    assert result.ready  # the student's code ran: its end is the student's outcome
    assert result.limit_hit == "memory_mb", (result.limit_hit, result.ended_early)
    assert f"more memory than the limit of {LIMITS.memory_mb} MB" in (result.ended_early or "")
    # The pool (or a cold sandbox) goes on: the next student's run is untouched.
    after = sandbox_run([Cell(0, "honest", "result = 2")], ("result",), {}, LIMITS)
    assert after.answers["result"].value == 2, after.ended_early
    assert _run_cgroups() == []


@needs_bwrap
def test_a_run_forking_children_stays_within_its_memory_limit(sandbox_run):
    _attack_is_bounded(sandbox_run)


@pytest.fixture
def accounting(monkeypatch):
    """The fallback of a machine with no writable memory cgroup (a grader that is not root: tests/test_nonroot.py runs
    it for real), chosen here on a machine that has one."""
    from course.sandbox import memory

    monkeypatch.setattr(memory, "hierarchy", lambda: None)


@needs_bwrap
def test_without_a_cgroup_the_supervisor_accounts_the_run(accounting, sandbox_run):
    _attack_is_bounded(sandbox_run)


@needs_bwrap
def test_the_memory_limit_is_the_students_outcome(baseline, tmp_path, grader):
    graded, _ = grader(with_cell(FORK_AND_FILL), tmp_path, config=CONFIG)
    assert graded.status == "graded"  # never autograder_error: the notebook's content did it
    assert per_question(graded) == baseline  # the answers set before the attack stand
    assert any(f"more memory than the limit of {LIMITS.memory_mb} MB" in m for m in graded.feedback.messages), (
        graded.feedback.messages
    )
    assert _run_cgroups() == []


def test_a_cold_sandbox_started_and_never_run_leaves_no_cgroup():
    from course.sandbox.cold import start

    with start(LIMITS, isolation=ISOLATION):
        pass
    assert _run_cgroups() == []


def test_the_bound_is_the_strongest_this_machine_allows():
    """Root with a writable memory cgroup gets a cgroup per run; a grader that is not root, accounting."""
    from course.sandbox.memory import RunMemory

    memory = RunMemory(LIMITS.memory_mb, list)
    try:
        # as on the machines this is written on: v1's memory controller mounted, writable by root
        v1_writable = os.geteuid() == 0 and os.access(Path("/sys/fs/cgroup/memory/cgroup.procs"), os.W_OK)
        if v1_writable:
            assert memory.mode.startswith("cgroup"), memory.mode
        elif os.geteuid() != 0:
            assert memory.mode == "accounting"
    finally:
        assert memory.close()
    assert _run_cgroups() == []


# A grader that is not root has no memory cgroup to write: the supervisor accounts the run (a cold run at the userns
# level here), as the grader itself, with the checkout under test.
NONROOT_GRADER = """import json, sys
from dataclasses import replace
from course.core.config import Limits
from course.sandbox import Cell, run_cells
from course.sandbox.memory import RunMemory
limits = replace(Limits(), cell_seconds=30, submission_seconds=60)
mode = RunMemory(limits.memory_mb, list).mode
run = run_cells([Cell(0, "attack", sys.argv[1])], ("result",), {}, limits)
after = run_cells([Cell(0, "honest", "result = 2")], ("result",), {}, limits)
print(json.dumps({"mode": mode, "level": run.isolation, "limit": run.limit_hit, "ended": run.ended_early,
                  "ready": run.ready, "after": after.answers["result"].value}))
"""


def test_a_grader_that_is_not_root_accounts_the_run(tmp_path):
    import json
    import subprocess

    from tests.support.helpers import NONROOT_USER, ROOT, nonroot_python

    python = nonroot_python()
    tmp_path.chmod(0o755)
    grader = subprocess.Popen(
        [
            "setpriv",
            f"--reuid={NONROOT_USER}",
            f"--regid={NONROOT_USER}",
            "--clear-groups",
            "--inh-caps=-all",
            python,
            "-c",
            NONROOT_GRADER,
            FORK_AND_FILL,
        ],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8", "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = 0
    while grader.poll() is None:  # every process of the grader's uid but the grader itself: the runs
        held = sum(_pss(pid) for pid in descendants(grader.pid) if _uid(pid) == NONROOT_USER)
        peak = max(peak, held)
        with contextlib.suppress(subprocess.TimeoutExpired):
            grader.wait(0.01)
    stdout, stderr = grader.communicate()
    assert grader.returncode == 0, stderr[-3000:]
    seen = json.loads(stdout.strip().splitlines()[-1])
    assert seen["mode"] == "accounting"
    assert peak > 0
    assert peak <= BOUND, f"the run held {peak // MIB} MiB"
    assert seen["ready"], seen
    assert seen["limit"] == "memory_mb", seen
    assert f"more memory than the limit of {LIMITS.memory_mb} MB" in seen["ended"]
    assert seen["after"] == 2


def _uid(pid: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    return None


# Two children that together hold about 100 MB less than memory_mb: within the limit, cold or warm. A cold run's
# cgroup was charged its interpreter's and torch's start (about 150 MB), a warm child's almost nothing; when
# the bound counted from the run's start, this run was stopped cold and passed warm.
NEAR_THE_LIMIT = f"""import os, time
children = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        block = b'x' * ({(LIMITS.memory_mb - 100) // 2} * 1024 ** 2)
        time.sleep(3)
        os._exit(0)
    children.append(pid)
result = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
"""


@needs_bwrap
@pytest.mark.parametrize("bound", ["cgroup", "accounting"])
def test_the_same_notebook_meets_the_same_bound_cold_and_warm(bound, request, sandbox_run):
    """The limit counts what the notebook's processes allocate once the sandbox is ready, in either mode."""
    if bound == "accounting":
        request.getfixturevalue("accounting")
    result = sandbox_run([Cell(0, "near", NEAR_THE_LIMIT)], ("result",), {}, LIMITS)
    assert result.limit_hit is None, result.ended_early
    assert result.answers["result"].value == [0, 0]
    assert _run_cgroups() == []


# The first statement allocates at once: were the first cell run before the grader took the run's measure at `ready`,
# that allocation would be counted as the start's, and the bound raised by it.
FIRST_STATEMENT = (
    "block = b'x' * (300 * 1024 ** 2)\nimport time\ntime.sleep(2)  # held while the grader looks\nresult = 1\n"
)


@needs_bwrap
def test_no_cell_runs_before_the_grader_has_taken_the_runs_measure_at_ready(monkeypatch, sandbox_run):
    from course.sandbox import memory

    if memory.hierarchy() is None:
        pytest.skip("needs a writable memory cgroup (root): the measure at ready is the cgroup's charge")
    seen: list[int] = []
    original = memory.RunMemory.count_from_ready

    def busy_grader(self):  # a grader slow to read `ready`: the runner must wait for it
        time.sleep(1.0)
        seen.append(self.cgroup.usage())
        original(self)

    monkeypatch.setattr(memory.RunMemory, "count_from_ready", busy_grader)
    result = sandbox_run([Cell(0, "first", FIRST_STATEMENT)], ("result",), {}, LIMITS)
    assert result.answers["result"].value == 1, result.ended_early
    assert len(seen) == 1
    assert seen[0] < 250 * MIB, f"the start was measured at {seen[0] // MIB} MiB: the first cell had run"
