"""The HTTP contract of issue 18, against a running `autograd-course serve`."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.support.helpers import CORRECT_CODE, add_cell, submitted_notebook
from tests.support.service import Server, course_for_service, multipart, notebook_bytes, request

pytestmark = pytest.mark.slow

CONTRACT_KEYS = {"id", "attempt", "student_id", "status", "score", "max_score", "feedback_url"}


def test_an_upload_is_answered_with_its_grade_and_the_same_json_later(server):
    reply = server.submit("alice", notebook_bytes(submitted_notebook()))
    assert reply.status == 200, reply.text
    body = reply.json
    assert set(body) == CONTRACT_KEYS
    assert (body["student_id"], body["status"], body["score"], body["max_score"]) == ("alice", "graded", 57, 57)
    assert server.get("alice", body["id"]).json == body
    page = request(server.url + body["feedback_url"])
    assert page.status == 200
    assert "57" in page.text
    assert "alice" in page.text
    # the service shows verdicts, not torch's values (students can resubmit at once)
    assert '"reveals_torch_values": false' not in page.text  # the page is HTML, not the JSON
    assert "torch says" not in page.text.lower()


def test_a_wrong_answer_is_graded_as_wrong_and_a_form_upload_works(server):
    wrong = notebook_bytes(submitted_notebook({**CORRECT_CODE, "cubic_grad": "0"}))
    body, kind = multipart({"notebook": wrong})
    reply = request(
        f"{server.url}/api/submissions", method="POST", token=server.tokens["bob"], data=body, content_type=kind
    )
    assert reply.status == 200, reply.text
    assert reply.json["score"] == 54  # cubic_grad is worth 3


def test_without_a_valid_token_nothing_is_stored(server):
    notebook = notebook_bytes(submitted_notebook())
    for token in (None, "", "not-a-token", server.instructor, server.tokens["alice"] + "x"):
        reply = request(
            f"{server.url}/api/submissions", method="POST", token=token, data=notebook, content_type="application/json"
        )
        assert reply.status == 401, token
        assert reply.headers["www-authenticate"] == "Bearer"
        assert "token" in reply.json["error"]
    assert request(f"{server.url}/api/submissions/1").status == 401


def test_an_oversized_notebook_is_refused_with_413_as_body_or_form(server):
    big = submitted_notebook()
    big["cells"][0]["source"] = "x" * (3 * 1024 * 1024)  # the default limit is 2048 KB
    data = notebook_bytes(big)
    reply = server.submit("carol", data)
    assert reply.status == 413
    assert "2048 KB" in reply.json["error"]
    body, kind = multipart({"notebook": data})
    reply = request(
        f"{server.url}/api/submissions", method="POST", token=server.tokens["carol"], data=body, content_type=kind
    )
    assert reply.status == 413
    assert request(f"{server.url}/s/{server.tokens['carol']}/").text.count("<tr") == 0  # nothing was stored


def test_what_is_not_a_notebook_is_refused_with_a_reason_before_it_counts(server):
    cases = [
        (b"hello", "application/json", 400, "not JSON"),
        (b'{"a": 1}', "application/json", 400, "no list of cells"),
        (notebook_bytes(submitted_notebook()), "text/plain", 415, "Content-Type: application/json"),
    ]
    for data, kind, status, words in cases:
        reply = request(
            f"{server.url}/api/submissions", method="POST", token=server.tokens["dave"], data=data, content_type=kind
        )
        assert reply.status == status
        assert words in reply.json["error"]
    body, kind = multipart({"other": "x"})
    reply = request(
        f"{server.url}/api/submissions", method="POST", token=server.tokens["dave"], data=body, content_type=kind
    )
    assert (reply.status, reply.json["error"]) == (400, "the form has no field named notebook")


def test_a_slow_notebook_is_acknowledged_with_202_then_graded(tmp_path):
    """After the wait (30 s in production; 1 s here) the upload is answered 202 queued, and graded later."""
    server = Server(course_for_service(tmp_path / "course"), wait=1.0, jobs=1)
    server.issue_tokens(["erin"])
    server.start()
    try:
        slow = add_cell(submitted_notebook(), "import time\ntime.sleep(4)")
        reply = server.submit("erin", notebook_bytes(slow))
        assert reply.status == 202, reply.text
        assert set(reply.json) == CONTRACT_KEYS
        assert reply.json["status"] in ("queued", "grading")
        graded = server.wait_graded("erin", reply.json["id"])
        assert (graded["status"], graded["score"]) == ("graded", 57)
        # the submit command polls after a 202 until the attempt is graded
        path = tmp_path / "autograd.ipynb"
        path.write_bytes(notebook_bytes(slow))
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "course",
                "submit",
                str(path),
                "--server",
                server.url,
                "--token",
                server.tokens["erin"],
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        # the student's attempt number (the page's), not the service's id
        assert "attempt 2: graded, score 57 of 57" in done.stdout
        assert done.stdout.rstrip().endswith(f"/s/{server.tokens['erin']}/attempts/2")
    finally:
        server.stop()


def _unreadable_uploads() -> list[tuple[bytes, str]]:
    old_format = submitted_notebook() | {"nbformat": 3}
    other = {
        "cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": "x = 1"}],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    not_a_cell = other | {"cells": [1]}
    odd_source = other | {"cells": [other["cells"][0] | {"source": 42}]}
    return [
        (notebook_bytes(old_format), "notebook format 3 is not supported"),
        (notebook_bytes(other), "none of the answer cells of assignment 'autograd'"),
        (notebook_bytes(not_a_cell), "cell 0 is not a notebook cell"),
        (notebook_bytes(odd_source), "cell 0 has a source that is neither text nor a list of lines"),
        (b"\xff\xfe not text", "not JSON"),
    ]


def test_the_attempt_policy_answers_429_with_when_to_retry(tmp_path):
    server = Server(course_for_service(tmp_path / "course", attempts=2, cooldown_minutes=0.1), jobs=1)
    server.issue_tokens(["frank", "warmup"])
    server.start()
    try:
        notebook = notebook_bytes(submitted_notebook())
        assert server.submit("warmup", notebook).status == 200  # the pool is warm: frank's attempts are quick
        # Uploads the grader could not read as this assignment's notebook are refused with why, and use up no
        # attempt: frank still has both below.
        for upload, words in _unreadable_uploads():
            refused = server.submit("frank", upload)
            assert refused.status == 400, refused.text
            assert words in refused.json["error"]
            assert "Traceback" not in refused.text
        assert server.submit("frank", notebook).status == 200
        refused = server.submit("frank", notebook)
        assert refused.status == 429
        assert 1 <= int(refused.headers["retry-after"]) <= 6
        assert "cooldown" in refused.json["error"]
        assert refused.json["retry_after"] > 0
        deadline = time.monotonic() + 30
        while (reply := server.submit("frank", notebook)).status == 429 and time.monotonic() < deadline:
            time.sleep(float(reply.headers.get("retry-after", "1")))
        assert reply.status == 200
        spent = server.submit("frank", notebook)
        assert spent.status == 429
        assert "retry-after" not in spent.headers
        assert spent.json["retry_after"] is None
        assert "all 2 attempts" in spent.json["error"]
    finally:
        server.stop()


def test_submit_command_prints_the_score_and_the_feedback_link(server, tmp_path):
    path = tmp_path / "autograd.ipynb"
    path.write_text(json.dumps(submitted_notebook()), encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "course",
            "submit",
            str(path),
            "--server",
            server.url,
            "--token",
            server.tokens["carol"],
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "graded, score 57 of 57" in done.stdout
    link = done.stdout.split("feedback: ")[1].strip()
    assert link.startswith(f"{server.url}/s/")
    assert request(link).status == 200
    bad = subprocess.run(
        [sys.executable, "-m", "course", "submit", str(path), "--server", server.url, "--token", "wrong"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 1
    assert bad.stderr.strip() == (
        "autograd-course submit: the server did not accept the token: use the one from your personal link"
    )


def test_the_service_runs_on_postgresql(tmp_path, postgres_url):
    server = Server(course_for_service(tmp_path / "course"), database=postgres_url, jobs=1)
    server.issue_tokens(["alice", "bob"])
    server.start()
    try:
        reply = server.submit("alice", notebook_bytes(submitted_notebook()))
        assert (reply.status, reply.json["score"]) == (200, 57)
        assert server.get("bob", reply.json["id"]).status == 404
        assert not (server.root / "service.db").exists()  # nothing went to SQLite
        grades = request(f"{server.url}/i/{server.instructor}/export/grades.csv").text
        assert grades.splitlines()[1].startswith('"alice",')
        assert ',"57","57","graded"' in grades
    finally:
        server.stop()


def test_the_instructor_exports_grades_canvas_and_into_nbgrader(server):
    import re

    from nbgrader.api import Gradebook

    assert server.submit("dave", notebook_bytes(submitted_notebook({**CORRECT_CODE, "net_dL_dw": "0"}))).status == 200
    assert server.submit("dave", notebook_bytes(submitted_notebook())).status == 200  # the best counts
    base = f"{server.url}/i/{server.instructor}"
    grades = request(f"{base}/export/grades.csv").text.splitlines()
    assert grades[0].startswith('"student_id","slopes",')  # every field quoted (course.core.text.csv_text)
    dave = next(line for line in grades if line.startswith('"dave",'))
    assert dave.endswith(',"57","0","57","57","graded"')
    canvas = request(f"{base}/export/canvas.csv").text.splitlines()
    assert canvas[0] == '"Student","ID","SIS User ID","SIS Login ID","Section","autograd"'
    assert '"Dave","103","","","","57"' in canvas
    preview = request(f"{base}/export/gradebook").text  # what would change, before anything is written
    csrf = re.search(r'name=csrf value="([^"]+)"', preview).group(1)
    plan = re.search(r'name=plan value="([^"]+)"', preview).group(1)
    ticks = re.findall(r'name=student value="([^"]+)" checked', preview)  # every student ticked by default
    assert "dave" in ticks
    body, kind = multipart({"csrf": csrf, "plan": plan, "student": ticks})
    reply = request(f"{base}/export/gradebook", method="POST", data=body, content_type=kind)
    assert reply.status == 200, reply.text
    assert "Recorded" in reply.text
    with Gradebook(f"sqlite:///{server.root / 'gradebook.db'}") as gradebook:
        assert gradebook.find_submission("autograd", "dave").score == 57
