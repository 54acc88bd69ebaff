"""The CLI, in process: every command has help and a section in docs/cli.md, which the README links; errors are
one line."""

from __future__ import annotations

import pytest

from course.cli import COMMAND_HELP, main
from tests.support.helpers import RELEASE_NOTEBOOK, ROOT, course_assignments, submitted_notebook, write


@pytest.mark.parametrize("command", sorted(COMMAND_HELP))
def test_every_command_has_help_and_is_in_the_cli_reference(command, capsys):
    with pytest.raises(SystemExit) as exited:
        main([*command.split(), "--help"])
    assert exited.value.code == 0
    assert COMMAND_HELP[command] in " ".join(capsys.readouterr().out.split())
    assert f"## `autograd-course {command}`" in (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert "(docs/cli.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_top_level_help_reads_as_user_documentation(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "CourseError" not in out
    assert "a term, step by step:" in out
    for step in (
        "autograd-course release",
        "nbgrader collect autograd",
        "autograd-course grade --roster",
        "nbgrader release_feedback autograd",
        "autograd-course export --format canvas",
    ):
        assert step in out


def test_a_course_error_is_one_line_without_traceback(tmp_path, capsys):
    assert main(["--course", str(tmp_path), "grade"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("autograd-course grade: ")
    assert "not found. Run autograd-course from the course root" in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_release_for_students_needs_variants(course_root, capsys):
    roster = course_root / "roster.csv"
    roster.write_text("student_id\nada\n")
    assert main(["--course", str(course_root), "release", "--no-verify", "--students", str(roster)]) == 1
    assert "release --students needs variants: true" in capsys.readouterr().err
    bad = course_root / "bad.csv"
    bad.write_text("student_id\n../evil\n")
    assert main(["--course", str(course_root), "release", "--students", str(bad)]) == 1
    assert "'../evil' is not a usable student id" in capsys.readouterr().err


@pytest.mark.parametrize("which", [[], ["--assignment", "autograd"]])
def test_grade_with_no_submissions_says_what_it_expected(any_course, capsys, which):
    (any_course / "empty").mkdir()
    assert main(["--course", str(any_course), "grade", str(any_course / "empty"), *which]) == 1
    every = f"no submissions of any assignment ({', '.join(course_assignments(any_course))}) found"
    assert (every if not which else "no submissions found") in capsys.readouterr().err


def test_a_path_that_does_not_exist_is_an_error_and_writes_nothing(course_root, capsys):
    before = sorted(p.relative_to(course_root) for p in course_root.rglob("*"))
    assert main(["--course", str(course_root), "grade", "nope/"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("autograd-course grade: nope: no such file or folder; nothing was graded or written")
    assert len(err.strip().splitlines()) == 1
    assert sorted(p.relative_to(course_root) for p in course_root.rglob("*")) == before  # no csv, no gradebook


def test_check_on_the_untouched_release_lists_what_is_missing(capsys):
    assert main(["--course", str(ROOT), "check", str(RELEASE_NOTEBOOK)]) == 1
    out = capsys.readouterr().out
    assert "[todo] 3. A whole (tiny) network by hand: net_h missing (still `...`)" in out
    assert "Not ready yet" in out
    assert out.strip().splitlines()[-1].startswith("sandbox: ")  # every entry point says how student code ran


def test_check_on_a_complete_notebook_is_ready_and_reveals_no_hidden_value(tmp_path, capsys):
    wrong_but_well_formed = {"net_dL_dw": "6"}
    from tests.support.helpers import CORRECT_CODE

    path = write(submitted_notebook({**CORRECT_CODE, **wrong_but_well_formed}), tmp_path / "me.ipynb")
    assert main(["--course", str(ROOT), "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Ready to submit" in out
    assert "[ok  ] 3. A whole (tiny) network by hand" in out
    assert "12" not in out  # torch's value of net_dL_dw is never shown by the self-check


def test_check_names_a_syntax_error_first(tmp_path, capsys):
    """A syntax error in an answer cell reads as the cause of its missing answers, not as missing answers."""
    from tests.support.helpers import CORRECT_CODE

    broken = {**CORRECT_CODE, "net_dL_dw": "12 +* 3"}  # the tiny network's answer cell no longer parses
    path = write(submitted_notebook(broken), tmp_path / "me.ipynb")
    assert main(["--course", str(ROOT), "check", str(path)]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("syntax error in your answer cell for 3. A whole (tiny) network by hand, line ")
    assert "fix it first" in first


@pytest.mark.parametrize(
    "command",
    [
        ["grade"],
        ["release", "--no-verify"],
        ["check", "autograd.ipynb"],
        ["export", "--format", "canvas", "--roster", "roster.csv"],
        ["autograder", "build", "--out", "dist"],
        ["serve", "tokens", "roster.csv", "--out", "tokens.csv"],
    ],
)
def test_a_mistyped_service_setting_stops_every_command(course_root, capsys, command):
    """Not only `serve`: every command loads the whole course YAML, the service's section included."""
    path = course_root / "source" / "course.yaml"
    path.write_text(path.read_text() + "service: {attemps: 3}\n")
    before = sorted(p.relative_to(course_root) for p in course_root.rglob("*"))
    assert main(["--course", str(course_root), *command]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"autograd-course {command[0]}: {path}: service: unknown key 'attemps' (known keys: attempts, "
        "cooldown_minutes, counts, fresh_numbers_per_attempt, pages_in_flight, pages_per_minute, "
        "storage_mb, upload_kb)\n"
    )
    assert sorted(p.relative_to(course_root) for p in course_root.rglob("*")) == before  # nothing was done


@pytest.mark.slow
def test_an_interrupted_grade_says_the_class_is_not_finished(tmp_path):
    """Ctrl-C left a grades CSV holding the students graded so far, and said only "interrupted": an instructor could
    take it for the class. The line now says the class is not finished and what to do."""
    import csv
    import os
    import shutil
    import signal
    import subprocess
    import sys

    from tests.support.helpers import add_cell, copy_course

    root = copy_course(tmp_path / "course")
    shutil.copytree(ROOT / "tests" / "samples" / "submitted", root / "submitted")
    # one student whose run waits out the course's cell limit (10 s), so the interrupt comes while the class is being
    # graded (the command then waits for the runs in flight to end: at most that limit)
    write(
        add_cell(submitted_notebook(), "import time\ntime.sleep(600)"),
        root / "submitted" / "zed" / "autograd" / "autograd.ipynb",
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "course", "--course", str(root), "grade", "--out", str(tmp_path / "out"), "--jobs", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stderr is not None
    for line in process.stderr:  # one line per student graded (not a terminal), on stderr
        if line.startswith("alice:"):
            break
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err[-2000:]
    assert "interrupted; the class is not finished" in err
    assert "run the same command again before using it" in err
    written = tmp_path / "out" / "grades-autograd.csv"
    if written.exists():  # whatever was flushed names only students graded, never zed, still running
        with written.open(encoding="utf-8") as stream:
            assert "zed" not in {row["student_id"] for row in csv.DictReader(stream)}
