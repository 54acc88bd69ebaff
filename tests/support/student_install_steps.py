"""A student's install, as docs/students.md has it, step by step (tests/test_student_install.py's scenario): the
venv the page's command made (tests/support/student_install.py), then what the student does with it. Each step
asserts what it checks, so the scenario reads as its steps and still fails where any of them breaks."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.helpers import ROOT
from tests.support.student_install import Installed

STUDENTS_MD = ROOT / "docs" / "students.md"
NBGRADER = str(Path(sys.executable).parent / "nbgrader")  # the instructor's, in the test environment
SERVICE_ONLY = ("starlette", "uvicorn", "python-multipart", "psycopg")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def install_section() -> str:
    text = STUDENTS_MD.read_text(encoding="utf-8")
    return text[text.index("## Install") : text.index("### For the instructor")]


def blocks(language: str) -> list[str]:
    """The lines of the install section's code blocks in `language`."""
    found = re.findall(rf"```{language}\n(.*?)```", install_section(), flags=re.DOTALL)
    return [line for block in found for line in block.splitlines() if line.strip()]


def run(command: list[str], env: dict[str, str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def said(done: subprocess.CompletedProcess) -> str:
    return ANSI.sub("", done.stdout + done.stderr)


@dataclass(frozen=True)
class Student:
    """The student's side of the install: home (the venv in home/.venv), environment, and the venv's bin/."""

    home: Path
    env: dict[str, str]

    @property
    def bin(self) -> str:
        return f"{self.home / '.venv'}/bin/"

    def run(self, *command: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        """One of the venv's commands (`python`, `jupyter`, `nbgrader`, `autograd-course`) with its arguments."""
        return run([self.bin + command[0], *command[1:]], self.env, cwd or self.home)


def the_page_installed(install: Installed) -> Student:
    """Step: the install ran the page's own command, and pip succeeded."""
    [create] = [line for line in blocks("bash") if "pip install" in line]
    assert create == "python3.11 -m venv .venv && .venv/bin/pip install autograd_course-*.whl"
    assert install.pip.returncode == 0, install.pip.stderr[-3000:]
    return Student(install.home, install.env)


def only_the_students_packages(student: Student) -> None:
    """Step: the student's packages only: the service's are absent, the notebook's and nbgrader's present."""
    probe = (
        "import importlib.metadata as m, json, sys\n"
        "def has(name):\n"
        "    try: m.distribution(name); return True\n"
        "    except m.PackageNotFoundError: return False\n"
        "print(json.dumps({name: has(name) for name in sys.argv[1:]}))"
    )
    names = [*SERVICE_ONLY, "torch", "numpy", "jupyterlab", "nbgrader", "autograd-course"]
    present = student.run("python", "-c", probe, *names)
    assert present.returncode == 0, present.stderr
    assert present.stdout.strip() == (
        '{"starlette": false, "uvicorn": false, "python-multipart": false, "psycopg": false, "torch": true, '
        '"numpy": true, "jupyterlab": true, "nbgrader": true, "autograd-course": true}'
    )
    # ... and the test environment has them, so the check above can tell the difference
    assert all(importlib.metadata.distribution(name) for name in SERVICE_ONLY)


def _extensions(student: Student) -> str:
    return said(student.run("jupyter", "server", "extension", "list")) + said(
        student.run("jupyter", "labextension", "list")
    )


def instructor_tools_turned_off(student: Student) -> None:
    """Step: nbgrader's instructor tools are on as installed, off after the page's commands; fetch, submit and
    validate stay."""
    assert "nbgrader.server_extensions.formgrader enabled" in _extensions(student)
    commands = [line for line in blocks("bash") if "extension disable" in line]
    assert len(commands) == 2
    for line in commands:
        done = run(shlex.split(line.replace(".venv/bin/", student.bin)), student.env, student.home)
        assert done.returncode == 0, said(done)
    listed = _extensions(student)
    for server_extension, state in (
        ("formgrader", "disabled"),
        ("course_list", "disabled"),
        ("assignment_list", "enabled"),
        ("validate_assignment", "enabled"),
    ):
        assert f"nbgrader.server_extensions.{server_extension} {state}" in listed, listed
    disabled = listed[listed.index("Disabled extensions:") :]
    for plugin in ("formgrader", "create-assignment", "course-list"):
        assert f"@jupyter/nbgrader:{plugin}" in disabled, listed
    assert "@jupyter/nbgrader:assignment-list" not in disabled


def fetch_from_a_released_exchange(student: Student, exchange: Path, instructor_home: Path) -> None:
    """Step: the page's two nbgrader settings, in ~/.jupyter, fetch from an exchange nbgrader released into (the
    instructor's nbgrader, in `instructor_home`): the released notebook, byte for byte."""
    settings = blocks("python")
    assert [line.split("=")[0].strip() for line in settings] == ["c.CourseDirectory.course_id", "c.Exchange.root"]
    exchange_root = re.search(r'"(.*)"', settings[1]).group(1)
    (student.home / ".jupyter").mkdir()
    (student.home / ".jupyter" / "nbgrader_config.py").write_text(
        "\n".join([settings[0], settings[1].replace(exchange_root, str(exchange))]) + "\n", encoding="utf-8"
    )
    course = instructor_home / "course"
    course.mkdir()
    (course / "release").symlink_to(ROOT / "release")
    exchange.mkdir(mode=0o777)
    released = run(
        [NBGRADER, "release_assignment", "autograd", "--course=autograd-course", f"--Exchange.root={exchange}"],
        {**os.environ, "HOME": str(instructor_home)},
        course,
    )
    assert released.returncode == 0, said(released)
    fetched = student.run("nbgrader", "fetch_assignment", "autograd")
    assert fetched.returncode == 0, said(fetched)
    assert (student.home / "autograd" / "autograd.ipynb").read_bytes() == (
        ROOT / "release" / "autograd" / "autograd.ipynb"
    ).read_bytes()


def check_the_fetched_notebook(student: Student) -> None:
    """Step: `check` on the fetched notebook, in the student's folder, runs it in the sandbox and lists what is to
    do."""
    checked = student.run("autograd-course", "check", "autograd.ipynb", cwd=student.home / "autograd")
    assert checked.returncode == 1, said(checked)  # nothing answered yet
    assert "Not ready yet" in checked.stdout
    assert checked.stdout.splitlines()[-1].startswith("sandbox: ")
    assert "Traceback" not in said(checked)


def submit_through_the_exchange(student: Student, exchange: Path) -> None:
    """Step: nbgrader's submit sends it back to the exchange."""
    submitted = student.run("nbgrader", "submit", "autograd")
    assert submitted.returncode == 0, said(submitted)
    assert [path.name for path in (exchange / "autograd-course" / "inbound").iterdir()]  # the submission arrived


def the_service_client_needs_no_service(student: Student) -> None:
    """Step: the service's client is the student's: it needs none of the service's packages (no server listens)."""
    sent = student.run(
        "autograd-course", "submit", "autograd/autograd.ipynb", "--server", "http://127.0.0.1:9", "--token", "t"
    )
    assert sent.returncode == 1
    assert sent.stderr.startswith("autograd-course submit: cannot reach the server http://127.0.0.1:9/"), said(sent)


def an_instructor_command_says_what_to_install(student: Student) -> None:
    """Step: an instructor's command in the student's install says, in one sentence, what to install."""
    served = student.run("autograd-course", "serve")
    assert served.returncode == 1
    assert served.stdout == ""
    [line] = served.stderr.splitlines()
    assert line.startswith(
        "autograd-course serve: autograd-course serve is the instructor's and needs the service "
        "extra (starlette, uvicorn, python-multipart not installed"
    ), line
    assert "whl[service]" in line
