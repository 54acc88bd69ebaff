"""The self-test proves the machinery once per what it proves (course/pipeline/selftest_proof.py): a second `grade` of
the same course, sandbox and interpreter reuses the proof the first one kept and says so; a change of what decides
the two known grades (the exercises module, the release, the sandbox's setting) or `--self-test` runs it again.
Real grading runs, in the real sandbox, of a private copy of the course."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from pathlib import Path

import pytest

from course.cli import main
from course.core.errors import CourseError
from course.pipeline.selftest_proof import record_path
from tests.support.helpers import ROOT, copy_course

pytestmark = pytest.mark.slow

ALICE = ROOT / "tests" / "samples" / "submitted" / "alice"
FRESH = re.compile(
    r"^self-test: the course's solution 57/57 and the untouched release 0/57 at the (\w+) level, before anyone was "
    r"graded \(\d+\.\d s, the sandbox's start included\)$"
)
REUSED = re.compile(
    r"^self-test: reused the proof of \d\d:\d\d \(the course's solution 57/57 and the untouched release 0/57 at the "
    r"(\w+) level; same course, sandbox and interpreter; --self-test proves it again\)$"
)


def grade(root: Path, capsys: pytest.CaptureFixture[str], *options: str) -> str:
    """`grade` of one student into a folder of its own; the summary's self-test line."""
    assert main(["--course", str(root), "grade", "--out", str(root.parent / "out"), "--quiet", *options]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("self-test:")]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture
def course(tmp_path: Path) -> Path:
    root = copy_course(tmp_path / "course")
    shutil.copytree(ALICE, root / "submitted" / "alice")
    return root


def test_the_second_grade_reuses_the_proof_and_says_so(course, capsys):
    first = grade(course, capsys)
    assert FRESH.match(first), first
    record = record_path(course, "autograd")
    kept = record.read_bytes()
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    assert stat.S_IMODE(record.parent.stat().st_mode) == 0o700
    assert json.loads(kept)["level"] == FRESH.match(first).group(1)

    second = grade(course, capsys)
    assert REUSED.match(second), second
    assert REUSED.match(second).group(1) == FRESH.match(first).group(1)
    assert record.read_bytes() == kept  # nothing proven again, nothing written again


def _edit_exercises(root: Path) -> None:
    path = root / "source" / "autograd" / "exercises.py"
    path.write_text(path.read_text(encoding="utf-8") + "\n# an edit that changes no grade\n", encoding="utf-8")


def _edit_release(root: Path) -> None:
    path = root / "release" / "autograd" / "autograd.ipynb"
    notebook = json.loads(path.read_text(encoding="utf-8"))
    notebook["metadata"]["edited"] = True
    path.write_text(json.dumps(notebook), encoding="utf-8")


def _edit_sandbox(root: Path) -> None:
    path = root / "source" / "course.yaml"
    text = path.read_text(encoding="utf-8")
    assert "\nsandbox: auto\n" in text
    path.write_text(text.replace("\nsandbox: auto\n", "\nsandbox: bwrap\n"), encoding="utf-8")


@pytest.mark.parametrize(
    ("change", "options"),
    [
        pytest.param(_edit_exercises, (), id="exercises.py"),
        pytest.param(_edit_release, (), id="release notebook"),
        pytest.param(_edit_sandbox, (), id="sandbox level"),
        pytest.param(lambda root: None, ("--self-test",), id="--self-test"),
    ],
)
def test_a_change_of_what_it_proves_or_the_flag_runs_it_again(course, capsys, change, options):
    assert FRESH.match(grade(course, capsys))
    assert REUSED.match(grade(course, capsys))  # the proof holds until the change
    before = json.loads(record_path(course, "autograd").read_text())
    change(course)
    again = grade(course, capsys, *options)
    assert FRESH.match(again), again
    after = json.loads(record_path(course, "autograd").read_text())
    assert after["proved_at"] > before["proved_at"]  # the new proof is kept
    if not options:
        assert after["key"] != before["key"]
        assert REUSED.match(grade(course, capsys))  # and reused in turn


def test_a_failed_self_test_keeps_no_proof_and_a_kept_one_does_not_outlive_its_limits(course, capsys):
    """The guarantee stays: a proof is of the limits it ran under; a tighter limit is a new key, and the self-test
    that fails there stops the command (and keeps nothing)."""
    assert FRESH.match(grade(course, capsys))
    record = record_path(course, "autograd")
    kept = record.read_bytes()
    path = course / "source" / "course.yaml"
    path.write_text(re.sub(r"(?m)^  open_files: \d+$", "  open_files: 3", path.read_text()), encoding="utf-8")
    assert main(["--course", str(course), "grade", "--out", str(course.parent / "out"), "--quiet"]) == 1
    assert "the self-test failed, so nothing was graded" in capsys.readouterr().err
    assert not record.exists(), kept  # the earlier proof went as the self-test began: none is left to reuse
    assert os.listdir(record.parent) == []


def test_a_forced_self_test_that_fails_leaves_no_proof_for_the_next_run(course, capsys, monkeypatch):
    """`--self-test` at the same key, failing (the machinery broke since the proof was kept): the next run without
    the flag must prove again, never reuse the proof of a machinery just shown broken."""
    from course.pipeline import selftest

    assert FRESH.match(grade(course, capsys))
    record = record_path(course, "autograd")
    assert record.exists()
    real = selftest.prove_setup

    def broken(*args, **kwargs):
        raise CourseError("the self-test failed, so nothing was graded (the machinery broke)")

    monkeypatch.setattr(selftest, "prove_setup", broken)
    assert main(["--course", str(course), "grade", "--out", str(course.parent / "out"), "--quiet", "--self-test"]) == 1
    assert not record.exists()
    monkeypatch.setattr(selftest, "prove_setup", real)
    assert FRESH.match(grade(course, capsys))
