"""The service's edge holds before the app does any work: the real `serve` process, reached over raw sockets.

Each test first shows the route works for an honest client, then that the bound holds: stalled headers and bodies
are cut off with 408, at the caps the connection that waited longest makes room (503 only when every place
answers a request), a student's third upload in flight 429, and
an upload's body waits on disk rather than in the server's memory. Every wait is for what is asserted (a socket
that answers and closes, a file that appears), bounded by a deadline far above the bound itself.
"""

from __future__ import annotations

import json
import resource
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.helpers import submitted_notebook
from tests.support.service import STUDENTS, Server, course_for_service, free_port, notebook_bytes, spooled

pytestmark = pytest.mark.slow

HEADER_SECONDS, BODY_SECONDS = 1, 2
ANSWER_SECONDS = 60  # how long a test waits for an answer it expects: far above every bound here


PATIENT_STUDENTS = [*STUDENTS, "erin", "frank"]


def _start(tmp_path_factory, name: str, *options: str) -> Iterator[Server]:
    root = course_for_service(tmp_path_factory.mktemp(name) / "course")
    running = Server(root, jobs=1, options=options)
    running.issue_tokens(PATIENT_STUDENTS)
    running.start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> Iterator[Server]:
    """A server with short deadlines, for the tests of slow senders."""
    yield from _start(
        tmp_path_factory, "quick", "--header-seconds", str(HEADER_SECONDS), "--body-seconds", str(BODY_SECONDS)
    )


@pytest.fixture(scope="module")
def patient(tmp_path_factory) -> Iterator[Server]:
    """A server with long deadlines and small caps, for the tests of what is held at once."""
    yield from _start(
        tmp_path_factory,
        "patient",
        "--header-seconds",
        "120",
        "--body-seconds",
        "120",
        "--connections",
        "12",
        "--connections-per-client",
        "6",
    )


def _connect(server: Server, source: str = "127.0.0.1") -> socket.socket:
    connection = socket.create_connection(
        ("127.0.0.1", server.port), timeout=ANSWER_SECONDS, source_address=(source, 0)
    )
    return connection


def _answer(connection: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a timeout fails the test: no answer)."""
    received = b""
    while chunk := connection.recv(65536):
        received += chunk
    return received


def _upload_head(server: Server, student: str, length: int, *, close: bool = False) -> bytes:
    ending = "Connection: close\r\n" if close else ""
    return (
        f"POST /api/submissions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {server.tokens[student]}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n{ending}\r\n"
    ).encode()


def _honest(server: Server, student: str) -> dict:
    reply = server.submit(student, notebook_bytes(submitted_notebook({})))
    assert reply.status == 200, reply.text
    return reply.json


def _honest_from(server: Server, student: str, source: str) -> bytes:
    """The status line of an honest upload sent from `source` (a loopback address of its own)."""
    body = notebook_bytes(submitted_notebook({}))
    with _connect(server, source) as connection:
        connection.sendall(_upload_head(server, student, len(body), close=True) + body)
        return _answer(connection).split(b"\r\n", 1)[0]


def _answer_head(connection: socket.socket) -> bytes:
    """What the server sends up to the end of its answer's headers."""
    received = b""
    while b"\r\n\r\n" not in received and (chunk := connection.recv(65536)):
        received += chunk
    return received


def _logged(server: Server, text: str) -> None:
    """Wait for `text` in the server's log: the instructor is told which limit was hit (and never a token)."""
    deadline = time.monotonic() + ANSWER_SECONDS
    while text not in (log := server.log.read_text(encoding="utf-8", errors="replace")):
        assert time.monotonic() < deadline, f"{text!r} never appeared in the server's log: {log[-2000:]}"
        time.sleep(0.1)
    assert all(token not in log for token in server.tokens.values())


# ----------------------------------------------------------------------------- slow senders


@pytest.mark.parametrize("kept_alive", [False, True], ids=["fresh", "kept-alive"])
def test_a_request_whose_headers_stall_is_answered_408_and_closed(quick, kept_alive):
    with _connect(quick) as connection:
        if kept_alive:  # the target exists: a whole request on this connection is answered and it stays open
            connection.sendall(b"GET /favicon.ico HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert _answer_head(connection).startswith(b"HTTP/1.1 204")
        connection.sendall(b"GET /static/dashboard.js HTTP/1.1\r\nHost: 127.")  # and nothing more
        answer = _answer(connection)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert f"did not arrive within {HEADER_SECONDS} s".encode() in answer
    _logged(quick, "serve --header-seconds")


def test_an_upload_whose_body_stalls_is_answered_408_with_a_sentence(quick):
    _honest(quick, "alice")  # the target exists: this student's uploads are graded
    body = notebook_bytes(submitted_notebook({}))
    with _connect(quick) as connection:
        connection.sendall(_upload_head(quick, "alice", len(body)) + body[:-1])  # all but its last byte
        answer = _answer(connection)  # the server closes the connection after its answer
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer
    assert json.loads(payload)["error"].startswith(f"the notebook did not arrive within {BODY_SECONDS} s")
    _logged(quick, "serve --body-seconds")
    _honest(quick, "alice")  # and the student's next upload is graded


def test_a_body_that_stalls_on_a_route_without_a_deadline_of_its_own_ends_its_connection(quick):
    """The gradebook form reads its body with no deadline of its own: the connection is closed once the body is
    late, rather than held open while it trickles in."""
    head = (
        f"POST /i/{quick.instructor}/export/gradebook HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\ncsrf="
    ).encode()
    with _connect(quick) as connection:
        connection.sendall(head)
        try:
            answer = _answer(connection)
        except ConnectionResetError:  # closed with bytes of ours unread: closed all the same
            answer = b""
    assert answer == b"", answer
    _logged(quick, "serve --body-seconds")


def test_an_answer_given_before_the_body_is_in_still_reaches_a_client_that_goes_on_sending_it(quick):
    """A form post from another site is refused before its body is read. nginx, as docs/service.md sets it up,
    passes requests on as HTTP/1.0 and sends the whole body it has buffered: the connection ends without a reset
    that would lose the answer (nginx said 502 Bad Gateway instead of the refusal, seen once in CI)."""
    body = b"-" * (1024 * 1024)  # far more than the sockets' buffers hold: the server must take it in
    head = (
        f"POST /s/{quick.tokens['alice']}/upload HTTP/1.0\r\nHost: 127.0.0.1\r\nOrigin: https://evil.example\r\n"
        f"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with _connect(quick) as connection:
        connection.sendall(head + body[:1000])
        answer = _answer_head(connection)
        assert answer.startswith(b"HTTP/1.1 403"), answer  # answered while the body is still on its way
        connection.sendall(body[1000:])  # raises if the server reset the connection
        answer += _answer(connection)  # as does this
    assert b"came from another page" in answer, answer


# ----------------------------------------------------------------------------- what is held at once


def _refused(connection: socket.socket) -> bytes:
    """A client that sends its request at once, as browsers do, still reads why it was refused."""
    connection.sendall(b"GET /static/dashboard.js HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    return _answer(connection)


def _served(server: Server, source: str) -> bool:
    with _connect(server, source) as connection:
        connection.sendall(b"GET /static/dashboard.js HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        return _answer(connection).startswith(b"HTTP/1.1 200")


def test_at_the_caps_the_connection_that_waited_longest_makes_room(patient):
    """A newcomer is not refused while another connection only waits (issue 39): one address beyond its cap of
    waiting connections closes its own oldest; the server at its cap closes the oldest waiting one of the client
    that holds the most places."""
    assert _served(patient, "127.0.0.1")  # the target exists
    held = []
    try:
        for _ in range(6):  # as many waiting connections as one address may hold, each stalled in its request line
            held.append(_connect(patient, "127.0.0.1"))
            held[-1].sendall(b"GET /static/dash")
        assert _served(patient, "127.0.0.1")  # the next from that address is served ...
        answer = _refused(held[0])  # ... in the place of its oldest, told why
        assert answer.startswith(b"HTTP/1.1 503"), answer
        assert b"The server needed this connection's place for another" in answer
        _logged(patient, "serve --connections-per-client")
        for source in ("127.0.0.2",) * 6 + ("127.0.0.3",):  # the server's 12 places are all taken now
            held.append(_connect(patient, source))
            held[-1].sendall(b"GET /static/dash")
        assert _honest_from(patient, "bob", "127.0.0.4") == b"HTTP/1.1 200 OK"
        _logged(patient, "serve: closing connections that waited longest")
        answer = _refused(held[6])  # the oldest of the address holding the most places: 127.0.0.2 (6 against 5)
        assert b"The server needed this connection's place for another" in answer
    finally:
        for connection in held:
            connection.close()


def test_only_when_every_place_answers_a_request_is_a_newcomer_refused(patient):
    body = notebook_bytes(submitted_notebook({})) + b" " * (256 * 1024)
    stalled = []
    try:
        for index, student in enumerate(PATIENT_STUDENTS):  # 6 students x 2 uploads: the 12 places, each answering
            for _ in range(2):
                stalled.append(_connect(patient, f"127.0.1.{index + 1}"))
                stalled[-1].sendall(_upload_head(patient, student, len(body)) + body[:-1])
        deadline = time.monotonic() + ANSWER_SECONDS
        while len(spooled(patient)) < 12:  # every one is being read by the app
            assert time.monotonic() < deadline, "the stalled uploads never reached the app"
            time.sleep(0.1)
        with _connect(patient, "127.0.0.4") as extra:
            answer = _refused(extra)
        assert answer.startswith(b"HTTP/1.1 503"), answer
        assert b"The server has as many connections open as it takes" in answer
        _logged(patient, "each answering a request, the limit (serve --connections)")
    finally:
        for connection in stalled:
            connection.close()
    deadline = time.monotonic() + ANSWER_SECONDS  # the server sees them close: the places are free again
    while not _served(patient, "127.0.0.1"):
        assert time.monotonic() < deadline, "the server never freed the places of closed connections"
        time.sleep(0.1)


def test_a_student_has_at_most_two_uploads_in_flight(patient):
    body = notebook_bytes(submitted_notebook({}))
    large = body + b" " * (256 * 1024)  # on disk once received in part: how the test sees the app reading it
    stalled = []
    try:
        for _ in range(2):
            stalled.append(_connect(patient, "127.0.0.5"))
            stalled[-1].sendall(_upload_head(patient, "carol", len(large)) + large[:-1])
        deadline = time.monotonic() + ANSWER_SECONDS
        while len(spooled(patient)) < 2:  # both are being read by the app, each holding its place
            assert time.monotonic() < deadline, "the stalled uploads never reached the app"
            time.sleep(0.1)
        # The third waits for no body: 429 at once, with when to try again, while others' uploads are graded.
        third = patient.submit("carol", body)
        assert third.status == 429, third.text
        assert third.headers["retry-after"] == "5"
        assert third.json["error"].startswith("you have 2 uploads in progress already")
        _logged(patient, "2 of theirs in progress")
        _honest(patient, "dave")
    finally:
        for connection in stalled:
            connection.close()
    deadline = time.monotonic() + ANSWER_SECONDS  # their places come back as the server sees them go
    while (reply := patient.submit("carol", body)).status == 429:
        assert time.monotonic() < deadline, reply.text
        time.sleep(0.1)
    assert reply.status == 200, reply.text


def test_an_upload_body_waits_on_disk_not_in_memory(patient):
    body = notebook_bytes(submitted_notebook({})) + b" " * (1024 * 1024)  # a valid notebook of over 1 MB
    assert spooled(patient) == []
    with _connect(patient, "127.0.0.6") as connection:
        connection.sendall(_upload_head(patient, "alice", len(body)) + body[:-1])
        deadline = time.monotonic() + ANSWER_SECONDS
        while not any(size >= 1024 * 1024 for size in spooled(patient)):
            assert time.monotonic() < deadline, f"no file of the upload's size in the work folder: {spooled(patient)}"
            time.sleep(0.1)
        connection.sendall(body[-1:])
        answer = _answer_head(connection)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert spooled(patient) == []  # and nothing is left of it


def test_the_serve_options_refuse_nonsense(tmp_path):
    server = Server(course_for_service(tmp_path / "course"))
    refused = subprocess.run(
        server.command("--connections", "0"), capture_output=True, text=True, timeout=120, check=False
    )
    assert refused.returncode != 0
    assert "--connections must be more than 0" in refused.stderr + refused.stdout


def _limited(soft: int, hard: int):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_serve_holds_as_many_descriptors_as_its_bounds_need_or_refuses_to_start(tmp_path):
    """With the common soft limit of 1024, a flood made accept() fail before any cap refused anything: serve
    raises its soft limit to what the bounds may hold (2 x 512 + 128 + 1024 held + 256 + 256), or says to lower them."""
    server = Server(course_for_service(tmp_path / "course"), jobs=1)
    server.issue_tokens(["alice"])
    refused = subprocess.run(
        server.command("--port", "0"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=_limited(1000, 1000),
    )
    assert refused.returncode == 1, refused.stderr
    assert "may need 2688 open files, but this process may open at most 1000" in refused.stderr
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 2688:
        pytest.skip(f"this process may open at most {hard} files: a server could not raise its limit to 2688")
    server.port = free_port()
    log = (tmp_path / "server.log").open("wb")
    process = subprocess.Popen(
        server.command("--port", str(server.port), "--jobs", "1"),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_limited(1024, hard),
    )
    try:
        deadline = time.monotonic() + ANSWER_SECONDS
        while True:  # up once it answers
            assert process.poll() is None, (tmp_path / "server.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()
            try:
                if _served(server, "127.0.0.1"):
                    break
            except OSError:
                time.sleep(0.2)
        limits = Path(f"/proc/{process.pid}/limits").read_text()
        assert next(line for line in limits.splitlines() if line.startswith("Max open files")).split()[3] == "2688"
    finally:
        process.terminate()
        process.wait(30)
        log.close()
