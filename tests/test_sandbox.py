"""The sandbox, for real: a separate process, unprivileged, no network, limits that hold."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from course.core.config import DEFAULT_SANDBOX_UID, Limits
from course.pipeline.submission import Cell
from course.sandbox import choose_isolation, run_cells
from course.sandbox.uids import UID_RANGE
from tests.support.helpers import ROOT, needs_tool

LIMITS = Limits(cell_seconds=5, submission_seconds=20)
ISOLATION = choose_isolation("auto", DEFAULT_SANDBOX_UID, LIMITS.tmp_mb)[0]
needs_isolation = needs_tool("bubblewrap as root", ISOLATION == "bwrap", f"this machine gives {ISOLATION!r} isolation")


def test_auto_never_settles_for_less_than_namespaces():
    """`auto` refuses to grade below namespace isolation (ISOLATION above would have raised), and a root
    grader gets the strongest level, a leased unprivileged uid per student. No environment variable turns
    this check off."""
    assert ISOLATION in ("bwrap", "userns")
    if os.geteuid() == 0:
        assert ISOLATION == "bwrap"


def run(*sources: str, names=("result",), limits=LIMITS, functions=None):
    cells = [Cell(i, f"cell {i}", source) for i, source in enumerate(sources)]
    return run_cells(cells, names, functions or {}, limits)


def test_plain_values_cross_back_and_everything_else_is_wrong_form():
    result = run(
        "import torch\na = 5\nb = [1, 2.5, float('nan')]\nc = torch.tensor(1.0)\nd = ...\n"
        "class F(float): pass\ne = F(2.0)\nf = True\ng = None",
        names=("a", "b", "c", "d", "e", "f", "g", "h"),
    )
    got = {name: (a.status, a.value, a.detail) for name, a in result.answers.items()}
    assert got["a"] == ("value", 5, "")
    assert got["b"][0] == "value"
    assert got["b"][1][:2] == [1, 2.5]
    assert got["c"] == ("wrong_form", None, "Tensor")
    assert got["d"] == ("missing", None, "still `...`")
    assert got["e"] == ("wrong_form", None, "F")
    assert got["f"] == ("value", True, "")
    assert got["g"] == ("value", None, "")
    assert got["h"] == ("missing", None, "not defined")


def test_function_answers_are_called_inside_at_the_graders_points():
    result = run("def f(x):\n    return 3 * x ** 2 - 2", names=("f",), functions={"f": [1.0, -2.5]})
    probes = result.answers["f"].probes
    assert [(p.x, p.value) for p in probes] == [(1.0, 1.0), (-2.5, 16.75)]


def test_ipython_magics_work():
    result = run("%time result = 2 ** 5")
    assert result.answers["result"].value == 32


@needs_isolation
def test_runs_as_an_unprivileged_user_with_no_capabilities():
    result = run(
        "import os\nresult = [os.getuid(), os.getgid(), int(open('/proc/self/status').read()"
        ".split('CapEff:')[1].split()[0], 16)]"
    )
    uid, gid, capabilities = result.answers["result"].value
    assert DEFAULT_SANDBOX_UID <= uid < DEFAULT_SANDBOX_UID + UID_RANGE  # a uid leased from the sandbox range
    assert (gid, capabilities) == (uid, 0)


@needs_isolation
@pytest.mark.parametrize(
    "target",
    [
        ROOT / "source" / "autograd" / "autograd.ipynb",
        ROOT / "source" / "course.yaml",
        "gradebook.db",
        ROOT / "tests" / "samples" / "submitted" / "alice" / "autograd" / "autograd.ipynb",
    ],
    ids=["source notebook", "course yaml", "gradebook", "another student"],
)
def test_the_graders_files_are_absent_from_the_view(target, tmp_path):
    if not isinstance(target, Path):  # a file a clean checkout lacks: one of the grader's, made here
        target = tmp_path / target
        target.write_text("the grader's own data")
    assert target.is_file()  # it exists, for the grader: only the sandbox can hide it
    assert (ROOT / "course").is_dir()
    result = run(f"import os\nresult = [os.path.exists({str(target)!r}), os.path.exists({str(ROOT)!r} + '/course')]")
    assert result.answers["result"].value == [False, False]


@needs_isolation
def test_writing_results_or_feedback_fails(tmp_path):
    victim = tmp_path / "graded" / "grades-autograd.csv"
    victim.parent.mkdir()
    victim.write_text("student_id,score\nalice,57\n")
    code = (
        "import os\nresult = []\n"
        f"for path in [{str(victim)!r}, {str(tmp_path / 'results.json')!r}, '/usr/lib/evil']:\n"
        "    try:\n        open(path, 'w').write('hacked')\n        result.append('written')\n"
        "    except OSError as error:\n        result.append(type(error).__name__)\n"
    )
    result = run(code)
    assert "written" not in result.answers["result"].value
    assert not (tmp_path / "results.json").exists()
    assert victim.read_text() == "student_id,score\nalice,57\n"


@needs_isolation
def test_the_network_is_unreachable():
    code = (
        "import socket\nresult = []\nfor host in ['127.0.0.1', '1.1.1.1', 'pypi.org']:\n    try:\n"
        "        socket.create_connection((host, 443), timeout=2)\n        result.append('connected')\n"
        "    except OSError as error:\n        result.append(type(error).__name__)\n"
    )
    value = run(code).answers["result"].value
    assert len(value) == 3
    assert "connected" not in value


@needs_isolation
def test_the_environment_is_empty_of_the_graders_variables(monkeypatch):
    monkeypatch.setenv("GRADER_SECRET", "s3cret")
    result = run("import os\nresult = sorted(os.environ)")
    assert "GRADER_SECRET" not in result.answers["result"].value


def test_an_endless_cell_is_stopped_and_earlier_answers_survive():
    limits = replace(LIMITS, cell_seconds=2)
    result = run("result = 42", "while True:\n    pass", "result = 0", limits=limits)
    assert result.limit_hit == "cell_seconds"
    assert result.answers["result"].value == 42
    assert "cell 1 ran longer than the limit of 2 s" in result.ended_early
    # Stopped at the cell's limit, long before the submission's (a wall-clock bound on the whole run, start-up
    # included, failed under a loaded machine's torch import: the limit that struck is what this test checks).
    assert result.seconds < limits.submission_seconds


def test_the_whole_submission_has_a_time_limit():
    limits = replace(LIMITS, cell_seconds=5, submission_seconds=3)
    result = run("import time\ntime.sleep(2)", "time.sleep(2)", "result = 1", limits=limits)
    assert result.limit_hit == "submission_seconds"


def test_answers_set_early_changed_late_or_put_back_survive_an_early_end():
    """A cell's report carries the answers only when they changed since the last one sent, and a run that ends
    early is graded on the last report: an answer set in the first cell and never touched again, one changed
    later, and one changed and then put back each count at the value they had when the process ended."""
    result = run(
        "a = 1\nb = 2\nc = 3", "x = 0", "c = 4", "b = 5", "c = 3", "import os\nos._exit(3)", names=("a", "b", "c")
    )
    assert {name: answer.value for name, answer in result.answers.items()} == {"a": 1, "b": 5, "c": 3}
    assert "exit code 3" in result.ended_early


def test_an_answer_changed_in_place_or_rebound_to_an_equal_object_is_reported_as_it_is():
    """A cell's report carries only the answers that changed; a name still bound to the same object is read again
    unless that object cannot change. A list grown in place, a list rebound, and a number rebound to an equal one
    each end at the value they had when the process ended."""
    result = run(
        "a = [1.0]\nb = 2.0\nc = [3]",
        "a.append(2.0)",
        "b = 3.0\nc = [3]",
        "c.append(4)",
        "import os\nos._exit(3)",
        names=("a", "b", "c"),
    )
    assert {name: answer.value for name, answer in result.answers.items()} == {"a": [1.0, 2.0], "b": 3.0, "c": [3, 4]}


def test_a_report_keeps_only_the_contracts_names():
    """What a forged report can add to the grader's memory is bounded by the contract's answer names."""
    from course.sandbox.supervisor import _Protocol

    protocol = _Protocol([Cell(0, "cell 1", "x = 1")], ("x", "y"), {}, started=0.0)
    protocol.accept({"event": "ready", "confined": True}, 0.1)
    protocol.accept(
        {
            "event": "done",
            "cell": 0,
            "error": None,
            "answers": {"x": {"kind": "value", "value": 1}, **{f"z{i}": {} for i in range(1000)}},
        },
        0.2,
    )
    protocol.accept({"event": "finished", "answers": {"y": {"kind": "value", "value": 2}}}, 0.3)
    assert {name: answer.value for name, answer in protocol.harvested.items()} == {"x": 1, "y": 2}
    assert protocol.finished
    assert not protocol.violation


def test_a_report_is_kept_decoded_so_a_forged_one_costs_the_grader_no_more_than_an_honest_one():
    """Each name's last report is kept as its decoded Answer, not as the parsed line: a list of a hundred thousand
    lists (a few MB of JSON, twenty times that parsed) is kept as an unreadable answer with a short reason."""
    from course.core.answers import UNREADABLE
    from course.sandbox.supervisor import _Protocol

    protocol = _Protocol([Cell(0, "cell 1", "x = 1"), Cell(1, "cell 2", "x = 2")], ("x", "y"), {}, started=0.0)
    protocol.accept({"event": "ready", "confined": True}, 0.1)
    protocol.accept(
        {"event": "done", "cell": 0, "error": None, "answers": {"x": {"kind": "value", "value": [[]] * 100_000}}}, 0.2
    )
    protocol.accept(
        {"event": "done", "cell": 1, "error": None, "answers": {"y": {"kind": "value", "value": [[]] * 100_000}}}, 0.3
    )
    assert [answer.status for answer in protocol.harvested.values()] == [UNREADABLE, UNREADABLE]
    assert all(answer.value is None and len(answer.detail) < 200 for answer in protocol.harvested.values())


def test_an_answer_that_changes_only_its_type_is_reported_changed():
    """1, 1.0 and True are equal to `==` (and 0.0 and -0.0), but not the same answer: a bool question takes True and
    no 1, a number question 1 and no True. The value the notebook ends with is the one graded, run to the end or
    not."""
    changes = ("a = 1\nb = True\nc = 0.0\nd = [1, 2]", "a = True\nb = 1\nc = -0.0\nd = [1.0, 2]")
    for sources in (changes, (*changes, "import os\nos._exit(3)")):
        result = run(*sources, names=("a", "b", "c", "d"))
        got = {name: answer.value for name, answer in result.answers.items()}
        assert [type(got[name]) for name in "abc"] == [bool, int, float]
        assert (got["a"], got["b"], str(got["c"]), [type(item) for item in got["d"]]) == (True, 1, "-0.0", [float, int])


def test_os_exit_keeps_the_answers_set_before_it():
    result = run("result = 7", "import os\nos._exit(3)", "result = 8")
    assert result.answers["result"].value == 7
    assert "exit code 3" in result.ended_early


def test_output_is_truncated_to_the_limit():
    limits = replace(LIMITS, output_kb=64)
    result = run("for _ in range(20000):\n    print('x' * 100)\nresult = 1", limits=limits)
    assert result.answers["result"].value == 1
    assert result.output_truncated
    assert len(result.output) <= 64 * 1024


def test_memory_is_limited():
    limits = replace(LIMITS, memory_mb=1024)
    result = run(
        "try:\n    block = bytearray(3 * 1024 ** 3)\n    result = 'allocated'\n"
        "except MemoryError:\n    result = 'MemoryError'",
        limits=limits,
    )
    assert result.answers["result"].value == "MemoryError"


# Cells that IPython runs in its own ways: errors before and during a run, magics, shell commands, help,
# `__future__`, exits, a custom traceback, warnings, an indented first line, an empty cell, a value displayed.
IPYTHON_CELLS = [
    "x = 1\ny = x + 1\ny",
    "1/0",
    "def f(:\n  pass",
    "%time z = 3",
    "!true",
    "x?",
    "from __future__ import annotations\nq: undefined_name = 2",
    "import sys\nsys.exit(3)",
    "raise KeyboardInterrupt",
    "w = [i for i in range(3)]\nw",
    "  # indented comment\nv = 1",
    "",
    "return 5",
    "a = '\\d'",
    "class A(Exception):\n    def _render_traceback_(self):\n        return ['said nicely']\nraise A()",
    "import warnings\nwarnings.warn('careful')\nu = 1",
    "get_ipython().ast_transformers\nn = 2",
    # a cell IPython rewrites runs with no exception of the runner's as its current one
    "%time t = 1\nraise",
    "!true\nimport sys\nexc = repr(sys.exc_info()[1])",
    # a leading string is an expression to IPython, not a docstring
    "'hello'\ndoc = __doc__",
    # the notebook's own settings: a transformer of its own, every expression displayed
    "get_ipython().input_transformers_post.append(lambda lines: [l.replace('41', '42') for l in lines])",
    "m = 41",
    "get_ipython().ast_node_interactivity = 'all'",
    "k = 5\nk\nk + 1\nshown = _",
]


def test_the_runner_runs_cells_as_ipython_does():
    """The runner's `run_cell` (one compile per plain-Python cell) against IPython's own `run_cell`, each in a
    fresh shell: the same error for every cell and the same values left in the namespace; and the same again when
    every cell was compiled beforehand, as a warm worker compiles the released notebook's cells (_precompile)."""
    from IPython.core.interactiveshell import InteractiveShell

    runner = {"__name__": "runner"}
    # the runner is handed to the sandbox's interpreter as text; here it is loaded the same way, in this process
    exec(compile((ROOT / "course" / "sandbox" / "runner.py").read_text(), "runner.py", "exec"), runner)  # noqa: S102

    def outcome(run_cell, precompile=False):
        InteractiveShell.clear_instance()
        shell = runner["_new_shell"]()
        runner["_PRECOMPILED"].clear()
        if precompile:
            runner["_precompile"](shell, IPYTHON_CELLS)
        errors = [runner["_error_text"](run_cell(shell, source)) for source in IPYTHON_CELLS]
        names = ("x", "y", "z", "q", "w", "v", "u", "a", "n", "t", "exc", "doc", "m", "shown")
        return errors, {name: repr(shell.user_ns.get(name)) for name in names}

    try:
        ours = outcome(runner["run_cell"])
        ipython = outcome(lambda shell, source: shell.run_cell(source, store_history=False))
        precompiled = outcome(runner["run_cell"], precompile=True)
        kept = len(runner["_PRECOMPILED"])
    finally:
        InteractiveShell.clear_instance()
    assert ours == ipython
    assert precompiled == ipython
    assert kept >= 10  # the plain-Python cells: the others are IPython's to run
    assert ours[0][1] == "ZeroDivisionError: division by zero"
    assert ours[1]["w"] == "[0, 1, 2]"
    assert (ours[1]["exc"], ours[1]["m"]) == ("'None'", "42")


@pytest.mark.parametrize("level", ["auto", "rlimits"])
def test_a_cold_run_starts_while_another_thread_of_the_grader_holds_the_lock_a_fork_handler_takes(level):
    """A `preexec_fn` makes subprocess run the interpreter's fork handlers, logging's among them (it takes logging's
    lock), and Python code in the forked child: a grader thread importing or logging at that moment deadlocked
    `grade --jobs 0` for good (seen: torch's import in one thread, nbgrader's in another, a cold start in a third).
    A cold run's limits are set by its runner and its uid by Popen: no fork handler runs, nothing waits."""
    import logging
    import threading

    held, release = threading.Event(), threading.Event()

    def hold_logging_lock() -> None:
        with logging._lock:  # type: ignore[attr-defined]  # what logging's fork handler acquires
            held.set()
            release.wait(120)

    holder = threading.Thread(target=hold_logging_lock, daemon=True)
    holder.start()
    assert held.wait(10)
    results: list = []
    runner = threading.Thread(
        target=lambda: results.append(
            run_cells(
                [Cell(0, "cell", "import resource\nresult = resource.getrlimit(resource.RLIMIT_NOFILE)[1]")],
                ("result",),
                {},
                LIMITS,
                isolation=level,
            )
        ),
        daemon=True,
    )
    try:
        runner.start()
        runner.join(60)  # a run takes seconds; blocked behind the lock, it would not end before the lock is let go
        finished_while_held = not runner.is_alive()
    finally:
        release.set()
        runner.join(60)
    assert finished_while_held
    assert results[0].answers["result"].value == LIMITS.open_files  # the limits still hold
