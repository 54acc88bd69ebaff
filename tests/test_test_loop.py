"""The test loop itself, run as a contributor runs it on a fresh machine: pytest in a subprocess with a PATH
that holds none of the system's tools (no podman, chromium, PostgreSQL, nginx), so what a run starts in the
background and how it ends are seen from outside."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

pytestmark = pytest.mark.slow  # each is a pytest run of its own (seconds: torch is imported at collection)


# What a fresh machine lacks: the tools of the container, browser, PostgreSQL and proxy tests.
HIDDEN = {"podman", "buildah", "runc", "crun", "conmon", "mmdebstrap", "chromium", "chromium-browser", "nginx",
          "postgres", "initdb", "pg_ctl", "psql"}


def fresh_path(folder: Path) -> str:
    """A PATH of one folder holding this PATH's commands (and /usr/sbin's) but HIDDEN's."""
    folder.mkdir()
    for directory in [*os.environ.get("PATH", "").split(os.pathsep), "/usr/sbin", "/sbin"]:
        if not Path(directory).is_dir():
            continue
        for command in Path(directory).iterdir():
            if command.name not in HIDDEN and not (folder / command.name).exists() and os.access(command, os.X_OK):
                (folder / command.name).symlink_to(command)
    return str(folder)


def run_pytest(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m pytest *args` in the checkout on a fresh machine's PATH, with a TMPDIR of its own (tmp_path/tmp)."""
    (tmp_path / "tmp").mkdir()
    clean = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    clean |= {"PATH": fresh_path(tmp_path / "bin"), "TMPDIR": str(tmp_path / "tmp")} | (env or {})
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", *args],
                          cwd=ROOT, env=clean, capture_output=True, text=True, timeout=300, check=False)


def left_behind(tmp_path: Path) -> list[str]:
    """What the run's background work left in its TMPDIR (the image build's and the bundle install's folders)."""
    return sorted(p.name for p in (tmp_path / "tmp").glob("autograd-*"))


def test_the_fast_loop_starts_no_image_build_and_exits_0(tmp_path):
    """test_image.py holds a test without the `container` mark: selecting it must not start the build."""
    completed = run_pytest(tmp_path, "tests/test_image.py", "tests/test_gradescope.py",
                           "-m", "not slow and not browser")
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    assert "Traceback" not in output, output
    assert "started in the background" not in output, output
    assert left_behind(tmp_path) == [], output


def test_container_tests_without_podman_skip_with_the_reason(tmp_path):
    completed = run_pytest(tmp_path, "tests/test_image.py", "-m", "container")
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    assert "started in the background: the container image build" in output, output
    assert "FileNotFoundError" not in output, output
    assert "7 skipped" in output, output
    if os.geteuid() == 0:  # as an ordinary user the reason is root, which is checked first
        assert "podman" in output.split("short test summary")[-1], output
    assert left_behind(tmp_path) == [], output  # the build's folder is removed, and nothing else was made
