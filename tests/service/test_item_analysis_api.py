"""The item analysis on the service, in process (Starlette's TestClient, a real SQLite store, nothing graded: the
attempts are recorded with feedback made here): the instructor's JSON and CSV of the counted attempts, the class
summary's section, and that a student's token opens none of it. Every student value on the instructor's page is
escaped; the CSV's cells are spreadsheet-safe."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from starlette.testclient import TestClient

from course.core.config import load_config
from course.pipeline.feedback_model import Feedback
from course.platforms.service.app import create_app
from course.platforms.service.run import make_service
from course.platforms.service.state import Service
from course.platforms.service.store import new_token
from tests.support.service import course_for_service

HOSTILE = "'<img src=x onerror=alert(1)>'"  # a student's text value, as the feedback shows it
FORMULA = '=HYPERLINK("http://evil")'


def _feedback(student: str, shown: str | None, right: bool) -> Feedback:
    earned = 1.0 if right else 0.0
    value = {
        "name": "slope_at_3",
        "your_value": shown,
        "torch_value": "6",
        "status": "value" if shown is not None else "missing",
        "correct": right,
        "points": 1,
        "earned": earned,
        "explanation": "",
    }
    return Feedback.from_json(
        {
            "student_id": student,
            "assignment": "autograd",
            "status": "graded",
            "score": earned,
            "max_score": 57,
            "messages": [],
            "cell_errors": [],
            "questions": [
                {
                    "id": "slopes",
                    "title": "Slopes",
                    "points": 1,
                    "earned": earned,
                    "values": [value],
                    "misconceptions": [],
                }
            ],
        }
    )


CLASS = {
    "ann": ("6", True),
    "ben": ("-6", False),
    "cat": ("-6.0000000001", False),  # within the course's tolerance of ben's -6
    "dan": (HOSTILE, False),
    "eve": (FORMULA, False),
    "fay": (None, False),
}


@dataclass
class Site:
    service: Service
    client: TestClient
    instructor: str
    tokens: dict[str, str]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[Site]:
    root = course_for_service(tmp_path_factory.mktemp("items") / "course")
    service = make_service(load_config(root), jobs=1, wait_seconds=0)
    instructor = new_token()
    service.store.add_instructor(instructor)
    tokens = {}
    for student, (shown, right) in CLASS.items():
        tokens[student] = new_token()
        service.store.set_student(student, tokens[student], {})
        attempt = service.store.submit(student, "autograd", b'{"cells": []}', service.policy)
        claimed = service.store.claim_next()
        assert claimed is not None
        assert claimed[0].id == attempt.id
        feedback = _feedback(student, shown, right)
        assert service.store.record(
            attempt.id,
            status="graded",
            score=feedback.score,
            raw_score=feedback.score,
            late_penalty=0.0,
            max_score=57.0,
            feedback=feedback,
            integrity=[],
            seconds=0.1,
        )
    yield Site(service, TestClient(create_app(service), follow_redirects=False), instructor, tokens)
    service.grader.stop()
    service.store.close()


def _answer(data: dict[str, Any]) -> dict[str, Any]:
    return next(item for item in data["answers"] if item["answer"] == "slope_at_3")


def test_the_instructor_gets_the_item_analysis_of_the_counted_attempts(site):
    answer = site.client.get(f"/i/{site.instructor}/api/item-analysis")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["cache-control"] == "no-store"
    data = answer.json()
    assert data["schema"] == "autograd-course/item-analysis"
    assert data["students"] == 6
    item = _answer(data)
    assert (item["right"], item["blanks"], item["wrong"], item["share_right"]) == (
        1,
        1,
        4,
        pytest.approx(1 / 6, abs=1e-6),
    )
    assert [(w["shown"], w["count"], w["students"]) for w in item["wrong_values"]] == [
        ("-6", 2, ["ben", "cat"]),
        (HOSTILE, 1, ["dan"]),
        (FORMULA, 1, ["eve"]),
    ]
    assert item["wrong_values"][1]["value"] is None  # text is never parsed into a value, let alone run


def test_a_student_token_opens_no_item_analysis(site):
    for path in ("api/item-analysis", "export/item-analysis.csv", "summary"):
        answer = site.client.get(f"/i/{site.tokens['ben']}/{path}")
        assert answer.status_code == 404, path
        assert "cat" not in answer.text
        answer = site.client.get(f"/i/{site.instructor}x/{path}")
        assert answer.status_code == 404, path
    # Nor through the student API with the student's own bearer token:
    answer = site.client.get("/api/item-analysis", headers={"Authorization": f"Bearer {site.tokens['ben']}"})
    assert answer.status_code in (404, 405)


def test_the_instructor_csv_and_summary_page_keep_student_values_inert(site):
    answer = site.client.get(f"/i/{site.instructor}/export/item-analysis.csv")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/csv")
    assert 'filename="item-analysis-autograd.csv"' in answer.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    wrong = {r["wrong_value"]: r for r in rows if r["answer"] == "slope_at_3" and r["row"] == "wrong"}
    assert wrong["-6"]["count"] == "2"  # a number stays a number
    assert wrong["-6"]["who"] == "ben, cat"
    assert "'" + FORMULA in wrong  # a formula is shown as text
    page = site.client.get(f"/i/{site.instructor}/summary")
    assert page.status_code == 200
    assert "id=item-analysis>" in page.text
    assert "<img src=x" not in page.text
    assert "&lt;img src=x onerror=alert(1)&gt;" in page.text
    dashboard = site.client.get(f"/i/{site.instructor}/")
    assert 'href="export/item-analysis.csv"' in dashboard.text
    assert 'href="api/item-analysis"' in dashboard.text
