"""A grader that is not root (an instructor's laptop, JupyterHub) gets namespace isolation too.

Runs the real CLI as an ordinary user (uid 65534) with a virtual environment that user can read (Debian's
/usr/bin/python3.11 with this package installed; `.ci/run` makes it and names it in
AUTOGRAD_COURSE_NONROOT_PYTHON). The instructor owns the course, so the grader can read the answer key;
the student's code, in its user namespace, must not even see it.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.helpers import NONROOT_USER, ORPHAN, ROOT, add_cell, nonroot_python, submitted_notebook, write

# alone under pytest-xdist (tests/conftest.py): its runs give way, and another worker's load would starve them
pytestmark = [pytest.mark.slow, pytest.mark.alone]

USER = NONROOT_USER


def _python() -> str:
    return nonroot_python()


def _as_instructor(command: list[str], home: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", "--inh-caps=-all", *command],
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        **kwargs,
    )


@pytest.fixture
def instructor_course():
    """A course owned by the instructor (uid 65534), in a folder that user can reach."""
    folder = Path(tempfile.mkdtemp(prefix="autograd-nonroot-", dir="/tmp"))
    folder.chmod(0o755)
    for part in ("source", "release"):
        shutil.copytree(ROOT / part, folder / part)
    shutil.copytree(ROOT / "tests" / "samples" / "submitted", folder / "submitted")
    subprocess.run(["chown", "-R", f"{USER}:{USER}", str(folder)], check=True)
    (folder / "source").chmod(0o700)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_an_ordinary_user_grades_the_class_in_namespaces(instructor_course):
    python = _python()
    answer_key = instructor_course / "source" / "autograd" / "autograd.ipynb"
    # The target exists and the grader's own user can read it: only the sandbox can stop the attack below.
    assert _as_instructor(["head", "-c", "20", str(answer_key)], instructor_course).returncode == 0
    attack = (
        "import socket\n"
        f"try:\n    net_h = open({str(answer_key)!r}).read()[:40]\nexcept OSError as error:\n"
        "    net_h = f'refused {error.errno}'\n"
        "try:\n    socket.create_connection(('127.0.0.1', 22), timeout=2)\n    net_a = 'connected'\n"
        "except OSError as error:\n    net_a = f'no network {error.errno}'\n"
    )
    mallory = instructor_course / "submitted" / "mallory" / "autograd" / "autograd.ipynb"
    write(add_cell(submitted_notebook(), attack), mallory)
    write(
        add_cell(submitted_notebook(), "while True:\n    pass"),
        instructor_course / "submitted" / "looper" / "autograd" / "autograd.ipynb",
    )
    write(submitted_notebook(), instructor_course / "submitted" / "zoe" / "autograd" / "autograd.ipynb")
    completed = _as_instructor(
        [
            python,
            "-m",
            "course",
            "--course",
            str(instructor_course),
            "grade",
            "--out",
            str(instructor_course / "out"),
            "--jobs",
            "1",
        ],
        instructor_course,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "sandbox: bubblewrap in a user namespace" in completed.stdout
    grades = next((instructor_course / "out").glob("grades*.csv"))  # the CSV's name is the gradebook's business
    with grades.open(encoding="utf-8") as stream:
        rows = {row["student_id"]: row for row in csv.DictReader(stream)}
    scores = {student: (row["score"], row["status"]) for student, row in rows.items()}
    assert scores["alice"] == ("57", "graded")
    assert scores["bob"] == ("45", "graded")
    assert scores["looper"][1] == "timed_out"
    assert scores["zoe"] == ("57", "graded")  # graded after the looper on the same worker
    feedback = json.loads(
        (instructor_course / "out" / "feedback" / "mallory" / "autograd" / "feedback.json").read_text(encoding="utf-8")
    )
    shown = {v["name"]: v["your_value"] for q in feedback["questions"] for v in q["values"]}
    assert shown["net_h"] == "'refused 2'"  # ENOENT: the course is not in the sandbox's view at all
    assert shown["net_a"].startswith("'no network")


ATTEMPT = (
    "out = []\n"
    "for path in ['/planted', '/etc/planted', '/dev/shm/planted', '/tmp/mine']:\n"
    "    try:\n"
    "        open(path, 'w').write('from an earlier student')\n"
    "        out.append('wrote ' + path)\n"
    "    except OSError as error:\n"
    "        out.append(f'{path} {error.errno}')\n"
    "status = open('/proc/self/status').read()\n"
    "out += [line.split()[1] for line in status.splitlines() if line.startswith(('CapEff', 'CapBnd'))]\n"
    "result = out\n"
)

# A cell that computes for a second and a half: the grader has it give way (course/sandbox/giving_way.py).
GIVING_WAY = (
    "import os, time\nstart = time.process_time()\nwhile time.process_time() - start < 1.5:\n    pass\n"
    "result = os.sched_getscheduler(0)"
)

WARM_CHECK = f"""
import json
from course.core.config import Limits
from course.sandbox import WarmPool
from course.pipeline.submission import Cell

with WarmPool(1, Limits(cell_seconds=5, submission_seconds=15)) as pool:
    seen = []
    for code in ({ATTEMPT!r}, "while True:\\n    pass", {ATTEMPT!r}, {ORPHAN!r}, {GIVING_WAY!r}):
        run = pool.run([Cell(0, "attempt", code)], ("result",), {{}})
        seen.append({{"worker": pool._workers[0].process.pid, "result": run.answers["result"].value,
                     "limit": run.limit_hit, "level": pool.level}})
print(json.dumps(seen))
"""


def test_the_user_namespace_level_keeps_students_apart_and_its_workers_warm(instructor_course):
    python = _python()
    completed = _as_instructor([python, "-c", WARM_CHECK], instructor_course, cwd=instructor_course)
    assert completed.returncode == 0, completed.stderr[-3000:]
    first, looper, second, orphaning, long = json.loads(completed.stdout.strip().splitlines()[-1])
    assert first["level"] == "userns"
    assert looper["limit"] == "cell_seconds"
    # The worker survives a student's run and even a student stopped at the time limit: it stays warm.
    assert first["worker"] == looper["worker"] == second["worker"] == orphaning["worker"]
    # pid 1 of the student's namespace is the small exec'd program, and it leaves no zombie behind
    assert orphaning["result"][0] is False
    assert orphaning["result"][1].endswith("/sleep")
    # A non-root grader, too, lowers the priority of a run that goes long.
    assert long["result"] == os.SCHED_IDLE
    # Only /tmp (fresh for each student) is writable; no capability is left, not even in the bounding set.
    for run in (first, second):
        assert run["result"][:4] == ["/planted 30", "/etc/planted 30", "/dev/shm/planted 30", "wrote /tmp/mine"]
        assert run["result"][4:] == ["0000000000000000", "0000000000000000"]


GIVES_WAY_IN_THREE_SESSIONS = """import subprocess, sys, time
from course.sandbox.giving_way import GIVING_WAY_NICENESS, GivingWay
spinners = [subprocess.Popen([sys.executable, '-c', 'while True: pass'], start_new_session=True) for _ in range(3)]
def nices():
    return [open(f'/proc/{spinner.pid}/autogroup').read().split()[-1] for spinner in spinners]
try:
    giving_way = GivingWay(lambda: [spinner.pid for spinner in spinners], time.monotonic())
    deadline = time.monotonic() + 60  # bounds only a failing run
    while nices() != [str(GIVING_WAY_NICENESS)] * 3 and time.monotonic() < deadline:
        giving_way.waited()
        time.sleep(0.05)
    print(' '.join(nices()))
finally:
    for spinner in spinners:
        spinner.kill()
"""


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="the kernel has no autogroups here")
def test_a_grader_that_is_not_root_lowers_every_session_of_a_run(tmp_path):
    """The kernel takes one autogroup nice per tenth of a second from a process without CAP_SYS_ADMIN, machine-wide:
    a grader that wrote every session's autogroup on every look lowered only the first of them, ever."""
    completed = _as_instructor([_python(), "-c", GIVES_WAY_IN_THREE_SESSIONS], tmp_path, cwd="/")
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split() == ["10", "10", "10"]


def test_files_the_grader_may_not_read_are_its_errors_and_the_class_goes_on(instructor_course):
    """A student folder or notebook the instructor's grader may not read (left root's by a copy made as root)
    once stopped the whole class on a traceback (the folder's timestamp.txt) or booked the student `failed` with
    0, telling them to act (the notebook). Both are the grader's set-up: autograder errors, the rest graded."""
    python = _python()
    bob = instructor_course / "submitted" / "bob" / "autograd"
    alice = instructor_course / "submitted" / "alice" / "autograd" / "autograd.ipynb"
    os.chown(bob, 0, 0)
    bob.chmod(0o700)
    os.chown(alice, 0, 0)
    alice.chmod(0o600)
    completed = _as_instructor(
        [
            python,
            "-m",
            "course",
            "--course",
            str(instructor_course),
            "grade",
            "--out",
            str(instructor_course / "out"),
            "--jobs",
            "1",
        ],
        instructor_course,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "Traceback" not in completed.stdout
    with (instructor_course / "out" / "grades-autograd.csv").open(encoding="utf-8") as stream:
        rows = {row["student_id"]: (row["score"], row["status"]) for row in csv.DictReader(stream)}
    assert rows == {
        "alice": ("0", "autograder_error"),
        "bob": ("0", "autograder_error"),
        "carol": ("0", "graded"),
        "dave": ("57", "graded"),
        "erin": ("4", "graded"),
        "frank": ("0", "failed"),
    }
    assert "2 autograder errors" in completed.stdout
    assert "could not be read by the grader" in completed.stderr  # the instructor is told which file, and why
    feedback = json.loads((instructor_course / "out" / "feedback" / "alice" / "autograd" / "feedback.json").read_text())
    assert "not your fault" in " ".join(feedback["messages"])
