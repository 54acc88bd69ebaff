"""A run's memory: the total of all its processes stays within `limits.memory_mb`.

RLIMIT_AS (limits.py) bounds each process's address space, and a run may have `processes` of them: a notebook that
forked three children each filling 1 GiB held 4.2-4.6 GiB against a 2 GiB limit. So each run also gets one bound
on the memory of all its processes together, decided here (`run_memory`), in the strongest form the machine allows:

- a memory cgroup of the run's own, under the grader's own cgroup: cgroup v2's `memory.max` (with `memory.swap.max`
  0 and `memory.oom.group`: the kernel ends the whole run) where v2 has the memory controller and the grader's
  cgroup can hand it down; else cgroup v1's `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes` where swap
  is accounted) where the v1 memory controller is mounted and writable. The kernel charges every page the run's
  processes allocate after they enter it, and at the limit reclaims, then kills a process of the run (never one
  outside it: the warm worker and the grader stay in their own). The supervisor sees the kill in the cgroup's
  count (`oom_kill`) and ends the run, naming the limit. Needs a grader that may write the cgroup: root, or a
  delegated v2 subtree.
- otherwise (a grader that is not root, a container without a writable cgroup), accounting: the supervisor sums
  the proportional set size of the run's processes (`/proc/<pid>/smaps_rollup`, or the resident size from
  `/proc/<pid>/statm` where a process hid its smaps by making itself non-dumpable: never less) every
  LOOK_EVERY_SECONDS and ends the run when the sum passes the limit. A run can go past the limit by what it
  allocates between two looks, and only the processes the grader finds as the run's are counted (see SECURITY.md).

A process enters the run's cgroup before any student code runs: the grader moves the run's processes in (`admit`)
after they are started and before it writes the request, which the runner reads before it runs any cell. Pages a
process had before it entered stay charged where they were (a warm worker's torch, shared copy-on-write with its
child, is the worker's; a cold run enters at its start, so its interpreter and torch are the run's). The cgroup is
removed when the run ends (`close`): everything left in it is killed first.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from course.core.errors import SandboxError

log = logging.getLogger(__name__)

RUN_PREFIX = "autograd-run-"  # each run's cgroup: autograd-run-<grader pid>-<n>, under the grader's own cgroup
ADMIT_ROUNDS = 50  # moving a run's processes in, while one started before its parent moved may still appear
REMOVE_SECONDS = 5.0  # waiting for a run's cgroup to empty before removing it
# Accounting: between two sums of a run's memory (its processes found through the kernel's lists of children, each
# one's smaps_rollup read: well under a millisecond for a run of a few processes). What a run can allocate between
# two looks is what it can go past the limit by: at a few GB/s, some tens of MB.
LOOK_EVERY_SECONDS = 0.02
_PAGE = os.sysconf("SC_PAGE_SIZE")
_numbers = itertools.count()

Finder = Callable[[], list[int]]  # the host pids of a run's processes, found afresh on each call


@dataclass(frozen=True)
class Hierarchy:
    """Where the runs' cgroups go: `parent` (the grader's own cgroup in a writable memory hierarchy) and its kind."""

    version: int  # 2: cgroup v2, memory.max; 1: cgroup v1's memory controller, memory.limit_in_bytes
    parent: Path


def _mountinfo() -> list[list[str]]:
    try:
        return [line.split() for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    except OSError:
        return []


def _own_cgroups() -> dict[str, str]:
    """Controller list ("" for v2, "memory" or "cpu,cpuacct" for v1) -> this process's cgroup path there."""
    own = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            own[controllers] = path
    return own


def _under(mount_point: str, mount_root: str, path: str) -> Path | None:
    """The folder of cgroup `path` in a hierarchy mounted at `mount_point` from its `mount_root`."""
    if mount_root != "/" and not (path == mount_root or path.startswith(mount_root.rstrip("/") + "/")):
        return None  # this mount does not show our cgroup (a container's view of another part of the tree)
    relative = path[len(mount_root.rstrip("/")) :].lstrip("/") if mount_root != "/" else path.lstrip("/")
    return Path(mount_point) / relative


def _v2_parent() -> Path | None:
    own = _own_cgroups().get("")
    if own is None:
        return None
    for fields in _mountinfo():
        if "-" not in fields:
            continue
        kind = fields[fields.index("-") + 1]
        if kind != "cgroup2":
            continue
        folder = _under(fields[4], fields[3], own)
        if folder is None or not folder.is_dir():
            continue
        with contextlib.suppress(OSError):
            if "memory" not in (folder / "cgroup.controllers").read_text().split():
                continue
            if "memory" not in (folder / "cgroup.subtree_control").read_text().split():
                # Refused (EBUSY) where the grader's cgroup holds processes itself and is not the root: then runs
                # cannot have cgroups of their own here, and accounting takes over.
                (folder / "cgroup.subtree_control").write_text("+memory")
            return folder
    return None


def _v1_parent() -> Path | None:
    own = next((path for controllers, path in _own_cgroups().items() if "memory" in controllers.split(",")), None)
    if own is None:
        return None
    for fields in _mountinfo():
        if "-" not in fields:
            continue
        at = fields.index("-")
        if fields[at + 1] != "cgroup" or "memory" not in fields[at + 3].split(","):
            continue
        folder = _under(fields[4], fields[3], own)
        if folder is not None and (folder / "memory.limit_in_bytes").is_file():
            return folder
    return None


def _works(hierarchy: Hierarchy) -> bool:
    """Whether a run's cgroup can be made, limited and removed there (a read-only cgroupfs, a grader that is not
    root, a controller not handed down all fail here, and the grader falls back to accounting)."""
    try:
        cgroup = RunCgroup.make(hierarchy, 64 * 1024 * 1024)
    except (OSError, SandboxError):
        return False
    return cgroup.close()


@cache
def hierarchy() -> Hierarchy | None:
    """The memory cgroup hierarchy runs get cgroups in, once per process: v2 where it has the memory controller,
    else v1's; None where neither is usable (then accounting)."""
    for version, find in ((2, _v2_parent), (1, _v1_parent)):
        try:
            parent = find()
        except OSError:
            continue
        if parent is not None and _works(Hierarchy(version, parent)):
            _remove_stale(parent)
            return Hierarchy(version, parent)
    return None


def _remove_stale(parent: Path) -> None:
    """Remove the empty run cgroups a grader that was killed left behind (best effort: one whose grader still
    runs is not touched, and one that still holds processes is refused by the kernel)."""
    with contextlib.suppress(OSError):
        for folder in parent.iterdir():
            if not folder.name.startswith(RUN_PREFIX):
                continue
            grader = folder.name[len(RUN_PREFIX) :].split("-")[0]
            if grader.isdigit() and not Path(f"/proc/{grader}").exists():
                with contextlib.suppress(OSError):
                    folder.rmdir()


def _write(path: Path, value: str) -> None:
    descriptor = os.open(path, os.O_WRONLY)
    try:
        os.write(descriptor, value.encode())
    finally:
        os.close(descriptor)


class RunCgroup:
    """One run's memory cgroup: made with its limit, processes admitted before student code, removed after."""

    def __init__(self, hierarchy: Hierarchy, folder: Path, limit: int) -> None:
        self.hierarchy, self.folder, self.limit = hierarchy, folder, limit
        self.removed = False

    @classmethod
    def make(cls, hierarchy: Hierarchy, limit: int) -> RunCgroup:
        folder = hierarchy.parent / f"{RUN_PREFIX}{os.getpid()}-{next(_numbers)}"
        folder.mkdir(mode=0o755)
        cgroup = cls(hierarchy, folder, limit)
        try:
            cgroup._write_limit(raising=False)
            if hierarchy.version == 2:
                for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                    if (folder / name).exists():
                        _write(folder / name, value)
        except SandboxError:
            cgroup.close()
            raise
        return cgroup

    def _write_limit(self, *, raising: bool) -> None:
        """Write `limit`: v2's memory.max; v1's memory.limit_in_bytes and, where swap is accounted, the bound on
        memory + swap too, which may never be below memory alone (so it goes first when the limit rises)."""
        if self.hierarchy.version == 2:
            names = ["memory.max"]
        else:
            swap = "memory.memsw.limit_in_bytes"
            names = ["memory.limit_in_bytes", *([swap] if (self.folder / swap).exists() else [])]
            if raising:
                names.reverse()
        try:
            for name in names:
                _write(self.folder / name, str(self.limit))
        except OSError as error:
            raise SandboxError(f"cannot limit the run's memory cgroup {self.folder}: {error.strerror}") from None

    def admit(self, find: Finder) -> None:
        """Move the run's processes in, before any student code runs. A process forked by one not yet moved is
        found on the next round; the rounds end when one finds no process it had not moved already."""
        procs = self.folder / "cgroup.procs"
        moved: set[int] = set()
        for _ in range(ADMIT_ROUNDS):
            found = [pid for pid in find() if pid not in moved]
            if not found:
                return
            for pid in found:
                try:
                    _write(procs, str(pid))
                except OSError as error:
                    if error.errno != errno.ESRCH:  # gone meanwhile: nothing to bound
                        raise SandboxError(
                            f"cannot move the run's process {pid} into its memory cgroup "
                            f"{self.folder}: {error.strerror}"
                        ) from None
                moved.add(pid)
        raise SandboxError(f"the run's processes kept appearing while they were moved into {self.folder}")

    def usage(self) -> int:
        """What the kernel charges the run now (bytes)."""
        name = "memory.current" if self.hierarchy.version == 2 else "memory.usage_in_bytes"
        with contextlib.suppress(OSError, ValueError):
            return int((self.folder / name).read_text())
        return 0

    def raise_limit(self, more: int) -> None:
        """Allow the run `more` bytes above its limit (see RunMemory.count_from_ready)."""
        self.limit += more
        self._write_limit(raising=True)

    def _count(self, file: str, key: str) -> int:
        with contextlib.suppress(OSError, ValueError):
            for line in (self.folder / file).read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
        return 0

    def exceeded(self) -> bool:
        """Whether the kernel killed a process of the run for going over the limit."""
        if self.hierarchy.version == 2:
            return self._count("memory.events", "oom_kill") > 0 or self._count("memory.events", "oom_group_kill") > 0
        return self._count("memory.oom_control", "oom_kill") > 0

    def _processes(self) -> list[int]:
        with contextlib.suppress(OSError, ValueError):
            return [int(pid) for pid in (self.folder / "cgroup.procs").read_text().split()]
        return []

    def close(self) -> bool:
        """Kill whatever is left in it (only the run's processes are there) and remove it; True when it is gone."""
        if self.removed:
            return True
        deadline = time.monotonic() + REMOVE_SECONDS
        if self.hierarchy.version == 2 and (self.folder / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                _write(self.folder / "cgroup.kill", "1")
        while True:
            for pid in self._processes():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            try:
                self.folder.rmdir()
            except FileNotFoundError:
                pass
            except OSError as error:
                if error.errno != errno.EBUSY or time.monotonic() > deadline:
                    log.warning(f"the run's memory cgroup {self.folder} could not be removed: {error.strerror}")
                    return False
                time.sleep(0.01)
                continue
            self.removed = True
            return True


def run_memory_of(pids: list[int]) -> int:
    """The memory of these processes together (bytes): each one's proportional set size (shared pages divided among
    their sharers), or its resident size where its smaps cannot be read (a non-dumpable process): never less."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
                for line in rollup:
                    if line.startswith(b"Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
                else:
                    raise OSError("no Pss")
            continue
        except (OSError, ValueError):
            pass
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{pid}/statm", "rb") as statm:
                total += int(statm.read().split()[1]) * _PAGE
    return total


class RunMemory:
    """The bound on one run's memory: `admit` its processes (before student code), ask `exceeded` on the
    supervisor's ticks, `close` after the run. A cgroup where the machine allows one, else accounting."""

    def __init__(self, limit_mb: int, find: Finder, *, use_cgroup: bool = True) -> None:
        self.limit = limit_mb * 1024 * 1024
        self.find = find
        found = hierarchy() if use_cgroup else None
        self.cgroup = RunCgroup.make(found, self.limit) if found else None
        self.mode = f"cgroup v{found.version}" if found else "accounting"
        self.next_look = time.monotonic()
        # How often the supervisor must ask: the kernel enforces a cgroup's limit itself, and the supervisor only
        # ends the run after its kill; accounting is the looks.
        self.look_every = 0.1 if self.cgroup is not None else LOOK_EVERY_SECONDS
        self.over = False
        self.baseline = 0  # accounting: the sum at `ready` (count_from_ready)

    def admit(self) -> None:
        if self.cgroup is not None:
            try:
                self.cgroup.admit(self.find)
            except BaseException:
                self.close()
                raise

    def count_from_ready(self) -> None:
        """Called when the runner says `ready`, before any student code: from here the bound counts what the run
        adds. A cold run was charged its interpreter's and torch's start (about 150 MB in its cgroup here), a warm
        child almost nothing (it shares its worker's pages): without this the same notebook could pass warm and be
        stopped cold. So the limit is what the notebook's processes allocate once the sandbox is ready, in either."""
        if self.cgroup is not None:
            try:
                self.cgroup.raise_limit(self.cgroup.usage())
            except SandboxError as error:  # the run goes on under the lower limit: stricter, never looser
                log.warning(f"{error}; the run keeps the limit it started with")
        else:
            self.baseline = run_memory_of(self.find())

    def exceeded(self) -> bool:
        """Whether the run has gone over its bound (the cgroup's kill, or the accounting's sum past the limit)."""
        if self.over:
            return True
        if self.cgroup is not None:
            self.over = self.cgroup.exceeded()
            return self.over
        now = time.monotonic()
        if now < self.next_look:
            return False
        self.next_look = now + LOOK_EVERY_SECONDS
        used = run_memory_of(self.find()) - self.baseline
        self.over = used > self.limit
        return self.over

    def close(self) -> bool:
        """Remove the run's cgroup (True when there is none left)."""
        return self.cgroup.close() if self.cgroup is not None else True


def at_ready(memory: RunMemory | None, go: threading.Event) -> Callable[[], None]:
    """What the supervisor does when the runner says `ready`: the bound counts from here, then the runner may run
    its first cell (it waits for `go`: protocol.write_in_background)."""

    def ready() -> None:
        try:
            if memory is not None:
                memory.count_from_ready()
        finally:
            go.set()

    return ready


def memory_sentence(memory_mb: int) -> str:
    """What the student reads when the run went over its memory bound (the supervisor's `ended_early`)."""
    return (
        f"the notebook's processes together used more memory than the limit of {memory_mb} MB (for all of them "
        "together, children included), so the run was stopped there"
    )
