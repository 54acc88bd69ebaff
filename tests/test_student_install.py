"""A student's install, as docs/students.md has it: the wheel alone, with its own dependencies, into a fresh venv
(pip resolves them as a student's pip would; torch and Jupyter are unpacked afresh: a minute or two). The grader's
and the service's packages stay out; nbgrader's instructor tools are turned off by the page's own commands; the
page's two nbgrader settings fetch and submit through an exchange that nbgrader released into; `check` runs on
the fetched notebook; an instructor's command says what to install."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import student_install
from tests.support.helpers import ROOT

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


def test_the_jupyterhub_image_sets_up_what_the_page_says():
    """The students' JupyterHub image (autograder/jupyterhub-singleuser.Dockerfile) runs the page's commands and
    writes its two nbgrader settings."""
    text = (ROOT / "autograder" / "jupyterhub-singleuser.Dockerfile").read_text(encoding="utf-8")
    joined = " ".join(text.replace("\\\n", " ").split())
    for line in blocks("bash"):
        if "extension disable" in line:
            assert " ".join(line.removeprefix(".venv/bin/").split()) in joined, line
    for line in blocks("python"):
        assert line.split("=")[0].strip() + ' = "%s"' in text, line
    assert "autograd_course-*.whl" in text
    assert "[grader]" not in text
    assert "[service]" not in text


@pytest.mark.slow
def test_a_student_install_fetches_checks_and_submits_without_the_grader_s_tools(tmp_path):
    # The page's install command, run in the background from the start of the run (tests/support/student_install.py).
    [create] = [line for line in blocks("bash") if "pip install" in line]
    assert create == "python3.11 -m venv .venv && .venv/bin/pip install autograd_course-*.whl"
    install = student_install.installed()
    assert install.pip.returncode == 0, install.pip.stderr[-3000:]
    home, env, exchange = install.home, install.env, tmp_path / "exchange"
    bin_ = f"{home / '.venv'}/bin/"

    # The student's packages only: the service's are absent, the notebook's and nbgrader's present.
    probe = (
        "import importlib.metadata as m, json, sys\n"
        "def has(name):\n"
        "    try: m.distribution(name); return True\n"
        "    except m.PackageNotFoundError: return False\n"
        "print(json.dumps({name: has(name) for name in sys.argv[1:]}))"
    )
    names = [*SERVICE_ONLY, "torch", "numpy", "jupyterlab", "nbgrader", "autograd-course"]
    present = run([bin_ + "python", "-c", probe, *names], env, home)
    assert present.returncode == 0, present.stderr
    assert present.stdout.strip() == (
        '{"starlette": false, "uvicorn": false, "python-multipart": false, "psycopg": false, "torch": true, '
        '"numpy": true, "jupyterlab": true, "nbgrader": true, "autograd-course": true}'
    )
    # ... and the test environment has them, so the check above can tell the difference
    assert all(importlib.metadata.distribution(name) for name in SERVICE_ONLY)

    # nbgrader's instructor tools: on as installed, off after the page's commands; fetch, submit, validate stay.
    def extensions() -> str:
        return said(run([bin_ + "jupyter", "server", "extension", "list"], env, home)) + said(
            run([bin_ + "jupyter", "labextension", "list"], env, home)
        )

    assert "nbgrader.server_extensions.formgrader enabled" in extensions()
    commands = [line for line in blocks("bash") if "extension disable" in line]
    assert len(commands) == 2
    for line in commands:
        done = run(shlex.split(line.replace(".venv/bin/", bin_)), env, home)
        assert done.returncode == 0, said(done)
    listed = extensions()
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

    # The page's two nbgrader settings, in ~/.jupyter: fetch from an exchange nbgrader released into, submit back.
    settings = blocks("python")
    assert [line.split("=")[0].strip() for line in settings] == ["c.CourseDirectory.course_id", "c.Exchange.root"]
    exchange_root = re.search(r'"(.*)"', settings[1]).group(1)
    (home / ".jupyter").mkdir()
    (home / ".jupyter" / "nbgrader_config.py").write_text(
        "\n".join([settings[0], settings[1].replace(exchange_root, str(exchange))]) + "\n", encoding="utf-8"
    )
    course = tmp_path / "course"
    course.mkdir()
    (course / "release").symlink_to(ROOT / "release")
    exchange.mkdir(mode=0o777)
    released = run(
        [NBGRADER, "release_assignment", "autograd", "--course=autograd-course", f"--Exchange.root={exchange}"],
        {**os.environ, "HOME": str(tmp_path)},
        course,
    )
    assert released.returncode == 0, said(released)
    fetched = run([bin_ + "nbgrader", "fetch_assignment", "autograd"], env, home)
    assert fetched.returncode == 0, said(fetched)
    assert (home / "autograd" / "autograd.ipynb").read_bytes() == (
        ROOT / "release" / "autograd" / "autograd.ipynb"
    ).read_bytes()

    # `check` on the fetched notebook, in the student's folder: it runs it in the sandbox and lists what is to do.
    checked = run([bin_ + "autograd-course", "check", "autograd.ipynb"], env, home / "autograd")
    assert checked.returncode == 1, said(checked)  # nothing answered yet
    assert "Not ready yet" in checked.stdout
    assert checked.stdout.splitlines()[-1].startswith("sandbox: ")
    assert "Traceback" not in said(checked)

    submitted = run([bin_ + "nbgrader", "submit", "autograd"], env, home)
    assert submitted.returncode == 0, said(submitted)
    assert [path.name for path in (exchange / "autograd-course" / "inbound").iterdir()]  # the submission arrived

    # The service's client is the student's: it needs none of the service's packages (here: no server listens).
    sent = run(
        [
            bin_ + "autograd-course",
            "submit",
            "autograd/autograd.ipynb",
            "--server",
            "http://127.0.0.1:9",
            "--token",
            "t",
        ],
        env,
        home,
    )
    assert sent.returncode == 1
    assert sent.stderr.startswith("autograd-course submit: cannot reach the server http://127.0.0.1:9/"), said(sent)

    # An instructor's command in the student's install: one sentence saying what to install.
    served = run([bin_ + "autograd-course", "serve"], env, home)
    assert served.returncode == 1
    assert served.stdout == ""
    [line] = served.stderr.splitlines()
    assert line.startswith(
        "autograd-course serve: autograd-course serve is the instructor's and needs the service "
        "extra (starlette, uvicorn, python-multipart not installed"
    ), line
    assert "whl[service]" in line
