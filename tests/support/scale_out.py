"""Three `autograd-course serve` processes on one PostgreSQL database behind nginx, one killed mid-load, step by
step (tests/service/test_scale_out.py). Each step asserts what it checks, so the scenario reads as its steps and
still fails where any of them breaks."""

from __future__ import annotations

import csv
import http.client
import io
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

from course.platforms.service.shared import LIVE, owners_alive
from tests.support.helpers import add_cell, submitted_notebook
from tests.support.service import NGINX, Reply, Server, course_for_service, free_port, notebook_bytes, request

STUDENTS = [f"s{index}" for index in range(5)]
ATTEMPTS = 3  # the policy's limit; each student sends one upload more, all at once
PROCESSES = 3
CUT_OFF = 0  # the status of a reply the client did not receive whole


def start_balancer(folder: Path, ports: list[int]) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    temp = "".join(
        f"{kind}_temp_path {folder / kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    servers = "".join(f"server 127.0.0.1:{upstream} max_fails=1 fail_timeout=30s;\n" for upstream in ports)
    (folder / "nginx.conf").write_text(
        f"""
daemon off;
user root root;
pid {folder / "nginx.pid"};
error_log {folder / "error.log"};
events {{}}
http {{
    access_log off;
    {temp}
    upstream serve {{ {servers} }}
    server {{
        listen 127.0.0.1:{port};
        client_max_body_size 4m;
        location / {{
            proxy_pass http://serve;
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_read_timeout 120s;
        }}
    }}
}}
""",
        encoding="utf-8",
    )
    assert NGINX is not None
    process = subprocess.Popen(
        [NGINX, "-p", str(folder), "-c", str(folder / "nginx.conf")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    return process, port


# The client ports of the sessions that hold the LIVE lock of an owner with a claim.
_CLAIMING_PORTS = text("""
    SELECT DISTINCT activity.client_port AS port FROM claims
    JOIN pg_locks AS held ON held.locktype = 'advisory' AND held.granted AND held.classid::bigint = :live
                          AND held.objsubid = 2 AND held.objid::bigint = claims.owner
    JOIN pg_stat_activity AS activity ON activity.pid = held.pid""")


def client_ports(server: Server) -> set[int]:
    """The local ports of the serve process's TCP connections (its database sessions among them)."""
    try:
        process = psutil.Process(server.process.pid)  # type: ignore[union-attr]
        return {
            c.laddr.port
            for p in (process, *process.children(recursive=True))
            for c in p.net_connections(kind="tcp")
            if c.laddr
        }
    except psutil.Error:
        return set()


def attempt_rows(url: str) -> list:
    engine = create_engine(url)
    try:
        with engine.connect() as db:
            return list(
                db.execute(
                    text("SELECT id, student_id, number, status, score, results_written FROM attempts ORDER BY id")
                )
            )
    finally:
        engine.dispose()


@dataclass(frozen=True)
class Cluster:
    """The serve processes, the balancer's address and the database they share."""

    servers: list[Server]
    site: str
    engine: Engine
    database: str

    @property
    def tokens(self) -> dict[str, str]:
        return self.servers[0].tokens


@contextmanager
def cluster(root_folder: Path, postgres_url: str) -> Iterator[Cluster]:
    """PROCESSES serve processes on `postgres_url`, started at once, and nginx in front of them; all stopped after."""
    root = course_for_service(root_folder / "course", attempts=ATTEMPTS)
    servers = [
        Server(root, database=postgres_url, wait=0.5, jobs=1, options=("--forwarded-allow-ips", "127.0.0.1"))
        for _ in range(PROCESSES)
    ]
    servers[0].issue_tokens(STUDENTS)
    started = [threading.Thread(target=server.start) for server in servers]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()
    assert all(server.port for server in servers)
    proxy = root_folder / "nginx"
    proxy.mkdir()
    nginx, port = start_balancer(proxy, [server.port for server in servers])
    engine = create_engine(postgres_url)
    try:
        yield Cluster(servers, f"http://127.0.0.1:{port}", engine, postgres_url)
    finally:
        engine.dispose()
        nginx.terminate()
        nginx.wait(30)
        for server in servers:
            server.stop()


def wait_for_the_balancer(cluster: Cluster) -> None:
    """Step: nginx answers, and so does every process behind it."""
    deadline = time.monotonic() + 30
    while True:
        try:
            if request(f"{cluster.site}/healthz", timeout=5).status == 200:
                break
        except OSError:
            pass
        assert time.monotonic() < deadline, "nginx did not answer"
        time.sleep(0.1)
    for server in cluster.servers:
        assert request(f"{server.url}/healthz").text == "ok"


def upload(cluster: Cluster, student: str, notebook: bytes) -> Reply:
    """One upload through the balancer. A process takes at most UPLOADS_IN_FLIGHT of one student's uploads at once,
    and the balancer may send three of the four to the same one: that refusal says when to come back, and a client
    does (the race this test is about is the attempt limit's, across processes)."""
    for _ in range(20):
        try:
            reply = request(
                f"{cluster.site}/api/submissions",
                method="POST",
                token=cluster.tokens[student],
                data=notebook,
                content_type="application/json",
            )
        except (OSError, http.client.HTTPException):  # the killed process's reply cut off mid-way through
            return Reply(CUT_OFF, b"", {})
        if reply.status != 429 or "uploads in progress" not in reply.json.get("error", ""):
            return reply
        time.sleep(reply.json.get("retry_after", 1))
    return reply


def kill_one_that_is_grading(cluster: Cluster) -> Server:
    """Step, mid-load with all three alive: kill one that is grading an attempt it claimed (found through its
    database session: the claim's owner holds its advisory lock on a connection from one of its ports); its
    session ends with it."""
    deadline = time.monotonic() + 120
    while True:
        with cluster.engine.connect() as db:
            alive = set(owners_alive(db))
            grading_ports = {row.port for row in db.execute(_CLAIMING_PORTS, {"live": LIVE})}
        victim = next((server for server in cluster.servers if grading_ports & client_ports(server)), None)
        if len(alive) == PROCESSES and victim is not None:
            break
        assert time.monotonic() < deadline, f"no process was seen grading a claimed attempt ({alive})"
        time.sleep(0.05)
    victim.kill()
    with cluster.engine.connect() as db:
        for _ in range(100):  # PostgreSQL ends the dead process's session as soon as its socket closes
            killed = alive - set(owners_alive(db))
            if killed:
                break
            time.sleep(0.05)
    assert len(killed) == 1, "the killed process's session did not end"
    return victim


def upload_all_at_once_and_kill_one(cluster: Cluster) -> tuple[list[tuple[str, Reply]], Server]:
    """Step: every student sends ATTEMPTS + 1 slow uploads at once, and one process is killed mid-load; the
    replies, and the process killed."""
    slow = notebook_bytes(add_cell(submitted_notebook(), "import time\ntime.sleep(1.5)"))
    with ThreadPoolExecutor(max_workers=len(STUDENTS) * (ATTEMPTS + 1)) as senders:
        sent = [
            (student, senders.submit(upload, cluster, student, slow))
            for student in STUDENTS
            for _ in range(ATTEMPTS + 1)
        ]
        victim = kill_one_that_is_grading(cluster)
        replies = [(student, future.result()) for student, future in sent]
    return replies, victim


@dataclass(frozen=True)
class Outcome:
    """The uploads' replies, sorted: acknowledged (attempt id -> student), refused and cut off (students)."""

    acknowledged: dict[Any, str]
    refused: list[str]
    cut_off: list[str]


def every_reply_is_an_attempt_a_refusal_or_cut_off(replies: list[tuple[str, Reply]]) -> Outcome:
    """Step: each reply acknowledged an attempt, refused one past the limit (saying so), or was cut off by the
    kill (no reply, or 502 from nginx)."""
    acknowledged = {reply.json["id"]: student for student, reply in replies if reply.status in (200, 202)}
    refused = [student for student, reply in replies if reply.status == 429]
    cut_off = [student for student, reply in replies if reply.status in (502, CUT_OFF)]
    assert len(acknowledged) + len(refused) + len(cut_off) == len(replies), [r.status for _, r in replies]
    for reply in (reply for _, reply in replies if reply.status == 429):
        assert "all 3 attempts" in reply.json["error"], reply.text
    return Outcome(acknowledged, refused, cut_off)


def every_acknowledged_attempt_is_graded(cluster: Cluster, outcome: Outcome) -> None:
    """Step: polled through the balancer, to whichever process is alive, each acknowledged attempt is graded."""
    for attempt_id, student in outcome.acknowledged.items():
        deadline = time.monotonic() + 180
        while (body := request(f"{cluster.site}/api/submissions/{attempt_id}", token=cluster.tokens[student]).json).get(
            "status", "queued"
        ) in ("queued", "grading"):  # a 429 (polled too often): poll again
            assert time.monotonic() < deadline, f"attempt {attempt_id} was never graded"
            time.sleep(body.get("retry_after", 0.2))
        assert (body["status"], body["score"]) == ("graded", 57), body


def every_stored_attempt_is_graded_once_within_the_limit(cluster: Cluster, outcome: Outcome) -> None:
    """Step: an upload stored but whose reply was cut off by the kill is an attempt like any other: it is graded too
    (waited for). None is lost, each is recorded once, the limit held across processes, and no claim is left."""
    deadline = time.monotonic() + 180
    rows = attempt_rows(cluster.database)
    while any(row.status in ("queued", "grading") for row in rows):
        assert time.monotonic() < deadline, [tuple(r) for r in rows]
        time.sleep(0.2)
        rows = attempt_rows(cluster.database)
    assert {row.id for row in rows} >= set(outcome.acknowledged)  # 0 lost
    assert all(row.status == "graded" and row.results_written == 1 for row in rows), [tuple(r) for r in rows]
    for student in STUDENTS:  # the limit held across processes: never more than 3, numbered 1..n once each
        numbers = sorted(row.number for row in rows if row.student_id == student)
        assert numbers == list(range(1, len(numbers) + 1))
        assert len(numbers) <= ATTEMPTS
        if student not in outcome.cut_off:
            assert len(numbers) == ATTEMPTS
            assert outcome.refused.count(student) == 1
    with cluster.engine.connect() as db:
        assert db.execute(text("SELECT count(*) FROM claims")).scalar() == 0


def the_killed_processs_claims_went_back(cluster: Cluster, victim: Server) -> None:
    """Step: the killed process's claims went back to the queue, taken by a living process, the moment it died."""
    assert any(
        "INFO course.platforms.service.shared: a process that stopped was grading" in server.log.read_text()
        for server in cluster.servers
        if server is not victim
    )


def every_student_is_counted(cluster: Cluster) -> None:
    """Step: the instructor's grades export counts every student, at full score."""
    grades = request(f"{cluster.site}/i/{cluster.servers[0].instructor}/export/grades.csv")
    assert grades.status == 200, grades.text
    counted = {row["student_id"]: row for row in csv.DictReader(io.StringIO(grades.text))}
    assert set(counted) == set(STUDENTS)
    assert all(float(row["score"]) == 57 for row in counted.values()), grades.text
