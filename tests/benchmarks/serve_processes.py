"""Benchmark: the service's throughput with 1, 2 and 3 `serve` processes on one PostgreSQL database, and the CPU an
upload costs, so that a reader can size a cluster (docs/service.md, "Past one machine").

Run:  .venv/bin/python tests/benchmarks/serve_processes.py [--processes 1 2 3] [--students 30] [--attempts 2]

For each number of processes: a fresh database on a PostgreSQL server of its own (as the tests start one),
that many real `autograd-course serve --database postgresql+psycopg://...` processes (`--jobs` warm workers
each), and simulated students, `concurrency` at a time, uploading honest notebooks round robin across the
processes (the client does what a load balancer would). It prints uploads per second, and the CPU seconds
per upload of the serve processes (HTTP, storing, claiming, judging) and of their sandboxes (the runs), read
from /proc, with the database server's own. On 2 cores more processes cannot grade faster: the figure to
carry to a cluster is the CPU per upload. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy import create_engine, text

from tests.benchmarks.serve_load import _cpu
from tests.support.helpers import submitted_notebook
from tests.support.service import Server, course_for_service, new_database, notebook_bytes, running_postgres


def _postgres_cpu(port: int) -> float:
    """CPU seconds of this benchmark's PostgreSQL server (the postmaster listening on `port`) and its backends,
    those running and those it reaped: not another PostgreSQL on the machine."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        listens = any(flag == b"-p" and value == str(port).encode() for flag, value in itertools.pairwise(command))
        if command[0].endswith(b"/postgres") and listens:
            return sum(_cpu(int(entry.name)))
    return float("nan")


def run(
    server_url: str, processes: int, students: int, attempts: int, concurrency: int, jobs: int, folder: Path
) -> dict[str, float]:
    root = course_for_service(folder / f"course-{processes}")
    port = int(server_url.rsplit(":", 1)[1])
    database = new_database(server_url)
    servers = [Server(root, database=database, jobs=jobs) for _ in range(processes)]
    names = [f"s{index:03d}" for index in range(students)]
    servers[0].issue_tokens(["warm", *names])
    for server in servers[1:]:
        server.tokens = servers[0].tokens
    starts = [threading.Thread(target=server.start) for server in servers]
    for thread in starts:
        thread.start()
    for thread in starts:
        thread.join()
    notebook = notebook_bytes(submitted_notebook())
    try:
        for server in servers:  # every pool warm, its standby workers started
            assert server.submit("warm", notebook).status in (200, 202)
        deadline = time.monotonic() + 120
        while not all("standby worker" in server.log.read_text() for server in servers) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)  # the last attempt recorded
        before = [_cpu(server.process.pid) for server in servers if server.process]
        database_before = _postgres_cpu(port)
        errors: list[int] = []
        lock = threading.Lock()

        def student(index: int) -> None:
            name = names[index]
            for attempt in range(attempts):
                server = servers[(index + attempt) % processes]
                reply = server.submit(name, notebook)
                body = reply.json if reply.status in (200, 202) else {}
                while body.get("status") in ("queued", "grading"):
                    time.sleep(0.1)
                    body = server.get(name, body["id"]).json
                if body.get("status") != "graded":
                    with lock:
                        errors.append(reply.status)

        started = time.monotonic()
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(student, range(students)))
        elapsed = time.monotonic() - started
        after = [_cpu(server.process.pid) for server in servers if server.process]
        database_cpu = _postgres_cpu(port) - database_before
    finally:
        for server in servers:
            server.stop()
    engine = create_engine(database)
    with engine.connect() as db:
        twice = db.execute(text("SELECT count(*) FROM attempts WHERE results_written <> 1")).scalar()
    engine.dispose()
    uploads = students * attempts
    own = sum(a[0] - b[0] for a, b in zip(after, before, strict=True))
    runs = sum(a[1] - b[1] for a, b in zip(after, before, strict=True))
    return {
        "processes": processes,
        "uploads": uploads,
        "seconds": elapsed,
        "per_second": uploads / elapsed,
        "serve_ms": 1000 * own / uploads,
        "sandbox_ms": 1000 * runs / uploads,
        "database_ms": 1000 * database_cpu / uploads,
        "failed": len(errors),
        "twice": twice or 0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--attempts", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--jobs", type=int, default=1, help="warm workers per process (default: 1)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="autograd-serve-processes-"))
    cores = len(os.sched_getaffinity(0))
    print(f"{cores} cores; load average (1 min) at the start {os.getloadavg()[0]:.2f}")
    results = []
    try:
        with running_postgres() as server_url:
            for processes in args.processes:
                results.append(
                    run(server_url, processes, args.students, args.attempts, args.concurrency, args.jobs, folder)
                )
                print(
                    f"{processes} process{'es' if processes != 1 else ''} x {args.jobs} warm worker(s): "
                    f"{results[-1]['uploads']} uploads in {results[-1]['seconds']:.1f} s = "
                    f"{results[-1]['per_second']:.2f} uploads/s; CPU an upload: {results[-1]['serve_ms']:.0f} ms "
                    f"in the serve processes, {results[-1]['sandbox_ms']:.0f} ms in the sandboxes, "
                    f"{results[-1]['database_ms']:.0f} ms in PostgreSQL; not graded {results[-1]['failed']}, "
                    f"graded twice {results[-1]['twice']}",
                    flush=True,
                )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"load average (1 min) at the end {os.getloadavg()[0]:.2f}")
    return 1 if any(result["failed"] or result["twice"] for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
