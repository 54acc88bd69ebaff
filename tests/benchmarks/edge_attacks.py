"""Benchmark: the service's edge under the attacks of issue 25 that reach it before any grading.

Run:  .venv/bin/python tests/benchmarks/edge_attacks.py [--students 50] [--connections 5000]

A real `autograd-course serve` (default bounds, SQLite, the warm pool) in its own process, then, one after the
other, while an honest student uploads `--honest` notebooks one after another from an address of their own:

1. stalled uploads: `students` students each start three uploads declaring a 2 MB body and send all of it but
   the last byte (spread over loopback addresses, as from a class behind different networks);
2. half-open connections: one address opens `connections` connections that each send half a request line;
3. large-feedback reloads: a student with 20 attempts whose feedback is about 1 MB each (written into the
   database as a notebook of 2000 raising cells made them before feedback was capped), reloaded by `reloaders`
   loops of their page and `feedback-reloaders` (default 0) of one such attempt's feedback page, each loop asking
   again as soon as it is answered (a 429's Retry-After ignored); the loops run in a process of their own, so
   that the attacker's own work does not slow the honest student's client (as from another machine);
4. storage flood: a student posts a notebook just under the 2 MB upload limit 60 times, two at a time (the
   default policy: no attempt limit, no cooldown); the database's growth is printed;
5. kept-alive holders (issue 39): 9 loopback addresses x 60 kept-alive connections, each sending a cheap GET every
   4 s (idle in between), a connection the server closes opened again at once;
6. never-finished requests from the honest student's own address (issue 39: a campus NAT): connections that send
   half a request line and wait, opened one after another (up to `--unfinished`, 20 600), each one the server
   closes replaced;
7. paced refusals behind a proxy (issues 39, 50): a second server behind a trusted proxy address (every connection
   from 127.0.0.1, the client named by X-Forwarded-For), where one student's token keeps `--paced` (600) page
   requests in flight, each asked again as soon as it is answered (every `Retry-After` ignored); the same honest
   uploads on that server with no attack are run just before, as its baseline;
8. paced refusals from an address of their own ("paced-direct", issue 50): the same loops, without a proxy, from
   127.0.5.1, while the honest student uploads from 127.0.0.1.
Attacks 5-8 run in a process of their own (asyncio), as from another machine. Every attack stops by itself: the
honest uploads are at most `--honest` and `--honest-seconds`, then the attacker is stopped.

It prints, for each, the server's peak resident memory and open descriptors, how the attackers were answered,
and the honest uploads' p50 and p95 latency from upload to graded response. The issue's targets: honest p95
<= 1 s, server RSS <= 300 MiB, descriptors bounded, every attacker told why. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from course.platforms.service.store import Store, attempts, database_url, now_utc
from tests.support.helpers import submitted_notebook
from tests.support.service import Server, course_for_service, notebook_bytes, request

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


def honest_uploads(server: Server, count: int, seconds: float = 300) -> tuple[list[float], collections.Counter]:
    """`count` honest uploads one after another (fewer when `seconds` run out first)."""
    notebook = notebook_bytes(submitted_notebook())
    latencies, statuses = [], collections.Counter()
    deadline = time.monotonic() + seconds
    for _ in range(count):
        if time.monotonic() > deadline:
            statuses["not sent: --honest-seconds ran out"] += count - sum(statuses.values())
            break
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


def report(
    name: str, peak: Peak, answers: collections.Counter, latencies: list[float], statuses: collections.Counter
) -> None:
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
                connection = socket.create_connection(
                    ("127.0.0.1", server.port), timeout=30, source_address=(source, 0)
                )
                head = (
                    f"POST /api/submissions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.tokens[student]}"
                    f"\r\nContent-Type: application/json\r\nContent-Length: {BODY}\r\n\r\n"
                ).encode()
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
                connection = socket.create_connection(
                    ("127.0.0.1", server.port), timeout=5, source_address=("127.0.3.1", 0)
                )
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


def large_feedback(student: str, errors: int = 2000) -> dict:
    return {
        "student_id": student,
        "assignment": "autograd",
        "status": "graded",
        "score": 1.0,
        "max_score": 57.0,
        "messages": [],
        "reveals_torch_values": False,
        "questions": [],
        "cell_errors": [{"cell": f"cell {i}", "error": "ZeroDivisionError: " + "x" * 480} for i in range(errors)],
    }


def feedback_reloads(server: Server, student: str, reloaders: int, feedback_reloaders: int, honest: int) -> None:
    """`reloaders` loops of the student's page and `feedback_reloaders` of one feedback page, while the honest
    student uploads."""
    store = Store(database_url(server.database, server.root))
    feedback = json.dumps(large_feedback(student))
    with store.begin() as db:
        for number in range(1, 21):
            db.execute(
                attempts.insert().values(
                    student_id=student,
                    assignment="autograd",
                    number=number,
                    submitted_at=now_utc(),
                    notebook=b"{}",
                    status="graded",
                    score=1.0,
                    raw_score=1.0,
                    late_penalty=0.0,
                    max_score=57.0,
                    feedback=feedback,
                    integrity="[]",
                    graded_at=now_utc(),
                    seconds=0.1,
                    results_written=1,
                )
            )
    last = store.attempts_of(student, feedback=False)[-1].id
    store.close()
    home = f"{server.url}/s/{server.tokens[student]}/"
    pages = [home] * reloaders + [f"{home}attempts/{last}"] * feedback_reloaders
    stop, results = multiprocessing.Event(), multiprocessing.Queue()
    attacker = multiprocessing.Process(target=reload_loops, args=(pages, stop, results), daemon=True)
    assert server.process is not None
    with Peak(server.process.pid) as peak:
        attacker.start()
        latencies, statuses = honest_uploads(server, honest)
        stop.set()
        answers, took, sentences = results.get(timeout=120)
        attacker.join()
    report(
        f"large-feedback reloads ({reloaders} loops of a page listing 20 attempts of 1 MB feedback, "
        f"{feedback_reloaders} of one such feedback page)",
        peak,
        answers,
        latencies,
        statuses,
    )
    for page, seconds in sorted(took.items()):
        print(f"  {page}: {len(seconds)} loads, median {statistics.median(seconds) * 1000:.0f} ms")
    print(f"  the attacker was told: {sorted(sentences)}")


def reload_loops(pages: list[str], stop: threading.Event, results: multiprocessing.Queue) -> None:
    """In the attacker's own process: one thread per page in `pages`, each reloading it until `stop`; then puts
    (answers by status, seconds per load by kind of page, the sentences of refusals) on `results`."""
    answers: collections.Counter = collections.Counter()
    took: dict[str, list[float]] = collections.defaultdict(list)
    sentences: set[str] = set()

    def reload(url: str) -> None:
        while not stop.is_set():
            started = time.monotonic()
            reply = request(url, timeout=60)
            took["feedback page" if "attempts/" in url else "student page"].append(time.monotonic() - started)
            answers[reply.status] += 1
            if reply.status != 200:
                sentences.add(reply.text.strip()[:200])

    threads = [threading.Thread(target=reload, args=(url,), daemon=True) for url in pages]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results.put((answers, dict(took), sentences))


def storage_flood(server: Server, student: str, uploads: int, honest: int) -> None:
    notebook = submitted_notebook()
    padding = 2 * 1024 * 1024 - len(notebook_bytes(notebook)) - 4096
    notebook["cells"].append({"cell_type": "markdown", "id": "padding", "metadata": {}, "source": "x" * padding})
    body = notebook_bytes(notebook)
    database = server.root / "service.db"
    before = database.stat().st_size + Path(f"{database}-wal").stat().st_size
    answers: collections.Counter = collections.Counter()
    sentences: set[str] = set()
    pending = iter(range(uploads))
    lock = threading.Lock()

    def post() -> None:
        while True:
            with lock:
                if next(pending, None) is None:
                    return
            reply = server.submit(student, body)
            answers[reply.status] += 1
            if reply.status != 200:
                sentences.add(reply.json.get("error", "")[:110])

    threads = [threading.Thread(target=post, daemon=True) for _ in range(2)]
    assert server.process is not None
    with Peak(server.process.pid) as peak:
        for thread in threads:
            thread.start()
        latencies, statuses = honest_uploads(server, honest)
        for thread in threads:
            thread.join()
    after = database.stat().st_size + Path(f"{database}-wal").stat().st_size
    report(
        f"storage flood ({uploads} uploads of {len(body) / 2**20:.2f} MiB, two at a time)",
        peak,
        answers,
        latencies,
        statuses,
    )
    print(f"  the database grew {(after - before) / 2**20:.0f} MiB; the attacker was told: {sorted(sentences)}")


# ----------------------------------------------------------------------------- issue 39: who holds the places


def slot_attack(
    kind: str,
    port: int,
    token: str,
    count: int,
    ready: threading.Event,
    stop: threading.Event,
    results: multiprocessing.Queue,
) -> None:
    """In the attacker's own process: `kind` ("keep-alive", "unfinished", "paced") until `stop`; puts its tally."""
    import asyncio

    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    tally: collections.Counter = collections.Counter()

    async def keep_alive(source: str) -> None:
        while not stop.is_set():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
            except OSError:
                tally["could not connect"] += 1
                await asyncio.sleep(0.1)
                continue
            tally["opened"] += 1
            try:
                while not stop.is_set():
                    writer.write(b"GET /favicon.ico HTTP/1.1\r\nHost: x\r\n\r\n")
                    head = await reader.readuntil(b"\r\n\r\n")
                    tally[head.split(b"\r\n", 1)[0].decode(errors="replace")] += 1
                    if not head.startswith(b"HTTP/1.1 204"):
                        break
                    await asyncio.sleep(4)
            except (OSError, asyncio.IncompleteReadError):
                tally["closed by the server"] += 1
            writer.close()

    async def unfinished() -> None:
        held: set[asyncio.Task] = set()

        async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                answer = await reader.read(4096)
                tally[answer.split(b"\r\n", 1)[0].decode(errors="replace") or "closed by the server"] += 1
            except OSError as error:
                tally[type(error).__name__] += 1
            writer.close()

        while not stop.is_set() and tally["opened"] < count:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"GET /static/dash")
            except OSError:
                tally["could not connect"] += 1
                await asyncio.sleep(0.01)
                continue
            tally["opened"] += 1
            task = asyncio.create_task(hold(reader, writer))
            held.add(task)
            task.add_done_callback(held.discard)
            await asyncio.sleep(0)
        await asyncio.to_thread(stop.wait)
        for task in held:
            task.cancel()

    async def paced(source: str) -> None:
        request = (
            f"GET /s/{token}/ HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 10.9.9.9\r\nConnection: close\r\n\r\n"
        ).encode()
        while not stop.is_set():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
                writer.write(request)
                answer = await reader.read()
                tally[answer.split(b"\r\n", 1)[0].decode(errors="replace") or "closed, no answer"] += 1
                writer.close()
            except OSError as error:
                tally[type(error).__name__] += 1
                await asyncio.sleep(0.01)

    async def run() -> None:
        if kind == "keep-alive":
            tasks = [asyncio.create_task(keep_alive(f"127.0.4.{a + 1}")) for a in range(9) for _ in range(60)]
        elif kind == "unfinished":
            tasks = [asyncio.create_task(unfinished())]
        else:
            source = "127.0.5.1" if kind == "paced-direct" else "127.0.0.1"
            tasks = [asyncio.create_task(paced(source)) for _ in range(count)]
        await asyncio.sleep(5)  # the attack is on before the honest student starts
        ready.set()
        started = time.monotonic()
        await asyncio.to_thread(stop.wait)
        tally["seconds (while the honest student uploaded)"] = round(time.monotonic() - started, 1)
        await asyncio.wait(tasks, timeout=10)

    asyncio.run(run())
    results.put(dict(tally))


def slots(server: Server, kind: str, count: int, honest: int, token: str = "", seconds: float = 300) -> None:
    ready, stop, results = multiprocessing.Event(), multiprocessing.Event(), multiprocessing.Queue()
    attacker = multiprocessing.Process(
        target=slot_attack, args=(kind, server.port, token, count, ready, stop, results), daemon=True
    )
    assert server.process is not None
    load = os.getloadavg()
    with Peak(server.process.pid) as peak:
        attacker.start()
        ready.wait(60)
        latencies, statuses = honest_uploads(server, honest, seconds)
        stop.set()
        answers = collections.Counter(results.get(timeout=120))
        attacker.join()
    name = {
        "keep-alive": "kept-alive holders (9 addresses x 60, a GET every 4 s)",
        "unfinished": f"never-finished requests from the honest student's address (up to {count})",
        "paced": f"paced refusals behind a proxy ({count} page requests of one token in flight)",
        "paced-direct": f"paced refusals from 127.0.5.1 ({count} page requests of one token in flight)",
    }[kind]
    report(name, peak, answers, latencies, statuses)
    print(f"  load average (1, 5, 15 min) before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=50)
    parser.add_argument("--connections", type=int, default=5000)
    parser.add_argument("--honest", type=int, default=20, help="honest uploads during each attack")
    parser.add_argument("--reloaders", type=int, default=12, help="loops reloading the large-feedback student's page")
    parser.add_argument("--feedback-reloaders", type=int, default=0, help="loops reloading one 1 MB feedback page")
    parser.add_argument("--unfinished", type=int, default=20_600, help="never-finished requests from one address")
    parser.add_argument("--paced", type=int, default=600, help="one token's page requests in flight, behind a proxy")
    parser.add_argument("--honest-seconds", type=float, default=300, help="the most an attack's honest uploads take")
    attacks = [
        "quiet",
        "stalled",
        "half-open",
        "reloads",
        "storage",
        "keep-alive",
        "unfinished",
        "paced-direct",
        "paced",
    ]
    parser.add_argument("--only", choices=attacks, action="append", help="run only these attacks (default: all)")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # the attacker's own sockets
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, args.connections + 3 * args.students + 256)), hard))
    folder = Path(tempfile.mkdtemp(prefix="autograd-edge-"))
    students = [f"s{i:04d}" for i in range(args.students)]
    server = Server(course_for_service(folder / "course"), jobs=len(os.sched_getaffinity(0)))
    server.issue_tokens(["honest", "mallory", "flooder", "pacer", *students])
    server.start()
    proxied = None
    try:
        honest_uploads(server, 2)  # the pool is warm, and the server has imported what grading needs
        deadline = time.monotonic() + 120  # and its standby workers have started (their torch import is no attack's)
        while "standby worker" not in server.log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.process is not None
        with Peak(server.process.pid) as idle:
            honest_uploads(server, 2)
        print(f"before the attacks: server RSS {idle.rss:.0f} MiB, descriptors {idle.fds}")
        chosen = args.only or attacks
        if "quiet" in chosen:  # the same honest uploads with no attack: the machine's own figure
            with Peak(server.process.pid) as peak:
                latencies, statuses = honest_uploads(server, args.honest)
            report("no attack", peak, collections.Counter(), latencies, statuses)
        if "stalled" in chosen:
            stalled_uploads(server, students, args.honest)
        if "half-open" in chosen:
            half_open(server, args.connections, args.honest)
        if "reloads" in chosen:
            feedback_reloads(server, "mallory", args.reloaders, args.feedback_reloaders, args.honest)
        if "storage" in chosen:
            storage_flood(server, "flooder", 60, args.honest)
        if "keep-alive" in chosen:
            slots(server, "keep-alive", 540, args.honest)
        if "unfinished" in chosen:
            slots(server, "unfinished", args.unfinished, args.honest)
        if "paced-direct" in chosen:  # its baseline is "quiet", on the same server
            slots(server, "paced-direct", args.paced, args.honest, server.tokens["pacer"], args.honest_seconds)
        print(f"the server's log: {server.log.read_text()[-1500:]}")
        if "paced" in chosen:  # behind a proxy: a server of its own, on the same course and database
            server.stop()
            proxied = Server(
                server.root, jobs=server.jobs, tokens=server.tokens, options=("--forwarded-allow-ips", "127.0.0.1")
            )
            proxied.start()
            honest_uploads(proxied, 2)
            with Peak(proxied.process.pid) as peak:  # the baseline: the same uploads on this server, no attack
                latencies, statuses = honest_uploads(proxied, args.honest, args.honest_seconds)
            report("no attack, behind the proxy", peak, collections.Counter(), latencies, statuses)
            slots(proxied, "paced", args.paced, args.honest, server.tokens["pacer"], args.honest_seconds)
            print(f"the proxied server's log: {proxied.log.read_text()[-1500:]}")
    finally:
        server.stop()
        if proxied is not None:
            proxied.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
