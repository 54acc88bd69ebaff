"""The Gradescope bundle installed as Gradescope installs it, for tests/test_gradescope.py, in the background
from the start of the run.

`setup.sh` pip-installs the course and every dependency (torch included) into a new venv: most of a minute,
mostly unpacking wheels. conftest.py starts it (at a lower CPU priority, nice 10) when the run's tests include
test_bundle_installs_in_a_fresh_venv_and_grades, and that test waits for it here (`installed`) and checks
what it did as before; the rest of the test (run_autograder on a submission) runs in the test itself.
"""

from __future__ import annotations

import os
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path

from course.core.config import load_config
from course.platforms.bundle import build_bundle
from tests.support.background_work import BackgroundWork
from tests.support.helpers import ROOT

TEST = "test_bundle_installs_in_a_fresh_venv_and_grades"


@dataclass
class Installed:
    root: Path  # AUTOGRADER_ROOT: source/ holds the unpacked zip, venv/ what setup.sh installed
    env: dict[str, str]
    setup: subprocess.CompletedProcess


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
    setup = _work.run(["nice", "-n", "10", "bash", str(root / "source" / "setup.sh")], env=env, timeout=900)
    return Installed(root, env, setup)


_work = BackgroundWork("autograd-bundle-", install)
start_in_background, installed, remove = _work.start, _work.result, _work.remove
