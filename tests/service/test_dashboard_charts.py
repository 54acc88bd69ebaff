"""The dashboard's pictures (issue 43), in process: GET /i/<token>/charts draws the counted attempts (score
distribution, each answer's share right) and first against counted attempt, for the instructor only; the
dashboard holds its placeholder (a link) and reads no feedback itself; no inline script anywhere."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import event

from course.core.config import load_config
from course.platforms.service import charts_view
from course.platforms.service.app import create_app
from course.platforms.service.run import make_service
from course.platforms.service.store import new_token
from course.term.item_analysis import AnswerItem, ItemAnalysis, WrongValue
from tests.support.service import Client, course_for_service, graded_feedback, record_graded


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    root = course_for_service(tmp_path_factory.mktemp("charts") / "course")
    service = make_service(load_config(root), jobs=1)
    service.tokens = {name: new_token() for name in ("alice", "bob", "carol", "instructor")}  # type: ignore[attr-defined]
    for name in ("alice", "bob", "carol"):
        service.store.set_student(name, service.tokens[name], {})
    service.store.add_instructor(service.tokens["instructor"])
    # alice: q1 wrong, then right (her second attempt counts, best-of); bob: right at once; carol: nothing yet
    record_graded(service, graded_feedback("alice", {"q1": False, "q2": False}))
    record_graded(service, graded_feedback("alice", {"q1": True, "q2": False}))
    record_graded(service, graded_feedback("bob", {"q1": True, "q2": True}))
    yield service
    service.store.close()


@pytest.fixture
def client(service):
    return Client(create_app(service))


def rows(page: str, chart: str) -> list[tuple[str, ...]]:
    figure = page.split(f'id="{chart}"')[1].split("</figure>")[0]
    cells = [tuple(re.findall(r"<td>([^<]*)</td>", row)) for row in re.findall(r"<tr>(.*?)</tr>", figure)]
    return [row for row in cells if row]  # the header's row has no <td>


def test_the_charts_draw_the_counted_attempts_and_first_against_counted(service, client):
    page = client.get(f"/i/{service.tokens['instructor']}/charts")
    assert page.status_code == 200
    assert re.search(r"<section class=card id=class-charts data-students=2 ", page.text)
    assert "Over the counted attempts of 2 students" in page.text
    # the distribution, the answers' shares, first against counted, and the item analysis's two: difficulty against
    # discrimination and the top slips (the slip search wired in: item_analysis.item_settings)
    assert page.text.count("<svg ") == 5
    assert 'id="chart-discrimination"' in page.text
    assert 'id="chart-slips"' in page.text
    assert rows(page.text, "chart-answers") == [
        ("grad · Question q2", "50% (1/2)", "0"),
        ("grad · Question q1", "100% (2/2)", "0"),
    ]
    assert rows(page.text, "chart-improvement") == [
        ("Question q1", "50% (1)", "100% (2)"),  # alice got q1 right on her second attempt
        ("Question q2", "50% (1)", "50% (1)"),
    ]
    assert "<script" not in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]


def test_the_charts_are_the_instructors_only(service, client):
    for student in ("alice", "bob"):
        assert client.get(f"/i/{service.tokens[student]}/charts").status_code == 404
        assert "class-charts" not in client.get(f"/s/{service.tokens[student]}/").text


def test_the_dashboard_holds_a_link_its_script_replaces_with_the_charts(service, client):
    dashboard = client.get(f"/i/{service.tokens['instructor']}/")
    assert dashboard.status_code == 200
    placeholder = dashboard.text.split("<section class=card id=class-charts>")[1].split("</section>")[0]
    assert '<a href="charts">open the charts</a>' in placeholder
    assert "figure.chart svg" in dashboard.text  # the charts' style is in the dashboard's head already
    script = client.get("/static/dashboard.js").text
    assert 'fetch("charts"' in script
    assert 'getElementById("class-charts")' in script


def test_the_charts_read_each_feedback_they_draw_once_and_the_dashboard_none(service, client):
    """Two reads of feedback at most (the counted attempts', then the first attempts' that are not counted),
    never one per student; the dashboard's own page reads none."""
    sent: list[str] = []

    def seen(connection, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("SELECT") and "attempts.feedback" in statement:
            sent.append(statement)

    event.listen(service.store.engine, "before_cursor_execute", seen)
    try:
        assert client.get(f"/i/{service.tokens['instructor']}/").status_code == 200
        assert sent == []
        assert client.get(f"/i/{service.tokens['instructor']}/charts").status_code == 200
    finally:
        event.remove(service.store.engine, "before_cursor_execute", seen)
    assert len(sent) == 2  # alice's first attempt is not her counted one: read apart


def test_the_charts_draw_an_item_analysis_when_given_one(service):
    """Where the lead wires the class's item analysis in (`charts_section(..., analysis=)`), its two charts join."""
    analysis = ItemAnalysis(
        "autograd",
        2,
        (
            AnswerItem("q1", "grad", 2, 2, 0, 1.0, None, ()),
            AnswerItem("q2", "grad", 2, 1, 0, 0.5, 1.0, (WrongValue("2", 2, ("alice", "carol")),)),
        ),
    )
    records = service.records()
    section = charts_view.charts_section(records, {}, analysis=analysis)
    assert '<figure class="chart scatter" id="chart-discrimination">' in section
    assert '<figure class="chart bars" id="chart-slips">' in section
    assert "q2 · grad = 2" in section
    assert "alice" not in section.split("<h3>Item analysis</h3>")[1]  # counts, not who
    assert "chart-discrimination" not in charts_view.charts_section(records, {})
