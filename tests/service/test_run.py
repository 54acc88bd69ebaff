"""`serve tokens` writes its secrets only where git will not commit them: inside a git work tree the token
files must be ignored by git; without git, or outside a work tree, they are written as before."""

from __future__ import annotations

import csv
import shutil
import subprocess
from pathlib import Path

import pytest

from course.cli import main
from tests.support.helpers import ROOT, require_tool
from tests.support.service import course_for_service


def git(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    if shutil.which("git") is None:
        require_tool("git", "these tests make git work trees (apt-get install git)")
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)


@pytest.fixture
def course(tmp_path) -> Path:
    root = course_for_service(tmp_path / "course")
    (root / "roster.csv").write_text("student_id,name,lms_id\nalice,Alice A,101\n", encoding="utf-8")
    return root


def serve_tokens(root: Path, out: str) -> int:
    return main(["--course", str(root), "serve", "tokens", str(root / "roster.csv"), "--out", str(root / out)])


def refusal(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line, no traceback
    return err


def test_tokens_are_refused_in_a_work_tree_that_does_not_ignore_them(course, capsys):
    git("init", "--quiet", cwd=course)
    assert serve_tokens(course, "tokens.csv") == 1
    err = refusal(capsys)
    assert f"{course / 'tokens.csv'} is in the git work tree {course.resolve()} and git does not ignore it" in err
    assert f"add its name to {course.resolve()}/.gitignore" in err
    assert not (course / "tokens.csv").exists()
    assert not (course / "tokens-instructor.txt").exists()
    assert not (course / "service.db").exists()  # refused before any token changed: the old ones still work


def test_with_the_projects_gitignore_the_tokens_are_written(course, capsys):
    git("init", "--quiet", cwd=course)
    shutil.copy(ROOT / ".gitignore", course / ".gitignore")
    assert serve_tokens(course, "tokens.csv") == 0, capsys.readouterr().err
    for name in ("tokens.csv", "tokens-instructor.txt"):
        assert (course / name).stat().st_mode & 0o777 == 0o600
    status = git("status", "--porcelain", "--untracked-files=all", cwd=course).stdout
    # the course's own files are left to commit; the tokens, the roster and the service's database are not
    assert [
        line for line in status.splitlines() if not line[3:].startswith(("source/", "release/", ".gitignore"))
    ] == [], status


def test_the_instructor_token_file_is_checked_too(course, capsys):
    git("init", "--quiet", cwd=course)
    (course / ".gitignore").write_text("secrets.csv\n")
    assert serve_tokens(course, "secrets.csv") == 1
    assert f"{course / 'secrets-instructor.txt'} is in the git work tree" in refusal(capsys)
    assert not (course / "secrets.csv").exists()


def test_a_tracked_tokens_file_is_refused_though_its_name_is_ignored(course, capsys):
    git("init", "--quiet", cwd=course)
    shutil.copy(ROOT / ".gitignore", course / ".gitignore")
    (course / "tokens.csv").write_text("student_id,token\n")
    git("add", "--force", "tokens.csv", cwd=course)  # committed once by mistake: the next commit would take it
    assert serve_tokens(course, "tokens.csv") == 1
    assert "tokens.csv is in the git work tree" in refusal(capsys)
    assert (course / "tokens.csv").read_text() == "student_id,token\n"


def test_outside_a_work_tree_the_tokens_are_written(course, capsys):
    assert subprocess.run(["git", "-C", str(course), "rev-parse"], capture_output=True, check=False).returncode != 0
    assert serve_tokens(course, "tokens.csv") == 0, capsys.readouterr().err
    assert (course / "tokens.csv").stat().st_mode & 0o777 == 0o600


def test_without_git_the_tokens_are_written(course, tmp_path, monkeypatch, capsys):
    git("init", "--quiet", cwd=course)  # a work tree that git, were it installed, would refuse to write into
    (tmp_path / "no-git").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "no-git"))
    assert serve_tokens(course, "tokens.csv") == 0, capsys.readouterr().err
    assert (course / "tokens.csv").exists()


# ----------------------------------------------------------------------------- one database (issue 39)


def roster_and_out(root: Path) -> list[str]:
    return ["tokens", str(root / "roster.csv"), "--out", str(root / "tokens.csv")]


def token_of(root: Path, student: str) -> str:
    with (root / "tokens.csv").open(newline="") as table:
        rows = {row["student_id"]: row["token"] for row in csv.DictReader(table)}
    return rows[student]


@pytest.mark.parametrize("where", ["before the action", "after the action"])
def test_tokens_go_to_the_database_serve_names(course, postgres_url, where, capsys):
    """`serve --database URL tokens ...` once wrote the tokens into a new SQLite service.db (the action's own
    default overwrote the URL): PostgreSQL had no students and every student got 401."""
    from course.platforms.service.store import Store

    before = ["--database", postgres_url] if where == "before the action" else []
    after = ["--database", postgres_url] if where == "after the action" else []
    assert main(["--course", str(course), "serve", *before, *roster_and_out(course), *after]) == 0, (
        capsys.readouterr().err
    )
    store = Store(postgres_url)
    try:
        assert set(store.students()) == {"alice"}
        assert store.student_for(token_of(course, "alice")) == "alice"
    finally:
        store.close()
    assert not (course / "service.db").exists()
    assert "autograd@127.0.0.1" in capsys.readouterr().out  # the database it wrote to is named


def test_the_named_database_wins_over_the_environments(course, postgres_url, monkeypatch, capsys):
    from course.platforms.service.store import Store

    monkeypatch.setenv("AUTOGRAD_SERVICE_DATABASE", f"sqlite:///{course / 'elsewhere.db'}")
    assert main(["--course", str(course), "serve", "--database", postgres_url, *roster_and_out(course)]) == 0
    store = Store(postgres_url)
    try:
        assert store.student_for(token_of(course, "alice")) == "alice"
    finally:
        store.close()
    assert not (course / "elsewhere.db").exists()


def test_two_databases_that_differ_are_refused(course, tmp_path, capsys):
    one, two = f"sqlite:///{tmp_path / 'one.db'}", f"sqlite:///{tmp_path / 'two.db'}"
    assert main(["--course", str(course), "serve", "--database", one, *roster_and_out(course), "--database", two]) == 1
    assert "name two databases: give --database once" in refusal(capsys)
    assert not (course / "tokens.csv").exists()
    assert not any((tmp_path / name).exists() for name in ("one.db", "two.db"))
    # the same URL twice is one database
    assert (
        main(["--course", str(course), "serve", "--database", one, *roster_and_out(course), "--database", one]) == 0
    ), capsys.readouterr().err
    assert (tmp_path / "one.db").exists()
