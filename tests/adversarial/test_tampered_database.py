"""A service database at the head revision, tampered with afterwards (issue 50, item 3): a column or a table dropped,
the version table left as it was. e2fd90b checked columns only in a database without a version table: it opened
this one, and every request that read the missing column or table was a bare 500 to a student. Now the Store,
`serve tokens` and `serve` refuse it at start with one sentence naming the database, what is missing and how to
mend it, and leave it as it is."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from course.cli import main
from course.core.errors import CourseError
from course.platforms.service.store import Store
from tests.support.service import Server, course_for_service, new_database, running_postgres

# How a hand (or a botched restore) leaves a head database, and what the refusal must name.
TAMPERINGS = {
    "a dropped column": ("ALTER TABLE attempts DROP COLUMN feedback", "table attempts lacks column feedback"),
    "a dropped table": ("DROP TABLE retired_tokens", "no table retired_tokens"),
}


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with running_postgres() as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def database(request, tmp_path) -> tuple[Path, str | None, str]:
    """A course folder, its `serve --database` (None: its service.db) and the URL to tamper with."""
    root = course_for_service(tmp_path / "course")
    if request.param == "sqlite":
        return root, None, f"sqlite:///{root / 'service.db'}"
    url = new_database(request.getfixturevalue("postgres"))
    return root, url, url


def columns(url: str) -> dict[str, list[str]]:
    engine = create_engine(url)
    with engine.connect() as db:
        inspector = inspect(db)
        found = {name: sorted(c["name"] for c in inspector.get_columns(name)) for name in inspector.get_table_names()}
    engine.dispose()
    return found


@pytest.mark.parametrize("tampering", ["a dropped column", "a dropped table"])
def test_a_head_database_missing_a_column_or_a_table_is_refused_at_every_start(database, tampering, capsys):
    root, option, url = database
    server = Server(root, database=option)
    server.issue_tokens(["alice", "bob"])  # `serve tokens`: the database made at the head revision
    statement, missing = TAMPERINGS[tampering]
    engine = create_engine(url)
    with engine.begin() as db:
        db.exec_driver_sql(statement)
    engine.dispose()
    before = columns(url)

    def says_so(sentence: str) -> None:
        assert "the service's database" in sentence, sentence
        assert url.split("://")[-1].split("@")[-1] in sentence, sentence  # the database, named
        assert "at revision 0003" in sentence, sentence
        assert missing in sentence, sentence
        assert "backup" in sentence, sentence  # how to restore it
        assert "serve tokens" in sentence, sentence  # or rebuild it
        assert "Traceback" not in sentence, sentence

    with pytest.raises(CourseError) as opened:
        Store(url)
    says_so(str(opened.value))

    tokens = ["--course", str(root), "serve", "tokens", str(root / "roster.csv"), "--out", str(root / "again.csv")]
    assert main([*tokens, *(["--database", option] if option else [])]) != 0
    says_so(capsys.readouterr().err)

    try:
        with pytest.raises(AssertionError, match="the server stopped") as stopped:
            server.start()  # e2fd90b starts, and answers a student's page with a 500
    finally:
        server.stop()
    says_so(str(stopped.value))
    assert columns(url) == before  # left as it is
