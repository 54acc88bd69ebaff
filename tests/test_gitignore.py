"""The project's .gitignore keeps out of commits every file the commands write into the course root that holds
a secret or student data (the README tells instructors to commit release/ from that folder), and nothing the
project itself commits. The names come from the code that writes the files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from course.platforms.service.store import database_url
from course.platforms.service.worker import SCRATCH
from course.term.gradebook import COURSE_TOTALS, grades_csv_path
from course.term.item_exports import item_analysis_path
from course.term.lms import FORMATS
from course.term.nbgrader_term import integrity_path
from course.term.recording import class_summary_path
from tests.support.helpers import ROOT, course_assignments, require_tool

COURSE = Path("/course")  # where the names below are made; only their part under it is checked
ASSIGNMENTS = course_assignments()  # source/course.yaml's, however many
SQLITE_FILES = ("", "-journal", "-wal", "-shm")
SERVICE_DB = Path(database_url(None, COURSE).removeprefix("sqlite:///")).relative_to(COURSE).as_posix()
WRITTEN = sorted(
    {
        # serve tokens (the README's --out tokens.csv) and the service's database and scratch folder
        "tokens.csv",
        "tokens-instructor.txt",
        *(SERVICE_DB + suffix for suffix in SQLITE_FILES),
        f"{SCRATCH}/autograd/upload-1a2b/submitted/alice/autograd/autograd.ipynb",
        # the roster the term's commands read, nbgrader's state, and what grade and export write
        "roster.csv",
        *(f"gradebook.db{suffix}" for suffix in SQLITE_FILES),
        ".nbgrader.log",
        "submitted/alice/autograd/autograd.ipynb",
        "submitted/alice/autograd/timestamp.txt",
        "autograded/alice/autograd/autograd.ipynb",
        "feedback/alice/autograd/feedback.html",
        "feedback/alice/autograd/feedback.json",
        COURSE_TOTALS,
        "grades.csv",  # the last: `nbgrader export`'s
        *(
            path.relative_to(COURSE).as_posix()
            for name in ASSIGNMENTS
            for path in (
                grades_csv_path(COURSE, name),
                class_summary_path(COURSE, name),
                class_summary_path(COURSE, name, ".json"),
                integrity_path(COURSE, name),
                item_analysis_path(COURSE, name, ".json"),
                item_analysis_path(COURSE, name, ".csv"),
                *(COURSE / f"{fmt}-{name}.csv" for fmt in FORMATS),
            )
        ),
        # the same with --out elsewhere in the folder (the README's sample run: --out graded)
        "graded/grades-autograd.csv",
        "results/grades-autograd.csv",
        "results/integrity-autograd.json",
        # `preview`: the answer key's notebook and its feedback pages, with torch's values
        "preview/backprop/notebooks/solution.ipynb",
        "preview/backprop/feedback/solution-torch_values.html",
        "results/item-analysis-autograd.csv",
        # personalised releases, and what an interrupted atomic write leaves behind
        "personalised/autograd/alice/autograd.ipynb",
        "release/autograd/students/alice/autograd.ipynb",
        ".tokens.csv.k2j3h4.tmp",
        ".grades-autograd.csv.x1y2.tmp",
    }
)
COMMITTED = [
    "source/course.yaml",
    "source/autograd/autograd.ipynb",
    "release/autograd/autograd.ipynb",
    "tests/samples/submitted/alice/autograd/autograd.ipynb",
    "course/term/roster.py",
    "nbgrader_config.py",
]


def git() -> str:
    found = shutil.which("git")
    if found is None:
        require_tool("git", "the .gitignore tests ask git itself what it ignores (apt-get install git)")
    return found


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    """An empty work tree with the project's .gitignore."""
    folder = tmp_path_factory.mktemp("repository")
    subprocess.run([git(), "init", "--quiet", str(folder)], check=True)
    shutil.copy(ROOT / ".gitignore", folder / ".gitignore")
    return folder


def ignored(repository: Path, path: str) -> bool:
    completed = subprocess.run(
        [git(), "-C", str(repository), "check-ignore", "--quiet", "--", path],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode in (0, 1), completed.stderr
    return completed.returncode == 0


@pytest.mark.parametrize("path", WRITTEN)
def test_secrets_and_student_data_are_ignored(repository, path):
    assert ignored(repository, path)


@pytest.mark.parametrize("path", COMMITTED)
def test_what_the_project_commits_is_not_ignored(repository, path):
    assert (ROOT / path).is_file()  # a real file of the project, not a guess
    assert not ignored(repository, path)


def test_no_tracked_file_matches_an_ignore_rule():
    listed = subprocess.run(
        [git(), "-C", str(ROOT), "ls-files", "--cached", "--ignored", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=False,
    )
    if listed.returncode != 0:
        pytest.skip(f"{ROOT} is not a git work tree: {listed.stderr.strip()}")
    assert listed.stdout == ""
