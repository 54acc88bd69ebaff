"""Nothing of one student is visible to another; the forms are CSRF-protected; a hostile notebook graded
through the service hurts no one else. Against a running `autograd-course serve`."""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from course.platforms.service.app import ROUTES
from tests.support.helpers import CORRECT_CODE, add_cell, submitted_notebook
from tests.support.service import multipart, notebook_bytes, request

# alone under pytest-xdist (tests/conftest.py): its runs give way, and another worker's load would starve them
pytestmark = [pytest.mark.slow, pytest.mark.alone]


@pytest.fixture(scope="module")
def attempts(server) -> dict[str, int]:
    """alice's and bob's graded attempts (bob's answers one value wrong)."""
    alice = server.submit("alice", notebook_bytes(submitted_notebook()))
    bob = server.submit("bob", notebook_bytes(submitted_notebook({**CORRECT_CODE, "cubic_grad": "0"})))
    assert (alice.status, bob.status) == (200, 200)
    return {"alice": alice.json["id"], "bob": bob.json["id"]}


def _every_route(server, token: str, attempt_id: int, student_id: str) -> list[tuple[str, str, str]]:
    """(route template, method, URL) of every route of the app, filled with the given token and ids."""
    tried = []
    for route in ROUTES:
        url = route.path.replace("{token}", token).replace("{attempt_id:int}", str(attempt_id))
        url = url.replace("{student_id}", student_id).replace("{format}", "grades").replace("{number:int}", "1")
        for method in sorted(route.methods - {"HEAD"}):
            tried.append((route.path, method, server.url + url))
    return tried


def _call(server, method: str, url: str, token: str) -> object:
    if method == "POST":
        body, kind = multipart({"notebook": notebook_bytes(submitted_notebook()), "csrf": "0.x"})
        return request(url, method="POST", token=token, data=body, content_type=kind)
    return request(url, token=token)


def test_every_route_with_another_students_token_and_ids_shows_nothing_of_theirs(server, attempts):
    alice, bob = server.tokens["alice"], server.tokens["bob"]
    before = len(server.get("alice", attempts["alice"]).json)
    for template, method, url in _every_route(server, alice, attempts["bob"], "bob"):
        reply = _call(server, method, url, alice)
        if template in ("/static/dashboard.js", "/favicon.ico"):
            assert reply.status in (200, 204)
            continue
        if template == "/healthz":  # the probes' route: public, and it says only whether the service is up
            assert (reply.status, reply.text) == (200, "ok")
            continue
        if template in (
            "/api/submissions",
            "/s/{token}/upload",
            "/s/{token}/",
            "/s/{token}/notebook",
            "/s/{token}/attempts/{number:int}",
        ):
            # alice's own: her token, no id of anyone's in the path (the upload is refused without a valid csrf,
            # by a redirect to her page, which says why; an attempt's number is of her own attempts, so attempt 1
            # is hers)
            if template == "/s/{token}/upload":
                assert reply.status == 303, reply.status
                reply = request(url.removesuffix("upload") + reply.headers["location"][2:])
                assert "out of date" in reply.text
            assert reply.status in (200, 403), (template, reply.status)
        else:
            assert reply.status in (404, 401), (template, method, reply.status)
        assert "bob" not in reply.text, template
        assert bob not in reply.text, template
    # and with bob's id but no token at all, or the instructor's token on a student's route
    for template, method, url in _every_route(server, server.instructor, attempts["bob"], "bob"):
        if template.startswith(("/s/", "/api/")):
            reply = _call(server, method, url, server.instructor)
            assert reply.status in (401, 404), template
            assert "bob" not in reply.text
    for template, method, url in _every_route(server, alice, attempts["bob"], "bob"):
        if template.startswith("/i/"):
            reply = _call(server, method, url.replace(alice, "x" * len(alice)), "")
            assert reply.status == 404, template
    assert len(server.get("alice", attempts["alice"]).json) == before


def test_the_upload_form_needs_its_csrf_token_from_the_same_student_and_site(server, attempts):
    alice_page = f"{server.url}/s/{server.tokens['alice']}/"
    bob_page = f"{server.url}/s/{server.tokens['bob']}/"

    def csrf_of(page: str) -> str:
        return re.search(r'name=csrf value="([^"]+)"', request(page).text).group(1)

    def history(page: str) -> int:
        return request(page).text.count("<tr") - 1

    notebook = notebook_bytes(submitted_notebook())
    count = history(alice_page)
    attempts_made = [
        ({"notebook": notebook}, {}),  # no token
        ({"notebook": notebook, "csrf": "1.abc"}, {}),  # a made-up one
        ({"notebook": notebook, "csrf": csrf_of(bob_page)}, {}),  # bob's, on alice's link
        ({"notebook": notebook, "csrf": csrf_of(alice_page)}, {"Origin": "https://evil.example"}),  # another site
    ]
    for fields, headers in attempts_made:
        body, kind = multipart(fields)
        reply = request(alice_page + "upload", method="POST", data=body, content_type=kind, headers=headers)
        if "Origin" in headers:  # another site's post: refused at once, before its body is read
            assert reply.status == 403, fields.keys()
            shown = reply.text
        else:  # the form's answer is a redirect to alice's page, which says why (post-redirect-get)
            assert reply.status == 303, fields.keys()
            assert reply.headers["location"].startswith("./?note=")
            shown = request(alice_page + reply.headers["location"][2:]).text
        assert "reload this page and submit again" in shown
    assert history(alice_page) == count  # nothing stored
    body, kind = multipart({"notebook": notebook, "csrf": csrf_of(alice_page)})
    reply = request(alice_page + "upload", method="POST", data=body, content_type=kind, headers={"Origin": server.url})
    assert reply.status == 303
    assert reply.headers["location"] == f"attempts/{count + 1}"  # the student's own number, as the page says
    assert history(alice_page) == count + 1
    gradebook = f"{server.url}/i/{server.instructor}/export/gradebook"
    body, kind = multipart({"csrf": "1.abc"})
    assert request(gradebook, method="POST", data=body, content_type=kind).status == 403


HOSTILE = {
    "kill every process it can": "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept Exception:\n"
    "    pass",
    "read the service's database": "print(open({db!r}, 'rb').read()[:4096])",
    "never end": "while True:\n    pass",
    "take all memory": "x = bytearray(10 ** 11)",
    "flood the output": "while True:\n    print('x' * 10000)",
}


def test_hostile_notebooks_through_the_service_hurt_no_one_else(server, attempts):
    db = str(server.root / "service.db")
    honest = notebook_bytes(submitted_notebook())
    replies: dict[str, object] = {}
    honest_replies: list = []

    def hostile(name: str, code: str) -> None:
        replies[name] = server.submit("carol", notebook_bytes(add_cell(submitted_notebook(), code.format(db=db))))

    def honest_student() -> None:
        for _ in range(3):
            honest_replies.append(server.submit("dave", honest))

    def hostile_student() -> None:  # two at a time: a third upload in flight would be answered 429 (test_edge.py)
        with ThreadPoolExecutor(2) as pair:
            list(pair.map(lambda item: hostile(*item), HOSTILE.items()))

    threads = [threading.Thread(target=hostile_student), threading.Thread(target=honest_student)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [reply.status for reply in honest_replies] == [200, 200, 200]
    assert [reply.json["score"] for reply in honest_replies] == [57, 57, 57], [
        (reply.json, request(server.url + reply.json["feedback_url"]).text[-3000:]) for reply in honest_replies
    ]
    statuses = {}
    for name, reply in replies.items():
        assert reply.status in (200, 202), (name, reply.status)
        graded = server.wait_graded("carol", reply.json["id"])
        statuses[name] = graded["status"]
        page = request(server.url + graded["feedback_url"]).text
        if name == "read the service's database":
            assert "FileNotFoundError" in page or "PermissionError" in page
        if name == "flood the output":  # stopped by the output limit, the memory limit or the cell time limit
            said = ("printed more than 10240 KB; the rest was discarded", "memory limit", "s per cell")
            assert any(text in page for text in said), page[-3000:]
        for student in ("alice", "bob", "dave"):
            assert server.tokens[student] not in page, name
        assert "SQLite format" not in page, name
    assert statuses["never end"] == "timed_out"
    assert statuses["kill every process it can"] == statuses["take all memory"] == "graded"
    # everyone else's records and pages are as they were, and the service still grades
    assert server.get("alice", attempts["alice"]).json["score"] == 57
    assert server.get("bob", attempts["bob"]).json["score"] == 54
    assert server.submit("alice", honest).json["score"] == 57
