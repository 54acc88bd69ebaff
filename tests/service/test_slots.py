"""The connection slots belong to students, not to whoever holds them (issue 39): the real `serve` process with
small caps, attacked over raw sockets while an honest student uploads.

Each attack keeps every place of the server taken for as long as it runs (a connection it loses is opened again at
once): kept-alive connections that send a cheap request every second (idle in between), requests that never finish
their headers (from other addresses, or from the honest student's own address, as behind a campus NAT), and one
student's token keeping many page requests in flight, each refused by the pace. On b99931e every one of these made
the honest uploads 503; the tests assert outcomes only (each honest upload graded, none refused), never a time.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.helpers import submitted_notebook
from tests.support.service import STUDENTS, Server, course_for_service, notebook_bytes, set_service_policy

pytestmark = pytest.mark.slow

PLACES, PER_CLIENT = 16, 6  # serve --connections, --connections-per-client
HONEST_UPLOADS = 3
ANSWER_SECONDS = 60
ATTACKERS = ["127.0.0.2"] * PER_CLIENT + ["127.0.0.3"] * PER_CLIENT + ["127.0.0.4"] * (PLACES - 2 * PER_CLIENT)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    root = course_for_service(tmp_path_factory.mktemp("slots") / "course")
    set_service_policy(root, pages_per_minute=1)  # mallory's pages are refused by the pace after the first burst
    running = Server(
        root,
        jobs=1,
        options=("--connections", str(PLACES), "--connections-per-client", str(PER_CLIENT), "--header-seconds", "300"),
    )
    running.issue_tokens([*STUDENTS, "mallory"])
    running.start()
    yield running
    running.stop()


class Holder:
    """Keeps one connection per source address in `sources` open to the server, each doing `kind` ("idle": a
    kept-alive connection sending a cheap GET every second; "unfinished": half a request line, never finished),
    opening another at once for each the server closes, until stopped."""

    def __init__(self, server: Server, sources: list[str], kind: str) -> None:
        self.server, self.kind = server, kind
        self.stopping = threading.Event()
        self.held = 0  # connections open and doing their part now
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.hold, args=(source,), daemon=True) for source in sources]
        self.all_held = threading.Event()

    def __enter__(self) -> Holder:
        for thread in self.threads:
            thread.start()
        assert self.all_held.wait(ANSWER_SECONDS), f"the attack never held {len(self.threads)} connections"
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join()

    def _count(self, change: int) -> None:
        with self.lock:
            self.held += change
            if self.held == len(self.threads):
                self.all_held.set()

    def hold(self, source: str) -> None:
        while not self.stopping.is_set():
            try:
                connection = socket.create_connection(
                    ("127.0.0.1", self.server.port), timeout=5, source_address=(source, 0)
                )
            except OSError:
                continue
            with connection:
                try:
                    self._use(connection)
                except OSError:
                    pass  # closed by the server: open another

    def _use(self, connection: socket.socket) -> None:
        counted = False
        try:
            if self.kind == "unfinished":
                connection.sendall(b"GET /static/dash")
                self._count(1)
                counted = True
                connection.settimeout(0.5)
                while not self.stopping.is_set():
                    try:
                        if not connection.recv(4096):
                            return  # closed (made room for another)
                    except TimeoutError:
                        continue
                    return  # answered (503) and closed
                return
            while not self.stopping.is_set():
                connection.sendall(b"GET /favicon.ico HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                answer = b""
                while b"\r\n\r\n" not in answer:
                    chunk = connection.recv(4096)
                    if not chunk:
                        return
                    answer += chunk
                if not answer.startswith(b"HTTP/1.1 204"):
                    return
                if not counted:
                    self._count(1)
                    counted = True
                self.stopping.wait(1.0)  # idle in between: well inside the 5 s keep-alive
        finally:
            if counted:
                self._count(-1)


def honest_uploads(server: Server, student: str) -> list[tuple[int, str]]:
    notebook = notebook_bytes(submitted_notebook())
    results = []
    for _ in range(HONEST_UPLOADS):
        reply = server.submit(student, notebook)
        results.append((reply.status, reply.json.get("status", "") if reply.status == 200 else reply.text[:200]))
    return results


GRADED = [(200, "graded")] * HONEST_UPLOADS


def logged(server: Server, text: str) -> None:
    """Wait for `text` in the server's log: the instructor is told what made room (and never a token)."""
    deadline = time.monotonic() + ANSWER_SECONDS
    while text not in (log := server.log.read_text(encoding="utf-8", errors="replace")):
        assert time.monotonic() < deadline, f"{text!r} never appeared in the server's log: {log[-2000:]}"
        time.sleep(0.1)
    assert all(token not in log for token in server.tokens.values())


def test_kept_alive_connections_that_hold_every_place_make_room_for_an_honest_upload(server):
    with Holder(server, ATTACKERS, "idle"):
        assert honest_uploads(server, "alice") == GRADED
    logged(server, "serve: closing connections that waited longest: 16 are open")


@pytest.mark.parametrize(
    "sources", [ATTACKERS, ["127.0.0.1"] * PER_CLIENT], ids=["other addresses", "the honest student's own address"]
)
def test_never_finished_requests_that_hold_every_place_make_room_for_an_honest_upload(server, sources):
    """Other addresses take every place of the server; or the honest student's own address (a campus NAT, where
    the attacker is one of the students behind it) holds as many waiting connections as one address may."""
    with Holder(server, sources, "unfinished"):
        assert honest_uploads(server, "bob") == GRADED
    logged(
        server,
        "serve: closing connections of 127.0.0.1"
        if sources[0] == "127.0.0.1"
        else "serve: closing connections that waited longest",
    )


@pytest.fixture(scope="module")
def proxied(tmp_path_factory) -> Iterator[Server]:
    """A server behind a reverse proxy (127.0.0.1, trusted): every connection comes from the proxy's address."""
    root = course_for_service(tmp_path_factory.mktemp("proxied") / "course")
    set_service_policy(root, pages_per_minute=1)
    running = Server(root, jobs=1, options=("--connections", str(PROXIED_PLACES), "--forwarded-allow-ips", "127.0.0.1"))
    running.issue_tokens([*STUDENTS, "mallory"])
    running.start()
    yield running
    running.stop()


PROXIED_PLACES, RELOADERS = 48, 60


def page_status(server: Server, path: str, forwarded_for: str) -> int:
    """The status of GET `path` through the proxy for `forwarded_for`, on a connection of its own (0: no answer,
    the connection closed or refused)."""
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=ANSWER_SECONDS) as connection:
            connection.sendall(
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-For: {forwarded_for}\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            answer = b""
            while chunk := connection.recv(65536):
                answer += chunk
    except OSError:
        return 0
    status = answer.split(b" ", 2)[1:2]
    return int(status[0]) if status and status[0].isdigit() else 0


def test_one_students_paced_refusals_leave_room_for_honest_uploads(proxied):
    """Behind a proxy, one token keeps more page requests in flight than the server has places (each refused by the
    pace, then asked again at once): a few of them are delayed, the rest are answered at once and closed, and the
    token, asking again before each Retry-After, is soon cut off (strikes.py): its requests are held out of the
    server's places, so they never hold them."""
    server = proxied
    stopping = threading.Event()
    answers: dict[int, int] = {}
    lock = threading.Lock()
    path = f"/s/{server.tokens['mallory']}/"

    def reload() -> None:
        while not stopping.is_set():
            status = page_status(server, path, "10.0.0.9")
            with lock:
                answers[status] = answers.get(status, 0) + 1

    loops = [threading.Thread(target=reload, daemon=True) for _ in range(RELOADERS)]
    for loop in loops:
        loop.start()
    try:
        while answers.get(429, 0) < RELOADERS:  # the pace refuses them: the attack is on
            stopping.wait(0.1)
        assert honest_uploads(server, "carol") == GRADED
        logged(server, "serve: cutting off a token")
    finally:
        stopping.set()
        for loop in loops:
            loop.join()
