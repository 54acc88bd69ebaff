"""The student's upload form as a browser uses it, in process (the real app, store and grader; its warm pool is
never started: nothing here is graded): every answer of the form is a redirect (post-redirect-get), the reason
a notebook was not taken reaches the student's page only as the server said it, and the notebook of another
assignment is named as that assignment's and uses no attempt (issue 40, item 9)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import parse_qs, quote, urlsplit

import pytest

from course.core.config import load_config
from course.platforms.service.app import create_app
from course.platforms.service.run import make_service
from course.platforms.service.store import new_token
from tests.support.helpers import ROOT, submitted_notebook
from tests.support.service import course_for_service, multipart, notebook_bytes


@dataclass
class Answer:
    status: int
    text: str
    headers: dict[str, str]


def call(app: object, method: str, path: str, *, body: bytes = b"", headers: dict[str, str] | None = None) -> Answer:
    """One request straight into the ASGI app (its lifespan, which would start the warm pool, is not run)."""
    where = urlsplit(path)
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": where.path,
        "raw_path": where.path.encode(),
        "query_string": where.query.encode(),
        "root_path": "",
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-length", str(len(body)).encode()),
            *((k.lower().encode(), v.encode()) for k, v in (headers or {}).items()),
        ],
    }
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    async def run() -> None:
        await app(scope, receive, send)  # type: ignore[operator]

    with ThreadPoolExecutor(1) as thread:  # a loop of its own (Playwright may keep one running in this thread)
        thread.submit(asyncio.run, run()).result()
    text = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body").decode("utf-8")
    return Answer(sent[0]["status"], text, {k.decode().lower(): v.decode() for k, v in sent[0].get("headers", [])})


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = course_for_service(tmp_path_factory.mktemp("form") / "course", attempts=2)
    service = make_service(load_config(root), jobs=1)
    tokens = {"ana": new_token(), "ben": new_token()}
    for student, token in tokens.items():
        service.store.set_student(student, token, {})
    yield service, create_app(service), tokens
    service.grader.stop()
    service.store.close()


def page_of(token: str) -> str:
    return f"/s/{token}/"


def upload(app: object, token: str, notebook: bytes, *, csrf: str | None = None) -> Answer:
    if csrf is None:
        csrf = re.search(r'name=csrf value="([^"]+)"', call(app, "GET", page_of(token)).text).group(1)
    body, kind = multipart({"notebook": notebook, "csrf": csrf})
    return call(
        app, "POST", page_of(token) + "upload", body=body, headers={"content-type": kind, "origin": "http://127.0.0.1"}
    )


def followed(app: object, token: str, answer: Answer) -> str:
    """The page a browser shows after the form's answer: the redirect's target, as a GET."""
    assert answer.status == 303, answer.text
    location = answer.headers["location"]
    assert location.startswith("./?note=")
    return call(app, "GET", page_of(token) + location[2:]).text


def attempts_of(service, student: str) -> int:
    return len(service.store.attempts_of(student, feedback=False))


def test_every_answer_of_the_form_is_a_redirect_and_the_page_it_leads_to_says_why(site):
    service, app, tokens = site
    before = attempts_of(service, "ana")
    for notebook, words in [
        (b"not json", "the upload is not a Jupyter notebook (.ipynb): it is not JSON."),
        (
            notebook_bytes(submitted_notebook() | {"nbformat": 3}),
            "the upload cannot be graded: notebook format 3 is not supported",
        ),
    ]:
        answer = upload(app, tokens["ana"], notebook)
        shown = followed(app, tokens["ana"], answer)
        assert f"<strong>Not submitted:</strong> {words}" in shown
        assert "autograd.ipynb: notebook format" not in shown  # the student's file is not named as ours
    stale = upload(app, tokens["ana"], notebook_bytes(submitted_notebook()), csrf="1.abc")
    assert "the form was out of date or came from another page: reload this page and submit again." in followed(
        app, tokens["ana"], stale
    )
    assert attempts_of(service, "ana") == before  # nothing was stored
    taken = upload(app, tokens["ana"], notebook_bytes(submitted_notebook()))
    assert (taken.status, taken.headers["location"]) == (303, f"attempts/{before + 1}")
    assert attempts_of(service, "ana") == before + 1


def test_the_note_shows_only_what_this_server_said_to_this_student(site):
    service, app, tokens = site
    answer = upload(app, tokens["ben"], b"not json")
    note = parse_qs(urlsplit(answer.headers["location"]).query)["note"][0]
    said = "the upload is not a Jupyter notebook"
    assert said in call(app, "GET", page_of(tokens["ben"]) + "?note=" + quote(note)).text
    # ana's page does not show ben's note; nor does a note made up, altered or of the past
    assert said not in call(app, "GET", page_of(tokens["ana"]) + "?note=" + quote(note)).text
    issued, payload, mac = note.split(".")
    made_up = "<script>alert(1)</script>"
    for forged in (
        f"{issued}.{payload[:-4]}AAAA.{mac}",
        f"{issued}.{payload}.{'0' * 64}",
        made_up,
        f"{int(issued) - 3600}.{payload}.{mac}",
        "9" * 5000,
    ):
        shown = call(app, "GET", page_of(tokens["ben"]) + "?note=" + quote(forged))
        assert shown.status == 200
        assert "id=banner" not in shown.text
        assert "<script>" not in shown.text
    # a note longer than any the server makes is not even decoded
    assert service.note_text("ben", note + "A" * 5000) == ""


def test_the_notebook_of_another_assignment_is_named_as_that_ones_and_uses_no_attempt(site):
    service, app, tokens = site
    training = (ROOT / "release" / "training" / "training.ipynb").read_bytes()
    before = attempts_of(service, "ben")
    shown = followed(app, tokens["ben"], upload(app, tokens["ben"], training))
    assert (
        "<strong>Not submitted:</strong> the upload cannot be graded: this is the notebook of assignment "
        "&#x27;training&#x27;; this page takes assignment &#x27;autograd&#x27;: upload your autograd.ipynb of "
        "&#x27;autograd&#x27; here"
    ) in shown
    assert "none of the answer cells" not in shown
    assert attempts_of(service, "ben") == before  # refused before it was stored: no attempt used
    assert f"{before} of 2 attempts used" in shown
    # a notebook that is no assignment's at all is still told what to submit, without naming the student's file
    other = {
        "cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": "x = 1"}],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    shown = followed(app, tokens["ben"], upload(app, tokens["ben"], json.dumps(other).encode()))
    assert "the upload cannot be graded: none of the answer cells of assignment &#x27;autograd&#x27;" in shown


def test_a_time_in_a_form_or_a_note_that_is_no_time_of_ours_is_refused_with_an_answer(site):
    """A CSRF token or a note whose time has 400 digits (no float holds it) or a digit `int` refuses ("²") was a
    500 from the form; now the form says the page was out of date, and the note shows nothing."""
    service, app, tokens = site
    before = attempts_of(service, "ana")
    for csrf in ("9" * 400 + ".x", "\u00b2.x", "-1.x"):
        answer = upload(app, tokens["ana"], notebook_bytes(submitted_notebook()), csrf=csrf)
        assert "the form was out of date" in followed(app, tokens["ana"], answer)
    assert attempts_of(service, "ana") == before
    for note in ("9" * 400 + ".x.y", "\u00b2.x.y"):
        shown = call(app, "GET", page_of(tokens["ana"]) + "?note=" + quote(note))
        assert shown.status == 200
        assert "id=banner" not in shown.text


def test_a_mac_that_is_not_ascii_is_refused_with_an_answer(site):
    """hmac.compare_digest raises TypeError on a str with non-ASCII characters: a form's CSRF token or a note whose
    MAC part was "é" was a 500."""
    service, app, tokens = site
    before = attempts_of(service, "ana")
    now = str(int(time.time()))
    answer = upload(app, tokens["ana"], notebook_bytes(submitted_notebook()), csrf=f"{now}.\u00e9")
    assert "the form was out of date" in followed(app, tokens["ana"], answer)
    assert attempts_of(service, "ana") == before
    shown = call(app, "GET", page_of(tokens["ana"]) + "?note=" + quote(f"{now}.eA.\u00e9"))
    assert shown.status == 200
    assert "id=banner" not in shown.text


def test_a_long_reason_of_wide_characters_is_still_shown(site):
    """A refusal's text may quote the student's notebook (its `nbformat`, say): 1 000 four-byte characters made a
    note longer than note_text reads, so the page showed no reason at all."""
    _, app, tokens = site
    wide = "\U0001f600" * 990
    shown = followed(
        app,
        tokens["ben"],
        upload(
            app,
            tokens["ben"],
            json.dumps({"cells": [], "metadata": {}, "nbformat": wide, "nbformat_minor": 5}).encode(),
        ),
    )
    assert "<strong>Not submitted:</strong>" in shown
    assert "\U0001f600" * 10 in shown


def test_a_record_the_service_cannot_read_is_a_page_that_says_so_not_a_500(site):
    """An attempt row whose status the service never writes (mended by hand, say) is refused when read back; the
    pages that need it said so with a bare 500. Now the instructor's pages name the row, the student's page says it
    is not their doing (503 both), and a classmate's page is untouched."""
    from sqlalchemy import update

    from course.platforms.service import store as store_module

    service, app, tokens = site
    instructor = new_token()
    service.store.add_instructor(instructor)
    upload(app, tokens["ana"], notebook_bytes(submitted_notebook()))  # an attempt (or a refusal: she has one)
    with service.store.begin() as db:
        db.execute(
            update(store_module.attempts).where(store_module.attempts.c.student_id == "ana").values(status="excellent")
        )
    try:
        for path in ("", "summary", "students/ana", "export/gradebook"):
            shown = call(app, "GET", f"/i/{instructor}/{path}")
            assert shown.status == 503, (path, shown.status, shown.text[:300])
            assert "status &#x27;excellent&#x27; is not one of" in shown.text, (path, shown.text[-800:])
            assert "mend that row" in shown.text
        mine = call(app, "GET", page_of(tokens["ana"]))
        assert mine.status == 503
        assert "Nothing you did caused this" in mine.text
        assert "excellent" not in mine.text  # the row's word is the staff's to see
        assert call(app, "GET", page_of(tokens["ben"])).status == 200
    finally:
        with service.store.begin() as db:
            db.execute(
                update(store_module.attempts)
                .where(store_module.attempts.c.status == "excellent")
                .values(status="graded")
            )
