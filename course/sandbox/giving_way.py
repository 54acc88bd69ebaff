"""A run that goes long gives way to the others, without paying for it in its time limit.

A notebook that spins towards its cell limit would otherwise hold a core for the whole limit, and every other
student's run shares what is left. So once a run's processes have used YIELD_AFTER_CPU_SECONDS of CPU (an
honest notebook uses a few hundredths of a second), the grader lowers their priority:
- each thread goes to the SCHED_IDLE policy: it runs when nothing else wants the processor, any other task
  that wakes preempts it at once, and the kernel places waking tasks on a processor that runs only such
  threads as if it were idle (where SCHED_IDLE is refused, nice 10 instead);
- the autogroup of each of the run's sessions goes to nice 10 (a tenth of a normal share) where the kernel
  groups processes by session (Debian's default, under which a thread's priority only ranks it within its
  own session).
It is done again on every look, so a process that resets its autogroup or starts a new session is lowered
again; a thread cannot leave SCHED_IDLE by itself (that needs an RLIMIT_NICE the sandbox does not give).

Giving way must not cost the run its work: the time its threads then waited for a CPU while others ran (the
kernel's count, `/proc/<pid>/task/<tid>/schedstat`) is credited to the cell's clock by the supervisor, up to one
more cell limit, so what a slow but honest cell may compute depends less on the load. The submission's limit
stays wall-clock: no run outlives it. Everything is best effort: a process that is gone, or a file the grader
may not write (a non-root grader, a process that made itself undumpable), is skipped.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable

YIELD_AFTER_CPU_SECONDS = 0.5
FIRST_LOOK_SECONDS = 0.25  # wall time before a run's processes are first looked at (an honest run has ended)
LOOK_EVERY_SECONDS = 0.25
GIVING_WAY_NICENESS = 10


def thread_times(pid: int) -> dict[int, tuple[int, int]]:
    """For each thread of `pid`: (nanoseconds on a CPU, nanoseconds runnable but waiting for one)."""
    times: dict[int, tuple[int, int]] = {}
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return times
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as stat:
                on_cpu, waiting = stat.read().split()[:2]
            times[int(tid)] = (int(on_cpu), int(waiting))
        except (OSError, ValueError):
            continue
    return times


def leads_its_session(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[3]) == pid
    except (OSError, IndexError, ValueError):
        return False


def lower_priority(pid: int, threads: list[int]) -> None:
    for tid in threads:  # a thread's policy and nice are its own on Linux
        try:
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        except OSError:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, tid, GIVING_WAY_NICENESS)
    # The autogroup is the session's: only through a session's leader, the student's own (the run's pid 1, say,
    # is still in its warm worker's session, whose autogroup must stay as it is for the next student).
    if not leads_its_session(pid):
        return
    with contextlib.suppress(OSError):  # absent where the kernel has no autogroups
        descriptor = os.open(f"/proc/{pid}/autogroup", os.O_WRONLY)
        try:
            os.write(descriptor, str(GIVING_WAY_NICENESS).encode())
        finally:
            os.close(descriptor)


class GivingWay:
    """One run's state: `waited()`, called on every tick of the supervisor, lowers the run's priority once it
    has gone long and returns the seconds any of its threads has since waited for a CPU (0.0 before)."""

    def __init__(self, processes: Callable[[], list[int]], started: float) -> None:
        self.processes = processes  # the host pids of the run's processes, found afresh on each call
        self.next_look = started + FIRST_LOOK_SECONDS
        self.giving_way = False
        self.waited_before: dict[int, int] = {}  # thread -> its waiting time when the run began to give way
        self.credit = 0.0

    def waited(self) -> float:
        now = time.monotonic()
        if now < self.next_look:
            return self.credit
        self.next_look = now + LOOK_EVERY_SECONDS
        times = {pid: thread_times(pid) for pid in self.processes()}
        if not self.giving_way:
            used = sum(on_cpu for threads in times.values() for on_cpu, _ in threads.values())
            if used < YIELD_AFTER_CPU_SECONDS * 1e9:
                return self.credit
            self.giving_way = True
        for pid, threads in times.items():
            lower_priority(pid, list(threads))
            for tid, (_, waiting) in threads.items():
                since = waiting - self.waited_before.setdefault(tid, waiting)
                self.credit = max(self.credit, since / 1e9)
        return self.credit
