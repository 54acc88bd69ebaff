"""Sandbox uids: leasing one per running sandbox, dropping to it, and ending whatever a run left behind."""

from __future__ import annotations

import fcntl
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from course.core.config import SANDBOX_UID_RANGE
from course.core.errors import SandboxError

UID_RANGE = SANDBOX_UID_RANGE  # sandbox uids base .. base+63: one per concurrently running sandbox


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


def processes_of(uid: int) -> list[int]:
    """Pids whose real uid is `uid` (read from /proc/<pid>/status: the owner of /proc/<pid> would be cheaper
    to read, but a process that makes itself non-dumpable shows as root's there). Runs after every
    submission, so it reads each file with two system calls and no text decoding."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{entry}/status", os.O_RDONLY)
        except OSError:
            continue
        try:
            status = os.read(fd, 4096)
        except OSError:
            continue
        finally:
            os.close(fd)
        at = status.find(b"\nUid:")
        if at >= 0:
            fields = status[at + 5 : status.find(b"\n", at + 5)].split()
            if fields and fields[0] == str(uid).encode():
                pids.append(int(entry))
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


def kill_descendants(pid: int, *, keep: list[str], timeout: float = 5.0) -> bool:
    """Kill every process below the first process under `pid` whose command line starts with `keep` (a warm
    worker, under its bubblewrap: the interpreter, not the bwrap whose arguments mention it), keeping that
    process. For the levels where the student's uid is the grader's own, so nothing may be killed by uid.
    True when nothing is left below it."""
    return _kill_until_gone(lambda: below_the_worker(pid, keep=keep), timeout)


def descendants(pid: int) -> list[int]:
    """Every process below `pid`."""
    return _below(pid, _children())


def below_the_worker(pid: int, *, keep: list[str]) -> list[int]:
    """The processes below the first process under `pid` whose command line starts with `keep` (see
    kill_descendants)."""
    prefix = [part.encode() for part in keep]
    children = _children()
    for candidate in _below(pid, children):
        try:
            if Path(f"/proc/{candidate}/cmdline").read_bytes().split(b"\0")[: len(prefix)] == prefix:
                return _below(candidate, children)
        except OSError:
            continue
    return []


def _children_of(pid: int) -> list[int] | None:
    """The children of `pid`, from the kernel's own list of each of its threads (/proc/<pid>/task/<tid>/children):
    a few reads, where _children reads every process of the machine. None where the kernel keeps no such list."""
    found: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found  # gone: no children
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as listed:
                found += [int(child) for child in listed.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended
            return None  # the kernel has no such list (CONFIG_PROC_CHILDREN)
        except (OSError, ValueError):
            continue
    return found


def descendants_quickly(pid: int) -> list[int]:
    """descendants, found through the kernel's lists of children (a few reads, where descendants reads every process of
    the machine); descendants itself where the kernel keeps no such lists."""
    found, pending = [], [pid]
    while pending:
        children = _children_of(pending.pop(0))
        if children is None:
            return descendants(pid)
        found += children
        pending += children
    return found


def below_the_worker_quickly(pid: int, *, keep: list[str]) -> list[int]:
    """below_the_worker, found through the kernel's lists of children: it reads the run's processes only, so it
    takes a fraction of a millisecond where below_the_worker takes tens on a busy machine (giving_way.py finds a
    run's processes again while it hops from one to the next). Falls back to below_the_worker where the kernel has
    no lists. Complete where the run has a pid namespace of its own: every process of it is below its pid 1."""
    prefix = [part.encode() for part in keep]
    pending, worker = [pid], None
    while pending and worker is None:
        current = pending.pop(0)
        children = _children_of(current)
        if children is None:
            return below_the_worker(pid, keep=keep)
        for child in children:
            try:
                if Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[: len(prefix)] == prefix:
                    worker = child
                    break
            except OSError:
                continue
            pending.append(child)
    if worker is None:
        return []
    found, pending = [], [worker]
    while pending:
        children = _children_of(pending.pop(0))
        if children is None:
            return below_the_worker(pid, keep=keep)
        found += children
        pending += children
    return found
