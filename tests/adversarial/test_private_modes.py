"""Recorded submissions readable by every user of the machine (issue 50, item 7).

At e2fd90b the service's recording into the term wrote submitted/<student>/<assignment>/ 0755 and the notebook
0644 (`nobody` read alice's notebook), and the gradebook's history kept copies with whatever modes it found;
nbgrader's collect leaves submitted/ as the student's files came (0644). After a whole term - a `grade` of the
class in the course root with its gradebook, the service's attempts recorded into the term twice (the second
keeps the first's files in the history), an export and the tokens - under the most permissive umask (000), another
user (uid 65534) finds nothing it can read or list in the course but what is the course's own text, and every
file and folder our commands wrote is 0600/0700; the one exception is the feedback page, 0644 inside folders
that are 0700, because `nbgrader release_feedback` copies it with its mode into the exchange for the student.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from course.cli import main
from tests.support.helpers import CORRECT_CODE, ROOT, copy_course, submitted_notebook

ASSIGNMENT = "autograd"
SAMPLES = ROOT / "tests" / "samples" / "submitted"
TIMESTAMP = "2026-11-20 09:00:00.000000 UTC"
CLASS = ("alice", "erin")  # graded by `grade` in the course root, their submitted/ as nbgrader collect leaves it
SERVICE = ("bob", "carol")  # upload to the service, recorded into the term from the dashboard
NOBODY = 65534
# The course's own text, what students receive, and this test's own files: not written by our commands.
NOT_OURS = {"source", "release", "nbgrader_config.py", "class.csv", "roster.csv"}

WALKER = """
import os, sys
found = []
for line in sys.stdin.read().splitlines():
    kind, path = line.split(" ", 1)
    try:
        if kind == "d":
            os.listdir(path)
        else:
            with open(path, "rb") as stream:
                stream.read(1)
    except OSError:
        continue
    found.append(line)
sys.stdout.write("".join(line + "\\n" for line in found))
"""


def as_nobody(listing: str) -> list[str]:
    """Of the listed paths ("d PATH" a folder, "f PATH" a file), those uid 65534 can list or read."""
    done = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", "/usr/bin/python3", "-c", WALKER],
        input=listing,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def ours(root: Path) -> list[Path]:
    """Every path under the course root that our commands wrote."""
    return [
        path
        for path in sorted(root.rglob("*"))
        if path.relative_to(root).parts[0] not in NOT_OURS and not path.name.startswith("server-")
    ]


def is_feedback_page(root: Path, path: Path) -> bool:
    """The page release_feedback hands out: feedback/<student>/<assignment>/<notebook>.html, and the history's
    copies of it (gradebook-history/<assignment>/<n>/files/<student>/feedback/<notebook>.html)."""
    parts = path.relative_to(root).parts
    return path.suffix == ".html" and (
        (len(parts) == 4 and parts[0] == "feedback") or (parts[0] == "gradebook-history" and parts[-2] == "feedback")
    )


def _submit_and_record(server, notebook: dict, expect: str) -> None:
    from tests.support.recording_form import message, post_form, recording_page
    from tests.support.service import notebook_bytes

    for student in SERVICE:
        reply = server.submit(student, notebook_bytes(notebook))
        assert (reply.status, reply.json["status"]) == (200, "graded"), reply.text  # answered once graded
    _, _, _, plan = recording_page(server)
    assert plan is not None
    done = post_form(server, plan=plan)
    assert done.status == 200, message(done)
    assert re.search(expect, message(done)), message(done)


@pytest.fixture(scope="module")
def term():
    """A whole term in a course folder other users can reach (/tmp/..., 0755, as a course checkout is)."""
    base = Path(tempfile.mkdtemp(prefix="autograd-modes-", dir="/tmp"))
    try:
        yield _whole_term(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _whole_term(base: Path) -> Path:
    from tests.support.service import Server

    base.chmod(0o755)
    root = copy_course(base / "course")
    root.chmod(0o755)
    shutil.copy(ROOT / "nbgrader_config.py", root)
    for student in CLASS:  # as `nbgrader collect` leaves them: the student's modes, readable by all
        folder = root / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        shutil.copy(SAMPLES / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", folder)
        (folder / "timestamp.txt").write_text(TIMESTAMP)
        (folder / "submission_secret.txt").write_text(f"secret-of-{student}")
        for path in (root / "submitted", folder.parent, folder, *folder.iterdir()):
            path.chmod(0o755 if path.is_dir() else 0o644)
    (root / "class.csv").write_text("student_id,name,lms_id\nalice,Alice A,1\nerin,Erin E,2\n")
    umask = os.umask(0o000)
    server = Server(root, jobs=1)
    try:
        classroll = str(root / "class.csv")
        assert main(["--course", str(root), "grade", "--quiet", "--roster", classroll]) == 0
        assert main(["--course", str(root), "export", "--format", "canvas", "--roster", classroll]) == 0
        server.issue_tokens(list(SERVICE))
        server.start()
        # a first attempt, recorded; then a second, whose recording keeps the first's files in the history
        _submit_and_record(server, submitted_notebook({**CORRECT_CODE, "net_h": "..."}), r"Recorded 2 students")
        _submit_and_record(server, submitted_notebook(), r"Recorded 2 students")
    finally:
        server.stop()
        os.umask(umask)
    return root


@pytest.mark.slow
def test_another_user_reads_nothing_of_the_term(term):
    root = term
    written = ours(root)
    kinds = {path.relative_to(root).parts[0] for path in written}
    # each kind of record was written, so each is walked
    assert {"submitted", "autograded", "feedback", "gradebook-history", "service-work", "gradebook.db"} <= kinds
    assert any(path.name == f"{ASSIGNMENT}.ipynb" for path in (root / "gradebook-history").rglob("*"))
    listing = "".join(f"{'d' if path.is_dir() else 'f'} {path}\n" for path in written if not path.is_symlink())
    page = root / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    assert as_nobody(f"d {root}\nf {page}\n") == [f"d {root}", f"f {page}"]  # the walker can read: it proves
    readable = as_nobody(listing)
    assert not readable, "\n".join(readable)


@pytest.mark.slow
def test_every_file_and_folder_of_the_term_is_the_graders_alone(term):
    root = term
    wrong = []
    for path in ours(root):
        if path.is_symlink():
            continue
        if is_feedback_page(root, path):
            expected = 0o644  # release_feedback copies it with this mode; the folders above it are 0700
        else:
            expected = 0o700 if path.is_dir() else 0o600
        if mode(path) != expected:
            wrong.append(f"{path.relative_to(root)} {mode(path):04o}")
    assert not wrong, "\n".join(wrong)
    pages = [path for path in ours(root) if is_feedback_page(root, path)]
    assert len(pages) >= len(CLASS) + len(SERVICE)
    for page in pages:
        assert all(mode(folder) == 0o700 for folder in page.parents if folder != root and root in folder.parents)


@pytest.mark.slow
def test_the_history_puts_back_what_nbgrader_needs(term):
    """The recording's history keeps the feedback page 0644, so that a page put back by an undo is still one
    release_feedback can hand out; everything else it keeps is 0600."""
    root = term
    kept = sorted((root / "gradebook-history" / ASSIGNMENT).glob("*/files/*/feedback"))
    assert kept, "the second recording kept the first's feedback"
    for folder in kept:
        assert {mode(path) for path in folder.iterdir() if is_feedback_page(root, path)} == {0o644}
        assert {mode(path) for path in folder.iterdir() if not is_feedback_page(root, path)} == {0o600}
    recording = json.loads(next((root / "gradebook-history" / ASSIGNMENT).glob("*/recording.json")).read_text())
    assert recording["students"]


@pytest.mark.parametrize("umask", [0o000, 0o022])
def test_a_kept_record_and_one_put_back_are_private_whatever_the_umask(tmp_path, umask):
    """What the history keeps of a student (term_files.keep) and what an undo puts back (put_back), from folders
    made readable to all (as nbgrader collect leaves submitted/): 0700 and 0600, the feedback page 0644."""
    from course.term import term_files

    root = tmp_path / "course"
    for name, files in (
        ("submitted", ("autograd.ipynb", "timestamp.txt")),
        ("feedback", ("autograd.html", "feedback.json")),
    ):
        folder = root / name / "alice" / ASSIGNMENT
        folder.mkdir(parents=True)
        for file in files:
            (folder / file).write_text(f"{name}/{file}")
            (folder / file).chmod(0o644)
        for path in (root / name, folder.parent, folder):
            path.chmod(0o755)
    before = term_files.fingerprints(root, ASSIGNMENT, "alice")
    kept = tmp_path / "history" / "0001" / "files" / "alice"
    previous = os.umask(umask)
    try:
        term_files.keep(root, ASSIGNMENT, "alice", kept)
        for name in term_files.FOLDERS:
            shutil.rmtree(root / name / "alice", ignore_errors=True)
        term_files.put_back(root, ASSIGNMENT, "alice", kept)
    finally:
        os.umask(previous)
    assert term_files.kept_fingerprints(kept) == before == term_files.fingerprints(root, ASSIGNMENT, "alice")
    page = {kept / "feedback" / "autograd.html", root / "feedback" / "alice" / ASSIGNMENT / "autograd.html"}
    for top in (kept, root / "submitted" / "alice", root / "feedback" / "alice"):
        for path in (top, *top.rglob("*")):
            expected = 0o644 if path in page else 0o700 if path.is_dir() else 0o600
            assert mode(path) == expected, f"{path} {mode(path):04o}"
