"""Which queued attempt a free grading thread takes next: fair between students, honest work first.

First come, first served lets one student crowd out the class: a script that uploads fifty notebooks at
once fills the queue, and a notebook that sits out its time limit again and again holds a grading run each
time. So:
- a student has at most one attempt being graded at a time (their next waits for it; nobody else's does);
- students take turns: an attempt's place is the later of when it joined the queue and when its student
  was last served, so one upload each keeps the order of arrival, a newcomer joins at the back, and a student
  with many queued gets one turn per round of the others (fair queueing, one unit of work per attempt);
- a student whose last attempt went long (it hit the time limit, or took LONG_GRADING_SECONDS) waits behind
  the others, but never longer than SUSPECT_WAIT_SECONDS: then they take their turn as anyone would.
Plain state kept in the server's memory (SQLite: one process), or in the database for the processes that share
it (PostgreSQL: shared.py). A restart of the one process starts every student afresh, which is only fair.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any

LONG_GRADING_SECONDS = 5.0  # an honest notebook takes a fraction of a second; this is a notebook that sleeps or spins
SUSPECT_WAIT_SECONDS = 20.0  # the longest a student whose last attempt went long is put behind the others
IN_FLIGHT_PER_STUDENT = 1


@dataclass(frozen=True)
class Queued:
    """A queued attempt, as the scheduler sees it."""

    id: int
    student_id: str
    submitted_at: datetime


class Scheduler:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._turn = 0
        self._served: dict[str, int] = {}  # student -> the turn their last attempt was taken in
        self._joined: dict[int, int] = {}  # attempt id -> the turn it was first seen in the queue
        self._went_long: set[str] = set()

    def state(self) -> dict[str, Any]:
        """The scheduler's state as plain JSON-able data (shared.py keeps it in the database)."""
        with self._lock:
            return {
                "turn": self._turn,
                "served": dict(self._served),
                "joined": {str(key): value for key, value in self._joined.items()},
                "went_long": sorted(self._went_long),
            }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Scheduler:
        scheduler = cls()
        scheduler._turn = int(state["turn"])
        scheduler._served = {str(key): int(value) for key, value in state["served"].items()}
        scheduler._joined = {int(key): int(value) for key, value in state["joined"].items()}
        scheduler._went_long = {str(student) for student in state["went_long"]}
        return scheduler

    def pick(self, queued: list[Queued], grading: list[str], now: datetime) -> int | None:
        """The id of the attempt to grade next (None: nothing may start now), given the queued attempts in
        order of arrival and the students of the attempts being graded (one entry per attempt); the
        student it belongs to is counted as served."""
        with self._lock:
            busy = {student: grading.count(student) for student in set(grading)}
            heads: dict[str, Queued] = {}
            for attempt in queued:
                self._joined.setdefault(attempt.id, self._turn)
                if busy.get(attempt.student_id, 0) < IN_FLIGHT_PER_STUDENT:
                    heads.setdefault(attempt.student_id, attempt)
            if not heads:
                return None

            def order(attempt: Queued) -> tuple[bool, int, int]:
                waited = (now - attempt.submitted_at).total_seconds()
                behind = attempt.student_id in self._went_long and waited < SUSPECT_WAIT_SECONDS
                place = max(self._joined[attempt.id], self._served.get(attempt.student_id, 0))
                return behind, place, attempt.id

            chosen = min(heads.values(), key=order)
            self._turn += 1
            self._served[chosen.student_id] = self._turn
            del self._joined[chosen.id]
            return chosen.id

    def graded(self, student_id: str, *, went_long: bool) -> None:
        """What the student's last graded attempt cost: one that went long puts their next one behind."""
        with self._lock:
            if went_long:
                self._went_long.add(student_id)
            else:
                self._went_long.discard(student_id)
