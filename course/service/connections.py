"""uvicorn's HTTP/1.1 protocol with the edge's bounds on connections and on the time a request's headers and body
may take (edge.py says why uvicorn alone does not bound them)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from course.service.edge import BODY_GRACE_SECONDS, LINGERING, LOG_EVERY_SECONDS, Edge

# A connection ended while its client is still sending (refused here, or answered by the app before the request's
# body was read) is half-closed, and what the client still sends is read and dropped for this long, so that those
# bytes do not reset the connection before the client has read the answer (nginx's lingering close; nginx as a
# proxy would say 502 Bad Gateway instead of it). At most LINGERING linger at once; beyond that one closes at once.
LINGER_SECONDS = 2.0


def _canned(status: str, sentence: str) -> bytes:
    body = (sentence + "\n").encode()
    return (f"HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode() + body


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


class EdgeProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with caps on open connections (in all, and from one address) and deadlines for
    a request's headers and body."""

    edge: ClassVar[Edge] = Edge()  # set by `protocol_for`
    _said: ClassVar[dict[str, float]] = {}  # kind of refusal -> when the log last said it
    _lingering: ClassVar[set[EdgeProtocol]] = set()  # refused connections still being drained

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_for: Any = None  # h11.IDLE (headers) or h11.SEND_BODY (the body) while a deadline is armed
        self._ending = False  # refused or lingering: what the client still sends is dropped

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._raw = transport
        super().connection_made(_LingeringTransport(transport, self))  # type: ignore[arg-type]
        refusal = self._over_a_cap()
        if refusal:
            self._refuse("503 Service Unavailable", refusal)
            return
        self._arm(h11.IDLE)  # a fresh connection has no keep-alive timer: its first request's headers have this

    def _over_a_cap(self) -> str:
        """Why this new connection is one too many ("" when it is not)."""
        if len(self.connections) > self.edge.connections:
            self._log("connections", "serve: refusing connections: %d are open, the limit (serve --connections)",
                      self.edge.connections)
            return "The server has as many connections open as it takes; try again in a minute."
        host = self.client[0] if self.client else None
        if self.edge.per_client is not None and host is not None:
            same = sum(1 for other in self.connections if (getattr(other, "client", None) or ("",))[0] == host)
            if same > self.edge.per_client:
                self._log("per_client", "serve: refusing connections from %s: %d of its are open, the limit "
                                        "(serve --connections-per-client)", host, self.edge.per_client)
                return "This address has as many connections open as one may; close some, or try again in a minute."
        return ""

    def data_received(self, data: bytes) -> None:
        if self._ending:
            return  # lingering: dropped
        if self.conn.their_state is h11.IDLE and self._waiting_for is not h11.IDLE:
            self._arm(h11.IDLE)  # the first byte of a request on a kept-alive connection
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self._ending:
            self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._lingering.discard(self)
        super().connection_lost(exc)

    def _follow(self) -> None:
        """Move the deadline along with the client's side of the request: headers, then body, then none."""
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            if self._waiting_for is not h11.SEND_BODY:
                self._arm(h11.SEND_BODY)
        elif state is not h11.IDLE and self._waiting_for is not None:
            self._disarm()  # the request is in: its response is the app's, and then keep-alive's timer

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
            self._log("headers", "serve: closing connections whose request's headers took over %g s "
                                 "(serve --header-seconds)", self.edge.header_seconds)
            self._refuse("408 Request Timeout", f"The request's headers did not arrive within "
                                                f"{self.edge.header_seconds:g} s; the connection is closed.")
        else:  # a body still arriving after the app's own deadline for it (or for a request it has answered)
            self._log("body", "serve: closing connections whose request's body took over %g s "
                              "(serve --body-seconds)", self.edge.body_seconds)
            self._raw.close()

    def _close(self) -> None:
        """uvicorn ends the connection: with lingering while the client may still be sending the request's body."""
        if self._ending:
            return
        if self.conn.their_state is h11.SEND_BODY:
            self._linger()
        else:
            self._raw.close()

    def _refuse(self, status: str, sentence: str) -> None:
        """Answer `status` with `sentence` and end the connection; it no longer counts against the caps."""
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True  # the app, if it still reads this request, hears that it is gone
        self._raw.write(_canned(status, sentence))
        self._linger()

    def _linger(self) -> None:
        """Half-close the connection, drop what the client still sends for LINGER_SECONDS, then close it. It no
        longer counts against the caps; LINGERING bounds how many linger."""
        self._disarm()
        self._ending = True
        self.connections.discard(self)
        if len(self._lingering) >= LINGERING or not self._raw.can_write_eof():
            self._raw.close()
            return
        self._lingering.add(self)
        self._raw.resume_reading()  # uvicorn pauses reading while a body waits unread
        self._raw.write_eof()
        self.loop.call_later(LINGER_SECONDS, self._raw.close)

    def _log(self, kind: str, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._said.get(kind, -LOG_EVERY_SECONDS) >= LOG_EVERY_SECONDS:
            self._said[kind] = now
            self.logger.warning(message, *args)


def protocol_for(edge: Edge) -> type[EdgeProtocol]:
    """uvicorn's `http` protocol class for these bounds."""
    return type("BoundedEdgeProtocol", (EdgeProtocol,), {"edge": edge, "_said": {}, "_lingering": set()})
