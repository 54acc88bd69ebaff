"""A run's clock counts only the time it could run; a run that goes long gives way to the others.

Time limits are wall-clock, and the grader's machine is shared: under load a cell waits for a processor
while other students' runs (or anything else) use it. So the supervisor does not count against a cell the time
its threads were kept waiting for a processor (the kernel's count, `/proc/<pid>/task/<tid>/schedstat`), up
to one more cell limit: a cell may compute about as much under load as alone. The submission's limit stays
wall-clock: no run outlives it.

A notebook that spins towards its cell limit would otherwise hold a core for the whole limit, and every other
student's run would share what is left. So in the warm pool, once a run's processes have been seen to use
YIELD_AFTER_CPU_SECONDS of CPU (an honest notebook uses a few hundredths of a second), or once the run has gone
on for YIELD_AFTER_SECONDS of wall time, whichever comes first, the grader lowers their priority:
- each thread goes to the SCHED_IDLE policy: it runs when nothing else wants the processor, any other task
  that wakes preempts it at once, and the kernel places waking tasks on a processor that runs only such
  threads as if it were idle (where SCHED_IDLE is refused, nice 10 instead);
- the autogroup of each of the run's sessions goes to nice 10 (a tenth of a normal share) where the kernel
  groups processes by session (Debian's default, under which a thread's priority only ranks it within its
  own session).
It is done again on every look, so a process that resets its autogroup or starts a new session (and lets its
leader exit, say) is lowered again; a thread cannot leave SCHED_IDLE by itself (that needs an RLIMIT_NICE above
0, which the sandbox's rlimits forbid). The time it then waits is not counted against it either, as above:
giving way costs it time, not work.

Why the wall time too: what a run's processes used is what the grader sees of them at its looks, and a process
that ends between two looks takes its CPU time with it. The kernel keeps a dead process's time only for the
parent that waits for it (cutime), and the sandbox's pid 1 reaps orphans without waiting (SIGCHLD ignored; at
the uid levels they go to the host's init), so no count of the run's own covers them. A notebook that spread its
computing over short-lived processes (each spins a millisecond, forks its successor, exits) was never seen to
use a fifth of a second, and kept a core at normal priority for its whole submission limit. The wall time
cannot be dodged that way: an honest run in the warm pool ends in a few tenths of a second, and one that goes on
past a second (not counting the time it was kept waiting for a processor) gives way whatever it was seen to use
(a run that sleeps loses nothing by it). Once lowered, a
process's children are born lowered (SCHED_IDLE is inherited across fork, and the autogroup is the session's).

A notebook that keeps its own threads waiting (a fork bomb: more runnable threads than processors) uses a
processor or more meanwhile, and is not credited. Threads that end between two looks take their CPU time with
them, so a notebook built to hide its use that way can stretch a cell to twice its limit, and never past the
submission's limit, which bounds every run already. Everything
is best effort: a process that is gone, or a file the grader may not write (a non-root grader, a process that
made itself undumpable), is skipped.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable

YIELD_AFTER_CPU_SECONDS = 0.2
YIELD_AFTER_SECONDS = 1.0  # of the run's wall time, whatever it was seen to use (see above: processes that hop)
FIRST_LOOK_SECONDS = 0.15  # wall time before a run's processes are first looked at (most honest runs have ended)
LOOK_EVERY_SECONDS = 0.2
GIVING_WAY_NICENESS = 10
LOWER_TRIES = 5  # finding the run's processes again at one look, while some ended before they were lowered


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


def session_of(pid: int) -> int | None:
    """The session id of `pid` (the pid of the process that started the session, as the grader sees pids)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[3])
    except (OSError, IndexError, ValueError):
        return None


def in_a_session_of_its_own(pid: int) -> bool:
    """Whether `pid`'s session (and so its autogroup) is the run's own: `pid` leads it, or the process that
    started it is gone (a notebook's orphaned session: the warm worker's session has a live leader, the worker,
    for as long as any run is in it). A leader's pid since reused by a process leading a session of its own
    looks alive: then nothing is lowered, never the wrong autogroup."""
    session = session_of(pid)
    if session is None or session <= 0:  # 0: a leader the grader cannot see
        return False
    return session == pid or session_of(session) != session


def threads_of(pid: int) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        return []


def lower_priority(pid: int, threads: list[int]) -> bool:
    """Lower the process's threads (and its session's autogroup when the session is the run's own); False when
    none of them was there any more."""
    reached = False
    for tid in threads:  # a thread's policy and nice are its own on Linux
        try:
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            reached = True
        except ProcessLookupError:
            continue
        except OSError:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, tid, GIVING_WAY_NICENESS)
                reached = True
    if not reached:
        return False
    # The autogroup is the session's: only that of a session the run made (the run's pid 1, say, is still in its
    # warm worker's session, whose autogroup must stay as it is for the next student). A session whose leader
    # has ended is one too: a notebook that starts a session and lets its leader exit keeps it otherwise at
    # nice 0, and SCHED_IDLE alone ranks its threads only within their own autogroup.
    if not in_a_session_of_its_own(pid):
        return True
    # Written only when it is not lowered yet: the kernel takes one autogroup nice from a grader that is not
    # root per tenth of a second, machine-wide (EAGAIN otherwise), and a run may have several sessions.
    with contextlib.suppress(OSError):  # absent where the kernel has no autogroups
        with open(f"/proc/{pid}/autogroup", "rb") as autogroup:
            if autogroup.read().split()[-1:] == [str(GIVING_WAY_NICENESS).encode()]:
                return True
        descriptor = os.open(f"/proc/{pid}/autogroup", os.O_WRONLY)
        try:
            os.write(descriptor, str(GIVING_WAY_NICENESS).encode())
        finally:
            os.close(descriptor)
    return True


class GivingWay:
    """One run's clock keeper. `waited()`, called on every tick of the supervisor, returns the seconds of the run
    so far in which it was kept waiting for a processor by other work: summed over looks, each counting the
    longest wait of any one of its threads since the last look, but no more than the part of that time the
    run as a whole did not spend on a processor. With `lower`, it lowers the run's priority once it has been seen
    to use YIELD_AFTER_CPU_SECONDS of CPU or has gone on for YIELD_AFTER_SECONDS since `started`."""

    def __init__(self, processes: Callable[[], list[int]], started: float, *, lower: bool = True) -> None:
        self.processes = processes  # the host pids of the run's processes, found afresh on each call
        self.lower = lower
        self.started = started
        self.last_look = started
        self.next_look = started + FIRST_LOOK_SECONDS
        self.giving_way = False
        self.seen: dict[int, tuple[int, int]] = {}  # thread -> (ns on a CPU, ns waiting) at the last look
        self.credit = 0.0
        self.used = 0.0  # seconds on a CPU of the threads seen at the looks so far (not all: see above)

    def waited(self) -> float:
        now = time.monotonic()
        if now < self.next_look:
            return self.credit
        times = {pid: thread_times(pid) for pid in self.processes()}
        longest = used = 0
        for threads in times.values():
            for tid, (on_cpu, waiting) in threads.items():
                before_on_cpu, before_waiting = self.seen.get(tid, (0, 0))
                if on_cpu < before_on_cpu or waiting < before_waiting:  # a thread id used again: a new thread
                    before_on_cpu = before_waiting = 0
                longest = max(longest, waiting - before_waiting)
                used += on_cpu - before_on_cpu
                self.seen[tid] = (on_cpu, waiting)
        self.used += used / 1e9
        # Waiting counts only while the run as a whole used less than one processor: a run that keeps its own
        # threads waiting (a fork bomb: more of them than processors) is not short of processor time at all.
        since = now - self.last_look
        self.credit += max(0.0, min(longest / 1e9, since - used / 1e9, since))
        self.last_look, self.next_look = now, now + LOOK_EVERY_SECONDS
        # What the run has been seen to use so far, those of its processes that have ended included: a notebook
        # that moves its work to a new process every so often (each below the limit) gives way too; one that
        # moves it more often than the grader looks is not seen, and gives way when its wall time is up.
        if self.lower and not self.giving_way:
            # Its wall time as its clock counts it: without the time it was kept waiting for a processor, so a
            # short honest run on a busy machine is not lowered for the machine's load.
            self.giving_way = (
                self.used >= YIELD_AFTER_CPU_SECONDS or now - self.started - self.credit >= YIELD_AFTER_SECONDS
            )
        if self.giving_way:
            self._lower({pid: list(threads) for pid, threads in times.items()})
        return self.credit

    def _lower(self, found: dict[int, list[int]]) -> None:
        """Lower the processes found; while one of them has ended before it was reached (its successor, born at
        normal priority, may be running: a run that hops from process to process), find them again, a few
        times. One reached is enough for a hopping run: its successors are born lowered."""
        for _ in range(LOWER_TRIES):
            ended = [pid for pid, threads in found.items() if not lower_priority(pid, threads)]
            if not ended:
                return
            found = {pid: threads_of(pid) for pid in self.processes()}
