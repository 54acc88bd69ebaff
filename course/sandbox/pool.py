"""The warm grading pool: sandboxed workers that import torch and IPython once, then fork a fresh,
unprivileged child per submission.

Every guarantee of a cold run holds: each worker lives in the same bubblewrap view (no network, no course
files, own pid namespace); each child gets its own /tmp, the rlimits, its worker's leased uid and
no_new_privs before it reads the submission; the grader enforces the same time limits and, when a run
ends, kills every process left with that uid. A worker that dies or misbehaves is replaced.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from course.core.config import DEFAULT_SANDBOX_UID, Limits
from course.core.errors import SandboxError
from course.sandbox.bubblewrap import DEVPTS_OPTIONS, bwrap_view, interpreter_paths_under_tmp
from course.sandbox.cold import run_cells
from course.sandbox.giving_way import GivingWay
from course.sandbox.handed_in import RUNNER_SOURCE, Cell, notebook_module_cell
from course.sandbox.levels import LEVELS, Level, choose_isolation, first_choice
from course.sandbox.limits import SANDBOX_ENV, rlimits_for
from course.sandbox.memory import RunMemory, at_ready
from course.sandbox.protocol import EventReader, encode_request, write_in_background
from course.sandbox.retry import first_ready
from course.sandbox.supervisor import RunResult, Supervised, supervise
from course.sandbox.uids import (
    below_the_worker,
    below_the_worker_quickly,
    descendants,
    kill_descendants,
    lease_uid,
    processes_of,
    reap_uid,
)

log = logging.getLogger(__name__)

WORKER_START_SECONDS = 60
LONG_RUN_SECONDS = 2.0  # a run this long, with others waiting, gets a stand-in worker (see WarmPool)
STANDBY_LONG_RUN_SECONDS = 0.5  # ... this long when a standby worker is ready (an honest run takes about 0.05 s)
STAND_IN_CHECK_SECONDS = 0.1
WORKER_COMMAND_START = (sys.executable, "-I", "-c")  # how a worker's command line (and its forks') begins
STUDENT_NICENESS = 5


def worker_command(level: str, tmp_mb: int) -> list[str]:
    if level == "bwrap":
        # The worker stays root inside the view, keeping only what it needs to set up each child: its
        # namespaces and /tmp (SYS_ADMIN) and the drop to the child's uid (SETUID, SETGID).
        # (bubblewrap run by root keeps every capability unless told otherwise: drop them all first; SETPCAP
        # is for emptying each child's bounding set)
        return [
            *bwrap_view(tmp_mb, with_aliases=True),
            "--cap-drop",
            "ALL",
            "--cap-add",
            "CAP_SETUID",
            "--cap-add",
            "CAP_SETGID",
            "--cap-add",
            "CAP_SYS_ADMIN",
            "--cap-add",
            "CAP_SETPCAP",
            "--",
        ]
    if level == "userns":
        # Not root: inside its user namespace the worker keeps SYS_ADMIN there (and nowhere else) to give
        # each child its namespaces and /tmp; the child drops every capability before student code.
        # (SETPCAP: to empty the child's bounding set before student code)
        return [
            *bwrap_view(tmp_mb, with_aliases=True, user_namespace=True),
            "--cap-add",
            "CAP_SYS_ADMIN",
            "--cap-add",
            "CAP_SETPCAP",
            "--",
        ]
    return []


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    control: socket.socket
    uid: int
    log: int  # a file descriptor of the worker's output: an unlinked file, so nothing is left behind on a crash
    events: EventReader = field(default_factory=lambda: EventReader(max_line=65536, max_total=2**62))
    pending: list[dict[str, Any]] = field(default_factory=list)
    stopped: bool = False

    def read_event(self, timeout: float) -> dict[str, Any] | None:
        """The next control message, or None on timeout, a dead worker or a garbled line."""
        deadline = time.monotonic() + timeout
        while not self.pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.events.broken:
                return None
            try:
                self.control.settimeout(remaining)  # raises too once the pool has closed the socket
                data = self.control.recv(4096)
            except (TimeoutError, OSError):
                return None
            if not data:
                return None
            self.pending += self.events.feed(data)
        return self.pending.pop(0)

    def log_tail(self) -> str:
        try:
            size = os.fstat(self.log).st_size
            data = os.pread(self.log, 8000, max(0, size - 8000))
        except OSError:
            return ""
        return data.decode("utf-8", errors="replace")[-2000:].strip()

    def stop(self) -> None:
        """End the worker and close what the pool holds of it; once (its log's descriptor may be reused after)."""
        if self.stopped:
            return
        self.stopped = True
        try:
            self.control.close()
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
            with contextlib.suppress(OSError):
                os.close(self.log)


class WarmPool:
    """`size` warm workers; `run(...)` has the signature and result of `run_cells` (a `Runner`).

    A run that has gone on for LONG_RUN_SECONDS (a notebook sleeping or spinning towards its time limit;
    an honest one takes a fraction of a second) while other runs wait for a worker gets a stand-in: one more
    worker starts, so the class goes on beside it rather than a worker short for the whole limit. The
    stand-in has a uid of its own; when the long run ends its worker retires and the pool is `size` again.
    Callers that want this give the pool more threads than workers (`threads`).

    A pool that lives long (the submission service) keeps `standby` more workers started and idle: a long run's
    stand-in is then one of them, at once and after only STANDBY_LONG_RUN_SECONDS, and when the long run ends
    its worker takes the stand-in's place in standby. No worker starts (a torch import, more CPU than most long
    runs cost) unless more runs go long at once than there are standby workers."""

    def __init__(
        self,
        size: int,
        limits: Limits,
        *,
        isolation: str = "auto",
        base_uid: int = DEFAULT_SANDBOX_UID,
        prelude: tuple[str, ...] | None = None,
        compiled: tuple[str, ...] = (),
        standby: int = 0,
        prove_by_start: bool = False,
    ) -> None:
        self.limits = limits
        # The grader's cells that begin every submission, run once in each worker before it forks (see
        # runner._preload): by default the cell that makes the course's helper module.
        self.prelude = (notebook_module_cell(),) if prelude is None else prelude
        # Cells most submissions hold unchanged (the released notebook's code cells: public text only, since every
        # child can read what its worker holds), compiled once in each worker (runner._precompile).
        self.compiled = compiled
        self.size = size
        self.requested = isolation
        # With prove_by_start, a level not chosen yet is the probe's first choice, unprobed, as a cold sandbox's
        # (cold.py): the first worker that reaches its runner's `ready` proves it, and a pool none of whose workers
        # start is refused (`unproven` stays True: the caller may probe and try again at the level it chooses).
        known = choose_isolation.known(isolation, base_uid, limits.tmp_mb)
        first = first_choice(isolation) if prove_by_start and not known else None
        self.unproven = first is not None
        self.level, self.note = known or (
            (first, "") if first else choose_isolation(isolation, base_uid, limits.tmp_mb)
        )
        self.isolation = LEVELS[self.level]
        self.base_uid = base_uid
        self._leases = ExitStack()
        self._idle: queue.Queue[_Worker | None] = queue.Queue()  # None: a worker that did not start
        self._lock = threading.Lock()
        self._workers: list[_Worker] = []
        self._busy: dict[int, float] = {}  # id of a worker -> when its run started
        self._stood_in: set[int] = set()  # ids of workers whose long run has a stand-in
        self._spare_uids: list[int] = []  # leased uids of retired workers, owning no process
        self.standby = standby
        self._standby: list[_Worker] = []  # started workers kept idle for long runs' stand-ins
        self._closing = threading.Event()
        self.standby_started = threading.Event()  # set when the standby workers have started (or failed to)
        self._closed = False
        self.start_failure = ""
        try:
            spawned = [self._spawn(self._lease()) for _ in range(size)]
        except BaseException:
            self.close()
            raise
        # Workers import torch in parallel with whatever the grader does next; each joins the idle
        # queue when it is ready (None stands for one that failed to start). The standby workers start
        # after them, so as not to slow the first grading down.
        starts = [self._start_in_background(worker) for worker in spawned]
        if standby:
            threading.Thread(target=self._start_standby, args=(starts,), daemon=True).start()

    @property
    def alive(self) -> bool:
        """Whether the pool is open with at least one worker started, starting or at work."""
        with self._lock:
            return not self._closed and bool(self._workers)

    @property
    def standby_ready(self) -> int:
        """How many standby workers are started and idle now."""
        with self._lock:
            return len(self._standby)

    @property
    def threads(self) -> int:
        """How many runs a caller may have waiting on the pool at once so that stand-ins are used: as many again
        as the workers (for stand-ins started when needed), and one more per standby worker."""
        return 2 * self.size + self.standby

    def _start_in_background(self, worker: _Worker, *, stand_in: bool = False) -> threading.Thread:
        def start() -> None:
            if self._ready(worker):
                self._idle.put(worker)
            elif not stand_in:  # a stand-in that does not start is only a missing stand-in
                self._idle.put(None)

        thread = threading.Thread(target=start, daemon=True)
        thread.start()
        return thread

    def _start_standby(self, after: list[threading.Thread]) -> None:
        """Start the standby workers, then stay until the pool closes: a worker is killed when the thread
        that started it ends (bubblewrap's --die-with-parent is the parent *thread*'s death signal)."""
        try:
            for thread in after:
                thread.join()
            for _ in range(self.standby):
                if self._closed:
                    break
                worker = self._spawn(self._lease())
                if not self._ready(worker):  # the pool works without it: stand-ins start as they are needed
                    with self._lock:
                        if worker in self._workers:
                            self._workers.remove(worker)
                    break
                with self._lock:
                    if not self._closed:
                        self._standby.append(worker)
                        continue
                self._retire(worker)
                break
        except Exception as error:  # no uid left to lease, say: the standby workers already started stay
            log.warning(f"a standby worker did not start: {error}")
        finally:
            self.standby_started.set()
            self._closing.wait()

    def _lease(self) -> int:
        with self._lock:
            if self._spare_uids:
                return self._spare_uids.pop()
            return self._leases.enter_context(lease_uid(self.base_uid)) if self.isolation.leased_uid else os.getuid()

    def _acquire(self) -> _Worker | None:
        """An idle worker; while waiting, a stand-in for a long run (see the class)."""
        deadline = time.monotonic() + WORKER_START_SECONDS + 30
        while True:
            try:
                return self._idle.get(timeout=STAND_IN_CHECK_SECONDS)
            except queue.Empty:
                with self._lock:
                    none_left = not self._workers  # none idle, busy or starting: every one failed to start
                if none_left or time.monotonic() > deadline:
                    return None
                self._stand_in_for_a_long_run()

    def _stand_in_for_a_long_run(self) -> None:
        now = time.monotonic()
        with self._lock:
            long_after = STANDBY_LONG_RUN_SECONDS if self._standby else LONG_RUN_SECONDS
            long = [
                key for key, started in self._busy.items() if now - started > long_after and key not in self._stood_in
            ]
            # A standby worker stands in for any long run; a worker is started for at most `size` of them.
            if not long or (not self._standby and len(self._stood_in) >= self.size):
                return
            self._stood_in.add(long[0])
            ready = self._standby.pop() if self._standby else None
        if ready is not None:
            self._idle.put(ready)
        else:
            self._start_in_background(self._spawn(self._lease()), stand_in=True)

    def _release(self, worker: _Worker, healthy: bool) -> None:
        with self._lock:
            self._busy.pop(id(worker), None)
            stood_in = id(worker) in self._stood_in
            self._stood_in.discard(id(worker))
        if not healthy:
            self._replace(worker, keep=not stood_in)
        elif stood_in and self._to_standby(worker):
            return
        elif stood_in:
            self._retire(worker)
        else:
            self._idle.put(worker)

    def _to_standby(self, worker: _Worker) -> bool:
        """Keep a healthy worker whose long run had a stand-in as a standby worker, if one is missing."""
        with self._lock:
            if self._closed or len(self._standby) >= self.standby:
                return False
            self._standby.append(worker)
            return True

    def _retire(self, worker: _Worker) -> None:
        """A worker whose long run had a stand-in leaves: the pool is back to its size."""
        worker.stop()
        with self._lock:
            if worker in self._workers:
                self._workers.remove(worker)
        if not self.isolation.leased_uid or self._closed:
            return
        if reap_uid(worker.uid):
            with self._lock:
                self._spare_uids.append(worker.uid)
        else:
            log.warning(f"uid {worker.uid} still owns processes after a run; it is retired")

    def _spawn(self, uid: int) -> _Worker:
        grader_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        command = [
            *worker_command(self.level, self.limits.tmp_mb),
            *WORKER_COMMAND_START,
            RUNNER_SOURCE,
            "--serve",
            str(worker_end.fileno()),
        ]
        env = {} if self.isolation.namespaces else dict(SANDBOX_ENV)
        # What a worker prints (an import error, bubblewrap's complaint) is kept for the error message.
        log_fd = _nameless_log()  # kept open, read by log_tail; a grader that is killed leaves no file behind
        prelude_read, prelude_write = os.pipe()  # the prelude's and compiled cells' sources, on its stdin
        try:
            process = subprocess.Popen(  # noqa: S603 - fixed argument list, no shell
                command,
                stdin=prelude_read,
                stdout=log_fd,
                stderr=log_fd,
                pass_fds=(worker_end.fileno(),),
                start_new_session=True,
                env=env,
                cwd="/",
            )
        except BaseException:
            os.close(log_fd)
            os.close(prelude_write)
            raise
        finally:
            worker_end.close()
            os.close(prelude_read)
        write_in_background(
            prelude_write, json.dumps({"prelude": list(self.prelude), "compiled": list(self.compiled)}).encode()
        )
        worker = _Worker(process, grader_end, uid, log_fd)
        with self._lock:
            self._workers.append(worker)
        return worker

    def _ready(self, worker: _Worker) -> bool:
        if (worker.read_event(WORKER_START_SECONDS) or {}).get("event") == "ready":
            if self.unproven:  # the level started: it works here
                choose_isolation.confirm(self.requested, self.base_uid, self.limits.tmp_mb, self.level)
                self.unproven = False
            return True
        self.start_failure = worker.log_tail() or f"exit code {worker.process.poll()}"
        worker.stop()
        with self._lock:
            if worker in self._workers:
                self._workers.remove(worker)
        return False

    def _replace(self, worker: _Worker, keep: bool = True) -> None:
        """A worker that died or misbehaved gives way to a fresh one (unless keep is False: a worker whose
        long run had a stand-in just retires). It keeps the leased uid only when that uid owns no process any
        more; otherwise the uid stays leased (to nobody) and the fresh worker gets another, so nothing left of
        one student can ever share a uid with the next."""
        if not keep or self._closed:
            self._retire(worker)
            return
        worker.stop()
        with self._lock:
            if worker in self._workers:
                self._workers.remove(worker)
        uid = worker.uid
        if self.isolation.leased_uid and not reap_uid(uid):
            log.warning(f"uid {uid} still owns processes after a run; it is retired")
            uid = self._lease()
        fresh = self._spawn(uid)
        self._idle.put(fresh if self._ready(fresh) else None)

    def run(
        self,
        cells: list[Cell],
        answer_names: tuple[str, ...],
        function_points: dict[str, list[float]],
        limits: Limits | None = None,
        *,
        cold_fallback: bool = True,
        **_: object,
    ) -> RunResult:
        """Run one submission on a warm worker. A run that ends before its runner's `ready` ran no student code:
        it is tried again on another worker (the one it ran on is replaced) and then, with cold_fallback, in a
        fresh cold sandbox at the pool's level; SandboxStartError when no try starts (retry.py). The start-up
        self-test passes cold_fallback=False, so that a pool whose workers cannot start a run is refused rather
        than graded cold, student by student."""
        limits = limits or self.limits
        tries = [
            (what, lambda: self._run_warm(cells, answer_names, function_points, limits))
            for what in ("a warm worker", "another warm worker")
        ]
        if cold_fallback:
            tries.append(
                (
                    "a fresh cold sandbox",
                    lambda: run_cells(
                        cells, answer_names, function_points, limits, isolation=self.requested, uid=self.base_uid
                    ),
                )
            )
        return first_ready(tries)

    def _run_warm(
        self, cells: list[Cell], answer_names: tuple[str, ...], function_points: dict[str, list[float]], limits: Limits
    ) -> RunResult:
        worker = self._acquire()
        if worker is None:
            raise SandboxError(
                "a warm grading worker did not start; run with --jobs 0 to grade without the pool "
                f"(its last words: {self.start_failure or 'none'})"
            )
        healthy = False
        with self._lock:
            self._busy[id(worker)] = time.monotonic()
        try:
            result, healthy = self._run_on(worker, cells, answer_names, function_points, limits)
            # A worker whose run never started is replaced: the next try gets another.
            healthy = healthy and result.ready
            return result
        finally:
            self._release(worker, healthy)

    def _run_on(
        self,
        worker: _Worker,
        cells: list[Cell],
        answer_names: tuple[str, ...],
        function_points: dict[str, list[float]],
        limits: Limits,
    ) -> tuple[RunResult, bool]:
        """One run on `worker`, and whether the worker may take the next."""
        request_read, request_write = os.pipe()
        channel_read, channel_write = os.pipe()
        output_read, output_write = os.pipe()
        private_tmp = self.isolation.namespaces
        scratch = "/tmp" if private_tmp else self._scratch(worker.uid)
        job = self._job(worker, limits, scratch)
        started = time.monotonic()
        self._send_job(
            worker, job, (request_read, request_write, channel_read, channel_write, output_read, output_write)
        )
        forked = worker.read_event(WORKER_START_SECONDS) or {}
        child_pid = forked.get("pid") if forked.get("event") == "forked" and type(forked.get("pid")) is int else None
        followed = _WarmRun(worker, self.isolation, child_pid)
        try:
            memory = _bound_memory(followed, limits) if forked.get("event") == "forked" else None
        except (OSError, SandboxError) as error:
            for fd in (request_write, channel_read, output_read):
                os.close(fd)
            raise SandboxError(f"cannot bound the run's memory: {error}") from None
        go = threading.Event()  # the child runs no cell before it (protocol.write_in_background)
        write_in_background(request_write, encode_request(cells, answer_names, function_points), go=go)
        run = Supervised(
            output_read,
            channel_read,
            followed.kill,
            followed.exit_code,
            followed.cpu_seconds,
            waited=GivingWay(followed.processes_quickly, started).waited,
            over_memory=memory.exceeded if memory else lambda: False,
            look_every=memory.look_every if memory else 0.1,
            at_ready=at_ready(memory, go),
        )
        try:
            result = supervise(run, cells, answer_names, function_points, limits, self.level, self.note, started)
        finally:
            go.set()  # the request's pipe closes whatever happened
            os.close(output_read)
            os.close(channel_read)
            if not private_tmp:
                self._clear_scratch(scratch)
            if memory is not None and not memory.close():
                followed.cleaned.append(False)  # something of the run is still there: the worker is replaced
        # The worker is reusable only if it reported its child's end and the uid owns nothing any more.
        healthy = (bool(followed.exit_codes) or followed.exit_code(5.0) is not None) and all(followed.cleaned)
        if not self.isolation.root_inside and not self.isolation.leased_uid and not healthy:
            worker.process.kill()
        return result, healthy and worker.process.poll() is None

    @staticmethod
    def _send_job(worker: _Worker, job: dict[str, Any], pipes: tuple[int, int, int, int, int, int]) -> None:
        """Hand `worker` the job with the child's ends of the pipes, then close them here (all six if it fails)."""
        request_read, request_write, channel_read, channel_write, output_read, output_write = pipes
        try:
            socket.send_fds(worker.control, [json.dumps(job).encode()], [request_read, channel_write, output_write])
        except OSError:
            for fd in (request_read, request_write, channel_read, channel_write, output_read, output_write):
                os.close(fd)
            raise SandboxError("a warm grading worker stopped answering") from None
        for fd in (request_read, channel_write, output_write):
            os.close(fd)

    def _job(self, worker: _Worker, limits: Limits, scratch: str) -> dict[str, Any]:
        """What the worker is told of the run it forks (runner.py), beside the request's pipes."""
        private_tmp = self.isolation.namespaces
        return {
            "uid": worker.uid if self.isolation.leased_uid else None,
            "private_tmp": private_tmp,
            "namespaces": private_tmp,  # a pid, mount and IPC namespace per student (see runner.py)
            "rebind": interpreter_paths_under_tmp() if private_tmp else [],
            "tmp_mb": limits.tmp_mb,
            "ptys": DEVPTS_OPTIONS,  # a devpts of the student's own (with private_tmp)
            "cwd": scratch,
            "rlimits": rlimits_for(limits),
            "nice": STUDENT_NICENESS,
            "env": {**SANDBOX_ENV, "HOME": scratch, "IPYTHONDIR": f"{scratch}/.ipython"},
        }

    def _scratch(self, uid: int) -> str:
        folder = tempfile.mkdtemp(prefix="autograd-sandbox-")
        if self.isolation.leased_uid:
            os.chown(folder, uid, uid)
        return folder

    @staticmethod
    def _clear_scratch(folder: str) -> None:
        shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        self._closed = True
        self._closing.set()
        with self._lock:
            workers, self._workers = self._workers, []
        for worker in workers:
            worker.stop()
            if self.isolation.leased_uid:
                reap_uid(worker.uid)
        self._leases.close()

    def __enter__(self) -> WarmPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _bound_memory(followed: _WarmRun, limits: Limits) -> RunMemory:
    """The child reads the request before any student code: it and all it forked are in the run's memory bound
    (memory.py) before the request is written."""
    memory = RunMemory(limits.memory_mb, followed.memory_processes)
    memory.admit()
    return memory


@dataclass
class _WarmRun:
    """One run on a warm worker as the grader follows it: the processes it is made of, its end as the worker reports
    it, and ending whatever is left of it."""

    worker: _Worker
    isolation: Level
    child_pid: int | None  # the child the worker forked for the run (it may not have its uid yet)
    exit_codes: list[int] = field(default_factory=list)
    emptied: list[bool] = field(default_factory=list)  # the worker ended the run's pid namespace, and every process
    cpu: list[float] = field(default_factory=list)
    cleaned: list[bool] = field(default_factory=list)

    def memory_processes(self) -> list[int]:
        """The run's processes, by host pid, from the child the worker forked (it may not have its uid yet)."""
        if self.isolation.namespaces:  # all of the run is below the worker (the child's pid is the worker's view)
            return below_the_worker_quickly(self.worker.process.pid, keep=[*WORKER_COMMAND_START])
        tree = [] if self.child_pid is None else [self.child_pid, *descendants(self.child_pid)]
        return sorted({*tree, *processes_of(self.worker.uid)}) if self.isolation.leased_uid else tree

    def exit_code(self, timeout: float) -> int | None:
        if self.exit_codes:
            return self.exit_codes[0]
        event = self.worker.read_event(timeout) if timeout else self.worker.read_event(0.001)
        if event and event.get("event") == "exit" and type(event.get("code")) is int:
            code: int = event["code"]
            self.exit_codes.append(code)
            self.emptied.append(event.get("emptied") is True)
            if type(event.get("cpu")) is float:
                self.cpu.append(event["cpu"])
            return code
        return None

    def cpu_seconds(self) -> float | None:
        return self.cpu[0] if self.cpu else None

    def kill(self) -> None:
        if any(self.emptied):
            # The worker ended the run's pid 1 itself before it reported the end (runner.py), and the kernel ends
            # every process of a pid namespace before its pid 1 can be waited for: nothing of the run is left,
            # and no process outside that namespace ever ran the student's code. (A scan of every process on
            # the machine here cost 1-2 ms of the grader's CPU a run, more on a busy machine.)
            self.cleaned.append(True)
        elif self.isolation.leased_uid:
            self.cleaned.append(reap_uid(self.worker.uid))
        elif self.isolation.namespaces:
            # The student's uid is the grader's own here: end the worker's children (the student's pid 1
            # among them, which takes its whole pid namespace along), never anything by uid.
            self.cleaned.append(kill_descendants(self.worker.process.pid, keep=[*WORKER_COMMAND_START]))
        elif self.child_pid is not None:
            # Same uid as the grader: end the child's own session (it called setsid), not by uid.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.child_pid, signal.SIGKILL)

    def processes(self) -> list[int]:
        """The run's processes, by host pid, as kill() finds them."""
        if self.isolation.leased_uid:
            return processes_of(self.worker.uid)
        if self.isolation.namespaces:
            return below_the_worker(self.worker.process.pid, keep=[*WORKER_COMMAND_START])
        return [] if self.child_pid is None else [self.child_pid, *descendants(self.child_pid)]

    def processes_quickly(self) -> list[int]:
        """The same, found in a fraction of a millisecond where the run has a pid namespace of its own (all of
        it is below the worker): a run that hops from process to process every millisecond is caught."""
        if self.isolation.namespaces:
            return below_the_worker_quickly(self.worker.process.pid, keep=[*WORKER_COMMAND_START])
        return self.processes()


def default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def _nameless_log() -> int:
    """A file for a worker's output that has no name at any moment (O_TMPFILE), so that nothing of it ever shows in
    the temporary folder; where the filesystem cannot make one, a named file unlinked at once."""
    folder = tempfile.gettempdir()
    try:
        return os.open(folder, os.O_TMPFILE | os.O_RDWR, 0o600)
    except (AttributeError, OSError):  # no O_TMPFILE here (an old kernel, a filesystem without it)
        log_fd, log_name = tempfile.mkstemp(prefix="autograd-worker-", suffix=".log")
        os.unlink(log_name)
        return log_fd
