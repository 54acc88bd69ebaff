"""Markup in a student's id, a question's title or an answer's name (a feedback document read back from the
service's database is input) is text in the class's charts: escaped once in the SVG, its <title>s, captions and
tables, on the dashboard's charts page and in the class summary (issue 43)."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from course.core.config import load_config
from course.platforms.service.app import create_app
from course.platforms.service.run import make_service
from course.platforms.service.store import new_token
from course.term.summary import class_summary
from course.term.summary_page import render_summary_html
from tests.support.service import Client, course_for_service, graded_feedback, record_graded

HOSTILE_ID = '<img src=x onerror=alert(1)>"&'
HOSTILE_TITLE = "<script>alert(1)</script> {}"
HOSTILE_ANSWER = '</text><foreignObject><iframe src="javascript:alert(1)"></iframe></foreignObject>'


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)

    def handle_data(self, data):
        self.text.append(data)


def assert_only_text(fragment: str) -> None:
    found = _Tags()
    found.feed(fragment)
    assert not found.tags & {"script", "img", "iframe", "foreignobject"}, found.tags
    assert "&amp;lt;" not in fragment  # escaped once, not twice
    words = "".join(found.text)
    assert "<script>alert(1)</script>" in words  # shown as the text it is
    assert "</text><foreignObject>" in words


def hostile_class():
    return [
        graded_feedback(HOSTILE_ID, {"q1": False, "q2": True}, title=HOSTILE_TITLE, answer=HOSTILE_ANSWER),
        graded_feedback("bob", {"q1": True, "q2": True}, title=HOSTILE_TITLE, answer=HOSTILE_ANSWER),
    ]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    root = course_for_service(tmp_path_factory.mktemp("chart-markup") / "course")
    service = make_service(load_config(root), jobs=1)
    service.tokens = {"instructor": new_token()}  # type: ignore[attr-defined]
    service.store.add_instructor(service.tokens["instructor"])
    for feedback in hostile_class():
        service.store.set_student(feedback.student_id, new_token(), {})
        record_graded(service, feedback)
    yield service
    service.store.close()


def test_the_dashboards_charts_show_markup_as_text(service):
    page = Client(create_app(service)).get(f"/i/{service.tokens['instructor']}/charts")
    assert page.status_code == 200
    section = page.text.split("<section class=card id=class-charts")[1]
    assert section.count("<figure ") == 2  # the answers' shares, first against counted (the histogram: its own svg)
    assert_only_text(section)
    assert "&lt;img src=x onerror=alert(1)&gt;&quot;&amp;" in section  # the histogram's title names who


def test_the_class_summarys_charts_show_markup_as_text():
    page = render_summary_html(class_summary(hostile_class()), "autograd")
    section = page.split("<section class=card id=charts>")[1].split("</section>")[0]
    assert "<figure " in section
    assert_only_text(section)
