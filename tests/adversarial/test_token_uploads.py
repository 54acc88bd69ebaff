"""An upload begun before its token was revoked or rotated (issue 50, item 8): its headers passed the token check,
then its body took its time (up to `serve --body-seconds`) while the instructor ran `serve tokens --revoke` or
`--rotate`. At e2fd90b it was stored and graded after the revoke. The token is looked at again when the body is in,
in the transaction that stores the attempt: refused with the sentence a retired link answers (the API's 401, the
form's 410), nothing stored, nothing graded.

Against a real `serve` (out of process, over a raw socket, so the body can wait half-sent), the token changed by the
real `serve tokens` command while the body waits on disk in the server's work folder."""

from __future__ import annotations

import contextlib
import csv
import json
import re
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from course.platforms.service.access import RETIRED_LINK
from course.platforms.service.store import Store, database_url
from tests.support.helpers import submitted_notebook
from tests.support.service import Server, course_for_service, multipart, notebook_bytes, request, spooled

pytestmark = pytest.mark.slow

ANSWER_SECONDS = 60  # how long a wait for what is asserted may take: far above every step here
PADDING = 512 * 1024  # the body is spooled to the work folder past 64 KB: that file says the app is reading it


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request, tmp_path_factory) -> Iterator[Server]:
    """SQLite (the insert holds the write lock), or a PostgreSQL server of its own (the student's row lock)."""
    from tests.support.service import new_database, running_postgres

    with contextlib.ExitStack() as stack:
        database = None
        if request.param == "postgresql":
            database = new_database(stack.enter_context(running_postgres()))
        root = course_for_service(tmp_path_factory.mktemp(f"retired-{request.param}") / "course")
        running = Server(root, database=database, jobs=1)
        running.issue_tokens(["alice", "bob", "carol", "dave"])
        running.start()
        stack.callback(running.stop)
        yield running


def _upload(server: Server, student: str, route: str) -> tuple[bytes, bytes]:
    """The request's head and body of an upload of `student`'s over the API or their page's form."""
    notebook = notebook_bytes(submitted_notebook({})) + b" " * PADDING  # a valid notebook, whitespace after it
    token = server.tokens[student]
    if route == "api":
        body, kind, path, more = notebook, "application/json", "/api/submissions", f"Authorization: Bearer {token}\r\n"
    else:
        page = request(f"{server.url}/s/{token}/").text
        csrf = re.search(r'name=csrf value="([^"]+)"', page)
        assert csrf is not None, page
        body, kind = multipart({"notebook": notebook, "csrf": csrf.group(1)})
        path, more = f"/s/{token}/upload", f"Origin: http://127.0.0.1:{server.port}\r\n"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n{more}Content-Type: {kind}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    return head, body


def _answer(connection: socket.socket) -> tuple[int, dict[str, str], bytes]:
    received = b""
    while chunk := connection.recv(65536):
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value for name, _, value in (line.partition(": ") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def _attempts(server: Server, student: str) -> list:
    store = Store(database_url(server.database, server.root))
    try:
        return store.attempts_of(student, feedback=False)
    finally:
        store.close()


@pytest.mark.parametrize(
    ("student", "change", "route"),
    [
        ("alice", "--revoke", "api"),
        ("bob", "--rotate", "api"),
        ("carol", "--revoke", "form"),
        ("dave", "--rotate", "form"),
    ],
)
def test_an_upload_whose_token_was_retired_while_its_body_came_is_refused_and_not_stored(
    server, student, change, route
):
    head, body = _upload(server, student, route)
    with socket.create_connection(("127.0.0.1", server.port), timeout=ANSWER_SECONDS) as connection:
        connection.sendall(head + body[:-1])  # all but its last byte: the app is reading it, its token checked
        deadline = time.monotonic() + ANSWER_SECONDS
        while not spooled(server):  # the app has read 64 KB of it (a file's size lags the app's buffered writes)
            assert time.monotonic() < deadline, f"the upload's body never reached the work folder: {spooled(server)}"
            time.sleep(0.05)
        changed = subprocess.run(
            server.command("tokens", change, student, "--out", str(server.root / "tokens.csv")),
            capture_output=True,
            text=True,
            timeout=ANSWER_SECONDS,
            check=False,
        )
        assert changed.returncode == 0, changed.stderr
        connection.sendall(body[-1:])  # the body is in, after the token stopped working
        status, headers, text = _answer(connection)
    reason = "revoked" if change == "--revoke" else "replaced"
    if route == "api":
        assert (status, json.loads(text)) == (401, {"error": RETIRED_LINK[reason], "token": reason})
        assert headers["www-authenticate"] == 'Bearer error="invalid_token"'
    else:
        assert (status, text.decode().strip()) == (410, RETIRED_LINK[reason])
    assert _attempts(server, student) == []  # nothing stored, so nothing is graded
    # The same student's link again, for the other half of the change: a rotated student's new token uploads.
    if change == "--rotate":
        with (server.root / "tokens.csv").open(encoding="utf-8") as stream:
            issued = {row["student_id"]: row["token"] for row in csv.DictReader(stream)}
        new = issued[student]
        assert new != server.tokens[student]
        reply = server.submit(student, notebook_bytes(submitted_notebook({})), token=new)
        assert reply.status == 200, reply.text
        assert [attempt.number for attempt in _attempts(server, student)] == [1]
