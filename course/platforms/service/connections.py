"""uvicorn's HTTP/1.1 protocol with the edge's bounds on connections and on the time a request's headers and body
may take (edge.py says why uvicorn alone does not bound them), and the clients that ignore `Retry-After` held
(strikes.py)."""

from __future__ import annotations

import asyncio
import collections
import json
import socket
import time
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from course.platforms.service.edge import (
    BODY_GRACE_SECONDS,
    EDGE_ANSWERED,
    EDGE_HEADER_BYTES,
    EDGE_REFUSED,
    LINGERING,
    LOG_EVERY_SECONDS,
    TOKEN_REQUESTS_IN_FLIGHT,
    Edge,
    presented_token,
    retry_seconds,
)
from course.platforms.service.strikes import CUT_OFF_SECONDS, HELD, HOLD_SECONDS, STRIKES, Strikes, keys_of

# A connection ended while its client is still sending (refused here, or answered by the app before the request's
# body was read) is half-closed, and what the client still sends is read and dropped for this long, so that those
# bytes do not reset the connection before the client has read the answer (nginx's lingering close; nginx as a
# proxy would say 502 Bad Gateway instead of it). At most LINGERING linger at once; beyond that one closes at once.
LINGER_SECONDS = 2.0


def _canned(status: str, sentence: str, *, api: bool = False, retry_after: int | None = None) -> bytes:
    """A whole answer with `sentence`: as the API's JSON error when `api`, else plain text."""
    if api:
        body, kind = (json.dumps({"error": sentence, "retry_after": retry_after}) + "\n").encode(), "application/json"
    else:
        body, kind = (sentence + "\n").encode(), "text/plain; charset=utf-8"
    retry = f"retry-after: {retry_after}\r\n" if retry_after is not None else ""
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: {kind}\r\nconnection: close\r\n{retry}content-length: {len(body)}\r\n\r\n"
    ).encode() + body


class _LingeringTransport:
    """The connection's transport as uvicorn sees it, but its close() is the protocol's `_close`."""

    def __init__(self, transport: asyncio.Transport, protocol: EdgeProtocol) -> None:
        self._transport, self._protocol = transport, protocol

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def close(self) -> None:
        self._protocol._close()

    def is_closing(self) -> bool:
        return self._protocol._ending or self._transport.is_closing()


IDLE, UNFINISHED = "idle", "unfinished"


class Waiting:
    """The connections that hold a place while no request of theirs is being answered, each in the order it began
    waiting: kept-alive ones between two requests (idle), and those whose request has not arrived in full
    (unfinished: a fresh connection, a request's headers on their way, a body still coming after its answer); and
    how many places each client address holds in all. At a cap one of these waiting connections makes room for a
    newcomer (`EdgeProtocol._make_room`); a request being answered (an upload's body being read included) is never
    closed for another, and is bounded per token (edge.py), not here. On the event loop only."""

    def __init__(self) -> None:
        self.kinds: dict[str, dict[EdgeProtocol, None]] = {IDLE: {}, UNFINISHED: {}}  # ordered: oldest first
        self.of_host: dict[str, dict[EdgeProtocol, None]] = {}  # both kinds, per client address, oldest first
        self.places: collections.Counter[str] = collections.Counter()  # places held per address, waiting or not

    def opened(self, connection: EdgeProtocol) -> None:
        self.places[connection.host] += 1

    def closed(self, connection: EdgeProtocol) -> None:
        """The connection no longer holds a place (called once, by `EdgeProtocol._free`)."""
        self.leave(connection)
        self.places[connection.host] -= 1
        if self.places[connection.host] <= 0:
            del self.places[connection.host]

    def wait(self, connection: EdgeProtocol, kind: str) -> None:
        if connection in self.kinds[kind]:
            return  # still waiting as it was: it keeps its place in the order
        self.leave(connection)
        self.kinds[kind][connection] = None
        self.of_host.setdefault(connection.host, {})[connection] = None

    def leave(self, connection: EdgeProtocol) -> None:
        for kind in self.kinds.values():
            kind.pop(connection, None)
        held = self.of_host.get(connection.host)
        if held is not None:
            held.pop(connection, None)
            if not held:
                del self.of_host[connection.host]

    def waiting_of(self, host: str) -> int:
        return len(self.of_host.get(host, ()))

    def victim(self, besides: EdgeProtocol, host: str | None = None) -> EdgeProtocol | None:
        """The connection to close for a newcomer (`besides`): of the client `host` when given, else of the client
        that holds the most places and has one waiting; of that client's, the longest-idle kept-alive one, else
        the oldest unfinished one that has sent a part of its request, else the oldest that has sent nothing yet.
        That last order is for a campus NAT: an honest client sends its whole request as it connects, so while it
        waits unfinished it has most likely sent nothing yet (its bytes are on their way), and a flood of stalled
        requests from its own address, each opened again as it is closed, would otherwise soon make it the oldest
        there and close it before the server had read a byte of it (seen under load). None: no other waits."""
        if host is None:
            hosts = sorted(self.of_host, key=lambda h: self.places[h], reverse=True)
        else:
            hosts = [host]
        for candidate in hosts:
            mine = self.of_host.get(candidate, {})
            for kind, heard in ((IDLE, None), (UNFINISHED, True), (UNFINISHED, False)):
                for connection in mine:
                    if (
                        connection is not besides
                        and connection in self.kinds[kind]
                        and (heard is None or connection.heard is heard)
                    ):
                        return connection
        return None


class EdgeProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with caps on open connections (in all, and from one address), kept by closing
    the connections that wait longest rather than refusing a newcomer, and deadlines for a request's headers and
    body."""

    edge: ClassVar[Edge] = Edge()  # set by `protocol_for`
    _said: ClassVar[dict[str, float]] = {}  # kind of refusal -> when the log last said it
    _lingering: ClassVar[set[EdgeProtocol]] = set()  # refused connections still being drained
    _waiting: ClassVar[Waiting] = Waiting()  # the connections that may make room for a newcomer
    _presented: ClassVar[collections.Counter[str]] = collections.Counter()  # token -> its requests being answered
    _strikes: ClassVar[Strikes] = Strikes()  # who ignored Retry-After, and who is cut off for it
    _held: ClassVar[dict[EdgeProtocol, asyncio.TimerHandle]] = {}  # cut-off clients' connections, oldest first

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_for: Any = None  # h11.IDLE (headers) or h11.SEND_BODY (the body) while a deadline is armed
        self._ending = False  # refused or lingering: what the client still sends is dropped
        self.host = ""  # the client's address (behind a proxy, the proxy's)
        self._holds = False  # counted in `_waiting.places` until `_free`
        self.heard = False  # the client has sent a byte (an unfinished one that has not is closed last: Waiting.victim)
        self._token: str | None = None  # the token its request being answered presents (counted in `_presented`)
        self._gated: Any = None  # the request (its cycle) the token bound last looked at
        self._keys: list[str] = []  # the client's strike keys (strikes.py) while it is held

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._raw = transport
        super().connection_made(_LingeringTransport(transport, self))  # type: ignore[arg-type]
        self.host = self.client[0] if self.client else ""
        if self._cut_off(None):  # its address is cut off: held before a byte of its request is read
            self._raw.pause_reading()
            self._hold(None)
            return
        self._holds = True
        self._waiting.opened(self)
        self._arm(h11.IDLE)  # a fresh connection has no keep-alive timer: its first request's headers have this
        self._waiting.wait(self, UNFINISHED)
        refusal = self._make_room()
        if refusal:
            self._refuse("503 Service Unavailable", refusal)
            return
        self._read_now()

    def _read_now(self) -> None:
        """Read what the client has sent already, before the next newcomer is looked at. An honest client sends its
        request as it connects, and once its headers are in, its request is being answered and never closed for
        another; read only when the event loop gets round to it, it waited with the newcomers of two accepts (up to
        BACKLOG each), and a flood from its own address (a campus NAT) closed it as the oldest waiting there."""
        if self.scheme != "http":
            return  # TLS: its bytes are the TLS transport's to read (serve terminates none: the proxy does)
        try:
            with self._raw.get_extra_info("socket").dup() as peer:
                data = peer.recv(EDGE_HEADER_BYTES, socket.MSG_DONTWAIT)
        except OSError:  # nothing yet (BlockingIOError), or gone: the transport's own reading says so in its turn
            return
        if data:
            self.data_received(data)

    def _make_room(self) -> str:
        """Keep the caps for this new connection by closing one that waits (`Waiting`: the longest-idle kept-alive
        one, else the oldest unfinished one), of the same client first when that client holds as many waiting
        connections as one may; why this one is refused ("" when it is not): only when every other place holds a
        request being answered."""
        host, per_client = self.host, self.edge.per_client
        if per_client is not None and self._waiting.waiting_of(host) > per_client:
            # Only connections that wait count here: behind one address (a campus NAT) hundreds of students'
            # requests may be answered at once, each bounded by its student's token, not by the address.
            victim = self._waiting.victim(self, host)
            if victim is not None:
                self._log(
                    "per_client",
                    "serve: closing connections of %s that waited longest: it held %d waiting "
                    "(serve --connections-per-client)",
                    host,
                    per_client,
                )
                victim._make_way()
        if len(self.connections) > self.edge.connections:
            victim = self._waiting.victim(self)
            if victim is None:
                self._log(
                    "connections",
                    "serve: refusing connections: %d are open, each answering a request, "
                    "the limit (serve --connections)",
                    self.edge.connections,
                )
                return "The server has as many connections open as it takes; try again in a minute."
            self._log(
                "evicted",
                "serve: closing connections that waited longest: %d are open, the limit (serve --connections)",
                self.edge.connections,
            )
            victim._make_way()
        return ""

    def _make_way(self) -> None:
        """Close this waiting connection for a newcomer: a kept-alive one as its keep-alive timeout would (a
        client opens another, as it must when a server ends an idle connection), an unfinished one with a 503
        that says to send the request again."""
        if self in self._waiting.kinds[IDLE]:
            self._disarm()
            self._unset_keepalive_if_required()
            self._ending = True
            self._free()
            self._raw.close()
        else:
            self._refuse(
                "503 Service Unavailable",
                "The server needed this connection's place for another before "
                "your request had arrived in full; send it again.",
            )

    def data_received(self, data: bytes) -> None:
        if self._ending:
            return  # lingering: dropped
        self.heard = True
        if self.conn.their_state is h11.IDLE and self._waiting_for is not h11.IDLE:
            self._arm(h11.IDLE)  # the first byte of a request on a kept-alive connection
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        retry_after = self.scope["state"].pop(EDGE_REFUSED, None)  # the app answered 429 with this Retry-After
        if retry_after is not None:
            self._struck(presented_token(self.scope["path"], self.scope["headers"]), retry_after)
        super().on_response_complete()
        if not self._ending:
            self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._lingering.discard(self)
        held = self._held.pop(self, None)
        if held is not None:
            held.cancel()
        self._free()
        super().connection_lost(exc)

    def _follow(self) -> None:
        """Move the deadline along with the client's side of the request: headers, then body, then none; and
        say whether the connection waits (`Waiting`) or has a request being answered."""
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            if self._waiting_for is not h11.SEND_BODY:
                self._arm(h11.SEND_BODY)
        elif state is not h11.IDLE and self._waiting_for is not None:
            self._disarm()  # the request is in: its response is the app's, and then keep-alive's timer
        answering = self.cycle is not None and not self.cycle.response_complete
        if not answering or self._ending:
            self._untoken()
        if self._ending or self._raw.is_closing():
            self._waiting.leave(self)
        elif answering:
            self._waiting.leave(self)  # a request being answered: never closed for another
            if self._gated is not self.cycle:
                self._gated = self.cycle
                self._gate()
        elif state is h11.IDLE and self._waiting_for is None:
            self._waiting.wait(self, IDLE)  # answered, kept alive, nothing of the next request yet
        else:
            self._waiting.wait(self, UNFINISHED)

    def _gate(self) -> None:
        """A request's headers are in: held when its token (or address) is cut off (strikes.py); else counted
        against its token's TOKEN_REQUESTS_IN_FLIGHT, or, beyond them, answered 429 at once and closed, before the
        app (or the database) does anything for it."""
        self._untoken()
        token = presented_token(self.scope["path"], self.scope["headers"])
        if self._cut_off(token):
            self.scope["state"][EDGE_ANSWERED] = True  # its task, created already, does nothing
            self.cycle.disconnected = True  # and answers nothing
            self._raw.pause_reading()
            self._hold(token)
            return
        if token is None:
            return
        if self._presented[token] >= TOKEN_REQUESTS_IN_FLIGHT:
            self._struck(token, 1)
            self.scope["state"][EDGE_ANSWERED] = True  # its task, created already, does nothing
            self._log(
                "token",
                "serve: answered requests 429 at once: %d under one token were being answered "
                "(a client asking again and again; the token is not logged)",
                TOKEN_REQUESTS_IN_FLIGHT,
            )
            self._refuse(
                "429 Too Many Requests",
                f"You have {TOKEN_REQUESTS_IN_FLIGHT} requests being answered "
                "already; wait for them, then reload. Nothing of yours is lost.",
                api=self.scope["path"].startswith("/api/"),
                retry_after=1,
            )
            return
        self._presented[token] += 1
        self._token = token

    def _strike_keys(self, token: str | None) -> list[str]:
        # Per address only where the address is the client's: behind a proxy (no per-client count) it is the proxy's.
        return keys_of(token, self.host if self.edge.per_client is not None else None)

    def _cut_off(self, token: str | None) -> float:
        """The seconds this client (its address, or `token`) stays cut off; 0: it is not."""
        return max((self._strikes.cut_off(key) for key in self._strike_keys(token)), default=0.0)

    def _struck(self, token: str | None, retry_after: float) -> None:
        """This client was answered 429 with `retry_after`: a strike if it had not waited out the last one."""
        for key in self._strikes.refused(self._strike_keys(token), retry_after):
            self._log(
                f"cut_off {key.partition(':')[0]}",
                "serve: cutting off %s for %g s: it asked again before the Retry-After it was given %d times in a "
                "row; its connections are held, then answered 429 (the token is not logged)",
                key if key.startswith("address:") else "a token",
                CUT_OFF_SECONDS,
                STRIKES,
            )

    def _hold(self, token: str | None) -> None:
        """Hold this cut-off client's connection unanswered (its reading paused), out of the caps, for HOLD_SECONDS
        or the rest of its cut-off; at most HELD at once, and past that a newcomer is closed unanswered at once."""
        self._disarm()
        self._ending = True  # what it may still send is dropped, never parsed
        self._free()
        self._keys = self._strike_keys(token)
        if len(self._held) >= HELD:  # full: this one is dropped unanswered (answering another would free a loop)
            self._strikes.dropped += 1
            self._raw.abort()
            return
        self._held[self] = self.loop.call_later(min(HOLD_SECONDS, self._cut_off(token)), self._release)
        self._strikes.held += 1
        unread = self.cycle is None
        self._log(
            f"held {unread}",
            "serve: holding connections of clients cut off for ignoring Retry-After (%d so far; the latest of %s, "
            "%s); %d held now",
            self._strikes.held,
            self.host,
            "its request unread" if unread else "after its request's headers",
            len(self._held),
        )

    def _release(self) -> None:
        """A held connection's answer: 429 with the time its client stays cut off, and closed (drained)."""
        timer = self._held.pop(self, None)
        if timer is None:
            return
        timer.cancel()
        left = self._strikes.answered_held(self._keys)
        if self.cycle is None and self.scheme == "http":  # its request, never read, is dropped: no reset at close
            try:
                with self._raw.get_extra_info("socket").dup() as peer:
                    peer.recv(EDGE_HEADER_BYTES, socket.MSG_DONTWAIT)
            except OSError:
                pass
        self._ending = False  # _refuse's lingering drains it
        self._refuse(
            "429 Too Many Requests",
            f"You asked again {STRIKES} times before the Retry-After you were given; wait "
            f"{retry_seconds(left)} s, then try again. Nothing of yours is lost.",
            api=self.cycle is not None and self.scope["path"].startswith("/api/"),
            retry_after=retry_seconds(left),
        )

    def _untoken(self) -> None:
        if self._token is not None:
            self._presented[self._token] -= 1
            if self._presented[self._token] <= 0:
                del self._presented[self._token]
            self._token = None

    def _arm(self, waiting_for: Any) -> None:
        self._disarm()
        seconds = self.edge.header_seconds if waiting_for is h11.IDLE else self.edge.body_seconds + BODY_GRACE_SECONDS
        self._waiting_for = waiting_for
        self._deadline = self.loop.call_later(seconds, self._late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline, self._waiting_for = None, None

    def _late(self) -> None:
        waiting_for, self._deadline, self._waiting_for = self._waiting_for, None, None
        if self._raw.is_closing():
            return
        if waiting_for is h11.IDLE:
            self._log(
                "headers",
                "serve: closing connections whose request's headers took over %g s (serve --header-seconds)",
                self.edge.header_seconds,
            )
            self._refuse(
                "408 Request Timeout",
                f"The request's headers did not arrive within "
                f"{self.edge.header_seconds:g} s; the connection is closed.",
            )
        else:  # a body still arriving after the app's own deadline for it (or for a request it has answered)
            self._log(
                "body",
                "serve: closing connections whose request's body took over %g s (serve --body-seconds)",
                self.edge.body_seconds,
            )
            self._raw.close()

    def _close(self) -> None:
        """uvicorn ends the connection: with lingering while the client may still be sending the request's body."""
        if self._ending:
            return
        if self.conn.their_state is h11.SEND_BODY:
            self._linger()
        else:
            self._raw.close()

    def _refuse(self, status: str, sentence: str, *, api: bool = False, retry_after: int | None = None) -> None:
        """Answer `status` with `sentence` and end the connection; it no longer counts against the caps."""
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True  # the app, if it still reads this request, hears that it is gone
        self._raw.write(_canned(status, sentence, api=api, retry_after=retry_after))
        self._linger()

    def _linger(self) -> None:
        """Half-close the connection, drop what the client still sends for LINGER_SECONDS, then close it. It no
        longer counts against the caps; LINGERING bounds how many linger."""
        self._disarm()
        self._ending = True
        self._free()
        if len(self._lingering) >= LINGERING or not self._raw.can_write_eof():
            self._raw.close()
            return
        self._lingering.add(self)
        self._raw.resume_reading()  # uvicorn pauses reading while a body waits unread
        self._raw.write_eof()
        self.loop.call_later(LINGER_SECONDS, self._raw.close)

    def _free(self) -> None:
        """This connection no longer holds a place: out of the caps' counts (once)."""
        self._untoken()
        self.connections.discard(self)
        if self._holds:
            self._holds = False
            self._waiting.closed(self)
        else:
            self._waiting.leave(self)

    def _log(self, kind: str, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._said.get(kind, -LOG_EVERY_SECONDS) >= LOG_EVERY_SECONDS:
            self._said[kind] = now
            self.logger.warning(message, *args)


def protocol_for(edge: Edge) -> type[EdgeProtocol]:
    """uvicorn's `http` protocol class for these bounds."""
    return type(
        "BoundedEdgeProtocol",
        (EdgeProtocol,),
        {
            "edge": edge,
            "_said": {},
            "_lingering": set(),
            "_waiting": Waiting(),
            "_presented": collections.Counter(),
            "_strikes": Strikes(),
            "_held": {},
        },
    )
