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
from pathlib import Path

from course.config import DEFAULT_SANDBOX_UID, Limits
from course.errors import SandboxError
from course.sandbox.bubblewrap import bwrap_view, interpreter_paths_under_tmp
from course.sandbox.levels import LEVELS, choose_isolation
from course.sandbox.limits import SANDBOX_ENV, rlimits_for
from course.sandbox.protocol import RUNNER_SOURCE, EventReader, encode_request, write_in_background
from course.sandbox.supervisor import RunResult, Supervised, supervise
from course.sandbox.uids import kill_descendants, lease_uid, reap_uid
from course.submission import Cell

WORKER_START_SECONDS = 60
WORKER_COMMAND_START = (sys.executable, "-I", "-c")  # how a worker's command line (and its forks') begins
STUDENT_NICENESS = 5


def worker_command(level: str, tmp_mb: int) -> list[str]:
    if level == "bwrap":
        # The worker stays root inside the view, keeping only what it needs to set up each child: its
        # namespaces and /tmp (SYS_ADMIN) and the drop to the child's uid (SETUID, SETGID).
        # (bubblewrap run by root keeps every capability unless told otherwise: drop them all first; SETPCAP
        # is for emptying each child's bounding set)
        return [*bwrap_view(tmp_mb, with_aliases=True), "--cap-drop", "ALL", "--cap-add", "CAP_SETUID",
                "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP", "--"]
    if level == "userns":
        # Not root: inside its user namespace the worker keeps SYS_ADMIN there (and nowhere else) to give
        # each child its namespaces and /tmp; the child drops every capability before student code.
        # (SETPCAP: to empty the child's bounding set before student code)
        return [*bwrap_view(tmp_mb, with_aliases=True, user_namespace=True), "--cap-add", "CAP_SYS_ADMIN",
                "--cap-add", "CAP_SETPCAP", "--"]
    return []


@dataclass
class _Worker:
    process: subprocess.Popen
    control: socket.socket
    uid: int
    log: Path
    events: EventReader = field(default_factory=lambda: EventReader(max_line=65536, max_total=2**62))
    pending: list[dict] = field(default_factory=list)

    def read_event(self, timeout: float) -> dict | None:
        """The next control message, or None on timeout, a dead worker or a garbled line."""
        deadline = time.monotonic() + timeout
        while not self.pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.events.broken:
                return None
            self.control.settimeout(remaining)
            try:
                data = self.control.recv(4096)
            except (TimeoutError, OSError):
                return None
            if not data:
                return None
            self.pending += self.events.feed(data)
        return self.pending.pop(0)

    def log_tail(self) -> str:
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")[-2000:].strip()
        except OSError:
            return ""

    def stop(self) -> None:
        try:
            self.control.close()
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
            self.log.unlink(missing_ok=True)


class WarmPool:
    """`size` warm workers; `run(...)` has the signature and result of `run_cells` (a `Runner`)."""

    def __init__(self, size: int, limits: Limits, *, isolation: str = "auto",
                 base_uid: int = DEFAULT_SANDBOX_UID) -> None:
        self.limits = limits
        self.level, self.note = choose_isolation(isolation, base_uid, limits.tmp_mb)
        self.isolation = LEVELS[self.level]
        self.base_uid = base_uid
        self._leases = ExitStack()
        self._idle: queue.Queue[_Worker | None] = queue.Queue()  # None: a worker that did not start
        self._lock = threading.Lock()
        self._workers: list[_Worker] = []
        self.start_failure = ""
        try:
            spawned = [self._spawn(self._lease()) for _ in range(size)]
        except BaseException:
            self.close()
            raise
        # Workers import torch in parallel with whatever the grader does next; each joins the idle
        # queue when it is ready (None stands for one that failed to start).
        for worker in spawned:
            threading.Thread(target=lambda w=worker: self._idle.put(w if self._ready(w) else None),
                             daemon=True).start()

    def _lease(self) -> int:
        return self._leases.enter_context(lease_uid(self.base_uid)) if self.isolation.leased_uid else os.getuid()

    def _spawn(self, uid: int) -> _Worker:
        grader_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        command = [*worker_command(self.level, self.limits.tmp_mb), *WORKER_COMMAND_START, RUNNER_SOURCE,
                   "--serve", str(worker_end.fileno())]
        env = {} if self.isolation.namespaces else dict(SANDBOX_ENV)
        # What a worker prints (an import error, bubblewrap's complaint) is kept for the error message.
        log_fd, log_name = tempfile.mkstemp(prefix="autograd-worker-", suffix=".log")
        try:
            process = subprocess.Popen(  # noqa: S603 - fixed argument list, no shell
                command, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd,
                pass_fds=(worker_end.fileno(),), start_new_session=True, env=env, cwd="/",
            )
        finally:
            os.close(log_fd)
            worker_end.close()
        worker = _Worker(process, grader_end, uid, Path(log_name))
        with self._lock:
            self._workers.append(worker)
        return worker

    def _ready(self, worker: _Worker) -> bool:
        if (worker.read_event(WORKER_START_SECONDS) or {}).get("event") == "ready":
            return True
        self.start_failure = worker.log_tail() or f"exit code {worker.process.poll()}"
        worker.stop()
        return False

    def _replace(self, worker: _Worker) -> None:
        """A worker that died or misbehaved gives way to a fresh one. It keeps the leased uid only when that
        uid owns no process any more; otherwise the uid stays leased (to nobody) and the fresh worker gets
        another, so nothing left of one student can ever share a uid with the next."""
        worker.stop()
        with self._lock:
            self._workers.remove(worker)
        uid = worker.uid
        if self.isolation.leased_uid and not reap_uid(uid):
            print(f"sandbox: uid {uid} still owns processes after a run; it is retired", file=sys.stderr)
            uid = self._lease()
        fresh = self._spawn(uid)
        self._idle.put(fresh if self._ready(fresh) else None)

    def run(self, cells: list[Cell], answer_names: tuple[str, ...], function_points: dict[str, list[float]],
            limits: Limits | None = None, **_: object) -> RunResult:
        limits = limits or self.limits
        try:
            worker = self._idle.get(timeout=WORKER_START_SECONDS + 30)
        except queue.Empty:
            worker = None
        if worker is None:
            raise SandboxError("a warm grading worker did not start; run with --jobs 0 to grade without the pool "
                               f"(its last words: {self.start_failure or 'none'})")
        healthy = False
        try:
            result, healthy = self._run_on(worker, cells, answer_names, function_points, limits)
            return result
        finally:
            if healthy:
                self._idle.put(worker)
            else:
                self._replace(worker)

    def _run_on(self, worker: _Worker, cells, answer_names, function_points, limits) -> tuple[RunResult, bool]:
        request_read, request_write = os.pipe()
        channel_read, channel_write = os.pipe()
        output_read, output_write = os.pipe()
        private_tmp = self.isolation.namespaces
        scratch = "/tmp" if private_tmp else self._scratch(worker.uid)
        job = {
            "uid": worker.uid if self.isolation.leased_uid else None,
            "private_tmp": private_tmp,
            "namespaces": private_tmp,  # a pid, mount and IPC namespace per student (see runner.py)
            "rebind": interpreter_paths_under_tmp() if private_tmp else [],
            "tmp_mb": limits.tmp_mb,
            "cwd": scratch,
            "rlimits": rlimits_for(limits),
            "nice": STUDENT_NICENESS,
            "env": {**SANDBOX_ENV, "HOME": scratch, "IPYTHONDIR": f"{scratch}/.ipython"},
        }
        started = time.monotonic()
        try:
            socket.send_fds(worker.control, [json.dumps(job).encode()], [request_read, channel_write, output_write])
        except OSError:
            for fd in (request_read, request_write, channel_read, channel_write, output_read, output_write):
                os.close(fd)
            raise SandboxError("a warm grading worker stopped answering") from None
        for fd in (request_read, channel_write, output_write):
            os.close(fd)
        forked = worker.read_event(WORKER_START_SECONDS) or {}
        child_pid = forked.get("pid") if forked.get("event") == "forked" and type(forked.get("pid")) is int else None
        write_in_background(request_write, encode_request(cells, answer_names, function_points))
        exit_codes: list[int] = []
        cpu: list[float] = []
        cleaned: list[bool] = []

        def exit_code(timeout: float) -> int | None:
            if exit_codes:
                return exit_codes[0]
            event = worker.read_event(timeout) if timeout else worker.read_event(0.001)
            if event and event.get("event") == "exit" and type(event.get("code")) is int:
                exit_codes.append(event["code"])
                if type(event.get("cpu")) is float:
                    cpu.append(event["cpu"])
                return event["code"]
            return None

        def kill() -> None:
            if self.isolation.leased_uid:
                cleaned.append(reap_uid(worker.uid))
            elif self.isolation.namespaces:
                # The student's uid is the grader's own here: end the worker's children (the student's pid 1
                # among them, which takes its whole pid namespace along), never anything by uid.
                cleaned.append(kill_descendants(worker.process.pid, keep=[*WORKER_COMMAND_START]))
            elif child_pid is not None:
                # Same uid as the grader: end the child's own session (it called setsid), not by uid.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child_pid, signal.SIGKILL)

        try:
            result = supervise(Supervised(output_read, channel_read, kill, exit_code, lambda: cpu[0] if cpu else None),
                               cells, answer_names,
                               function_points, limits, self.level, self.note, started)
        finally:
            os.close(output_read)
            os.close(channel_read)
            if not private_tmp:
                self._clear_scratch(scratch)
        # The worker is reusable only if it reported its child's end and the uid owns nothing any more.
        healthy = (bool(exit_codes) or exit_code(5.0) is not None) and all(cleaned)
        if not self.isolation.root_inside and not self.isolation.leased_uid and not healthy:
            worker.process.kill()
        return result, healthy and worker.process.poll() is None

    def _scratch(self, uid: int) -> str:
        folder = tempfile.mkdtemp(prefix="autograd-sandbox-")
        if self.isolation.leased_uid:
            os.chown(folder, uid, uid)
        return folder

    @staticmethod
    def _clear_scratch(folder: str) -> None:
        shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
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


def default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)))
