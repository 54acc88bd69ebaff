"""The HTTP contract in process, with Starlette's TestClient: the real app, a real SQLite store in a temporary
folder and the real grader's checks of an upload, no `serve` process and no warm pool (the app's lifespan, which
starts it, is not run; nothing here is graded). The same contract is tested out of process, over loopback HTTP,
in test_api.py, test_pages.py and test_security.py; here it is in the fast loop.

The API's answers to an upload (taken, too large, not a notebook, no token, attempts used up, too many at once),
the same refusals on the student's form (one `UploadRefused` per refusal, each medium its own rendering), a
student's page, the instructor's with and without their token, and the 410 of a retired link."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count

import pytest
from starlette.testclient import TestClient

from course.core.config import load_config
from course.platforms.service.access import RETIRED_INSTRUCTOR_LINK, RETIRED_LINK
from course.platforms.service.app import create_app
from course.platforms.service.edge import UPLOADS_IN_FLIGHT
from course.platforms.service.middleware import SECURITY_HEADERS
from course.platforms.service.run import make_service
from course.platforms.service.state import Service
from course.platforms.service.store import REPLACED, REVOKED, new_token
from course.platforms.service.uploads import MULTIPART_SLACK, UploadRefused, accept_upload
from tests.support.helpers import submitted_notebook
from tests.support.service import course_for_service, multipart, notebook_bytes

ATTEMPTS = 2
UPLOAD_KB = 512
ORIGIN = "http://testserver"  # TestClient's own host: the form's posts come from the same site
_STUDENTS = count()


@dataclass
class Site:
    service: Service
    client: TestClient
    instructor: str

    def student(self) -> tuple[str, str]:
        """A student of their own for one test (id, token): the attempts of one test never count in another's."""
        student, token = f"student{next(_STUDENTS)}", new_token()
        self.service.store.set_student(student, token, {})
        return student, token

    def submit(self, token: str | None, body: bytes, content_type: str = "application/json"):
        headers = {"Content-Type": content_type}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return self.client.post("/api/submissions", content=body, headers=headers)

    def form_upload(self, token: str, notebook: bytes):
        page = self.client.get(f"/s/{token}/")
        csrf = re.search(r'name=csrf value="([^"]+)"', page.text)
        assert csrf is not None, page.text
        body, kind = multipart({"notebook": notebook, "csrf": csrf.group(1)})
        return self.client.post(f"/s/{token}/upload", content=body, headers={"Content-Type": kind, "Origin": ORIGIN})

    def followed(self, token: str, answer) -> str:
        """The page the form's redirect leads to, as a browser shows it."""
        assert answer.status_code == 303, answer.text
        location = answer.headers["location"]
        assert location.startswith("./?note="), location
        return self.client.get(f"/s/{token}/{location[2:]}").text


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[Site]:
    root = course_for_service(tmp_path_factory.mktemp("contract") / "course", attempts=ATTEMPTS, upload_kb=UPLOAD_KB)
    # No wait for grading: a taken upload is answered 202 (queued) at once, with the contract's JSON.
    service = make_service(load_config(root), jobs=1, wait_seconds=0)
    instructor = new_token()
    service.store.add_instructor(instructor)
    yield Site(service, TestClient(create_app(service), follow_redirects=False), instructor)
    service.grader.stop()
    service.store.close()


NOTEBOOK = notebook_bytes(submitted_notebook())


def test_an_upload_taken_is_queued_with_the_contracts_json_and_read_back_by_its_id(site):
    student, token = site.student()
    taken = site.submit(token, NOTEBOOK)
    assert taken.status_code == 202, taken.text
    said = taken.json()
    assert said == {
        "id": said["id"],
        "attempt": 1,
        "student_id": student,
        "status": "queued",
        "score": None,
        "max_score": said["max_score"],
        "feedback_url": f"/s/{token}/attempts/1",
    }
    again = site.client.get(f"/api/submissions/{said['id']}", headers={"Authorization": f"Bearer {token}"})
    assert (again.status_code, again.json()) == (200, said)
    # another student's token does not read it
    _, other = site.student()
    theirs = site.client.get(f"/api/submissions/{said['id']}", headers={"Authorization": f"Bearer {other}"})
    assert (theirs.status_code, theirs.json()) == (404, {"error": "no such submission of yours"})
    # the attempt's page says it is being graded, and refreshes itself into the feedback
    page = site.client.get(f"/s/{token}{said['feedback_url'][len(f'/s/{token}') :]}")
    assert page.status_code == 200
    assert "Attempt 1 was received" in page.text
    assert "<meta http-equiv=refresh" in page.text


@pytest.mark.parametrize(
    ("size", "sentence"),
    [
        # over the notebook's limit but within the form's slack: read, then refused for its size
        (UPLOAD_KB * 1024 + 1, f"the notebook is larger than the limit of {UPLOAD_KB} KB"),
        # beyond the slack too: refused while it is read, with what to do about it
        (
            UPLOAD_KB * 1024 + MULTIPART_SLACK + 1,
            f"the notebook is larger than the limit of {UPLOAD_KB} KB; clear its "
            "outputs (Edit > Clear Outputs of All Cells) and submit again",
        ),
    ],
)
def test_an_upload_too_large_is_413_and_uses_no_attempt(site, size, sentence):
    student, token = site.student()
    refused = site.submit(token, b" " * size)
    assert (refused.status_code, refused.json()) == (413, {"error": sentence})
    assert site.service.store.attempts_of(student, feedback=False) == []


@pytest.mark.parametrize(
    ("body", "content_type", "status", "sentence"),
    [
        (b"not json", "application/json", 400, "the upload is not a Jupyter notebook (.ipynb): it is not JSON"),
        (b"[]", "application/json", 400, "the upload is not a Jupyter notebook (.ipynb): it has no list of cells"),
        (
            NOTEBOOK,
            "text/plain",
            415,
            "send the notebook as the body (Content-Type: application/json) or as the multipart form field notebook",
        ),
    ],
)
def test_an_upload_that_is_not_a_notebook_is_refused_with_why(site, body, content_type, status, sentence):
    student, token = site.student()
    refused = site.submit(token, body, content_type)
    assert (refused.status_code, refused.json()) == (status, {"error": sentence})
    assert "retry-after" not in refused.headers
    assert site.service.store.attempts_of(student, feedback=False) == []


@pytest.mark.parametrize("authorization", [None, "Bearer not-a-token", "Basic abc"])
def test_an_upload_without_a_valid_token_is_401(site, authorization):
    headers = {"Content-Type": "application/json", **({"Authorization": authorization} if authorization else {})}
    refused = site.client.post("/api/submissions", content=NOTEBOOK, headers=headers)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == "Bearer"
    assert refused.json() == {"error": "a valid student token is needed: Authorization: Bearer <token>"}


def test_an_upload_once_the_attempts_are_used_up_is_429_with_no_time_to_wait(site):
    student, token = site.student()
    for number in range(1, ATTEMPTS + 1):
        taken = site.submit(token, NOTEBOOK)
        assert (taken.status_code, taken.json()["attempt"]) == (202, number)
    refused = site.submit(token, NOTEBOOK)
    assert refused.status_code == 429
    said = refused.json()
    assert said["retry_after"] is None  # waiting will not help
    assert f"{ATTEMPTS}" in said["error"]
    assert "retry-after" not in refused.headers
    assert len(site.service.store.attempts_of(student, feedback=False)) == ATTEMPTS
    # the student's page says so, with no form to submit
    page = site.client.get(f"/s/{token}/")
    assert "No attempts left" in page.text
    assert "<form class=upload" not in page.text


def test_too_many_uploads_at_once_are_429_with_retry_after_and_close_the_connection_in_both_media(site):
    student, token = site.student()
    slots = [site.service.upload_slot(student) for _ in range(UPLOADS_IN_FLIGHT)]
    for slot in slots:  # the student's uploads in progress, as the app holds them
        assert slot.__enter__() is True
    try:
        page = site.client.get(f"/s/{token}/")  # (the form's CSRF token, before its own upload is refused)
        csrf = re.search(r'name=csrf value="([^"]+)"', page.text)
        assert csrf is not None
        refused = site.submit(token, NOTEBOOK)
        body, kind = multipart({"notebook": NOTEBOOK, "csrf": csrf.group(1)})
        form = site.client.post(f"/s/{token}/upload", content=body, headers={"Content-Type": kind, "Origin": ORIGIN})
    finally:
        for slot in slots:
            slot.__exit__(None, None, None)
    sentence = f"you have {UPLOADS_IN_FLIGHT} uploads in progress already; wait for their feedback, then submit again"
    assert (refused.status_code, refused.json()) == (429, {"error": sentence, "retry_after": 5})
    assert (refused.headers["retry-after"], refused.headers["connection"]) == ("5", "close")
    assert form.headers["connection"] == "close"
    assert f"<strong>Not submitted:</strong> {sentence}." in site.followed(token, form)
    assert site.service.store.attempts_of(student, feedback=False) == []


@pytest.mark.parametrize(
    ("notebook", "sentence"),
    [
        (b"not json", "the upload is not a Jupyter notebook (.ipynb): it is not JSON."),
        (b" " * (UPLOAD_KB * 1024 + 1), f"the notebook is larger than the limit of {UPLOAD_KB} KB."),
    ],
)
def test_the_forms_refusal_is_the_same_sentence_on_the_students_page(site, notebook, sentence):
    """The form's refusals are the API's (the same `UploadRefused`), said as a note on the student's page."""
    student, token = site.student()
    answer = site.form_upload(token, notebook)
    assert "connection" not in answer.headers  # its body was read to the end: the connection may stay
    assert f"<strong>Not submitted:</strong> {sentence}" in site.followed(token, answer)
    assert site.service.store.attempts_of(student, feedback=False) == []


def test_a_notebook_taken_by_the_form_leads_to_its_attempts_page(site):
    student, token = site.student()
    answer = site.form_upload(token, NOTEBOOK)
    assert (answer.status_code, answer.headers["location"]) == (303, "attempts/1")
    assert len(site.service.store.attempts_of(student, feedback=False)) == 1


@pytest.mark.parametrize(
    ("notebook", "code", "status"),
    [
        (b"{", "not_a_notebook", 400),
        (b'{"cells": []}', "not_gradable", 400),
    ],
)
def test_a_refused_upload_is_a_value_with_its_status_and_code(site, notebook, code, status):
    """What the rooms are handed: a refusal as a value (status, code word, sentence), never a response."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    student, token = site.student()
    # A loop of its own, in a thread of its own: a test before this one (Playwright's sync API, the browser tests)
    # may leave an event loop running in this thread, where asyncio.run refuses to start another.
    with ThreadPoolExecutor(1) as thread:
        refused = thread.submit(asyncio.run, accept_upload(site.service, student, token, notebook)).result(timeout=120)
    assert isinstance(refused, UploadRefused)
    assert (refused.status, refused.code, refused.close) == (status, code, False)
    assert refused.message.startswith(("the upload is not a Jupyter notebook", "the upload cannot be graded"))


def test_a_students_page_shows_the_form_the_policy_and_the_security_headers(site):
    student, token = site.student()
    page = site.client.get(f"/s/{token}/")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert f"<strong>{student}</strong>" in page.text
    assert '<form class=upload method=post action="upload"' in page.text
    assert f"0 of {ATTEMPTS} attempts used" in page.text
    for name, value in SECURITY_HEADERS.items():
        assert page.headers[name] == value
    assert site.client.get(f"/s/{token}/attempts/1").status_code == 404  # no attempt yet
    assert site.client.get(f"/s/{new_token()}/").status_code == 404


def test_the_instructors_pages_open_with_their_token_only(site):
    _, token = site.student()
    dashboard = site.client.get(f"/i/{site.instructor}/")
    assert dashboard.status_code == 200
    assert "<table" in dashboard.text
    for path in ("/", "/summary", "/charts", "/version"):
        refused = site.client.get(f"/i/{new_token()}{path}")
        assert (refused.status_code, refused.text) == (404, "Not found. Check the link you were given.")
        assert site.client.get(f"/i/{site.instructor}{path}").status_code == 200
    # a student's token is no instructor's
    assert site.client.get(f"/i/{token}/").status_code == 404


def test_a_retired_link_is_410_and_says_why(site):
    revoked, revoked_token = site.student()
    replaced, replaced_token = site.student()
    site.service.store.revoke_students([revoked])
    site.service.store.set_student(replaced, new_token(), {})
    for token, reason in ((revoked_token, REVOKED), (replaced_token, REPLACED)):
        for path in ("", "attempts/1", "notebook"):
            gone = site.client.get(f"/s/{token}/{path}")
            assert (gone.status_code, gone.text) == (410, RETIRED_LINK[reason])
        refused = site.submit(token, NOTEBOOK)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == 'Bearer error="invalid_token"'
        assert refused.json() == {"error": RETIRED_LINK[reason], "token": reason}


def test_a_replaced_instructor_link_is_410_and_says_why(tmp_path):
    """On a service of its own: the instructor's token is replaced here."""
    service = make_service(load_config(course_for_service(tmp_path / "course")), jobs=1)
    try:
        old, new = new_token(), new_token()
        service.store.add_instructor(old)
        service.store.replace_instructors(new)
        client = TestClient(create_app(service), follow_redirects=False)
        gone = client.get(f"/i/{old}/")
        assert (gone.status_code, gone.text) == (410, RETIRED_INSTRUCTOR_LINK)
        assert client.get(f"/i/{new}/").status_code == 200
    finally:
        service.grader.stop()
        service.store.close()
