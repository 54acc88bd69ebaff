"""A run that goes long gives way to the class (course/sandbox/giving_way.py): lower priority, and the time it
then waited for a processor credited to its cell's clock."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import time

import pytest

from course.core.config import Limits
from course.pipeline.submission import Cell
from course.sandbox import WarmPool
from course.sandbox.giving_way import (
    FIRST_LOOK_SECONDS,
    GIVING_WAY_NICENESS,
    YIELD_AFTER_SECONDS,
    GivingWay,
    thread_times,
)

# alone under pytest-xdist (tests/conftest.py): its runs give way, and another worker's load would starve them
pytestmark = pytest.mark.alone

SPIN = "while True:\n    pass"


def nice_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[16])
    except (OSError, ValueError):
        return None


def autogroup_nice(pid: int) -> int | None:
    """The nice of the process's autogroup (None where the kernel has none)."""
    try:
        with open(f"/proc/{pid}/autogroup") as autogroup:
            return int(autogroup.read().split("nice")[1])
    except (OSError, IndexError, ValueError):
        return None


@pytest.fixture
def busy_cores():
    """One spinning process per core, at the test's own priority: the machine is contended."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", SPIN], start_new_session=True)
        for _ in range(len(os.sched_getaffinity(0)))
    ]
    yield
    for spinner in spinners:
        spinner.kill()
        spinner.wait()


def test_a_runs_processes_are_found_quickly_as_the_full_scan_finds_them():
    """Giving way finds a run's processes again at each look through the kernel's lists of children (a few reads,
    not every process of the machine): the same processes as the full scan, below the worker's interpreter."""
    from course.sandbox.uids import below_the_worker, below_the_worker_quickly, descendants

    tree = (
        "import os, subprocess, sys, time\n"  # a "worker" with a child that has children of its own
        "child = subprocess.Popen([sys.executable, '-c', 'import os, time\\nos.fork()\\ntime.sleep(30)'])\n"
        "time.sleep(30)"
    )
    outer = subprocess.Popen(["/bin/sh", "-c", f'"{sys.executable}" -c "$0"; :', tree])  # the interpreter below
    try:
        keep = [sys.executable, "-c"]
        deadline = time.monotonic() + 30
        while len(below_the_worker(outer.pid, keep=keep)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        found = below_the_worker(outer.pid, keep=keep)
        assert len(found) == 2  # the child and its fork
        assert sorted(below_the_worker_quickly(outer.pid, keep=keep)) == sorted(found)
        assert below_the_worker_quickly(outer.pid, keep=["no-such-worker"]) == []
    finally:
        for pid in [*descendants(outer.pid), outer.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        outer.wait()


def test_thread_times_are_the_kernels_count_for_each_thread():
    times = thread_times(os.getpid())
    assert os.getpid() in times  # the main thread's id is the process id
    assert all(on_cpu >= 0 and waiting >= 0 for on_cpu, waiting in times.values())
    assert thread_times(2**22 + 1) == {}  # no such process: nothing, no error


def test_a_process_that_uses_little_cpu_gives_way_only_once_its_wall_time_is_up():
    """Within its first second, a run is lowered only for the CPU it was seen to use; past it, whatever it used (a
    run that hops from process to process faster than the grader looks is seen to use nothing)."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        giving_way = GivingWay(lambda: [sleeper.pid], time.monotonic() - FIRST_LOOK_SECONDS)
        giving_way.waited()
        assert not giving_way.giving_way
        assert nice_of(sleeper.pid) == os.getpriority(os.PRIO_PROCESS, 0)  # as it started (`nice pytest`: not 0)
        assert os.sched_getscheduler(sleeper.pid) == os.SCHED_OTHER
        gone_on = GivingWay(lambda: [sleeper.pid], time.monotonic() - 10 * YIELD_AFTER_SECONDS)
        gone_on.waited()
        assert gone_on.giving_way
        assert os.sched_getscheduler(sleeper.pid) == os.SCHED_IDLE
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_process_that_spins_gives_way_and_counts_what_it_waited(busy_cores):
    # A session of its own, as a student's run has: giving way lowers its autogroup, not the tests'.
    spinner = subprocess.Popen([sys.executable, "-c", SPIN], start_new_session=True)
    try:
        giving_way = GivingWay(lambda: [spinner.pid], time.monotonic())
        deadline = time.monotonic() + 60
        while not giving_way.giving_way:  # half a second of CPU, however long that takes here
            assert time.monotonic() < deadline, "the spinner never used half a second of CPU"
            giving_way.waited()
            time.sleep(0.05)
        assert os.sched_getscheduler(spinner.pid) == os.SCHED_IDLE
        assert autogroup_nice(spinner.pid) in (None, GIVING_WAY_NICENESS)
        assert autogroup_nice(os.getpid()) in (None, 0)
        while giving_way.waited() < 0.5:  # it competes with a spinner per core, and gives way to them
            assert time.monotonic() < deadline, "the spinner never waited for a processor"
            time.sleep(0.05)
    finally:
        spinner.kill()
        spinner.wait()


def test_a_spinning_cell_in_the_pool_is_stopped_at_its_limit():
    with WarmPool(1, Limits(cell_seconds=2, submission_seconds=30)) as pool:
        result = pool.run([Cell(0, "cell 0", SPIN)], ("result",), {})
    assert result.limit_hit == "cell_seconds"
    assert "cell 0 ran longer than the limit of 2 s per cell" in result.ended_early
    assert 2 < result.seconds < 30


class WaitedMostOfTheTime:
    """Stands in for the kernel's count (measured for real by the tests above) to check the supervisor's
    arithmetic on a cold run: the run "waited" for a processor for four fifths of its time."""

    def __init__(self, processes, started, *, lower=True):
        self.started = started

    def waited(self) -> float:
        return 0.8 * (time.monotonic() - self.started)


def test_a_cell_is_not_charged_the_time_it_waited_up_to_one_more_limit(monkeypatch):
    from course.sandbox import cold, run_cells

    monkeypatch.setattr(cold, "GivingWay", WaitedMostOfTheTime)
    limits = Limits(cell_seconds=1.5, submission_seconds=60)
    # 2 s of wall time in the cell, 1.6 s of it "waiting": 0.4 s counted against the 1.5 s limit.
    done = run_cells([Cell(0, "cell 0", "import time\ntime.sleep(2)\nresult = 1")], ("result",), {}, limits)
    assert done.limit_hit is None, done.ended_early
    assert done.answers["result"].value == 1
    # Never more than one more limit: a cell that sleeps on is stopped after 1.5 + 1.5 s.
    stopped = run_cells([Cell(0, "cell 0", "import time\ntime.sleep(30)")], ("result",), {}, limits)
    assert stopped.limit_hit == "cell_seconds"
    assert (
        "ran longer than the limit of 1.5 s per cell (not counting 1.5 s it waited for a processor)"
        in stopped.ended_early
    )
    assert stopped.seconds < 30


TRIES_TO_LEAVE_SCHED_IDLE = (
    "import os, time\nstart = time.process_time()\nwhile time.process_time() - start < 1.5:\n    pass\n"
    "try:\n    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))\nexcept OSError:\n    pass\n"
    "result = os.sched_getscheduler(0)"
)


def test_a_cell_that_computes_for_long_sees_its_priority_lowered():
    """The student's own view: a cell that has used more than half a second of CPU runs under SCHED_IDLE by the
    end of it, on an idle machine too; and it cannot leave it."""
    with WarmPool(1, Limits(cell_seconds=30, submission_seconds=60)) as pool:
        short = pool.run([Cell(0, "cell 0", "import os\nresult = os.sched_getscheduler(0)")], ("result",), {})
        long = pool.run([Cell(0, "cell 0", TRIES_TO_LEAVE_SCHED_IDLE)], ("result",), {})
    assert short.answers["result"].value == os.SCHED_OTHER
    assert long.answers["result"].value == os.SCHED_IDLE


@pytest.mark.skipif(autogroup_nice(os.getpid()) is None, reason="the kernel has no autogroups here")
def test_a_session_whose_leader_has_gone_gives_way_too():
    """A process spinning in a session whose leader has exited: that session's autogroup is the run's own (the
    warm worker's session keeps its leader), and is lowered like any other; SCHED_IDLE alone would rank its
    threads only within that autogroup. (The sandbox refuses setsid to a notebook: this is the grader's side.)"""
    leader = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys\nos.setsid()\nspinner = os.fork()\nif spinner == 0:\n"
            "    quiet = os.open(os.devnull, os.O_RDWR)\n"  # not holding the pipe read below
            "    os.dup2(quiet, 1)\n    os.dup2(quiet, 2)\n"
            f"    os.execv(sys.executable, [sys.executable, '-c', {SPIN!r}])\nprint(spinner)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    spinner = int(leader.stdout)  # its session's leader has exited (and was reaped)
    try:
        giving_way = GivingWay(lambda: [spinner], time.monotonic())
        deadline = time.monotonic() + 60  # bounds only a failing run
        while autogroup_nice(spinner) != GIVING_WAY_NICENESS and time.monotonic() < deadline:
            giving_way.waited()
            time.sleep(0.05)
        assert giving_way.giving_way
        assert autogroup_nice(spinner) == GIVING_WAY_NICENESS
    finally:
        os.kill(spinner, 9)


def test_a_notebook_cannot_start_a_session():
    """A new session is a new autogroup, at nice 0 until the grader's next look: a run that gives way would start
    one every tenth of a second. The system-call filter refuses setsid."""
    cell = (
        "import os\ntry:\n    os.setsid()\n    result = 'started'\nexcept OSError as error:\n    result = error.errno"
    )
    with WarmPool(1, Limits(cell_seconds=30, submission_seconds=60)) as pool:
        result = pool.run([Cell(0, "cell 0", cell)], ("result",), {})
    assert result.answers["result"].value == errno.EPERM


def test_a_grader_started_with_a_high_rlimit_nice_still_keeps_a_run_in_sched_idle():
    """RLIMIT_NICE is what lets a thread leave SCHED_IDLE: the sandbox sets it to 0 whatever the grader was started
    with (a container or a service manager may give it more)."""
    import resource

    before = resource.getrlimit(resource.RLIMIT_NICE)
    try:  # would let a thread at nice 5 back to SCHED_OTHER
        resource.setrlimit(resource.RLIMIT_NICE, (20, 20))
    except (ValueError, OSError):
        pytest.skip("raising RLIMIT_NICE's hard limit needs CAP_SYS_RESOURCE")
    try:
        with WarmPool(1, Limits(cell_seconds=30, submission_seconds=60)) as pool:
            long = pool.run([Cell(0, "cell 0", TRIES_TO_LEAVE_SCHED_IDLE)], ("result",), {})
    finally:
        resource.setrlimit(resource.RLIMIT_NICE, before)
    assert long.answers["result"].value == os.SCHED_IDLE


@pytest.mark.skipif(autogroup_nice(os.getpid()) is None, reason="the kernel has no autogroups here")
def test_a_notebook_cannot_reset_the_nice_of_its_autogroup():
    """Giving way lowers a run's autogroup every quarter of a second; a notebook that made itself dumpable again
    (its /proc files are then its own) and wrote 0 there between looks kept it at nice 0 most of the time. The
    student's /proc is read-only."""
    cell = (
        "import ctypes, os\nctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE\n"
        "try:\n    with open('/proc/self/autogroup', 'w') as autogroup:\n        autogroup.write('0')\n"
        "    result = 'written'\nexcept OSError as error:\n    result = os.strerror(error.errno)"
    )
    with WarmPool(1, Limits(cell_seconds=30, submission_seconds=60)) as pool:
        if not pool.isolation.namespaces:
            pytest.skip(f"no /proc of the student's own at isolation level {pool.level!r}")
        result = pool.run([Cell(0, "cell 0", cell)], ("result",), {})
    assert result.answers["result"].value == "Read-only file system"


HOPS_FROM_PROCESS_TO_PROCESS = """import os, time
r, w = os.pipe()
if os.fork() == 0:
    os.close(r)
    spun, hop = 0.0, time.process_time()
    while os.sched_getscheduler(0) != os.SCHED_IDLE and spun < 10:  # bounds only a failing run
        if time.process_time() - hop > 0.1:  # the work moves to a new process, the old one ends
            spun += time.process_time() - hop
            if os.fork():
                os._exit(0)
            hop = time.process_time()
    os.write(w, str(os.sched_getscheduler(0)).encode())
    os._exit(0)
os.close(w)
data = b''
while chunk := os.read(r, 64):
    data += chunk
result = int(data)"""


# A process with torch loaded takes tens of milliseconds to fork: the hopping is done by a fresh, small interpreter.
HOPPER = """import os, sys, time
w = int(sys.argv[1])
born, hops = time.monotonic(), 0
while os.sched_getscheduler(0) != os.SCHED_IDLE and time.monotonic() - born < 20:  # bounds a failing run
    hop = time.process_time()
    while time.process_time() - hop < 0.001:
        pass
    hops += 1
    if os.fork():  # the work moves to a new process every millisecond, the old one ends
        os._exit(0)
os.write(w, f"{os.sched_getscheduler(0)} {hops}".encode())"""
HOPS_EVERY_MILLISECOND = f"""import os, sys
r, w = os.pipe()
if os.fork() == 0:
    os.close(r)
    os.set_inheritable(w, True)
    os.execv(sys.executable, [sys.executable, "-S", "-c", {HOPPER!r}, str(w)])
os.close(w)
data = b''
while chunk := os.read(r, 64):
    data += chunk
result = [int(part) for part in data.split()]"""


def test_a_run_that_moves_its_work_from_process_to_process_gives_way_however_often_it_hops():
    """Every tenth of a second of CPU: no process of it ever uses a fifth of a second, but what the run was seen to
    use, summed over the looks, does. Every few milliseconds: the grader's looks see almost none of its CPU, and
    the kernel keeps none of it (the sandbox's pid 1 reaps without waiting); it never gave way, and held a core at
    normal priority for its whole submission limit. Now it is lowered once the run has gone on for
    YIELD_AFTER_SECONDS. (One pool for both: a pool's start is most of the time.)"""
    with WarmPool(1, Limits(cell_seconds=60, submission_seconds=120)) as pool:
        slow = pool.run([Cell(0, "cell 0", HOPS_FROM_PROCESS_TO_PROCESS)], ("result",), {})
        fast = pool.run([Cell(0, "cell 0", HOPS_EVERY_MILLISECOND)], ("result",), {})
    assert slow.ended_early is None, slow.ended_early
    assert slow.answers["result"].value == os.SCHED_IDLE
    assert fast.ended_early is None, fast.ended_early
    policy, hops = fast.answers["result"].value
    assert hops > 20  # it did hop: dozens of processes, each gone before the next look (tenths of a second apart)
    assert policy == os.SCHED_IDLE
