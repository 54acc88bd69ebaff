"""The course YAML's policies through the service: the due date and late policy, and fresh numbers for
every attempt (the student downloads the notebook of their next attempt)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from course.authoring.release import release
from course.core.config import load_config
from course.pipeline.assignment import load_course_assignment
from course.pipeline.variants import numbers_source
from course.platforms.service.policy import attempt_numbers
from tests.support.helpers import CONTRACT_FUNCTIONS, fill, solve
from tests.support.service import Server, course_for_service, notebook_bytes, request

pytestmark = pytest.mark.slow


def _numbers_cell(notebook: dict) -> str:
    cell = next(c for c in notebook["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "numbers")
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _answered(notebook: dict, params: dict) -> bytes:
    answers = {name: repr(value) for name, value in solve(params).items()} | CONTRACT_FUNCTIONS["cubic"]
    return notebook_bytes(fill(notebook, answers))


def test_late_work_and_fresh_numbers_for_each_attempt(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOGRAD_COURSE_SECRET", "a secret for the service tests")
    root = course_for_service(tmp_path / "course", fresh_numbers_per_attempt=True)
    path = root / "source" / "course.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    due = datetime.now(UTC) - timedelta(hours=1)
    data["assignments"][0]["due"] = f"{due:%Y-%m-%d %H:%M:%S} UTC"
    data |= {"variants": True, "late_policy": {"mode": "penalty", "percent": 10, "per": "day"}}
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    config = load_config(root)
    release(config, verify=False)  # the template every personalised notebook starts from
    policy = config.service
    content, defaults = (lambda a: (a.content, a.default_params))(load_course_assignment(config, "autograd"))

    server = Server(root, jobs=1)
    server.issue_tokens(["alice"])
    server.start()
    try:
        link = f"{server.url}/s/{server.tokens['alice']}/notebook"
        first = json.loads(request(link).body)
        numbers = [attempt_numbers(config, policy, content, "alice", n, defaults) for n in (1, 2)]
        assert _numbers_cell(first) == numbers_source(numbers[0], content)
        reply = server.submit("alice", _answered(first, numbers[0]))
        assert reply.status == 200, reply.text
        assert reply.json["score"] == pytest.approx(57 - 5.7)  # one started day late: 10% of 57 points
        page = request(server.url + reply.json["feedback_url"]).text
        assert "after the deadline" in page
        assert "5.7 of your 57 points were taken off" in page

        second = json.loads(request(link).body)  # the notebook of attempt 2: numbers of its own
        assert _numbers_cell(second) == numbers_source(numbers[1], content)
        assert numbers[1] != numbers[0]
        stale = server.submit("alice", _answered(first, numbers[0]))  # attempt 2 answered with attempt 1's numbers
        assert stale.json["score"] < 51.3
        third = json.loads(request(link).body)
        numbers.append(attempt_numbers(config, policy, content, "alice", 3, defaults))
        fresh = server.submit("alice", _answered(third, numbers[2]))
        assert fresh.json["score"] == pytest.approx(51.3)
        history = request(f"{server.url}/s/{server.tokens['alice']}/").text
        assert "your best attempt counts" in history
        assert "counted: attempt 1" in history  # the first of the best
    finally:
        server.stop()
