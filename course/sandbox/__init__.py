"""Run untrusted student code: its own process, no network, no course files, resource limits, timeouts.

The public face: `run_cells` (a fresh sandbox per submission) and `WarmPool` (warm workers that fork one
sandboxed child per submission), both `Runner`s returning a `RunResult` of plain data; `choose_isolation`
and `LEVELS` for the isolation in force. Inside, one module per concern (as nsjail keeps one file per
isolation concern):

  levels.py      what each isolation level guarantees; choosing the strongest that works
  bubblewrap.py  which bwrap runs; the view (mounts) and namespaces it builds
  interpreter.py the Python the sandbox runs: the folders of the packages it imports, the programs' prelude
  limits.py      the student's environment and rlimits
  uids.py        leasing sandbox uids; dropping to one; ending what a run left behind
  memory.py      the memory of a run, all its processes together: a cgroup of its own, else accounting
  handed_in.py   everything that crosses into the sandbox as text (the runner, the notebook's helper modules),
                 assembled here only; `Cell`, the unit of student code
  protocol.py    the request sent in; the one bounded reader of every message that comes out
  supervisor.py  the grader's side of one run: output, the cells' clocks, the end, the result
  cold.py        a fresh interpreter per submission
  pool.py        warm workers that fork a sandboxed child per submission
  runner.py      the program that runs *inside* the sandbox, next to the student's code (imports nothing of
                 this package: it is handed to the interpreter as text)
"""

from __future__ import annotations

from typing import Protocol

from course.core.config import Limits
from course.sandbox.cold import run_cells
from course.sandbox.handed_in import Cell
from course.sandbox.levels import ISOLATION_SUMMARY, LEVELS, Level, choose_isolation
from course.sandbox.pool import WarmPool, default_jobs
from course.sandbox.supervisor import CellOutcome, RunResult


class Runner(Protocol):
    """Runs one submission's cells in a sandbox: `run_cells`, or `WarmPool.run`."""

    def __call__(
        self, cells: list[Cell], answer_names: tuple[str, ...], function_points: dict[str, list[float]], limits: Limits
    ) -> RunResult: ...


__all__ = [
    "ISOLATION_SUMMARY",
    "LEVELS",
    "Cell",
    "CellOutcome",
    "Level",
    "RunResult",
    "Runner",
    "WarmPool",
    "choose_isolation",
    "default_jobs",
    "run_cells",
]
