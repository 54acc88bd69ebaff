"""A cold run: a fresh sandboxed interpreter for one submission.

The interpreter can be started before its submission is known (`start`): it imports torch and IPython while
the grader reads the notebook, then `ColdSandbox.run` hands it the cells. `run_cells` does both at once."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from course.core.config import DEFAULT_SANDBOX_UID, Limits
from course.core.errors import SandboxError
from course.sandbox.bubblewrap import bwrap_command, userns_command
from course.sandbox.giving_way import GivingWay
from course.sandbox.handed_in import RUNNER_SOURCE, Cell
from course.sandbox.levels import LEVELS, choose_isolation, first_choice
from course.sandbox.limits import SANDBOX_ENV, rlimits_for
from course.sandbox.memory import RunMemory, at_ready
from course.sandbox.protocol import encode_request, write_in_background
from course.sandbox.retry import first_ready
from course.sandbox.supervisor import EXIT_GRACE_SECONDS, RunResult, Supervised, supervise
from course.sandbox.uids import descendants, descendants_quickly, lease_uid, reap_uid

log = logging.getLogger(__name__)


def run_cells(
    cells: list[Cell],
    answer_names: tuple[str, ...],
    function_points: dict[str, list[float]],
    limits: Limits,
    *,
    isolation: str = "auto",
    uid: int = DEFAULT_SANDBOX_UID,
) -> RunResult:
    """Run the cells in a fresh sandboxed process (a cold start) and return the answers as plain data."""
    with start(limits, isolation=isolation, uid=uid) as sandbox:
        return sandbox.run(cells, answer_names, function_points, limits)


@contextmanager
def start(limits: Limits, *, isolation: str = "auto", uid: int = DEFAULT_SANDBOX_UID) -> Iterator[ColdSandbox]:
    """A fresh sandboxed interpreter, started now, for one submission's cells later; ended on leaving."""
    sandbox = ColdSandbox(limits, isolation, uid)
    try:
        yield sandbox
    finally:
        sandbox.close()


class ColdSandbox:
    """One fresh sandboxed interpreter, started before its cells are known; `run` (a `Runner`) runs them, once.

    Its level is the one `choose_isolation` has made or, before any choice, `first_choice` unprobed (the probe
    would otherwise sit on the critical path of every Gradescope run). A run that reaches its runner's `ready`,
    which the runner sends before any student code, proves that level. One that ends before it ran no student
    code, so nothing of the notebook can be the reason: then the probe chooses exactly as it would have, and the
    cells run in a fresh sandbox at its choice. A notebook can never make the grader take a weaker level."""

    def __init__(self, limits: Limits, isolation: str, uid: int) -> None:
        self.limits, self.isolation, self.base_uid = limits, isolation, uid
        known = choose_isolation.known(isolation, uid, limits.tmp_mb)
        first = None if known else first_choice(isolation)
        self.unproven = first is not None
        self.level: str
        self.note: str
        self.level, self.note = known or ((first, "") if first else choose_isolation(isolation, uid, limits.tmp_mb))
        self.error: SandboxError | None = None  # what ended `run`, for callers that catch every error of a run
        self._leases = ExitStack()
        self._process: subprocess.Popen[bytes] | None = None
        self._used = False
        self._channel_read = self._stdin_fd = -1
        self._scratch: str | None = None
        self._memory: RunMemory | None = None
        self._uid = uid
        try:
            if LEVELS[self.level].leased_uid:
                self._uid = self._leases.enter_context(lease_uid(uid))
            self._spawn()
        except SandboxError:
            if not self.unproven:
                self.close()
                raise
            # bubblewrap could not even be executed: `run` leaves the choice to the probe
        except BaseException:
            self.close()
            raise

    def _launch_place(self) -> tuple[list[str], str, dict[str, str]]:
        """The level's command prefix, working folder and environment (the scratch folder made for the lower levels)."""
        if self.level == "bwrap":
            return bwrap_command(self._uid, self.limits.tmp_mb), "/", {}
        if self.level == "userns":
            return userns_command(self.limits.tmp_mb), "/", {}
        try:
            self._scratch = cwd = tempfile.mkdtemp(prefix="autograd-sandbox-")
            if self.level == "uid":
                os.chown(cwd, self._uid, self._uid)
        except OSError as error:  # close() removes a folder made before the chown failed
            raise SandboxError(
                f"cannot make the sandbox's scratch folder in {tempfile.gettempdir()}: {error.strerror}"
            ) from None
        return [], cwd, {**SANDBOX_ENV, "HOME": cwd, "IPYTHONDIR": f"{cwd}/.ipython"}

    def _spawn(self) -> None:
        """Start the sandbox's process, with its answer channel, and bound its memory."""
        command, cwd, env = self._launch_place()
        # The answer channel last: nothing between its making and the Popen below can fail and leave it open.
        channel_read, channel_write = os.pipe()
        # The run's rlimits go to the runner, which sets them on itself before anything else (runner._set_rlimits),
        # and the uid level's drop is Popen's own: no Python runs in the forked child of this threaded grader.
        command = [
            *command,
            sys.executable,
            "-I",
            "-c",
            RUNNER_SOURCE,
            str(channel_write),
            json.dumps(rlimits_for(self.limits)),
        ]
        uid = self._uid if self.level == "uid" else None
        try:
            process = subprocess.Popen(  # noqa: S603 - fixed argument list, no shell
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                pass_fds=(channel_write,),
                start_new_session=True,
                user=uid,
                group=uid,
                extra_groups=None if uid is None else [],
            )
        except OSError as error:
            os.close(channel_read)
            raise SandboxError(f"cannot start the sandbox: {error}") from None
        finally:
            os.close(channel_write)
        if process.stdin is None:  # asked for as a pipe above
            _kill(process)
            process.wait()
            os.close(channel_read)
            raise SandboxError("cannot start the sandbox: no pipe to it")
        self._process, self._channel_read = process, channel_read
        self._stdin_fd = os.dup(process.stdin.fileno())  # the request goes in later, from a thread of its own
        process.stdin.close()
        # Everything of the run, from its start, in its memory bound (memory.py): it reads no cell before the request.
        try:
            self._memory = RunMemory(self.limits.memory_mb, lambda: [process.pid, *descendants_quickly(process.pid)])
            self._memory.admit()
        except (OSError, SandboxError) as error:
            self.close()
            raise SandboxError(f"cannot bound the sandbox's memory: {error}") from None

    def run(
        self, cells: list[Cell], answer_names: tuple[str, ...], function_points: dict[str, list[float]], limits: Limits
    ) -> RunResult:
        """Run the cells in this sandbox and return the answers as plain data. A run that ends before its runner's
        `ready` ran no student code: it is tried once more in a fresh sandbox (retry.py), and SandboxStartError
        says when that fails too (NoIsolationError: no level works here)."""
        if self._used:
            raise SandboxError("a cold sandbox runs one submission only")
        self._used = True
        started_here = self._process is not None and limits == self.limits
        first = [("this sandbox", lambda: self._first_run(cells, answer_names, function_points))]
        afresh = ("a fresh sandbox", lambda: self._afresh(cells, answer_names, function_points, limits))
        tries = [*first, afresh] if started_here else [afresh, afresh]
        try:
            return first_ready(tries)
        except SandboxError as error:
            self.error = error
            raise

    def _first_run(
        self, cells: list[Cell], answer_names: tuple[str, ...], function_points: dict[str, list[float]]
    ) -> RunResult:
        result = self._supervise(cells, answer_names, function_points)
        if self.unproven and result.ready:  # the level started: it works here
            choose_isolation.confirm(self.isolation, self.base_uid, self.limits.tmp_mb, self.level)
        return result

    def _afresh(
        self, cells: list[Cell], answer_names: tuple[str, ...], function_points: dict[str, list[float]], limits: Limits
    ) -> RunResult:
        """The cells in a sandbox started now, at the level the probe chooses (as it would have before any run:
        a level that never reached `ready` proved nothing, and the probe may raise NoIsolationError)."""
        self.close()
        choose_isolation(self.isolation, self.base_uid, limits.tmp_mb)
        with start(limits, isolation=self.isolation, uid=self.base_uid) as fresh:
            fresh._used = True
            if fresh._process is None:
                raise SandboxError("cannot start the sandbox")
            return fresh._supervise(cells, answer_names, function_points)

    def _supervise(
        self, cells: list[Cell], answer_names: tuple[str, ...], function_points: dict[str, list[float]]
    ) -> RunResult:
        process = self._process
        if process is None or process.stdout is None:  # _spawn made both
            raise SandboxError("cannot start the sandbox: no pipes to it")
        stdin_fd, self._stdin_fd = self._stdin_fd, -1
        go = threading.Event()  # the runner runs no cell before it (protocol.write_in_background)
        write_in_background(stdin_fd, encode_request(cells, answer_names, function_points), go=go)
        started = time.monotonic()
        cpu: list[float] = []

        def exit_code(timeout: float) -> int | None:
            """Reap the sandbox with wait4, which also gives the CPU time of it and everything it reaped."""
            deadline = time.monotonic() + timeout
            while process.returncode is None:
                pid, status, usage = os.wait4(process.pid, os.WNOHANG)
                if pid:
                    process.returncode = os.waitstatus_to_exitcode(status)
                    cpu.append(usage.ru_utime + usage.ru_stime)
                elif time.monotonic() >= deadline:
                    return None
                else:
                    time.sleep(0.01)
            return process.returncode

        # Its clock does not count the time it waited for a processor; alone in its sandbox, it gives way to none.
        clock = GivingWay(lambda: [process.pid, *descendants(process.pid)], started, lower=False)
        memory = self._memory
        try:
            return supervise(
                Supervised(
                    process.stdout.fileno(),
                    self._channel_read,
                    lambda: _kill(process),
                    exit_code,
                    lambda: cpu[0] if cpu else None,
                    waited=clock.waited,
                    over_memory=memory.exceeded if memory else lambda: False,
                    look_every=memory.look_every if memory else 0.1,
                    at_ready=at_ready(memory, go),
                ),
                cells,
                answer_names,
                function_points,
                self.limits,
                self.level,
                self.note,
                started,
            )
        finally:
            go.set()  # the request's pipe closes whatever happened

    def close(self) -> None:
        """End the interpreter (if it still runs), what its uid left behind, its files and its uid's lease."""
        process, self._process = self._process, None
        try:
            if process is not None:
                if process.returncode is None:  # never run, or still there after the supervisor's kill
                    _kill(process)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        process.wait(timeout=EXIT_GRACE_SECONDS)
                if self._stdin_fd >= 0:
                    os.close(self._stdin_fd)
                    self._stdin_fd = -1
                os.close(self._channel_read)
                if process.stdout is not None:
                    process.stdout.close()
                if LEVELS[self.level].leased_uid and not reap_uid(self._uid):
                    log.warning(f"uid {self._uid} still owns processes after a run")
            memory, self._memory = self._memory, None
            if memory is not None:
                memory.close()
            if self._scratch:
                shutil.rmtree(self._scratch, ignore_errors=True)
                self._scratch = None
        finally:
            self._leases.close()


def _kill(process: subprocess.Popen[bytes]) -> None:
    """End the sandbox's process group (the supervisor then reaps it, for its CPU time)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
