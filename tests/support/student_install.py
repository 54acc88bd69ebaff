"""A student's install of the wheel into a fresh venv, for tests/test_student_install.py, in the background from
the start of the run.

The install unpacks torch and Jupyter afresh: minutes on a busy machine, mostly waiting on the disk. conftest.py
starts it (at a lower CPU priority, nice 10) when the run's tests include the student-install test, which waits
for it here (`installed`) and checks what it did; everything else that test does runs in the test itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from course.platforms.bundle import build_wheel
from tests.support.background_work import BackgroundWork
from tests.support.helpers import ROOT

TEST = "test_a_student_install_fetches_checks_and_submits_without_the_grader_s_tools"


@dataclass
class Installed:
    home: Path  # the student's home folder, with the venv in home/.venv
    env: dict[str, str]  # the student's environment: HOME, and nothing of the test environment's venv
    pip: subprocess.CompletedProcess


def student_env(home: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("VIRTUAL_ENV", "PYTHONPATH", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_PATH")
    }
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
    pip = _work.run(
        ["nice", "-n", "10", str(venv / "bin" / "pip"), "install", "--quiet", str(wheel)],
        env=env,
        cwd=home,
        timeout=1500,
    )
    return Installed(home, env, pip)


_work = BackgroundWork("autograd-student-", install)
start_in_background, installed, remove = _work.start, _work.result, _work.remove
