"""Work that a few tests wait for, started in the background at the start of the run (conftest.py's BACKGROUND):
one piece of work per run, in a thread, whose processes run in sessions of their own so that `remove` can end
them when the run stops before any test waited (tests/support/bundle_install.py, tests/support/student_install.py)."""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

Result = TypeVar("Result")


class BackgroundWork(Generic[Result]):
    """`work(folder)` run once per run in a thread, in a temporary folder named with `prefix`."""

    def __init__(self, prefix: str, work: Callable[[Path], Result]) -> None:
        self.prefix, self.work = prefix, work
        self._thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=prefix)
        self._started: tuple[Path, concurrent.futures.Future[Result]] | None = None
        self._running: set[subprocess.Popen] = set()

    def run(
        self, command: list[str], *, env: dict[str, str], timeout: float, cwd: Path | None = None
    ) -> subprocess.CompletedProcess:
        """subprocess.run(command, capture_output=True, text=True) in a session of its own, which `remove` ends."""
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        self._running.add(process)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        finally:
            self._running.discard(process)
        return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)

    def start(self) -> None:
        """Begin the work (once per run)."""
        if self._started is None:
            folder = Path(tempfile.mkdtemp(prefix=self.prefix))
            self._started = (folder, self._thread.submit(self.work, folder))

    def result(self) -> Result:
        """The finished work, waiting for it (started now if it was not yet)."""
        self.start()
        assert self._started is not None
        return self._started[1].result()

    def remove(self) -> None:
        """The work's folder, gone; work no test waited for (the run stopped early) is ended first."""
        if self._started is None:
            return
        (folder, done), self._started = self._started, None
        while not done.done():
            for process in list(self._running):
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            concurrent.futures.wait([done], timeout=1)
        shutil.rmtree(folder, ignore_errors=True)
