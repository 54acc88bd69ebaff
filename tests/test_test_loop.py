"""The test loop itself, run as a contributor runs it on a fresh machine: pytest in a subprocess with a PATH
that holds none of the system's tools (no podman, chromium, PostgreSQL, nginx), so what a run starts in the
background and how it ends are seen from outside; and under CI=true, where a missing tool is a failure."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import ROOT, require_tool

# What a fresh machine lacks: the tools of the container, browser, PostgreSQL and proxy tests.
HIDDEN = frozenset(
    {
        "podman",
        "buildah",
        "runc",
        "crun",
        "conmon",
        "mmdebstrap",
        "chromium",
        "chromium-browser",
        "nginx",
        "postgres",
        "initdb",
        "pg_ctl",
        "psql",
    }
)


def fresh_path(folder: Path, hidden: frozenset[str]) -> str:
    """A PATH of one folder holding this PATH's commands (and /usr/sbin's) but the hidden ones."""
    folder.mkdir()
    for directory in [*os.environ.get("PATH", "").split(os.pathsep), "/usr/sbin", "/sbin"]:
        if not Path(directory).is_dir():
            continue
        for command in Path(directory).iterdir():
            if command.name not in hidden and not (folder / command.name).exists() and os.access(command, os.X_OK):
                (folder / command.name).symlink_to(command)
    return str(folder)


def run_pytest(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, hide: frozenset[str] = frozenset()
) -> subprocess.CompletedProcess:
    """`python -m pytest *args` in the checkout on a fresh machine's PATH (without HIDDEN's commands, nor
    `hide`'s), with a TMPDIR of its own (tmp_path/tmp), not under CI unless `env` says so. Seconds each (torch
    is imported at collection): the tests that call it are marked slow."""
    (tmp_path / "tmp").mkdir()
    clean = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    clean |= {"PATH": fresh_path(tmp_path / "bin", HIDDEN | hide), "TMPDIR": str(tmp_path / "tmp")} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", *args],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def left_behind(tmp_path: Path) -> list[str]:
    """What the run's background work left in its TMPDIR (the image build's and the bundle install's folders)."""
    return sorted(p.name for p in (tmp_path / "tmp").glob("autograd-*"))


@pytest.mark.slow
def test_the_fast_loop_starts_no_image_build_and_exits_0(tmp_path):
    """test_image.py holds a test without the `container` mark: selecting it must not start the build."""
    completed = run_pytest(
        tmp_path, "tests/test_image.py", "tests/test_gradescope.py", "-m", "not slow and not browser"
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    assert "Traceback" not in output, output
    assert "started in the background" not in output, output
    assert left_behind(tmp_path) == [], output


@pytest.mark.slow
def test_container_tests_without_podman_skip_with_the_reason(tmp_path):
    completed = run_pytest(tmp_path, "tests/test_image.py", "-m", "container")
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    assert "started in the background: the container image build" in output, output
    assert "FileNotFoundError" not in output, output
    assert "11 skipped" in output, output
    if os.geteuid() == 0:  # as an ordinary user the reason is root, which is checked first
        assert "podman" in output.split("short test summary")[-1], output
    assert left_behind(tmp_path) == [], output  # the build's folder is removed, and nothing else was made


@pytest.mark.parametrize("ci", ["", "false", "0"])
def test_a_missing_tool_skips_the_test_and_says_what_to_install(monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception, match=r"^podman is missing: apt-get install podman$"):
        require_tool("podman", "apt-get install podman")


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_a_missing_tool_fails_the_test(monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match=r"^podman is missing: apt-get install podman \(CI=true"):
        require_tool("podman", "apt-get install podman")


@pytest.mark.slow
def test_under_ci_the_container_tests_fail_without_podman(tmp_path):
    """The image build's own check (in its background thread) fails every container test, saying why."""
    completed = run_pytest(tmp_path, "tests/test_image.py", "-m", "container", env={"CI": "true"})
    output = completed.stdout + completed.stderr
    assert completed.returncode == 1, output
    if os.geteuid() == 0:  # as an ordinary user the image test is skipped for want of root, not of a tool
        assert "11 errors" in output, output  # at set-up, in the fixtures that wait for the builds
        assert "podman, runc, mmdebstrap is missing" in output, output
    assert left_behind(tmp_path) == [], output


@pytest.mark.slow
@pytest.mark.parametrize(("ci", "outcome"), [({}, "skipped"), ({"CI": "true"}, "error")])
def test_a_needs_tool_mark_skips_here_and_fails_under_ci(tmp_path, ci, outcome):
    """A module's needs_tool mark (the HTTPS proxy's openssl, hidden here), through conftest.py's hook."""
    completed = run_pytest(tmp_path, "tests/service/test_https_proxy.py", env=ci, hide=frozenset({"openssl"}))
    output = completed.stdout + completed.stderr
    assert completed.returncode == (1 if ci else 0), output
    assert re.search(rf"\d+ {outcome}", output), output
    assert "passed" not in output, output  # no test ran without its tool
    assert "openssl is missing: the HTTPS proxy test makes its certificate" in output, output


def test_ci_stops_at_once_when_a_missing_tool_cannot_be_installed(tmp_path):
    """.ci/run as an ordinary user (apt-get needs root) on a machine without podman: it fails before building
    anything, saying why, rather than running the suite to have its container tests fail."""
    as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"] if os.geteuid() == 0 else []
    env = {"PATH": fresh_path(tmp_path / "bin", HIDDEN), "HOME": "/", "LANG": "C.UTF-8"}
    # the script on stdin, run from / (its `cd "$(dirname "$0")/.."` stays there): nothing of the checkout is
    # touched, whoever can read it
    completed = subprocess.run(
        [*as_user, "bash", "-s"],
        input=(ROOT / ".ci" / "run").read_text(),
        cwd="/",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 1, completed.stdout + completed.stderr
    assert re.search(r"^ci: FAILED: .*podman.* missing, and installing them needs root$", completed.stderr, re.M), (
        completed.stderr
    )
    assert completed.stdout == "", completed.stdout  # no step ran
