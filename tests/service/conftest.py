"""The service under test is the real thing: `autograd-course serve` in its own process (uvicorn, the warm
pool, SQLite or PostgreSQL), reached over loopback HTTP with the standard library's client. The pieces the tests
share (Server, request, multipart, ...) are in tests/support/service.py; here are the fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.service import STUDENTS, Server, course_for_service, new_database, running_postgres


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    """One running service for a module: four students with tokens, no attempt limits."""
    root = course_for_service(tmp_path_factory.mktemp("service") / "course")
    running = Server(root)
    running.issue_tokens(STUDENTS)
    running.start()
    yield running
    running.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server of its own in a temporary folder (Debian's postgresql package: initdb, pg_ctl);
    skipped, saying why, where there is none."""
    with running_postgres() as url:
        yield url


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A fresh, empty database on the test's PostgreSQL server."""
    return new_database(postgres_server)
