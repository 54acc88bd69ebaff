"""Benchmark: the service's edge under the attacks of issue 25 that reach it before any grading.

Run:  .venv/bin/python tests/benchmarks/edge_attacks.py [--students 50] [--connections 5000]

A real `autograd-course serve` (default bounds, SQLite, the warm pool) in its own process, then, one after the
other, while an honest student uploads `--honest` notebooks one after another from an address of their own:

1. stalled uploads: `students` students each start three uploads declaring a 2 MB body and send all of it but
   the last byte (spread over loopback addresses, as from a class behind different networks);
2. half-open connections: one address opens `connections` connections that each send half a request line.

It prints, for each, the server's peak resident memory and open descriptors, how the attackers were answered,
and the honest uploads' p50 and p95 latency from upload to graded response. The issue's targets: honest p95
<= 1 s, server RSS <= 300 MiB, descriptors bounded, every attacker told why. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers import submitted_notebook
from service.conftest import Server, course_for_service, notebook_bytes

BODY = 2 * 1024 * 1024 - 1  # bytes an upload declares: within the default limit of 2048 KB


class Peak:
    """The server's peak RSS (MiB) and descriptors, sampled every 50 ms from another thread."""

    def __init__(self, pid: int) -> None:
        self.pid, self.rss, self.fds = pid, 0.0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            try:
                status = Path(f"/proc/{self.pid}/status").read_text()
                rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
                fds = len(os.listdir(f"/proc/{self.pid}/fd"))
            except (OSError, StopIteration):
                continue
            self.rss, self.fds = max(self.rss, rss / 1024), max(self.fds, fds)


def honest_uploads(server: Server, count: int) -> tuple[list[float], collections.Counter]:
    notebook = notebook_bytes(submitted_notebook())
    latencies, statuses = [], collections.Counter()
    for _ in range(count):
        started = time.monotonic()
        reply = server.submit("honest", notebook)
        statuses[reply.status] += 1
        if reply.status == 200:
            latencies.append(time.monotonic() - started)
    return latencies, statuses


def first_line(connection: socket.socket, timeout: float = 0.5) -> str:
    """The status line the server sent on `connection` so far ("" when nothing yet)."""
    connection.settimeout(timeout)
    try:
        data = connection.recv(4096)
    except (TimeoutError, BlockingIOError):
        return ""
    except OSError as error:
        return type(error).__name__
    return data.split(b"\r\n", 1)[0].decode(errors="replace") if data else "closed"


def report(name: str, peak: Peak, answers: collections.Counter, latencies: list[float],
           statuses: collections.Counter) -> None:
    ordered = sorted(latencies)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] if ordered else float("nan")
    p50 = statistics.median(ordered) if ordered else float("nan")
    print(f"{name}: server peak RSS {peak.rss:.0f} MiB, peak descriptors {peak.fds}")
    print(f"  attackers were answered: {dict(answers)}")
    print(f"  honest uploads: {dict(statuses)}; graded p50 {p50:.3f} s, p95 {p95:.3f} s")


def stalled_uploads(server: Server, students: list[str], honest: int) -> None:
    held, answers = [], collections.Counter()
    assert server.process is not None
    with Peak(server.process.pid) as peak:
        for index, student in enumerate(students):
            source = f"127.0.2.{index % 250 + 1}"
            for _ in range(3):
                connection = socket.create_connection(("127.0.0.1", server.port), timeout=30,
                                                      source_address=(source, 0))
                head = (f"POST /api/submissions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.tokens[student]}"
                        f"\r\nContent-Type: application/json\r\nContent-Length: {BODY}\r\n\r\n").encode()
                try:
                    connection.sendall(head + b" " * (BODY - 1))
                except OSError:  # refused before its body was read, and closed: its answer is read below
                    pass
                held.append(connection)
        latencies, statuses = honest_uploads(server, honest)
        for connection in held:
            answers[first_line(connection, 0.01) or "no answer yet (within its 60 s)"] += 1
        for connection in held:
            connection.close()
    report(f"stalled uploads ({len(students)} students x 3)", peak, answers, latencies, statuses)


def half_open(server: Server, count: int, honest: int) -> None:
    held, answers = [], collections.Counter()
    assert server.process is not None
    with Peak(server.process.pid) as peak:
        for _ in range(count):
            try:
                connection = socket.create_connection(("127.0.0.1", server.port), timeout=5,
                                                      source_address=("127.0.3.1", 0))
                connection.sendall(b"GET /static/dashbo")
            except OSError as error:
                answers[type(error).__name__] += 1
                continue
            held.append(connection)
        latencies, statuses = honest_uploads(server, honest)
        for connection in held:
            answers[first_line(connection, 0.001) or "no answer yet (within its 10 s)"] += 1
        for connection in held:
            connection.close()
    report(f"half-open connections ({count} from one address)", peak, answers, latencies, statuses)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=50)
    parser.add_argument("--connections", type=int, default=5000)
    parser.add_argument("--honest", type=int, default=20, help="honest uploads during each attack")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # the attacker's own sockets
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, args.connections + 3 * args.students + 256)), hard))
    folder = Path(tempfile.mkdtemp(prefix="autograd-edge-"))
    students = [f"s{i:04d}" for i in range(args.students)]
    server = Server(course_for_service(folder / "course"), jobs=len(os.sched_getaffinity(0)))
    server.issue_tokens(["honest", *students])
    server.start()
    try:
        honest_uploads(server, 2)  # the pool is warm, and the server has imported what grading needs
        deadline = time.monotonic() + 120  # and its standby workers have started (their torch import is no attack's)
        while "standby worker" not in server.log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.process is not None
        with Peak(server.process.pid) as idle:
            honest_uploads(server, 2)
        print(f"before the attacks: server RSS {idle.rss:.0f} MiB, descriptors {idle.fds}")
        stalled_uploads(server, students, args.honest)
        half_open(server, args.connections, args.honest)
        print(f"the server's log: {server.log.read_text()[-1500:]}")
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
