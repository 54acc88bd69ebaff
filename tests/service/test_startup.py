"""`serve` proves its own setup before it takes any work (course/pipeline/selftest.py): the course's solution and the
untouched release through the server's own warm pool, or it refuses to start with one line."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.support.helpers import set_limit
from tests.support.service import Server, course_for_service, free_port

pytestmark = pytest.mark.slow


def test_the_running_service_said_its_self_test_passed(server):
    said = [line for line in server.log.read_text().splitlines() if "self-test: the course's solution" in line]
    # a line of the service's log: its UTC time, its level, its logger, then the message
    assert re.match(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ INFO course\.platforms\.service\.run: self-test: the course's solution "
        r"57/57 and the untouched release 0/57",
        said[0],
    ), said


def test_serve_refuses_to_start_when_its_sandbox_cannot_start_a_run(tmp_path):
    root = course_for_service(tmp_path / "course")
    set_limit(root, "open_files", 3)  # the sandbox's own start-up can open no file
    refused = Server(root, jobs=1)
    refused.issue_tokens(["ana"])
    completed = subprocess.run(
        refused.command("--port", str(free_port()), "--jobs", "1"),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 1
    said = [line for line in completed.stderr.splitlines() if line.startswith("autograd-course serve: ")]
    assert len(said) == 1
    assert "the self-test failed, so nothing was graded" in said[0]
    assert "open_files=3" in said[0]
    assert "Traceback" not in completed.stderr
    assert "assignment autograd on http" not in completed.stderr  # it never announced itself, so it never served


def test_a_restarted_service_reuses_its_proof_and_proves_again_when_told(tmp_path):
    """The self-test's proof is kept for the same course, sandbox and interpreter (selftest_proof.py): a server
    started again reuses it and says so; `--self-test` proves it again."""
    root = course_for_service(tmp_path / "course")
    server = Server(root, jobs=1)
    server.issue_tokens(["ana"])

    def self_test_line(*options: str) -> str:
        server.options = options
        try:
            server.start()
        finally:
            server.stop()
        (line,) = [line for line in server.log.read_text().splitlines() if "self-test: " in line]
        return line.split("self-test: ", 1)[1]

    assert self_test_line().startswith("the course's solution 57/57 and the untouched release 0/57")
    assert self_test_line().startswith("reused the proof of ")
    assert self_test_line("--self-test").startswith("the course's solution 57/57 and the untouched release 0/57")
