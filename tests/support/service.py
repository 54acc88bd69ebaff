"""The service as the tests meet it: the real thing, `autograd-course serve` in its own process (uvicorn, the warm
pool, SQLite or PostgreSQL), reached over loopback HTTP with the standard library's client."""

from __future__ import annotations

import asyncio
import csv
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from course.core.status import Status
from course.pipeline.feedback_model import Feedback
from course.platforms.service.store import GradedAttempt
from tests.support.helpers import copy_course, free_port, require_tool

STUDENTS = ["alice", "bob", "carol", "dave"]
_DATABASES = itertools.count()
START_SECONDS = 120  # the server is up once it answers; its warm workers import torch meanwhile


@dataclass
class Reply:
    status: int
    body: bytes
    headers: dict[str, str]

    @property
    def json(self) -> dict:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def request(
    url: str,
    *,
    method: str = "GET",
    token: str | None = None,
    data: bytes | None = None,
    content_type: str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 120,
) -> Reply:
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    if content_type:
        sent["Content-Type"] = content_type
    req = urllib.request.Request(url, data=data, method=method, headers=sent)  # noqa: S310 - the test server

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(req, timeout=timeout) as response:
            return Reply(response.status, response.read(), {k.lower(): v for k, v in response.headers.items()})
    except urllib.error.HTTPError as error:
        return Reply(error.code, error.read(), {k.lower(): v for k, v in error.headers.items()})


def multipart(
    fields: dict[str, str | bytes | list[str]], boundary: str = "autograd-test-boundary"
) -> tuple[bytes, str]:
    """A multipart form; a list value is the field repeated (as a form's ticked checkboxes send it)."""
    parts = []
    pairs = [(name, one) for name, value in fields.items() for one in (value if isinstance(value, list) else [value])]
    for name, value in pairs:
        if isinstance(value, bytes):
            parts.append(
                f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="autograd.ipynb"'
                f"\r\nContent-Type: application/json\r\n\r\n".encode()
                + value
                + b"\r\n"
            )
        else:
            parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def set_service_policy(root: Path, **policy) -> None:
    path = root / "source" / "course.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["service"] = policy
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


@dataclass
class Server:
    root: Path
    database: str | None = None
    wait: float = 30.0
    jobs: int = 2
    tokens: dict[str, str] = field(default_factory=dict)
    instructor: str = ""
    process: subprocess.Popen | None = None
    port: int = 0
    log: Path = Path()
    options: tuple[str, ...] = ()  # more `serve` options

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self, *args: str) -> list[str]:
        database = ["--database", self.database] if self.database else []
        return [sys.executable, "-m", "course", "--course", str(self.root), "serve", *args, *database]

    def issue_tokens(self, students: list[str]) -> None:
        roster = self.root / "roster.csv"
        roster.write_text(
            "student_id,name,lms_id\n" + "".join(f"{s},{s.title()},{100 + i}\n" for i, s in enumerate(students)),
            encoding="utf-8",
        )
        out = self.root / "tokens.csv"
        subprocess.run(self.command("tokens", str(roster), "--out", str(out)), check=True, capture_output=True)
        with out.open(encoding="utf-8") as stream:
            self.tokens = {row["student_id"]: row["token"] for row in csv.DictReader(stream)}
        self.instructor = (self.root / "tokens-instructor.txt").read_text().strip()

    def start(self) -> Server:
        self.port = free_port()
        self.log = self.root / f"server-{self.port}.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                self.command(
                    "--port", str(self.port), "--jobs", str(self.jobs), "--wait", str(self.wait), *self.options
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the server stopped: {self.log.read_text()}")
            try:
                if request(f"{self.url}/static/dashboard.js", timeout=5).status == 200:
                    return self
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"the server did not answer within {START_SECONDS} s: {self.log.read_text()}")

    def kill(self) -> None:
        """SIGKILL the server process only (what a crash does)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    # ------------------------------------------------------------------ the contract
    def submit(self, student: str, notebook: bytes, *, token: str | None = None) -> Reply:
        return request(
            f"{self.url}/api/submissions",
            method="POST",
            token=token or self.tokens[student],
            data=notebook,
            content_type="application/json",
        )

    def get(self, student: str, attempt_id: int, *, token: str | None = None) -> Reply:
        return request(f"{self.url}/api/submissions/{attempt_id}", token=token or self.tokens[student])

    def wait_graded(self, student: str, attempt_id: int, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reply = self.get(student, attempt_id)
            if reply.status == 429:  # polled faster than service.pages_per_minute: wait as the server says
                time.sleep(int(reply.headers["retry-after"]))
                continue
            if reply.json["status"] not in ("queued", "grading"):
                return reply.json
            time.sleep(0.2)
        raise AssertionError(f"attempt {attempt_id} was not graded within {timeout} s")


def spooled(server: Server) -> list[int]:
    """Sizes of the unlinked files the server holds open in its work folder (an upload's body waiting there, past
    64 KB: the app is reading it, its token checked)."""
    assert server.process is not None
    folder = str(server.root / "service-work")
    sizes = []
    for fd in Path(f"/proc/{server.process.pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
            if target.startswith(folder) and target.endswith(" (deleted)"):
                sizes.append(os.stat(fd).st_size)
        except OSError:
            continue
    return sizes


def course_for_service(root: Path, **policy) -> Path:
    copy_course(root)
    if policy:
        set_service_policy(root, **policy)
    return root


def notebook_bytes(notebook: dict) -> bytes:
    return json.dumps(notebook).encode("utf-8")


# ----------------------------------------------------------------------------- a real PostgreSQL server


def _postgres_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return found[-1].parent if found else None


def _unprivileged_user() -> tuple[int, int] | None:
    """Who runs postgres when the tests run as root (postgres refuses to run as root)."""
    import pwd

    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return entry.pw_uid, entry.pw_gid
    return None


@contextmanager
def running_postgres() -> Iterator[str]:
    """A PostgreSQL server started in a temporary folder for as long as the block runs: its URL, without a
    database name (the benchmarks use it too)."""
    import shutil
    import tempfile

    binaries = _postgres_bin()
    if binaries is None:
        require_tool(
            "PostgreSQL",
            "the service's PostgreSQL tests start a server of their own with its initdb and "
            "pg_ctl (apt-get install postgresql)",
        )
    try:
        import psycopg  # noqa: F401
    except ImportError:
        require_tool("psycopg", "the service's PostgreSQL tests connect with it (pip install -e '.[test]')")
    folder = Path(tempfile.mkdtemp(prefix="autograd-postgres-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        user = _unprivileged_user()
        if user is None:
            pytest.skip("running as root with no unprivileged user (postgres or nobody) to run PostgreSQL as")
        os.chown(folder, *user)
        as_user = ["setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups", "--"]
    data, port = folder / "data", free_port()
    try:
        subprocess.run(
            [
                *as_user,
                str(binaries / "initdb"),
                "-D",
                str(data),
                "-A",
                "trust",
                "-U",
                "autograd",
                "--no-sync",
                "-E",
                "UTF8",
            ],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                *as_user,
                str(binaries / "pg_ctl"),
                "-D",
                str(data),
                "-w",
                "-l",
                str(folder / "log"),
                "-o",
                f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off",
                "start",
            ],
            check=True,
            capture_output=True,
        )
    except subprocess.CalledProcessError as error:
        shutil.rmtree(folder, ignore_errors=True)
        raise AssertionError(f"PostgreSQL did not start: {error.stderr.decode(errors='replace')}") from None
    try:
        yield f"postgresql+psycopg://autograd@127.0.0.1:{port}"
    finally:
        subprocess.run(
            [*as_user, str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
            check=False,
        )
        shutil.rmtree(folder, ignore_errors=True)


def new_database(server: str) -> str:
    import psycopg

    name = f"service_{next(_DATABASES)}"
    with psycopg.connect(
        server.replace("postgresql+psycopg", "postgresql") + "/postgres", autocommit=True
    ) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    return f"{server}/{name}"


# ----------------------------------------------------------------------------- in process


@dataclass
class Answer:
    status_code: int
    text: str
    headers: dict[str, str] = field(default_factory=dict)

    def json(self) -> dict:
        return json.loads(self.text)


@dataclass
class Client:
    """Requests straight into the ASGI app (its lifespan, which would start the warm pool, is not run)."""

    app: object

    def get(
        self, path: str, headers: dict[str, str] | None = None, *, method: str = "GET", body: bytes = b""
    ) -> Answer:
        # A thread of its own for the event loop: the browser tests' Playwright, alive for the whole session,
        # keeps a loop running in this one.
        with ThreadPoolExecutor(1) as thread:
            return thread.submit(asyncio.run, self._get(path, headers or {}, method, body)).result()

    async def _get(self, path: str, headers: dict[str, str], method: str, body: bytes) -> Answer:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"127.0.0.1"), *((k.lower().encode(), v.encode()) for k, v in headers.items())],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 80),
        }
        sent: list[dict] = []

        async def receive() -> dict:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict) -> None:
            sent.append(message)

        await self.app(scope, receive, send)  # type: ignore[operator]
        answer = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return Answer(
            sent[0]["status"],
            answer.decode("utf-8"),
            {k.decode().lower(): v.decode() for k, v in sent[0].get("headers", [])},
        )


# ----------------------------------------------------------------------------- tools, fixed data

NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)

RESULTS = GradedAttempt(
    status="graded",
    score=5.0,
    raw_score=5.0,
    late_penalty=0.0,
    max_score=57.0,
    feedback=Feedback("alice", "autograd", Status.GRADED, 5.0, 57.0, (), (), True, ()),
    integrity=(),
    seconds=0.1,
)

NOW = datetime(2026, 11, 30, 12, 0, 0)


def queue_of(*students: str, first: int = 1) -> list:
    """The scheduler's queue: one waiting attempt per student named, ids from `first`, all at NOW."""
    from course.platforms.service.schedule import Queued

    return [Queued(index, student, NOW) for index, student in enumerate(students, start=first)]


def graded_feedback(
    student: str, right: dict[str, bool], *, title: str = "Question {}", answer: str = "grad"
) -> Feedback:
    """A graded feedback of one answer per question (`right`: question id -> whether it was right), 1 point each."""
    questions = [
        {
            "id": qid,
            "title": title.format(qid),
            "points": 1,
            "earned": 1 if ok else 0,
            "values": [
                {
                    "name": answer,
                    "your_value": "1" if ok else "2",
                    "torch_value": "1",
                    "status": "value",
                    "correct": ok,
                    "points": 1,
                    "earned": 1 if ok else 0,
                    "explanation": "",
                }
            ],
            "misconceptions": [],
        }
        for qid, ok in right.items()
    ]
    score = float(sum(right.values()))
    return Feedback.from_json(
        {
            "student_id": student,
            "assignment": "autograd",
            "status": "graded",
            "score": score,
            "max_score": float(len(right)),
            "messages": [],
            "cell_errors": [],
            "questions": questions,
        }
    )


def record_graded(service, feedback: Feedback) -> int:
    """An attempt of feedback's student stored and recorded as a grading run records it (nothing is graded): its id."""
    attempt = service.store.submit(feedback.student_id, "autograd", b'{"cells": []}', service.policy)
    claimed, _ = service.store.claim_next()
    assert claimed.id == attempt.id
    assert service.store.record(
        attempt.id,
        GradedAttempt(
            status="graded",
            score=feedback.score,
            raw_score=feedback.score,
            late_penalty=0.0,
            max_score=feedback.max_score,
            feedback=feedback,
            integrity=(),
            seconds=0.1,
        ),
    )
    return attempt.id
