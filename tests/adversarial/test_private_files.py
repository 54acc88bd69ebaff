"""Grades and secrets readable by every user of the machine: `grade` under a umask of 022 (the common default)
left the gradebook, the grades, integrity report, class summary, course totals, feedback and autograded/ 0644.

Everything a command writes into the course is the grader's user's alone (files 0600, folders it makes 0700),
whatever the umask, except what students must read: release/, and the feedback page, which
`nbgrader release_feedback` copies with its mode into the exchange (so it is 0644, inside folders that are 0700)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from course.cli import main
from tests.support.helpers import ROOT

SAMPLES = ROOT / "tests" / "samples" / "submitted"
TIMESTAMP = "2026-11-20 09:00:00.000000 UTC"
STUDENTS = ("alice", "erin")  # erin patches torch.allclose: the integrity report has a line on her
# What students or nbgrader's exchange bring, and the course's own text: not written by our commands.
NOT_OURS = ("source", "release", "submitted", "nbgrader_config.py", "roster.csv")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.fixture(scope="module")
def course_under_umask_022(tmp_path_factory):
    base = tmp_path_factory.mktemp("umask")
    root = base / "course"
    for folder in ("source", "release"):
        shutil.copytree(ROOT / folder, root / folder)
    shutil.copy(ROOT / "nbgrader_config.py", root)
    for student in STUDENTS:
        folder = root / "submitted" / student / "autograd"
        folder.mkdir(parents=True)
        shutil.copy(SAMPLES / student / "autograd" / "autograd.ipynb", folder)
        (folder / "timestamp.txt").write_text(TIMESTAMP)
        (folder / "submission_secret.txt").write_text(f"secret-of-{student}")
    (root / "roster.csv").write_text("student_id,name,lms_id\nalice,Alice A,1\nerin,Erin E,2\nzoe,Zoe Z,3\n")
    umask = os.umask(0o022)
    try:
        roster = str(root / "roster.csv")
        assert main(["--course", str(root), "grade", "--quiet", "--roster", roster]) == 0
        assert main(["--course", str(root), "export", "--format", "canvas", "--roster", roster]) == 0
        assert main(["--course", str(root), "serve", "tokens", roster, "--out", str(root / "tokens.csv")]) == 0
    finally:
        os.umask(umask)
    return root


@pytest.mark.slow
def test_every_file_that_holds_grades_or_secrets_is_the_graders_alone(course_under_umask_022):
    root = course_under_umask_022
    expected = {
        "gradebook.db",
        "grades-autograd.csv",
        "integrity-autograd.json",
        "class-summary-autograd.html",
        "class-summary-autograd.json",
        "course-totals.csv",
        "canvas-autograd.csv",
        "tokens.csv",
        "tokens-instructor.txt",
        "service.db",
        "autograded",
        "feedback",
    }
    assert expected <= {path.name for path in root.iterdir()}  # each of them was written, so each is checked
    pages = {root / "feedback" / student / "autograd" / "autograd.html" for student in STUDENTS}
    readable = []
    for path in sorted(root.rglob("*")):
        if path.relative_to(root).parts[0] in NOT_OURS or path in pages:
            continue
        allowed = 0o700 if path.is_dir() else 0o600
        if mode(path) & ~allowed or (path.is_dir() and mode(path) != 0o700):
            readable.append(f"{path.relative_to(root)} {mode(path):04o}")
    assert readable == []
    for student in STUDENTS:  # the trees of one student, each file in them
        for tree in ("autograded", "feedback"):
            assert {mode(path) for path in (root / tree / student).rglob("*") if path not in pages} == {0o600, 0o700}, (
                tree,
                student,
            )


@pytest.mark.slow
def test_the_feedback_page_is_readable_only_through_the_exchange(course_under_umask_022, tmp_path):
    root = course_under_umask_022
    for student in STUDENTS:
        page = root / "feedback" / student / "autograd" / "autograd.html"
        assert mode(page) == 0o644  # release_feedback copies it with this mode: the student's user reads the copy
        for folder in (page.parent, page.parent.parent, root / "feedback"):
            assert mode(folder) == 0o700, folder  # ...and nobody else reaches it in the course
    exchange = tmp_path / "exchange"
    exchange.mkdir(mode=0o755)
    nbgrader = str(Path(sys.executable).parent / "nbgrader")
    common = ["--course=autograd-course", f"--Exchange.root={exchange}"]
    done = subprocess.run(
        [nbgrader, "release_feedback", "autograd", *common],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    released = list((exchange / "autograd-course" / "feedback").glob("*.html"))
    assert len(released) == len(STUDENTS)
    assert {mode(path) & stat.S_IROTH for path in released} == {stat.S_IROTH}
    home = tmp_path / "alice"
    # what `nbgrader submit` leaves in the student's own cache: the notebook and the secret of the submission
    cached = home / "cache" / "autograd-course" / f"alice+autograd+{TIMESTAMP}"
    cached.mkdir(parents=True)
    shutil.copy(root / "submitted" / "alice" / "autograd" / "autograd.ipynb", cached)
    shutil.copy(root / "submitted" / "alice" / "autograd" / "submission_secret.txt", cached)
    done = subprocess.run(
        [nbgrader, "fetch_feedback", "autograd", "--student=alice", *common, f"--Exchange.cache={home / 'cache'}"],
        cwd=home,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    fetched = list((home / "autograd" / "feedback").glob("*/autograd.html"))
    assert [path.read_text() for path in fetched] == [
        (root / "feedback" / "alice" / "autograd" / "autograd.html").read_text()
    ]


def test_a_gradebook_left_readable_by_an_earlier_version_is_made_private(tmp_path):
    from course.term.nbgrader_bridge import open_gradebook

    database = tmp_path / "gradebook.db"
    database.touch(mode=0o644)
    database.chmod(0o644)
    with open_gradebook(f"sqlite:///{database}") as gradebook:
        gradebook.update_or_create_student("alice")
    assert mode(database) == 0o600
