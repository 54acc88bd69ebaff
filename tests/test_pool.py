"""The warm pool keeps the sandbox's guarantees between students, not just within one run."""

from __future__ import annotations

import pytest

from course.core.config import DEFAULT_SANDBOX_UID, Limits
from course.pipeline.submission import Cell
from course.sandbox import WarmPool, choose_isolation
from course.sandbox.uids import lease_uid
from tests.support.helpers import ORPHAN, ROOT, needs_tool

LIMITS = Limits(cell_seconds=3, submission_seconds=15)
ISOLATION = choose_isolation("auto", DEFAULT_SANDBOX_UID, LIMITS.tmp_mb)[0]
needs_bwrap = needs_tool("bubblewrap as root", ISOLATION == "bwrap", f"the isolation level here is {ISOLATION!r}")


@pytest.fixture(scope="module")
def pool():
    with WarmPool(1, LIMITS) as warm:
        yield warm


def run(pool, source: str, names=("result",)):
    return pool.run([Cell(0, "cell", source)], names, {})


def test_leased_uids_are_exclusive():
    with lease_uid(DEFAULT_SANDBOX_UID) as first, lease_uid(DEFAULT_SANDBOX_UID) as second:
        assert first != second
    with lease_uid(DEFAULT_SANDBOX_UID) as again:
        assert again in (first, second)


@needs_bwrap
def test_each_student_gets_a_fresh_tmp(pool):
    run(pool, "open('/tmp/left-by-alice', 'w').write('answers')\nresult = 1")
    later = run(pool, "import os\nresult = sorted(os.listdir('/tmp'))")
    assert "left-by-alice" not in later.answers["result"].value


@needs_bwrap
def test_processes_left_by_one_student_are_gone_for_the_next(pool):
    run(pool, "import subprocess\nsubprocess.Popen(['sleep', '600'])\nresult = 1")
    later = run(pool, "import os\nresult = sum(1 for p in os.listdir('/proc') if p.isdigit())")
    assert later.answers["result"].value <= 3  # init, the worker and this child: no sleeper survived


@needs_bwrap
def test_nothing_runs_as_the_students_uid_once_their_run_is_reported_ended(pool):
    """The grader no longer scans the machine for the leased uid after a run whose pid namespace the worker ended
    itself: the kernel ended every process of it first, a child and an orphan handed to the run's pid 1 included."""
    from course.sandbox.uids import processes_of

    daemon = (
        "import os, subprocess, time\nsubprocess.Popen(['sleep', '600'])\nif os.fork() == 0:\n"
        "    if os.fork() == 0:\n        while True:\n            time.sleep(1)\n    os._exit(0)\n"
        "time.sleep(0.2)\nresult = 1"
    )
    ran = run(pool, daemon)
    assert ran.answers["result"].value == 1, ran.output
    assert processes_of(pool._workers[0].uid) == []


def test_a_timed_out_student_leaves_the_worker_usable(pool):
    stuck = run(pool, "while True:\n    pass")
    assert stuck.limit_hit == "cell_seconds"
    after = run(pool, "result = 41 + 1")
    assert after.answers["result"].value == 42


def test_a_student_who_kills_their_process_leaves_the_worker_usable(pool):
    gone = run(pool, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    assert "killed by SIGKILL" in gone.ended_early
    assert run(pool, "result = 'fine'").answers["result"].value == "fine"


def test_a_sleeping_notebook_does_not_hold_a_worker_from_the_rest_of_the_class():
    """A run that waits out its time limit gets a stand-in worker: the next student is graded meanwhile."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as threads:
        with WarmPool(1, Limits(cell_seconds=300, submission_seconds=600)) as pool:
            sleeper = threads.submit(pool.run, [Cell(0, "cell", "import time\ntime.sleep(600)")], ("result",), {})
            deadline = time.monotonic() + 120
            while not pool._busy and time.monotonic() < deadline:  # the sleeper has the only worker
                time.sleep(0.05)
            assert pool._busy
            quick = run(pool, "result = 41 + 1")
            assert quick.answers["result"].value == 42
            assert not sleeper.done()  # graded while the sleeper still held its worker
        ended = sleeper.result(timeout=60)  # closing the pool ends the sleeper too
    assert ended.answers["result"].status == "missing"


def wait_for(condition, what: str, seconds: float = 120) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds:g} s for {what}"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_standby_worker_stands_in_for_a_long_run_and_takes_its_place_after():
    """With a standby worker (the service's pool), a long run's stand-in is that worker, already started: no
    worker starts while the class waits; when the long run ends, its worker goes into standby in turn."""
    from concurrent.futures import ThreadPoolExecutor

    with (
        ThreadPoolExecutor(1) as threads,
        WarmPool(1, Limits(cell_seconds=20, submission_seconds=60), standby=1) as pool,
    ):
        wait_for(lambda: len(pool._standby) == 1, "the standby worker to start")
        standby = pool._standby[0]
        sleeper = threads.submit(pool.run, [Cell(0, "cell", "import time\ntime.sleep(600)")], ("result",), {})
        wait_for(lambda: pool._busy, "the sleeper to take the pool's worker")
        sleeping = next(worker for worker in pool._workers if id(worker) in pool._busy)
        quick = run(pool, "result = 41 + 1")
        assert quick.answers["result"].value == 42
        assert not sleeper.done()  # graded while the sleeper still held its worker ...
        assert not pool._standby  # ... by the standby worker: none started
        assert len(pool._workers) == 2
        assert standby is not sleeping
        assert standby in pool._workers
        ended = sleeper.result(timeout=120)
        assert "ran longer than the limit of 20 s" in ended.ended_early
        wait_for(lambda: len(pool._standby) == 1, "the sleeper's worker to go into standby")
        assert pool._standby == [sleeping]
        assert len(pool._workers) == 2
        assert run(pool, "result = 6 * 7").answers["result"].value == 42  # the stand-in goes on as the worker


@needs_bwrap
def worker_files() -> set[str]:
    import tempfile
    from pathlib import Path

    return {path.name for path in Path(tempfile.gettempdir()).glob("autograd-worker-*")}


def test_workers_leave_no_file_in_the_temporary_folder():
    """A worker's output is kept in an unlinked file: a grader that is killed leaves nothing in /tmp."""
    before = worker_files()
    with WarmPool(1, LIMITS) as warm:
        assert run(warm, "result = 1").answers["result"].value == 1
        assert worker_files() - before == set()
    assert worker_files() - before == set()


def test_a_worker_that_cannot_start_is_reported_with_its_last_words(monkeypatch):
    import course.sandbox.pool as pool_module
    from course.core.errors import SandboxError

    monkeypatch.setattr(pool_module, "RUNNER_SOURCE", "import sys\nsys.exit('the worker broke on purpose')")
    with WarmPool(1, LIMITS) as warm:
        with pytest.raises(SandboxError, match="the worker broke on purpose"):
            warm.run([Cell(0, "cell", "result = 1")], ("result",), {}, cold_fallback=False)
        # A run never started on a worker is the grader's failure: it is tried in a fresh cold sandbox instead.
        fallback = run(warm, "result = 1")
        assert fallback.ready
        assert fallback.answers["result"].value == 1


def test_the_helper_module_a_student_changes_is_fresh_for_the_next(pool):
    """The course's helper module is made once in each worker (runner._preload), so each child starts with a
    copy of it: what one student does to theirs never reaches the next student."""
    from course.sandbox.handed_in import notebook_module_cell

    helpers = Cell(-3, "helpers (from the course)", notebook_module_cell())
    tampered = pool.run(
        [
            helpers,
            Cell(
                0, "cell", "import course.notebook as m\nm.TOLERANCE = 5.0\nm.check_form = None\nresult = m.TOLERANCE"
            ),
        ],
        ("result",),
        {},
    )
    assert tampered.answers["result"].value == 5.0
    assert [cell.error for cell in tampered.cells] == [None, None]
    later = pool.run(
        [
            helpers,
            Cell(0, "cell", "import course.notebook as m\nresult = m.TOLERANCE if callable(m.check_form) else -1.0"),
        ],
        ("result",),
        {},
    )
    assert later.answers["result"].value == 1e-6


def test_a_prelude_cell_that_fails_in_the_worker_runs_and_fails_in_each_child():
    """A prelude cell with an error is not taken as done: it runs in the student's child, which reports it."""
    failing = "raise ValueError('the prelude broke on purpose')"
    with WarmPool(1, LIMITS, prelude=(failing,)) as warm:
        ran = warm.run([Cell(-1, "prelude", failing), Cell(0, "cell", "result = 7")], ("result",), {})
    assert "the prelude broke on purpose" in (ran.cells[0].error or "")
    assert ran.answers["result"].value == 7


def test_only_the_exact_prelude_text_is_skipped():
    """A first cell that differs from the prelude by a character runs as sent; the same text is not run twice."""
    prelude = "runs = globals().get('runs', 0) + 1\n"
    with WarmPool(1, LIMITS, prelude=(prelude,)) as warm:
        same = warm.run([Cell(-1, "prelude", prelude), Cell(0, "cell", "result = runs")], ("result",), {})
        edited = warm.run([Cell(-1, "prelude", prelude + "\n"), Cell(0, "cell", "result = runs")], ("result",), {})
    assert same.answers["result"].value == 1
    assert edited.answers["result"].value == 2


def test_cells_the_worker_compiled_run_as_if_compiled_in_the_child():
    """The released notebook's cells are compiled once in each worker (WarmPool's `compiled`); a child runs them
    as it would have compiled them itself: the same answers and errors, and a cell after `from __future__ import
    annotations` compiled under it (its annotation is not evaluated), as IPython would."""
    released = ("q: undefined_name = 2\nresult = 1", "x = 1\ny = x / 0", "value = 41 + 1\nvalue")
    with WarmPool(1, LIMITS, compiled=released) as warm:
        plain = warm.run(
            [
                Cell(0, "c0", released[0]),
                Cell(1, "c1", released[1]),
                Cell(2, "c2", released[2]),
                Cell(3, "c3", "result = value"),
            ],
            ("result",),
            {},
        )
        future = warm.run(
            [Cell(0, "c0", "from __future__ import annotations"), Cell(1, "c1", released[0])], ("result",), {}
        )
    assert "NameError" in (plain.cells[0].error or "")  # the annotation was evaluated, as in IPython
    assert (plain.cells[1].error or "").startswith("ZeroDivisionError")
    assert plain.cells[2].error is None
    assert plain.answers["result"].value == 42
    assert future.cells[1].error is None
    assert future.answers["result"].value == 1


def test_a_child_runs_the_workers_compiled_code_only_while_the_shell_compiles_as_it_did():
    """In the runner itself: a precompiled cell is not compiled again, unless the notebook changed what its
    compiling depends on (a `__future__` flag, an input transformer); a cell whose compiling changes the flags is
    not kept (later cells would compile otherwise in the worker)."""
    import importlib.util

    from IPython.core.interactiveshell import InteractiveShell

    spec = importlib.util.spec_from_file_location("runner_under_test", ROOT / "course" / "sandbox" / "runner.py")
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    InteractiveShell.clear_instance()
    shell = runner._new_shell()
    flags = shell.compile.flags
    runner._precompile(shell, ["seen = 'precompiled'", "from __future__ import annotations\nz = 1", 7, ""])
    assert list(runner._PRECOMPILED) == ["seen = 'precompiled'"]
    assert shell.compile.flags == flags
    compiled_in_child = []
    compile_cell = runner._compile_cell
    runner._compile_cell = lambda *args: compiled_in_child.append(args[1]) or compile_cell(*args)
    try:
        runner.run_cell(shell, "seen = 'precompiled'")
        assert (shell.user_ns["seen"], compiled_in_child) == ("precompiled", [])
        shell.input_transformer_manager.line_transforms.append(lambda lines: lines)
        runner.run_cell(shell, "seen = 'precompiled'")
        assert compiled_in_child == ["seen = 'precompiled'"]
    finally:
        shell.input_transformer_manager.line_transforms.pop()
        runner._compile_cell = compile_cell
        InteractiveShell.clear_instance()


def test_workers_are_handed_only_the_releases_public_code_cells(tmp_path):
    """What a worker compiles, every child can read: the release's code cells, less any that still marks a
    solution or hidden tests (a release edited by hand); nothing when there is no release to read."""
    import json

    from course.authoring.release import release
    from course.core.config import load_config
    from course.pipeline.release_cells import released_code_cells
    from tests.support.helpers import copy_course

    root = copy_course(tmp_path / "course")
    config = load_config(root)
    config.release_notebook("autograd").unlink()
    assert released_code_cells(config.release_notebook("autograd")) == ()  # no release at hand
    release(config, verify=False)
    cells = released_code_cells(config.release_notebook("autograd"))
    notebook = json.loads(config.release_notebook("autograd").read_text(encoding="utf-8"))
    code = [
        "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        for cell in notebook["cells"]
        if cell["cell_type"] == "code"
    ]
    assert cells == tuple(code)
    notebook["cells"][-1] = {
        "cell_type": "code",
        "metadata": {},
        "outputs": [],
        "execution_count": None,
        "source": "x = 1\n### BEGIN HIDDEN TESTS\nassert x == 1\n### END HIDDEN TESTS\n",
    }
    config.release_notebook("autograd").write_text(json.dumps(notebook), encoding="utf-8")
    assert not any("HIDDEN" in cell for cell in released_code_cells(config.release_notebook("autograd")))


def test_what_a_student_orphans_is_reaped_by_their_pid_1(pool):
    ran = run(pool, ORPHAN)
    assert ran.cells[0].error is None, ran.output
    left, init = ran.answers["result"].value
    assert left is False
    assert init.endswith("/sleep")  # pid 1 is the small exec'd program, not a fork of the worker


def test_a_standby_worker_outlives_a_failure_to_start_the_next(monkeypatch):
    """The standby workers are started by one thread, and a worker dies with the thread that started it: when the
    second cannot start (no uid left to lease, say), the first still stands in for a long run."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    spawn = WarmPool._spawn
    spawned, refused = [], threading.Event()

    def spawn_twice(pool, uid):
        if len(spawned) == 2:
            refused.set()
            raise OSError("no more workers, on purpose")
        spawned.append(uid)
        return spawn(pool, uid)

    monkeypatch.setattr(WarmPool, "_spawn", spawn_twice)
    with ThreadPoolExecutor(1) as threads:
        with WarmPool(1, Limits(cell_seconds=20, submission_seconds=60), standby=2) as pool:
            wait_for(refused.is_set, "the second standby worker to be refused")
            assert len(pool._standby) == 1
            sleeper = threads.submit(pool.run, [Cell(0, "cell", "import time\ntime.sleep(600)")], ("result",), {})
            wait_for(lambda: pool._busy, "the sleeper to take the pool's worker")
            assert run(pool, "result = 41 + 1").answers["result"].value == 42  # on the standby worker
            assert not sleeper.done()
        # Closing the pool ends the sleeper (as in the test above): its 20 s limit is not what this test is about.
        ended = sleeper.result(timeout=60)
    assert ended.answers["result"].status == "missing"


def _kernel_collapses_into_huge_pages() -> bool:
    """Whether this kernel moves a process's private memory into huge pages on request (MADV_COLLAPSE, Linux 6.1)."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    area = mmap.mmap(-1, 4 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    area.write(b"x" * (4 << 20))
    view = ctypes.c_char.from_buffer(area)
    start = (ctypes.addressof(view) + (2 << 20) - 1) & ~((2 << 20) - 1)
    collapsed = libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(2 << 20), 25) == 0
    del view
    area.close()
    return collapsed


READ_HUGE_PAGES = (
    "result = int(next(line.split()[1] for line in open('/proc/self/smaps_rollup')\n"
    "                 if line.startswith('AnonHugePages')))"
)


@pytest.mark.skipif(not _kernel_collapses_into_huge_pages(), reason="this kernel has no MADV_COLLAPSE (before 6.1)")
def test_a_worker_that_has_served_a_few_runs_forks_its_children_from_huge_pages(pool):
    # Forking copies a page-table entry per page: a worker's ~150 MiB of 4 KiB pages cost each run ~25 ms of CPU here
    # (runner._collapse_into_huge_pages). A child sees the huge pages it shares with its worker in its own smaps.
    seen = [run(pool, READ_HUGE_PAGES).answers["result"].value for _ in range(6)]
    assert seen[-1] >= 50 * 1024, seen  # kB: most of the worker's memory, once it has served a few runs


SHELL_STATE = """
import sys
ip = get_ipython()
result = ['pygments.formatters' in sys.modules, 'torch' in globals(), hasattr(sys, 'last_value'),
          getattr(ip.InteractiveTB, 'tb', None) is None, ip.last_execution_succeeded]
"""


def test_a_child_starts_with_ipythons_traceback_display_loaded_and_no_error_shown(pool):
    # The worker shows a few tracebacks before it serves anyone (runner._warm_up_tracebacks), so a raising notebook's
    # child does not import their formatting; the shell it hands on has shown no error and bound no name.
    assert run(pool, SHELL_STATE).answers["result"].value == [True, False, False, True, True]
    # and the first error a student's notebook raises is still shown and reported as theirs
    raised = pool.run([Cell(0, "cell", "1 / 0"), Cell(1, "cell", SHELL_STATE)], ("result",), {})
    assert "ZeroDivisionError" in (raised.cells[0].error or ""), raised
    assert raised.answers["result"].value == [True, False, True, False, False]
