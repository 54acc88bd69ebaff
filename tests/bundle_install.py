"""The Gradescope bundle installed as Gradescope installs it, for tests/test_gradescope.py, in the background
from the start of the run.

`setup.sh` pip-installs the course and every dependency (torch included) into a new venv: most of a minute,
mostly unpacking wheels. conftest.py starts it (at a lower CPU priority, nice 10) when the run's tests include
test_bundle_installs_in_a_fresh_venv_and_grades, and that test waits for it here (`installed`) and checks
what it did as before; the rest of the test (run_autograder on a submission) runs in the test itself.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import signal
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from course.bundle import build_bundle
from course.config import load_config
from helpers import ROOT

TEST = "test_bundle_installs_in_a_fresh_venv_and_grades"


@dataclass
class Installed:
    root: Path  # AUTOGRADER_ROOT: source/ holds the unpacked zip, venv/ what setup.sh installed
    env: dict[str, str]
    setup: subprocess.CompletedProcess


_running: set[subprocess.Popen] = set()


def install(folder: Path) -> Installed:
    """Unpack the zip like Gradescope, then run its setup.sh into a new venv under `folder`."""
    path = build_bundle(load_config(ROOT), folder / "dist")
    root = folder / "autograder"
    with zipfile.ZipFile(path) as archive:
        archive.extractall(root / "source")
    for script in ("setup.sh", "run_autograder"):
        (root / "source" / script).chmod(0o755)
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_SKIP_APT": "1", "TORCH_INDEX_URL": ""}
    env.pop("VIRTUAL_ENV", None)
    command = ["nice", "-n", "10", "bash", str(root / "source" / "setup.sh")]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    _running.add(process)
    try:
        stdout, stderr = process.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
    finally:
        _running.discard(process)
    return Installed(root, env, subprocess.CompletedProcess(command, process.returncode, stdout, stderr))


_installs = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="bundle-install")
_started: dict[str, tuple[Path, concurrent.futures.Future[Installed]]] = {}


def start_in_background() -> None:
    """Begin the install (once per run)."""
    if "bundle" not in _started:
        folder = Path(tempfile.mkdtemp(prefix="autograd-bundle-"))
        _started["bundle"] = (folder, _installs.submit(install, folder))


def installed() -> Installed:
    """The finished install, waiting for it (started now if it was not yet)."""
    start_in_background()
    return _started["bundle"][1].result()


def remove() -> None:
    """The install's folder, gone; an install no test waited for (the run stopped early) is ended first."""
    if "bundle" not in _started:
        return
    folder, done = _started.pop("bundle")
    while not done.done():
        for process in list(_running):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        concurrent.futures.wait([done], timeout=1)
    shutil.rmtree(folder, ignore_errors=True)
