"""A student's install of the wheel into a fresh venv, for tests/test_student_install.py, in the background from
the start of the run.

The install unpacks torch and Jupyter afresh: minutes on a busy machine, mostly waiting on the disk. conftest.py
starts it (at a lower CPU priority, nice 10) when the run's tests include the student-install test, which waits
for it here (`installed`) and checks what it did; everything else that test does runs in the test itself.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from course.bundle import build_wheel
from helpers import ROOT

TEST = "test_a_student_install_fetches_checks_and_submits_without_the_grader_s_tools"


@dataclass
class Installed:
    home: Path  # the student's home folder, with the venv in home/.venv
    env: dict[str, str]  # the student's environment: HOME, and nothing of the test environment's venv
    pip: subprocess.CompletedProcess


_running: set[subprocess.Popen] = set()


def student_env(home: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if key not in ("VIRTUAL_ENV", "PYTHONPATH", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_PATH")}
    env["HOME"] = str(home)
    return env


def install(folder: Path) -> Installed:
    """The wheel built from this checkout, then `python -m venv` and `pip install <wheel>` as docs/students.md
    says, in a home folder under `folder`."""
    wheel = build_wheel(ROOT, folder / "dist")
    home = folder / "home"
    home.mkdir()
    env = student_env(home)
    venv = home / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], env=env, cwd=home, check=True, capture_output=True)
    command = ["nice", "-n", "10", str(venv / "bin" / "pip"), "install", "--quiet", str(wheel)]
    process = subprocess.Popen(command, cwd=home, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    _running.add(process)
    try:
        stdout, stderr = process.communicate(timeout=1500)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
    finally:
        _running.discard(process)
    return Installed(home, env, subprocess.CompletedProcess(command, process.returncode, stdout, stderr))


_installs = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="student-install")
_started: dict[str, tuple[Path, concurrent.futures.Future[Installed]]] = {}


def start_in_background() -> None:
    """Begin the install (once per run)."""
    if "student" not in _started:
        folder = Path(tempfile.mkdtemp(prefix="autograd-student-"))
        _started["student"] = (folder, _installs.submit(install, folder))


def installed() -> Installed:
    """The finished install, waiting for it (started now if it was not yet)."""
    start_in_background()
    return _started["student"][1].result()


def remove() -> None:
    """The install's folder, gone; an install no test waited for (the run stopped early) is ended first."""
    if "student" not in _started:
        return
    folder, done = _started.pop("student")
    while not done.done():
        for process in list(_running):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        concurrent.futures.wait([done], timeout=1)
    shutil.rmtree(folder, ignore_errors=True)
