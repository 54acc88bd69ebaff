"""A cold run: a fresh sandboxed interpreter for one submission."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from course.config import DEFAULT_SANDBOX_UID, Limits
from course.errors import SandboxError
from course.sandbox.bubblewrap import bwrap_command, userns_command
from course.sandbox.levels import LEVELS, choose_isolation
from course.sandbox.limits import SANDBOX_ENV, set_limits
from course.sandbox.protocol import RUNNER_SOURCE, encode_request, write_in_background
from course.sandbox.supervisor import RunResult, Supervised, supervise
from course.sandbox.uids import drop_to, lease_uid, reap_uid
from course.submission import Cell


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
    level, note = choose_isolation(isolation, uid, limits.tmp_mb)
    if not LEVELS[level].leased_uid:
        return _run_cold(cells, answer_names, function_points, limits, level, note, uid)
    with lease_uid(uid) as leased:
        return _run_cold(cells, answer_names, function_points, limits, level, note, leased)


def _run_cold(cells: list[Cell], answer_names: tuple[str, ...], function_points: dict[str, list[float]],
              limits: Limits, level: str, note: str, uid: int) -> RunResult:
    channel_read, channel_write = os.pipe()
    scratch = None
    env: dict[str, str]
    if level == "bwrap":
        command, cwd, env = bwrap_command(uid, limits.tmp_mb), "/", {}
    elif level == "userns":
        command, cwd, env = userns_command(limits.tmp_mb), "/", {}
    else:
        scratch = tempfile.mkdtemp(prefix="autograd-sandbox-")
        if level == "uid":
            os.chown(scratch, uid, uid)
        command, cwd, env = [], scratch, {**SANDBOX_ENV, "HOME": scratch, "IPYTHONDIR": f"{scratch}/.ipython"}
    command = [*command, sys.executable, "-I", "-c", RUNNER_SOURCE, str(channel_write)]

    def prepare_child() -> None:
        set_limits(limits)
        if level == "uid":
            drop_to(uid)

    started = time.monotonic()
    try:
        process = subprocess.Popen(  # noqa: S603 - fixed argument list, no shell
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            cwd=cwd, env=env, pass_fds=(channel_write,), start_new_session=True, preexec_fn=prepare_child,
        )
    except OSError as error:
        os.close(channel_read)
        os.close(channel_write)
        raise SandboxError(f"cannot start the sandbox: {error}") from None
    os.close(channel_write)
    stdin, stdout = process.stdin, process.stdout
    if stdin is None or stdout is None:  # both were asked for as pipes above
        raise SandboxError("cannot start the sandbox: no pipes to it")
    stdin_fd = os.dup(stdin.fileno())
    stdin.close()
    write_in_background(stdin_fd, encode_request(cells, answer_names, function_points))

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

    try:
        return supervise(Supervised(stdout.fileno(), channel_read, lambda: _kill(process), exit_code,
                                    lambda: cpu[0] if cpu else None),
                         cells, answer_names, function_points, limits, level, note, started)
    finally:
        os.close(channel_read)
        stdout.close()
        if LEVELS[level].leased_uid and not reap_uid(uid):
            print(f"sandbox: uid {uid} still owns processes after a run", file=sys.stderr)
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def _kill(process: subprocess.Popen) -> None:
    """End the sandbox's process group (the supervisor then reaps it, for its CPU time)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
