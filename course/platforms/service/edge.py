"""The bounds of the service's edge: what one connection, one upload and one student may hold before the app does
any work. `connections.py` holds them where the bytes arrive, `uploads.py` and `state.py` per upload and per student.

uvicorn bounds a request's headers in size (h11's 16 KB) and an idle keep-alive connection in time, but nothing else
before a request is complete: a connection that sends half a request line and waits is never timed out (its
keep-alive timer is cancelled by the first byte), and `limit_concurrency` answers 503 only to requests that did
arrive, so such connections pile up to the process's descriptor limit. Hence, before any route or token is looked
at: at most `connections` open at once, and at most `per_client` of one address's waiting (issue 39: the places
belong to students, not to whoever holds them). A connection *waits* while no request of its own is being answered:
kept alive between two requests, or its request not yet in full. At a cap a waiting one makes room for the newcomer
(the longest-idle kept-alive one, else the oldest unfinished one, of the address holding the most places; of the
newcomer's own address at its `per_client`); a request being answered is never closed for another, so only when
every place answers one is the newcomer refused (503 and closed). What a client holds beyond waiting connections is
bounded by its token, not its address (a campus NAT puts hundreds of students behind one): at most
TOKEN_REQUESTS_IN_FLIGHT requests presenting one token are answered at once, counted before the token is looked up
(beyond, 429 at once and closed). A request's headers within `header_seconds` of its first byte (408 and closed),
and its body within `body_seconds` of its headers (the app answers an upload that is late 408 itself, with a
sentence; a connection still sending a body a little after that is closed). HTTP/1.1 handles one request at a time
per connection, so `connections` also bounds the requests in progress. Per upload: its body is spooled to disk past
SPOOL_BYTES rather than held in memory, and one student has at most UPLOADS_IN_FLIGHT uploads in progress (429 with
Retry-After beyond). A client that asks again and again before the Retry-After of its 429s is cut off: its
connections held unanswered, then refused, out of every cap above (strikes.py).

Per student, their pages and the API's reads (GET) are paced (`PageGate`): at most `service.pages_in_flight` of
them answered at once and `service.pages_per_minute` after a burst of PAGE_BURST, 429 with Retry-After beyond
(sent after PAGE_REFUSAL_SECONDS, at most PAGE_REFUSALS_DELAYED of a student's at once, the rest at once and their
connections closed); and every student's pages are read and rendered on PAGE_THREADS threads of
their own. Measured (docs/performance.md, "paced"): twelve loops reloading one student's page kept a dozen threads
rendering, which took most of the server's one interpreter lock from the event loop and the grading threads, and
an honest upload beside them waited 1-2 s for it. Uploads are acknowledged and graded on other threads, so pages
never queue in front of them.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from course.core.config import PAGE_BURST
from course.platforms.service.strikes import HELD

EDGE_HEADER_BYTES = 16 * 1024  # a request line and headers together (h11's default; uvicorn answers 400 above it)
SPOOL_BYTES = 64 * 1024  # an upload's body past this goes to a file in the service's work folder
UPLOADS_IN_FLIGHT = 2  # uploads of one student being received or graded at once
UPLOAD_RETRY_SECONDS = 5  # the Retry-After of the 429 beyond them
LOG_EVERY_SECONDS = 10.0  # one line in the server's log per kind of refusal (and student) and this long
BODY_GRACE_SECONDS = 5.0  # after body_seconds, how long the app has to answer 408 before the connection is closed
BACKLOG = 256  # connections the kernel queues, and the event loop accepts in one go, before any is looked at
LINGERING = 128  # refused connections drained at once (connections.py); beyond them a refusal closes at once
OWN_DESCRIPTORS = 256  # the server's own beside its connections: database, warm workers, logs, the class's spools
# Threads that read and render students' pages, shared by the class. More than service.pages_in_flight's default,
# so one student never holds them all; few, because each rendering thread takes its turn at the one interpreter
# lock, and every thread waiting for it makes the event loop and the grading threads wait longer for theirs.
PAGE_THREADS = 3
# A page refused by a student's pace is answered after this long (or its Retry-After, if shorter): a loop that asks
# again the moment it is answered then costs a connection held a second, not a hundred refusals a second, each of
# which is as much work for the event loop as a small page (measured: 80-100 a second from twelve loops on the
# same machine took three quarters of the interpreter lock). Its connection still counts against the caps above.
PAGE_REFUSAL_SECONDS = 1.0
# One student's refusals being delayed at once (each holds a connection that is answering, which no newcomer may
# close): beyond them a refusal is answered at once and its connection closed. Without this bound one token behind
# a proxy kept 600 page requests in flight, each refused after the delay, and took the places honest uploads needed.
# Twelve reload loops (docs/performance.md, "paced") still all wait: answered at once, they asked again 80-100 times
# a second, and the event loop answering them took the honest uploads' time (with 4 delayed, the other loops asked
# 700 times in the seconds an honest student's 20 uploads took, against 50).
PAGE_REFUSALS_DELAYED = 12
# Requests presenting one token (in the personal link's path or as the API's bearer) being answered at once, counted
# before the token is looked up: a student's own are at most 2 uploads + service.pages_in_flight pages (2) +
# PAGE_REFUSALS_DELAYED (12). Beyond, 429 at once (no database, no thread) and the connection closed, so a loop
# that keeps hundreds of requests in flight under one token holds this many places, not the server's.
TOKEN_REQUESTS_IN_FLIGHT = 16
EDGE_ANSWERED = "edge_answered"  # in a request's scope["state"]: the edge answered it; the app does nothing
EDGE_REFUSED = "edge_refused"  # in a request's scope["state"]: the app answered it 429, with this Retry-After (s)


@dataclass(frozen=True)
class Edge:
    """The bounds of the service's edge (`serve` options)."""

    connections: int = 512  # open at once: the server's descriptors stay well below the common soft limit, 1024
    # Waiting connections (kept-alive between requests, or a request not yet in full) from one address; a request
    # being answered never counts, so hundreds of students behind one NAT are not refused for sharing it. Half the
    # server: a flood from an honest student's own address must open this many connections while the student's
    # request is on its way to close it (at the server's cap the address holding most places gives way first).
    # None behind a reverse proxy, where every connection comes from it.
    per_client: int | None = 256
    header_seconds: float = 10.0  # from a request's first byte to the end of its headers
    body_seconds: float = 60.0  # from the end of a request's headers to the end of its body: 2 MB at 35 KB/s
    keep_alive_seconds: float = 5.0  # an idle connection between requests (uvicorn's default)

    @property
    def descriptors(self) -> int:
        """The most file descriptors the server holds: each connection one, and its upload's spool file one more;
        the refused ones draining, the cut-off clients' held (strikes.py) and the accepted ones not yet looked at;
        and its own."""
        return 2 * self.connections + LINGERING + HELD + BACKLOG + OWN_DESCRIPTORS


@dataclass
class _Pace:
    allowance: float  # pages the student may still ask for at once (a token bucket of PAGE_BURST)
    at: float  # when `allowance` was last brought up to date
    in_flight: int = 0


@dataclass
class PageGate:
    """Whether a student's page (or API read) is answered now: at most `in_flight` of theirs at once, and
    `per_minute` after a burst of `burst`. Keyed by student id (after their token was found), so it holds one entry
    per student of the roster at most. Thread-safe (the event loop is its only caller when serving)."""

    in_flight: int
    per_minute: int
    burst: int = PAGE_BURST
    clock: Callable[[], float] = time.monotonic
    _paces: dict[str, _Pace] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def enter(self, student: str) -> float | None:
        """None: admitted (call `leave` when answered); else the seconds to wait before asking again."""
        with self._lock:
            now = self.clock()
            pace = self._paces.setdefault(student, _Pace(float(self.burst), now))
            pace.allowance = min(float(self.burst), pace.allowance + (now - pace.at) * self.per_minute / 60)
            pace.at = now
            if pace.in_flight >= self.in_flight:
                return 1.0
            if pace.allowance < 1:
                return (1 - pace.allowance) * 60 / self.per_minute
            pace.allowance -= 1
            pace.in_flight += 1
            return None

    def leave(self, student: str) -> None:
        with self._lock:
            self._paces[student].in_flight -= 1

    def refusal(self, wait: float) -> str:
        """The student's sentence for a request refused with `wait` (from `enter`)."""
        return (
            f"You are asking for your pages faster than the service answers one student (at most "
            f"{self.in_flight} at once and {self.per_minute} a minute); wait {retry_seconds(wait)} s, then "
            "reload. Nothing of yours is lost."
        )


def presented_token(path: str, headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The token a request presents, unchecked: a personal link's (/s/<token>/..., /i/<token>/...) or the API's
    bearer; None for none."""
    if path.startswith(("/s/", "/i/")):
        return path.split("/", 3)[2] or None
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return (token.strip() or None) if scheme.lower() == "bearer" else None
    return None


def retry_seconds(wait: float) -> int:
    """`wait` as a Retry-After header's whole seconds, at least 1."""
    return max(1, math.ceil(wait))
