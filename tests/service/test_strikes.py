"""A client that ignores `Retry-After` is cut off at the edge (issue 50, item 9; course/platforms/service/strikes.py).

At e2fd90b a loop that asked again the moment it was refused was refused again at once, a thousand times a second,
and the event loop answering it starved an honest student's upload (tests/benchmarks/edge_attacks.py, "paced"). Now
a client refused STRIKES times in a row, each before the previous Retry-After ran out, has its connections held:
by its address as it connects, before a byte of its request is read (a connection that sends no HTTP at all is
answered as held, not 400), or by its token once its headers are in (behind a proxy, where the address is the
proxy's, only so). Another client at the same time is served. The mechanism is asserted, never a time: against a
real `serve` over raw sockets, each wait for what is asserted, under a deadline far above the bounds.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator

import pytest

from course.platforms.service.strikes import CLIENTS, CUT_OFF_SECONDS, STRIKES, Strikes, keys_of
from tests.support.helpers import submitted_notebook
from tests.support.service import Server, course_for_service, notebook_bytes, spooled

ANSWER_SECONDS = 60  # how long a test waits for an answer it expects: far above every bound here
HELD_SENTENCE = f"You asked again {STRIKES} times before the Retry-After you were given".encode()


def _serve(tmp_path_factory, name: str, *options: str) -> Iterator[Server]:
    running = Server(course_for_service(tmp_path_factory.mktemp(name) / "course"), jobs=1, options=options)
    running.issue_tokens(["alice", "bob"])
    running.start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def direct(tmp_path_factory) -> Iterator[Server]:
    yield from _serve(tmp_path_factory, "direct", "--body-seconds", "120")


@pytest.fixture(scope="module")
def proxied(tmp_path_factory) -> Iterator[Server]:
    """Behind a trusted proxy at 127.0.0.1: every connection comes from it."""
    yield from _serve(tmp_path_factory, "proxied", "--body-seconds", "120", "--forwarded-allow-ips", "127.0.0.1")


def _connect(server: Server, source: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=ANSWER_SECONDS, source_address=(source, 0))


def _answer(connection: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a timeout fails the test: no answer)."""
    received = b""
    try:
        while chunk := connection.recv(65536):
            received += chunk
    except ConnectionResetError:  # an answer written before the reset is what was received
        pass
    return received


def _upload(server: Server, student: str, body: bytes, *, send: int | None = None) -> bytes:
    head = (
        f"POST /api/submissions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.tokens[student]}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    return head + body[:send]


def _ignore_retry_after(server: Server, source: str) -> list[socket.socket]:
    """Alice, from `source`, holds her two uploads in flight (bodies never finished) and uploads again and again,
    each answered 429 with Retry-After 5 at once and asked again at once: STRIKES + 1 refusals in a row. Returns
    the stalled uploads' connections (to close)."""
    body = notebook_bytes(submitted_notebook({})) + b" " * (256 * 1024)  # past 64 KB: spooled while it is read
    stalled = []
    for _ in range(2):
        stalled.append(_connect(server, source))
        stalled[-1].sendall(_upload(server, "alice", body, send=len(body) - 1))
    deadline = time.monotonic() + ANSWER_SECONDS
    while len(spooled(server)) < 2:  # both are read by the app (past 64 KB), each holding one of her two places
        assert time.monotonic() < deadline, f"the stalled uploads never reached the app: {spooled(server)}"
        time.sleep(0.05)
    refused, small = 0, notebook_bytes(submitted_notebook({}))
    while refused <= STRIKES:
        with _connect(server, source) as connection:
            connection.sendall(_upload(server, "alice", small))
            answer = _answer(connection)
        assert answer.startswith(b"HTTP/1.1 429"), answer  # the third upload in flight
        assert b"uploads in progress already" in answer, answer
        assert b"retry-after: 5" in answer.lower(), answer
        refused += 1
    return stalled


def _logged(server: Server, text: str) -> str:
    deadline = time.monotonic() + ANSWER_SECONDS
    while text not in (log := server.log.read_text(encoding="utf-8", errors="replace")):
        assert time.monotonic() < deadline, f"{text!r} never appeared in the server's log: {log[-2000:]}"
        time.sleep(0.1)
    assert all(token not in log for token in server.tokens.values())
    return log


def _honest(server: Server, student: str, source: str) -> bytes:
    body = notebook_bytes(submitted_notebook({}))
    with _connect(server, source) as connection:
        connection.sendall(_upload(server, student, body))
        return _answer(connection)


@pytest.mark.slow
def test_an_address_that_ignores_retry_after_is_held_unread_while_another_is_served(direct):
    stalled = _ignore_retry_after(direct, "127.0.0.7")
    try:
        # Its next connection sends no HTTP at all: parsed, it would be answered 400 at once.
        with _connect(direct, "127.0.0.7") as garbage, _connect(direct, "127.0.0.9") as token_elsewhere:
            garbage.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            body = notebook_bytes(submitted_notebook({}))
            token_elsewhere.sendall(_upload(direct, "alice", body))  # her token, from an address of its own
            honest = _honest(direct, "bob", "127.0.0.8")  # another student, meanwhile: served
            assert honest.startswith(b"HTTP/1.1 200"), honest
            held = _answer(garbage)
            by_token = _answer(token_elsewhere)
        assert held.startswith(b"HTTP/1.1 429"), held
        assert HELD_SENTENCE in held, held
        assert b"retry-after: " in held.lower()
        assert by_token.startswith(b"HTTP/1.1 429"), by_token
        assert json.loads(by_token.partition(b"\r\n\r\n")[2])["error"].startswith(HELD_SENTENCE.decode())
        # The server's log counts them, and says which were held unread (never a token).
        _logged(direct, "serve: cutting off address:127.0.0.7")
        log = _logged(direct, "its request unread")
        _logged(direct, "after its request's headers")
        assert re.search(
            r"cut off for ignoring Retry-After \([12] so far; the latest of 127\.0\.0\.7, its request unread", log
        )
    finally:
        for connection in stalled:
            connection.close()


@pytest.mark.slow
def test_behind_a_proxy_the_token_that_ignores_retry_after_is_held_and_the_address_is_not(proxied):
    stalled = _ignore_retry_after(proxied, "127.0.0.1")
    try:
        with _connect(proxied, "127.0.0.1") as page:
            page.sendall(f"GET /s/{proxied.tokens['alice']}/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            honest = _honest(proxied, "bob", "127.0.0.1")  # from the same address, the proxy's: served
            assert honest.startswith(b"HTTP/1.1 200"), honest
            with _connect(proxied, "127.0.0.1") as garbage:  # the proxy's address is not cut off: parsed, 400
                garbage.sendall(b"NOT HTTP AT ALL\r\n\r\n")
                assert _answer(garbage).startswith(b"HTTP/1.1 400")
            held = _answer(page)
        assert held.startswith(b"HTTP/1.1 429"), held
        assert HELD_SENTENCE in held, held
        log = _logged(proxied, "serve: cutting off a token")
        assert "cutting off address:" not in log
        _logged(proxied, "after its request's headers")
    finally:
        for connection in stalled:
            connection.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_strikes_count_refusals_in_a_row_that_came_too_early_and_forgive_a_client_that_waits():
    clock = Clock()
    strikes = Strikes(clock)
    keys = keys_of("t0k3n", "10.0.0.1")
    assert keys == ["token:t0k3n", "address:10.0.0.1"]
    assert keys_of(None, None) == []
    assert keys_of("t", None) == ["token:t"]
    for _ in range(STRIKES):  # the first refusal is no strike; each next one, 0.1 s later, is
        assert strikes.refused(keys, 5) == []
        clock.now += 0.1
    clock.now += 5  # it waited out its Retry-After: forgiven, counting starts again
    for _ in range(STRIKES):
        assert strikes.refused(keys, 5) == []
        clock.now += 0.1
    assert strikes.refused(keys, 5) == keys  # the STRIKES-th too early in a row: cut off, both keys
    assert strikes.cut_off("address:10.0.0.1") == CUT_OFF_SECONDS
    assert strikes.cut_off("address:10.0.0.2") == 0
    clock.now += CUT_OFF_SECONDS - 1
    assert strikes.answered_held(keys) == CUT_OFF_SECONDS  # it asked while cut off: its cut-off starts again
    clock.now += CUT_OFF_SECONDS - 1
    assert strikes.cut_off("token:t0k3n") == 1
    clock.now += 1
    assert strikes.cut_off("token:t0k3n") == 0
    assert strikes.refused(keys, 5) == []  # and having waited it out, it is forgiven
    for index in range(CLIENTS + 1):  # bounded: the longest unrefused is forgotten
        strikes.refused([f"address:{index}"], 1)
    assert len(strikes._records) == CLIENTS


def test_classmates_refused_at_one_address_never_cut_it_off_and_an_address_is_not_renewed_by_its_held():
    """Behind a NAT, students share an address: each one's refusal (another token) starts its count again, however
    long the Retry-After one of them was given; "too early" is against the last refusal's Retry-After; and a held
    connection renews a token's cut-off, never an address's."""
    clock = Clock()
    strikes = Strikes(clock)
    assert strikes.refused(keys_of("cooling", "10.0.0.1"), 600) == []  # one student's ten-minute cooldown
    for index in range(3 * STRIKES):  # classmates at the same address, each refused once, one a second
        clock.now += 1
        assert strikes.refused(keys_of(f"student{index}", "10.0.0.1"), 600) == []
    assert strikes.cut_off("address:10.0.0.1") == 0
    one = keys_of("looper", "10.0.0.2")
    assert strikes.refused(one, 600) == []
    clock.now += 1
    assert strikes.refused(one, 2) == []  # early against the 600 s: a strike
    clock.now += 3  # past the last Retry-After (2 s), though not the longest: forgiven
    for _ in range(STRIKES):
        assert strikes.refused(one, 5) == []
        clock.now += 0.1
    assert strikes.refused(one, 5) == one
    clock.now += CUT_OFF_SECONDS - 1
    assert strikes.answered_held(one) == CUT_OFF_SECONDS  # the token's starts again
    clock.now += 1
    assert strikes.cut_off("address:10.0.0.2") == 0  # the address's ran out as it was
    assert strikes.cut_off("token:looper") == CUT_OFF_SECONDS - 1
