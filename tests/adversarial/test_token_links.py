"""Students' links, attacked by the term itself (issue 40, item 5): a late student added, a lost link rotated, a
student revoked, the instructor's token replaced. Each change reaches only the link it names: every other link keeps
working, and a link that stopped says why. e1a50ec re-issued every token at each `serve tokens`: every earlier link
answered 404, and every earlier instructor token kept working."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from course.cli import main
from course.platforms.service import store as store_module
from course.platforms.service.store import Store
from tests.support.helpers import submitted_notebook


def write_roster(path: Path, students: list[str]) -> Path:
    path.write_text(
        "student_id,name,lms_id\n" + "".join(f"{s},{s.title()} Student,{100 + i}\n" for i, s in enumerate(students)),
        encoding="utf-8",
    )
    return path


def tokens_file(path: Path) -> dict[str, tuple[str, str]]:
    with path.open(encoding="utf-8") as stream:
        return {row["student_id"]: (row["token"], row.get("new")) for row in csv.DictReader(stream)}


def hashes(root: Path) -> dict[str, str]:
    """Each student's row's token hash, as the database holds it."""
    store = Store(f"sqlite:///{root / 'service.db'}")
    try:
        with store.engine.connect() as db:
            return {row.student_id: row.token_hash for row in db.execute(select(store_module.students))}
    finally:
        store.close()


def test_a_longer_roster_adds_the_new_students_and_leaves_every_earlier_link(tmp_path, capsys):
    from tests.support.service import course_for_service

    root = course_for_service(tmp_path / "course")
    out, instructor_file = tmp_path / "tokens.csv", tmp_path / "tokens-instructor.txt"
    roster = write_roster(tmp_path / "roster.csv", ["alice", "bob"])
    assert main(["--course", str(root), "serve", "tokens", str(roster), "--out", str(out)]) == 0
    first, first_hashes, instructor = tokens_file(out), hashes(root), instructor_file.read_text().strip()

    write_roster(roster, ["alice", "bob", "carol"])  # the late student
    capsys.readouterr()
    assert main(["--course", str(root), "serve", "tokens", str(roster), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    second = tokens_file(out)
    assert {s: second[s][0] for s in ("alice", "bob")} == {s: first[s][0] for s in ("alice", "bob")}
    assert [second[s][1] for s in ("alice", "bob", "carol")] == ["", "", "yes"]  # which links to send now
    assert "new tokens for: carol" in said
    assert {s: h for s, h in hashes(root).items() if s != "carol"} == first_hashes  # their rows' tokens unchanged
    assert instructor_file.read_text().strip() == instructor
    store = Store(f"sqlite:///{root / 'service.db'}")
    try:
        assert [store.student_for(second[s][0]) for s in ("alice", "bob", "carol")] == ["alice", "bob", "carol"]
        assert store.is_instructor(instructor)

        # A roster without bob revokes nobody: his link still works, and the command says so.
        write_roster(roster, ["alice", "carol"])
        assert main(["--course", str(root), "serve", "tokens", str(roster), "--out", str(out)]) == 0
        assert "in the database but not in the roster, their links unchanged" in capsys.readouterr().out
        assert store.student_for(second["bob"][0]) == "bob"

        # The instructor's token replaced: the earlier one stops, and there is one.
        assert main(["--course", str(root), "serve", "tokens", "--rotate-instructor", "--out", str(out)]) == 0
        newest = instructor_file.read_text().strip()
        assert not store.is_instructor(instructor)
        assert store.is_instructor(newest)
        assert store.instructor_count() == 1
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_over_http_a_late_student_a_rotation_and_a_revocation_reach_only_their_link(tmp_path, backend):
    """Against a running `autograd-course serve` (SQLite, or a real PostgreSQL server of its own): the tokens
    changed while it runs, each link opened over HTTP."""
    from tests.support.service import new_database, running_postgres

    if backend == "sqlite":
        links_over_http(tmp_path, None)
        return
    with running_postgres() as postgres:
        links_over_http(tmp_path, new_database(postgres))


def links_over_http(tmp_path: Path, database: str | None) -> None:
    from course.platforms.service.access import RETIRED_INSTRUCTOR_LINK, RETIRED_LINK
    from tests.support.service import Server, course_for_service, notebook_bytes
    from tests.support.service import request as http

    server = Server(course_for_service(tmp_path / "course"), database=database)
    server.issue_tokens(["alice", "bob"])
    server.start()
    try:
        page = lambda token: http(f"{server.url}/s/{token}/")  # noqa: E731 - a student opening their link
        before, instructor = dict(server.tokens), server.instructor
        assert page(before["alice"]).status == 200
        attempt = server.submit("alice", notebook_bytes(submitted_notebook()))
        assert attempt.status == 200, attempt.text

        server.issue_tokens(["alice", "bob", "carol"])  # the late student, while the service runs
        assert {s: server.tokens[s] for s in ("alice", "bob")} == before
        assert server.instructor == instructor
        assert [page(server.tokens[s]).status for s in ("alice", "bob", "carol")] == [200, 200, 200]
        assert server.get("alice", attempt.json["id"]).status == 200

        tokens = server.root / "tokens.csv"
        subprocess.run(
            server.command("tokens", "--rotate", "bob", "--out", str(tokens)), check=True, capture_output=True
        )
        rotated = tokens_file(tokens)["bob"][0]
        old_bob = page(before["bob"])
        assert (old_bob.status, old_bob.text) == (410, RETIRED_LINK["replaced"])
        assert page(rotated).status == 200
        assert [page(server.tokens[s]).status for s in ("alice", "carol")] == [200, 200]

        subprocess.run(
            server.command("tokens", "--revoke", "alice", "--out", str(tokens)), check=True, capture_output=True
        )
        revoked = page(before["alice"])
        assert (revoked.status, revoked.text) == (410, RETIRED_LINK["revoked"])
        upload = server.submit("alice", notebook_bytes(submitted_notebook()))
        assert (upload.status, upload.json["error"]) == (401, RETIRED_LINK["revoked"])
        notebook = tmp_path / "autograd.ipynb"
        notebook.write_bytes(notebook_bytes(submitted_notebook()))
        submitted = subprocess.run(
            [
                sys.executable,
                "-m",
                "course",
                "submit",
                str(notebook),
                "--server",
                server.url,
                "--token",
                before["alice"],
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert submitted.returncode == 1
        assert "has been revoked by the course staff" in submitted.stderr
        assert "alice" not in tokens_file(tokens)
        assert [page(t).status for t in (rotated, server.tokens["carol"])] == [200, 200]
        her_record = http(f"{server.url}/i/{instructor}/students/alice")  # her attempts stay in the record
        assert her_record.status == 200
        assert 'href="alice/attempts/1"' in her_record.text

        subprocess.run(
            server.command("tokens", "--rotate-instructor", "--out", str(tokens)), check=True, capture_output=True
        )
        newest = (server.root / "tokens-instructor.txt").read_text().strip()
        old_dashboard = http(f"{server.url}/i/{instructor}/")
        assert (old_dashboard.status, old_dashboard.text) == (410, RETIRED_INSTRUCTOR_LINK)
        assert http(f"{server.url}/i/{newest}/").status == 200
        assert page(server.tokens["carol"]).status == 200
    finally:
        server.stop()
