"""Family 5: reaching what is not theirs. Each attack runs in the sandbox and fails by itself: the file is
absent from its view, the write is refused, the socket cannot connect."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from course.core.config import Limits
from course.pipeline.submission import Cell
from tests.support.adversarial import needs_bwrap
from tests.support.helpers import ROOT

pytestmark = [pytest.mark.slow, needs_bwrap]


@pytest.fixture
def attempt(sandbox_run):
    """attempt(code): run `code`, which sets `result`, in the sandbox (cold or warm); return the plain value."""

    def run_attack(code: str):
        return _attempt(sandbox_run, code)

    return run_attack


def _attempt(sandbox_run, code: str):
    run = sandbox_run([Cell(0, "attack", code)], ("result",), {}, Limits(cell_seconds=10, submission_seconds=20))
    answer = run.answers["result"]
    assert answer.status == "value", (answer, run.output[-2000:])
    return answer.value


# Files of the grader a notebook must not read. Those a clean checkout does not have (a gradebook, a graded
# class) are made for the test in a folder of the grader's, so that every target really exists.
READ_TARGETS = {
    "source notebook (answer key)": ROOT / "source" / "autograd" / "autograd.ipynb",
    "hidden tests via the course package": ROOT / "course" / "pipeline" / "judge.py",
    "course settings": ROOT / "source" / "course.yaml",
    "gradebook": "gradebook.db",
    "another student's submission": ROOT / "tests" / "samples" / "submitted" / "alice" / "autograd" / "autograd.ipynb",
    "another student's feedback": "graded/feedback/alice/autograd/feedback.json",
    "the grader's shell history": "home/.bash_history",
}


@pytest.fixture(scope="module")
def graders_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("graders-files")
    for relative in (
        "gradebook.db",
        "graded/feedback/alice/autograd/feedback.json",
        "graded/grades-autograd.csv",
        "results/results.json",
        "home/.bash_history",
    ):
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text("the grader's own data\n")
    return folder


def _existing(target: str | Path, folder: Path) -> Path:
    """The target as a path that exists and that the grader itself can read: only the sandbox can stop the
    attack, never a missing file."""
    path = target if isinstance(target, Path) else folder / target
    assert path.is_file()
    assert path.read_bytes()[:1]
    return path


@pytest.mark.parametrize("target", list(READ_TARGETS))
def test_reading_files_of_the_grader(target, attempt, graders_folder):
    path = str(_existing(READ_TARGETS[target], graders_folder))
    result = attempt(
        f"import os\ntry:\n    open({path!r}, 'rb').read(10)\n    result = 'read'\n"
        f"except OSError as error:\n    result = type(error).__name__"
    )
    assert result in ("FileNotFoundError", "PermissionError")


def test_the_course_folder_is_not_in_view(attempt):
    assert attempt(f"import os\nresult = os.path.exists({str(ROOT / 'source')!r})") is False


def test_the_graders_environment_variables(monkeypatch, attempt):
    monkeypatch.setenv("AUTOGRADER_SECRET", "hunter2")
    assert attempt("import os\nresult = ' '.join(sorted(os.environ))").count("AUTOGRADER_SECRET") == 0


def test_proc_of_the_parent_and_other_processes(attempt):
    code = (
        "import os\nvisible = [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "try:\n    open('/proc/1/environ', 'rb').read()\n    environ = 'read'\n"
        "except OSError as error:\n    environ = type(error).__name__\n"
        "result = [len(visible), environ, os.getppid()]"
    )
    visible, environ, parent = attempt(code)
    assert visible <= 3  # bubblewrap's init, the runner and at most a helper: no grader process in view
    assert environ == "PermissionError"
    assert parent != os.getpid()


WRITE_TARGETS = {
    "results.json": "results/results.json",
    "grades-autograd.csv": "graded/grades-autograd.csv",
    "feedback": "graded/feedback/alice/autograd/feedback.json",
    "gradebook": "gradebook.db",
    "the package": ROOT / "course" / "pipeline" / "judge.py",
}


@pytest.mark.parametrize("target", list(WRITE_TARGETS))
def test_writing_the_graders_results(target, attempt, graders_folder):
    path = _existing(WRITE_TARGETS[target], graders_folder)
    before = path.read_bytes()
    result = attempt(
        f"try:\n    open({str(path)!r}, 'w').write('hacked')\n    result = 'written'\n"
        f"except OSError as error:\n    result = type(error).__name__"
    )
    assert result in ("FileNotFoundError", "PermissionError", "OSError")
    assert path.read_bytes() == before


def test_network_sockets(attempt):
    code = (
        "import socket\nresult = []\n"
        "for family, address in [(socket.AF_INET, ('127.0.0.1', 8888)), (socket.AF_INET, ('1.1.1.1', 443)),"
        " (socket.AF_INET6, ('::1', 8888))]:\n"
        "    try:\n        socket.create_connection(address[:2], timeout=2)\n        result.append('connected')\n"
        "    except OSError as error:\n        result.append(type(error).__name__)\n"
        "try:\n    socket.getaddrinfo('pypi.org', 443)\n    result.append('resolved')\n"
        "except OSError as error:\n    result.append(type(error).__name__)\n"
    )
    result = attempt(code)
    assert "connected" not in result
    assert "resolved" not in result
