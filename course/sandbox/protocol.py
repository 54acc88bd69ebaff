"""The wire between the grader and a sandbox: the request it sends, and the one reader of every message that
comes back (from the answer channel of a run, or the control socket of a warm worker)."""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from course.sandbox.handed_in import Cell

MAX_CHANNEL_LINE = 4 * 1024 * 1024


MAX_CHANNEL_BYTES = 64 * 1024 * 1024


FUNCTION_CALL_SECONDS = 1.0


class EventReader:
    """Newline-delimited JSON objects out of a sandbox or a worker: each line at most `max_line` bytes and
    all of them together at most `max_total`. At the first malformed, oversized or non-object line it stops
    trusting the stream for good (`broken` says why) and returns nothing more."""

    def __init__(self, max_line: int = MAX_CHANNEL_LINE, max_total: int = MAX_CHANNEL_BYTES) -> None:
        self.max_line, self.max_total = max_line, max_total
        self.buffer = b""
        self.total = 0
        self.broken = ""

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        if self.broken:
            return []
        self.total += len(data)
        if self.total > self.max_total:
            self.broken = f"more than {self.max_total // 2**20} MB of messages"
            return []
        self.buffer += data
        events: list[dict[str, Any]] = []
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            try:
                event = json.loads(line) if len(line) <= self.max_line else None
            except (ValueError, RecursionError):
                event = None
            if type(event) is not dict:
                self.broken = "a line that is not a message of the grader's format"
                return events
            events.append(event)
        if len(self.buffer) > self.max_line:
            self.broken = f"a message longer than {self.max_line // 2**20} MB"
        return events


def encode_request(cells: list[Cell], answer_names: tuple[str, ...], function_points: dict[str, list[float]]) -> bytes:
    return json.dumps(
        {
            "cells": [{"index": c.index, "source": c.source} for c in cells],
            "answers": list(answer_names),
            "functions": function_points,
            "call_seconds": FUNCTION_CALL_SECONDS,
        }
    ).encode()


def write_in_background(fd: int, data: bytes, *, go: threading.Event | None = None) -> threading.Thread:
    """Feed the request to the sandbox without blocking the supervisor (the child may die unread).

    With `go`: the request goes in as one line and the pipe stays open until `go` is set: the runner reads the
    line, says `ready` and runs no cell before the pipe's end (see runner.run_request's `go`). The grader sets it
    once it has taken what it must at `ready` (the run's memory at that moment, memory.py), and always after the
    run, so the pipe is closed whatever happened."""

    def feed() -> None:
        try:
            view = memoryview(data + b"\n" if go is not None else data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if go is not None:
                go.wait()
        except OSError:
            pass  # the child died before reading: reported by the supervisor
        finally:
            os.close(fd)

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    return thread
