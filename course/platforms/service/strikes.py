"""Clients that ask again before the `Retry-After` they were given, cut off at the edge (issue 50, item 9).

A 429 costs the server little, but not nothing (about 0.6 ms of the event loop each: the connection accepted, its
request parsed, the answer written, the connection drained and closed), and a loop that ignores `Retry-After` asks
again the moment it is answered: 600 such loops under one token drew 700-1 600 refusals a second, the event loop did
little else, the kernel's accept queue overflowed, and an honest student's upload waited for a place in it (p95
3.8-6.5 s against 0.14-0.22 s). Refusing faster only makes such a loop ask faster; what stops it is an answer that
takes its time. So each refusal with a Retry-After is remembered against the client it went to (its token, and its
address where the address is the client's own, not a proxy's), and a client refused STRIKES times in a row, each
time before the previous Retry-After was out, is *cut off* for CUT_OFF_SECONDS: its connections are held,
unanswered, for HOLD_SECONDS, then answered 429 with the time left and closed (connections.py). An address cut off
is held as it connects, before a byte of its request is read (nothing parsed); a token, once its request's headers
are in (before the app, the database or a thread does anything). A loop then asks once per HOLD_SECONDS, not a
thousand times a second. Held connections count against none of the edge's caps (an honest newcomer never waits
for them) and are at most HELD at once; beyond, a newcomer is closed at once, unanswered (answering the one held
longest instead would free a loop to ask again at once, so that more loops than HELD asked at full speed).

A client that waits out its Retry-After is forgiven (its count starts again), so a student who clicks again during
a cooldown is never cut off for it; "too early" is measured against the last refusal's Retry-After, not the longest
one given. Behind a campus NAT an address is shared: an address cut off holds every connection from it, so the count
per address is kept only where `serve` is not behind a proxy, it counts only refusals of one client in a row (the
same token, or none: classmates refused at one address start it again), and an address's cut-off is not renewed by
its held connections (a token's is). On the event loop only.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

STRIKES = 10  # refusals in a row, each asked for before the previous one's Retry-After ran out, that cut one off
CUT_OFF_SECONDS = 30.0  # how long a client stays cut off after its last strike
HOLD_SECONDS = 10.0  # a cut-off client's connection is held this long (at most) before its 429
HELD = 1024  # connections held at once (each a descriptor: edge.Edge.descriptors counts them)
CLIENTS = 4096  # clients remembered (the longest unrefused forgotten first)


@dataclass
class _Record:
    not_before: float = 0.0  # when the Retry-After of the client's last refusal runs out
    strikes: int = 0  # refusals in a row asked for before that
    cut_until: float = 0.0
    who: str | None = None  # the token key of the last refusal (an address's count is of one client's refusals)


class Strikes:
    """Refusals by client key ("token:..." or "address:..."): who asked again too early, and who is cut off."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._records: collections.OrderedDict[str, _Record] = collections.OrderedDict()
        self.held = 0  # connections held so far (the server's log says how many)
        self.dropped = 0  # connections closed unanswered because HELD were held already

    def refused(self, keys: Iterable[str], retry_after: float) -> list[str]:
        """A 429 with `retry_after` seconds went to the client of these keys; those it cuts off now."""
        keys = list(keys)
        who = next((key for key in keys if key.startswith("token:")), None)  # the client: its token, or none
        now, cut = self.clock(), []
        for key in keys:
            record = self._records.pop(key, None) or _Record()
            self._records[key] = record  # the most recently refused last
            if len(self._records) > CLIENTS:
                self._records.popitem(last=False)
            early = now < record.not_before and record.who == who
            record.strikes = record.strikes + 1 if early else 0
            record.not_before, record.who = now + retry_after, who
            if record.strikes >= STRIKES:
                if record.cut_until <= now:
                    cut.append(key)
                record.cut_until = now + CUT_OFF_SECONDS
        return cut

    def answered_held(self, keys: Iterable[str]) -> float:
        """A held connection of these keys' client is answered: the seconds it is told to wait. It asked while cut
        off, so its token's cut-off starts again now (an address's runs out as it was), and a client that waits it out
        is forgiven (`refused`)."""
        now, left = self.clock(), 0.0
        for key in keys:
            record = self._records.get(key)
            if record is None or record.cut_until <= now:
                continue
            if key.startswith("token:"):  # a token's loop keeps itself cut off; an address (shared) is not renewed
                record.cut_until = record.not_before = now + CUT_OFF_SECONDS
            left = max(left, record.cut_until - now)
        return left

    def cut_off(self, key: str) -> float:
        """The seconds the client of `key` stays cut off (0: it is not)."""
        record = self._records.get(key)
        return max(0.0, record.cut_until - self.clock()) if record is not None else 0.0


def keys_of(token: str | None, host: str | None) -> list[str]:
    """A client's keys: its token's, and its address's (None behind a proxy, where the address is the proxy's)."""
    return [f"token:{token}"] * (token is not None) + [f"address:{host}"] * bool(host)
