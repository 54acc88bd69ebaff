"""The sample class graded in the environments instructors really have, each cell named in its test id.

Every cell either grades the sample class exactly (57/45/0/57/4/0, frank's file refused) after the self-test
passed, or refuses with one clear message: never a class of zeros. The cells vary what CI's own set-up never
does: root or an ordinary user (uid 65534); the interpreter in the system prefix, a separate prefix, the user's
home, the temporary folder (a `nosuid,nodev` tmpfs of its own, as most distributions mount /tmp: the kernel
then locks those flags on every mount made from it, which broke the warm pool's re-binding of an interpreter
there) or a path through a symlink (the view held only the folder it leads to, so bubblewrap found no interpreter
where it was told to start one); a read-only course folder; HOME unset; a working directory that is not the
course root; warm and cold.

Each cell is a shell script run as root: it may make a private mount namespace (the tmpfs /tmp, a read-only bind
of the course), then drops to the instructor with setpriv and a clean environment, and prints the grades CSV.
"""

from __future__ import annotations

import csv
import io
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.helpers import NONROOT_USER, ROOT, SAMPLE_SCORES, nonroot_python

pytestmark = pytest.mark.slow

CSV_MARK = "----- grades-autograd.csv -----"


@dataclass(frozen=True)
class Cell:
    nonroot: bool
    interpreter: str  # "checkout" (the tests' own), "separate-prefix", "system-prefix", "home", "temporary-folder",
    # "through-a-symlink" (the venv started by a path through a symlink: /home -> /data/home, a linked .venv)
    read_only_course: bool = False
    home: bool = True
    cwd_elsewhere: bool = False
    jobs: int = 2
    cuda: bool = False  # needs torch's CUDA build (it maps about 3 GiB at import: limits.py makes room)
    sandbox: str = "auto"  # course.yaml's `sandbox:`


CELLS = {
    "root-checkout-venv-cwd-elsewhere-home-unset": Cell(False, "checkout", cwd_elsewhere=True, home=False),
    "root-read-only-course": Cell(False, "checkout", read_only_course=True),
    "root-interpreter-in-temporary-folder": Cell(False, "temporary-folder"),
    "nonroot-separate-prefix": Cell(True, "separate-prefix"),
    "nonroot-system-prefix": Cell(True, "system-prefix", cwd_elsewhere=True),
    "nonroot-home": Cell(True, "home", cwd_elsewhere=True),
    "nonroot-temporary-folder-warm": Cell(True, "temporary-folder"),
    "root-venv-through-a-symlink": Cell(False, "through-a-symlink"),
    "nonroot-venv-through-a-symlink-cold": Cell(True, "through-a-symlink", jobs=0),
    "nonroot-temporary-folder-cold": Cell(True, "temporary-folder", jobs=0),
    "nonroot-read-only-course-home-unset-cwd-elsewhere": Cell(
        True, "separate-prefix", read_only_course=True, home=False, cwd_elsewhere=True
    ),
    "root-cuda-build-of-torch": Cell(False, "checkout", cuda=True),
    "nonroot-rlimits-level-warm": Cell(True, "separate-prefix", sandbox="rlimits"),
    "nonroot-rlimits-level-cold": Cell(True, "separate-prefix", sandbox="rlimits", jobs=0),
}

LEVEL_SAID = {"auto": None, "rlimits": "As course.yaml asks (sandbox: rlimits)"}


def _venv_of(python: str) -> Path:
    return Path(python).parent.parent


def _script(cell: Cell, work: Path, python: str) -> tuple[str, bool]:
    """(the cell's shell script, whether it needs a private mount namespace)."""
    course, out = work / "course", work / "out"
    lines = ["set -euo pipefail"]
    private = cell.interpreter == "temporary-folder" or cell.read_only_course
    env = ["PATH=/usr/bin:/bin", "LANG=C.UTF-8"]
    if cell.interpreter == "temporary-folder":
        # A fresh /tmp hides what was under the old one: a checkout (its editable install) or a venv there is
        # bound back into place, from a view of the old /tmp kept beside the course.
        outer = work / "outer-tmp"
        lines += [
            f"mkdir {outer}",
            f"mount --rbind /tmp {outer}",
            "mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /tmp",
        ]
        for needed in (ROOT.resolve(), _venv_of(python).resolve()):
            if needed.is_relative_to("/tmp"):
                place = shlex.quote(str(needed))
                lines += [
                    f"mkdir -p {place}",
                    f"mount --bind {shlex.quote(str(outer / needed.relative_to('/tmp')))} {place}",
                ]
        lines += [f"cp -a {shlex.quote(str(_venv_of(python)))} /tmp/venv", "chmod -R a+rX /tmp/venv"]
        python = f"/tmp/venv/bin/{Path(python).name}"
    elif cell.interpreter == "home":
        home = work / "home" / "instructor"
        lines += [
            f"mkdir -p {home}",
            f"cp -al {shlex.quote(str(_venv_of(python)))} {home}/.venv 2>/dev/null "
            f"|| cp -a {shlex.quote(str(_venv_of(python)))} {home}/.venv",
            f"chown {NONROOT_USER}:{NONROOT_USER} {home}",
        ]
        python = f"{home}/.venv/bin/{Path(python).name}"
        env.append(f"HOME={home}")
    elif cell.interpreter == "through-a-symlink":
        link = work / "linked" / "venv"
        lines += [f"mkdir -p {link.parent}", f"ln -s {shlex.quote(str(_venv_of(python)))} {link}"]
        python = f"{link}/bin/{Path(python).name}"
    elif cell.interpreter == "system-prefix":
        site = subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        python = "/usr/bin/python3.11"
        env.append(f"PYTHONPATH={site}")  # the packages on the path of the system's own interpreter
    if cell.home and not any(e.startswith("HOME=") for e in env):
        env.append(f"HOME={course}")
    if cell.read_only_course:
        lines += [f"mount --bind {course} {course}", f"mount -o remount,bind,ro {course}"]
    drop = (
        ["setpriv", f"--reuid={NONROOT_USER}", f"--regid={NONROOT_USER}", "--clear-groups", "--inh-caps=-all"]
        if cell.nonroot
        else []
    )
    cwd = "/" if cell.cwd_elsewhere else str(course)
    grade = [
        python,
        "-m",
        "course",
        "--course",
        str(course),
        "grade",
        f"{course}/submitted",
        "--out",
        str(out),
        "--jobs",
        str(cell.jobs),
        "--quiet",
    ]
    inner = f"cd {shlex.quote(cwd)} && exec {shlex.join(grade)}"
    lines += [
        f"{shlex.join([*drop, 'env', '-i', *env, 'sh', '-c', inner])}",
        f"echo {shlex.quote(CSV_MARK)}",
        f"cat {out}/grades-autograd.csv",
    ]
    return "\n".join(lines), private


def _python_for(cell: Cell) -> str:
    if not cell.nonroot:
        if os.geteuid() != 0:
            pytest.skip("the root cells need root")
        return sys.executable
    return nonroot_python()


@pytest.mark.parametrize("name", list(CELLS))
def test_the_sample_class_grades_the_same_in_every_environment(name):
    cell = CELLS[name]
    python = _python_for(cell)
    if cell.interpreter == "system-prefix" and not os.access("/usr/bin/python3.11", os.X_OK):
        pytest.skip("no /usr/bin/python3.11 here")
    if cell.cuda:
        import torch

        if not torch.version.cuda:
            pytest.skip(f"torch {torch.__version__} here is the CPU build; this cell runs where the CUDA build is")
    # Outside /tmp: a cell may mount a tmpfs of its own over /tmp.
    work = Path(tempfile.mkdtemp(prefix="autograd-environment-", dir="/var/tmp"))
    try:
        work.chmod(0o755)
        for part in ("source", "release"):
            shutil.copytree(ROOT / part, work / "course" / part)
        shutil.copytree(ROOT / "tests" / "samples" / "submitted", work / "course" / "submitted")
        if cell.sandbox != "auto":
            settings = work / "course" / "source" / "course.yaml"
            text = settings.read_text()
            assert "\nsandbox: auto\n" in text
            settings.write_text(text.replace("\nsandbox: auto\n", f"\nsandbox: {cell.sandbox}\n"))
        (work / "out").mkdir()
        if cell.nonroot:
            subprocess.run(["chown", "-R", f"{NONROOT_USER}:{NONROOT_USER}", str(work)], check=True)
        script, private = _script(cell, work, python)
        command = (
            ["unshare", "-m", "--propagation", "private", "bash", "-c", script] if private else ["bash", "-c", script]
        )
        completed = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert completed.returncode == 0, f"{name}: {completed.stderr[-3000:]}"
    summary, _, table = completed.stdout.partition(CSV_MARK)
    level = LEVEL_SAID[cell.sandbox] or ("bubblewrap in a user namespace" if cell.nonroot else "bubblewrap: ")
    assert f"sandbox: {level}" in summary
    assert "self-test: the course's solution 57/57 and the untouched release 0/57" in summary
    rows = {row["student_id"]: row for row in csv.DictReader(io.StringIO(table.strip()))}
    assert {s: float(row["score"]) for s, row in rows.items()} == SAMPLE_SCORES
    assert {s: row["status"] for s, row in rows.items()} == {
        s: "failed" if s == "frank" else "graded" for s in SAMPLE_SCORES
    }
