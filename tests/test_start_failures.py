"""Our failure is never a student's grade (course/sandbox/retry.py, course/pipeline/selftest.py).

A run that ends before the runner's `ready` ran no student code: it is tried again, and when no try starts it
is an autograder error, never `graded`, never a 0 in the gradebook or an LMS export. And every command that
grades proves its own setup first: the course's solution must earn full marks and the untouched release 0
through the very runner it is about to use, or nothing is graded.

The failures here are real: a worker process killed before its run, a runner that ends before `ready` for one
marked notebook (the runner handed to the sandbox with one line added), and a limit so tight that the
sandbox's own start-up cannot open a file.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest

import course.sandbox.cold as cold_module
import course.sandbox.pool as pool_module
from course.cli import main
from course.core.config import load_config
from course.core.errors import SandboxStartError, SelfTestError
from course.core.status import Status
from course.pipeline.assignment import load_course_assignment
from course.pipeline.discovery import SubmissionRef
from course.pipeline.grading import grade_submission
from course.pipeline.run_context import open_run
from course.pipeline.selftest import from_source, prove_setup, untouched_release
from course.pipeline.submission import Cell
from course.sandbox import WarmPool, run_cells
from course.sandbox.handed_in import RUNNER_SOURCE
from course.term.batch import grade_batch
from course.term.lms import export_rows
from course.term.roster import read_roster
from tests.support.helpers import ROOT, SAMPLE_SCORES, add_cell, copy_course, load, set_limit, submitted_notebook, write

SAMPLES = ROOT / "tests" / "samples" / "submitted"
DOOMED = "# this notebook's sandbox ends before ready"
READY_LINE = '    _send(channel, {"event": "ready", "confined": confined})\n'


def runner_that_ends_before_ready_for_doomed_notebooks() -> str:
    """The real runner, but a request holding DOOMED makes it end (exit 70) just before it would send `ready`:
    what a sandbox that breaks during its start-up does, for one chosen notebook only."""
    assert READY_LINE in RUNNER_SOURCE  # the injection point exists: this test can fail
    return RUNNER_SOURCE.replace(
        READY_LINE, f"    if {DOOMED!r} in json.dumps(request):\n        os._exit(70)\n" + READY_LINE
    )


@pytest.fixture
def doomed_runner(monkeypatch):
    source = runner_that_ends_before_ready_for_doomed_notebooks()
    monkeypatch.setattr(pool_module, "RUNNER_SOURCE", source)
    monkeypatch.setattr(cold_module, "RUNNER_SOURCE", source)


def grade_alice(tmp_path: Path, run) -> object:
    config = load_config(ROOT)
    assignment = load_course_assignment(config, "autograd")
    path = tmp_path / "alice.ipynb"
    shutil.copy(SAMPLES / "alice" / "autograd" / "autograd.ipynb", path)
    return grade_submission(SubmissionRef("alice", path), assignment, config, run=run)


def test_a_worker_killed_before_its_run_is_retried_and_the_student_gets_the_right_score(tmp_path, caplog):
    config = load_config(ROOT)
    with WarmPool(1, config.limits) as pool:
        assert pool.run([Cell(0, "cell", "x = 1")], ("x",), {}).answers["x"].value == 1  # the worker is ready
        worker = pool._workers[0]
        os.kill(worker.process.pid, signal.SIGKILL)
        worker.process.wait()
        graded = grade_alice(tmp_path, pool.run)
    assert (graded.status, graded.feedback.score) == (Status.GRADED, SAMPLE_SCORES["alice"])
    retries = [r for r in caplog.records if r.name == "course.sandbox.retry" and r.levelname == "WARNING"]
    assert any("trying again on another warm worker" in r.getMessage() for r in retries)  # said, in the grader's log


@pytest.mark.parametrize("mode", ["warm", "cold"])
def test_a_sandbox_that_ends_before_ready_is_an_autograder_error_never_graded(mode, doomed_runner, tmp_path, caplog):
    config = load_config(ROOT)
    assignment = load_course_assignment(config, "autograd")
    path = write(add_cell(submitted_notebook(), DOOMED, at=0), tmp_path / "doomed.ipynb")
    with WarmPool(1, config.limits) as pool:
        run = pool.run if mode == "warm" else partial(run_cells, isolation=config.sandbox, uid=config.sandbox_uid)
        graded = grade_submission(SubmissionRef("doomed", path), assignment, config, run=run)
        # The same sandbox grades a notebook without the mark: the failure was the start-up's, and only it failed.
        honest = grade_alice(tmp_path, run)
    assert graded.status == Status.AUTOGRADER_ERROR
    assert graded.feedback.score == 0
    assert "not your fault" in " ".join(graded.feedback.messages)
    assert "did not run to the end" not in json.dumps(graded.feedback.to_json())
    assert "SandboxStartError" in graded.internal_error
    assert "exit code 70" in graded.internal_error
    tries = (
        "a warm worker, another warm worker, a fresh cold sandbox"
        if mode == "warm"
        else "this sandbox, a fresh sandbox"
    )
    assert f"({tries})" in graded.internal_error
    assert (honest.status, honest.feedback.score) == (Status.GRADED, SAMPLE_SCORES["alice"])
    assert "trying again" in caplog.text


def test_the_pool_alone_refuses_when_no_worker_starts_a_run(doomed_runner):
    config = load_config(ROOT)
    with WarmPool(1, config.limits) as pool, pytest.raises(SandboxStartError, match="2 tries"):
        pool.run([Cell(0, "cell", DOOMED)], (), {}, cold_fallback=False)


@pytest.mark.slow
def test_a_student_whose_sandbox_never_starts_is_no_grade_in_the_gradebook_or_the_lms(doomed_runner, tmp_path):
    root = copy_course(tmp_path / "course")
    shutil.copytree(SAMPLES, root / "submitted")
    doomed = load(SAMPLES / "bob" / "autograd" / "autograd.ipynb")
    write(add_cell(doomed, DOOMED, at=0), root / "submitted" / "dan" / "autograd" / "autograd.ipynb")
    roster = root / "roster.csv"
    roster.write_text(
        "student_id,lms_id\n" + "".join(f"{s},{100 + i}\n" for i, s in enumerate([*SAMPLE_SCORES, "dan"])),
        encoding="utf-8",
    )
    config = load_config(root)
    summary = grade_batch(config, [], root, record_gradebook=True, roster=read_roster(roster))
    statuses = {g.student_id: g.status for g in summary.graded}
    assert statuses["dan"] == Status.AUTOGRADER_ERROR
    assert all(statuses[s] == (Status.GRADED if s != "frank" else Status.FAILED) for s in SAMPLE_SCORES)
    assert "1 autograder error" in summary.lines()[0]
    assert "1 autograder errors" not in summary.lines()[0]
    assert any(
        line.startswith("autograder errors (ours, not the students'") and line.endswith(": dan")
        for line in summary.lines()
    )
    with (root / "grades-autograd.csv").open(newline="") as stream:
        rows = {row["student_id"]: row for row in csv.DictReader(stream)}
    assert rows["dan"]["status"] == Status.AUTOGRADER_ERROR
    assert {s: float(rows[s]["score"]) for s in SAMPLE_SCORES} == SAMPLE_SCORES
    # nbgrader's gradebook records the graded students and nothing for dan: no submission, no score of 0.
    from nbgrader.api import Gradebook

    with Gradebook(config.gradebook_url) as gradebook:
        recorded = {s.student.id for s in gradebook.assignment_submissions("autograd")}
    assert "dan" not in recorded
    assert {"alice", "bob", "carol", "dave", "erin"} <= recorded
    # The LMS export leaves dan's cell empty (the LMS keeps what it had) rather than importing a 0.
    exported = {
        row.student.student_id: row.score for row in export_rows(root / "grades-autograd.csv", read_roster(roster))
    }
    assert exported["dan"] == ""
    assert exported["alice"] == "57.0" or float(exported["alice"]) == 57


@pytest.mark.parametrize("name", ["autograd", "training"])
def test_the_self_test_passes_for_both_assignments_and_its_notebooks_are_the_known_ones(name):
    context = open_run(load_config(ROOT), name)
    config, assignment = context.config, context.assignment
    with WarmPool(1, config.limits) as pool:
        proven = prove_setup(context, partial(pool.run, cold_fallback=False), level=pool.level)
    assert (proven.solution_score, proven.untouched_score) == (assignment.max_score, 0)
    assert f"at the {pool.level} level" in proven.line()

    # Without release/ (a Gradescope bundle), the untouched release is made from the source: the same cells.
    def code(notebook: dict) -> list[str]:
        return ["".join(cell["source"]).rstrip() for cell in notebook["cells"] if cell["cell_type"] == "code"]

    assert code(from_source(assignment, solved=False)) == code(untouched_release(context))


def test_the_self_test_names_the_level_the_limits_and_the_first_difference():
    config = load_config(ROOT)
    config = replace(config, limits=replace(config.limits, open_files=3))
    context = open_run(config, "autograd")
    with WarmPool(1, config.limits) as pool, pytest.raises(SelfTestError) as refused:
        prove_setup(context, partial(pool.run, cold_fallback=False), level=pool.level)
    message = str(refused.value)
    assert message.startswith(
        "the self-test failed, so nothing was graded: the course's solution of assignment "
        "'autograd' scored 0/57 (it must score 57)"
    )
    assert f"at the {pool.level} level" in message
    assert "open_files=3" in message
    assert "the sandbox ended before any student code ran" in message
    assert "Too many open files" in message


@pytest.mark.slow
def test_grade_refuses_before_grading_anyone_when_the_self_test_fails(tmp_path, capsys):
    root = copy_course(tmp_path / "course")
    shutil.copytree(SAMPLES, root / "submitted")
    assert main(["--course", str(root), "grade"]) == 0  # a real term: the gradebook and the CSV exist
    capsys.readouterr()
    kept = {
        path.name: path.read_bytes()
        for path in root.iterdir()
        if path.is_file() and path.name.startswith(("gradebook.db", "grades-", "course-totals"))
    }
    assert "gradebook.db" in kept
    assert "grades-autograd.csv" in kept
    feedback = {p: p.stat().st_mtime_ns for p in (root / "feedback").rglob("*") if p.is_file()}
    set_limit(root, "open_files", 3)  # the sandbox's start-up can open no file: the sandbox cannot start
    assert main(["--course", str(root), "grade"]) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("autograd-course grade: ")]
    assert len(lines) == 1
    assert "the self-test failed, so nothing was graded" in lines[0]
    assert "open_files=3" in lines[0]
    assert "Traceback" not in lines[0]
    # Nothing was written: the gradebook, the grades CSV and every feedback file are as they were.
    assert {name: (root / name).read_bytes() for name in kept if (root / name).exists()} == kept
    assert {p: p.stat().st_mtime_ns for p in (root / "feedback").rglob("*") if p.is_file()} == feedback


def test_check_says_its_sandbox_did_not_start_rather_than_judging_the_notebook(tmp_path, capsys):
    root = copy_course(tmp_path / "course")
    set_limit(root, "open_files", 3)  # the sandbox's own start-up can open no file
    notebook = write(submitted_notebook(), tmp_path / "autograd.ipynb")
    assert main(["--course", str(root), "check", str(notebook)]) == 1
    captured = capsys.readouterr()
    said = [line for line in captured.err.splitlines() if line.startswith("autograd-course check: ")]
    assert len(said) == 1
    assert "none of your notebook ran and nothing was checked" in said[0]
    assert "not of your notebook" in said[0]
    assert "todo" not in captured.out  # no question is reported as unanswered


def test_a_submitted_link_is_the_graders_error_not_the_students_zero(tmp_path):
    """nbgrader's collect copies regular files: a notebook that is a symbolic link in submitted/ is the grader's
    layout (the grader refuses to follow it: it could point at the answer key). It was booked `failed`, 0, telling
    the student to submit the file itself; it is an autograder error, and the student is told it is not theirs."""
    root = copy_course(tmp_path / "course")
    config = load_config(root)
    real = write(submitted_notebook(), tmp_path / "elsewhere" / "alice.ipynb")
    link = root / "submitted" / "alice" / "autograd" / "autograd.ipynb"
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    graded = grade_submission(
        SubmissionRef("alice", link),
        load_course_assignment(config),
        config,
        run=lambda *_: pytest.fail("a file that was not read must not run"),
    )
    assert graded.status == Status.AUTOGRADER_ERROR
    assert "is a symbolic link" in graded.internal_error
    assert str(link) in graded.internal_error
    assert any("not your fault" in message for message in graded.feedback.messages)


@pytest.mark.parametrize("command", ["grade", "autograder"])
def test_a_results_folder_that_cannot_be_written_is_said_before_anyone_is_graded(command, tmp_path, capsys):
    """An --out (or Gradescope's results/) the grader may not write once surfaced as a traceback per student after
    the whole class had run, then an uncaught one; now one sentence before the sandbox starts, nothing graded."""
    if command == "grade":
        root = copy_course(tmp_path / "course")
        shutil.copytree(SAMPLES, root / "submitted")
        out = tmp_path / "out"
        out.write_text("a file where the results folder should be\n")
        argv = ["--course", str(root), "grade", "--out", str(out)]
    else:
        root = tmp_path / "autograder"
        shutil.copytree(ROOT / "source", root / "source" / "source")
        write(submitted_notebook(), root / "submission" / "autograd.ipynb")
        out = root / "results"
        out.write_text("a file where the results folder should be\n")
        argv = ["autograder", "run", "--root", str(root)]
    assert main(argv) == 1
    captured = capsys.readouterr()
    said = [line for line in captured.err.splitlines() if line.startswith(f"autograd-course {command}: ")]
    assert len(said) == 1, captured.err[-3000:]
    assert "it is a file, not a folder" in said[0]
    assert "nothing was graded" in said[0]
    assert "Traceback" not in captured.err
    assert "self-test" not in captured.out  # refused before the sandbox was started
