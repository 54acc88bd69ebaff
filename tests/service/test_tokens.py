"""Per-student tokens (`serve tokens`): the store's rotation, revocation and instructor replacement on SQLite and a
real PostgreSQL server, a database made before them, what is read back (rows, the earlier tokens file), the
command's refusals, and what a retired link answers (in process: the real app and store, no grading)."""

from __future__ import annotations

import csv
import json

import pytest
from sqlalchemy import create_engine, insert, select, update

from course.cli import main
from course.core.config import load_config
from course.core.errors import CourseError
from course.platforms.service import store as store_module
from course.platforms.service.access import RETIRED_INSTRUCTOR_LINK, RETIRED_LINK
from course.platforms.service.app import create_app
from course.platforms.service.policy import ServicePolicy
from course.platforms.service.run import make_service
from course.platforms.service.store import REPLACED, REVOKED, Store, hash_token, new_token
from course.platforms.service.tokens import HEADER, _provisionally, read_tokens_file
from tests.support.service import Client, course_for_service


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def url(request, tmp_path) -> str:
    return (
        f"sqlite:///{tmp_path / 'service.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    )


@pytest.fixture
def store(url):
    opened = Store(url)
    yield opened
    opened.close()


def test_rotating_or_revoking_one_student_leaves_the_others_and_keeps_the_attempts(store):
    alice, bob, carol = new_token(), new_token(), new_token()
    store.add_students({"alice": (alice, {}), "bob": (bob, {"lms_id": "7"}), "carol": (carol, {})})
    attempt = store.submit("bob", "autograd", b"{}", ServicePolicy())

    fresh = new_token()
    store.rotate_students({"alice": fresh})
    assert (store.student_for(alice), store.student_for(fresh)) == (None, "alice")
    assert (store.retired(alice), store.retired(fresh)) == (REPLACED, None)

    assert store.revoke_students(["bob"]) == ["bob"]
    assert store.revoke_students(["bob"]) == []  # revoked already: nothing changes
    assert (store.student_for(bob), store.retired(bob)) == (None, REVOKED)
    assert store.attempt(attempt.id).student_id == "bob"  # the record stays, and so does the student's row
    assert store.students()["bob"] == {"lms_id": "7"}
    assert store.token_rows()["bob"].revoked
    with pytest.raises(CourseError, match="'zed' has no token"):
        store.revoke_students(["carol", "zed"])
    assert store.student_for(carol) == "carol"  # the refused transaction revoked nobody

    back = new_token()
    store.rotate_students({"bob": back})  # how a revoked student is let back in
    assert (store.student_for(back), store.retired(bob)) == ("bob", REVOKED)
    assert not store.token_rows()["bob"].revoked
    assert store.student_for(carol) == "carol"
    assert store.retired(new_token()) is None


def test_replacing_the_instructor_token_stops_every_earlier_one(store):
    first, second, student = new_token(), new_token(), new_token()
    store.add_instructor(first)  # an earlier version added one at each `serve tokens`
    store.add_instructor(second)
    store.add_students({"alice": (student, {})})
    newest = new_token()
    assert store.replace_instructors(newest) == 2
    assert store.instructor_count() == 1
    assert [store.is_instructor(t) for t in (first, second, newest)] == [False, False, True]
    assert store.retired(first, instructor=True) == REPLACED
    assert store.retired(first) is None  # a student's link never says an instructor token was replaced
    assert store.retired(student, instructor=True) is None
    assert store.student_for(student) == "alice"


def old_schema(url: str) -> None:
    """The tables as e1a50ec's service made them (every table of today's but retired_tokens, unchanged since), with
    one student and two instructor tokens of its `serve tokens` (it added one at each run)."""
    engine = create_engine(url)
    old = [store_module.students, store_module.instructors, store_module.attempts, store_module.settings]
    store_module.metadata.create_all(engine, tables=old)
    with engine.begin() as db:
        db.execute(
            insert(store_module.students).values(
                student_id="alice", token_hash=hash_token("alice-old-token"), lms='{"lms_id": "101"}'
            )
        )
        db.execute(
            insert(store_module.instructors),
            [{"token_hash": hash_token("instructor-1")}, {"token_hash": hash_token("instructor-2")}],
        )
    engine.dispose()


def test_a_database_made_before_per_student_tokens_keeps_its_links(url, tmp_path, capsys):
    """A service.db (or PostgreSQL database) of e1a50ec: its students keep their links when the roster grows, and
    revocation and instructor rotation work on it (the new table is added at open; no column changes)."""
    old_schema(url)
    root = course_for_service(tmp_path / "course")
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id,lms_id\nalice,101\nbob,102\n", encoding="utf-8")
    out = tmp_path / "tokens.csv"
    assert main(["--course", str(root), "serve", "tokens", str(roster), "--out", str(out), "--database", url]) == 0
    said = capsys.readouterr().out
    assert "instructor token unchanged (2 working; --rotate-instructor" in said
    assert "not in" in said
    assert "alice" in said
    assert list(read_tokens_file(out)) == ["bob"]
    store = Store(url)
    try:
        assert store.student_for("alice-old-token") == "alice"
        assert store.student_for(read_tokens_file(out)["bob"]) == "bob"
        assert store.is_instructor("instructor-1")
        assert store.is_instructor("instructor-2")
        assert main(["--course", str(root), "serve", "tokens", "--revoke", "alice", "--database", url]) == 0
        assert store.retired("alice-old-token") == REVOKED
        assert (
            main(
                ["--course", str(root), "serve", "tokens", "--rotate-instructor", "--out", str(out), "--database", url]
            )
            == 0
        )
        assert "the 2 earlier instructor token(s) no longer work" in capsys.readouterr().out
        assert not store.is_instructor("instructor-1")
        assert not store.is_instructor("instructor-2")
        assert store.is_instructor((tmp_path / "tokens-instructor.txt").read_text().strip())
    finally:
        store.close()


@pytest.mark.parametrize(
    ("column", "value", "says"),
    [
        ("lms", "[1, 2]", "the lms column of student 'alice' is not a JSON object of text"),
        ("lms", "{not json", "the lms column of student 'alice' is not a JSON object of text"),
        ("token_hash", "x" * 64, "its token_hash is not a SHA-256"),
        ("student_id", "../alice", "is not a usable student id"),
    ],
)
def test_a_students_row_that_serve_tokens_did_not_write_is_named_not_used(tmp_path, column, value, says):
    url = f"sqlite:///{tmp_path / 'service.db'}"
    store = Store(url)
    try:
        store.add_students({"alice": (new_token(), {})})
        with store.begin() as db:
            db.execute(update(store_module.students).values({column: value}))
        with pytest.raises(CourseError, match=f"the service's database: .*{says.replace('(', '.').replace(')', '.')}"):
            store.token_rows()
    finally:
        store.close()


def test_the_earlier_tokens_file_is_read_as_input(tmp_path):
    path = tmp_path / "tokens.csv"
    assert read_tokens_file(path) == {}
    path.write_text(
        '"student_id","token"\n"alice","a1"\n"../x","b2"\n"bob"\n"alice","again"\n"carol","'
        + "c" * 101
        + '"\n"dave","d4","yes","extra"\n',
        encoding="utf-8",
    )
    assert read_tokens_file(path) == {"alice": "a1", "dave": "d4"}  # e1a50ec's two columns, or ours, or more
    notes = tmp_path / "notes.csv"
    notes.write_text("name,grade\nalice,A\n", encoding="utf-8")
    with pytest.raises(CourseError, match=r"is not a tokens file .* it is left as it is"):
        read_tokens_file(notes)
    notes.write_bytes(b"\xff\xfe binary")
    with pytest.raises(CourseError, match="is not a tokens file"):
        read_tokens_file(notes)


def test_a_file_that_is_not_a_tokens_file_is_never_overwritten_and_nothing_changes(tmp_path, capsys):
    root = course_for_service(tmp_path / "course")
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id\nalice\n", encoding="utf-8")
    notes = tmp_path / "notes.csv"
    notes.write_text("name,grade\nalice,A\n", encoding="utf-8")
    assert main(["--course", str(root), "serve", "tokens", str(roster), "--out", str(notes)]) == 1
    assert "is not a tokens file" in capsys.readouterr().err
    assert notes.read_text(encoding="utf-8") == "name,grade\nalice,A\n"
    store = Store(f"sqlite:///{root / 'service.db'}")
    try:
        assert store.token_rows() == {}
        assert store.instructor_count() == 0
    finally:
        store.close()


def test_a_failed_change_puts_the_tokens_file_back(tmp_path):
    path = tmp_path / "tokens.csv"
    path.write_text("earlier\n", encoding="utf-8")
    seen = []

    def refused(target):
        with _provisionally(target, "new tokens\n"):
            seen.append(target.read_text())
            raise RuntimeError("the database refused")

    with pytest.raises(RuntimeError):
        refused(path)
    assert seen == ["new tokens\n"]
    assert path.read_text() == "earlier\n"
    with pytest.raises(RuntimeError):
        refused(tmp_path / "fresh.csv")
    assert not (tmp_path / "fresh.csv").exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "serve tokens needs a ROSTER (or --rotate, --revoke or --rotate-instructor)"),
        (["roster.csv"], "serve tokens needs --out FILE"),
        (["--rotate", "alice"], "serve tokens needs --out FILE"),
        (["--rotate-instructor"], "serve tokens needs --out FILE"),
        (
            ["roster.csv", "--rotate", "alice", "--out", "t.csv"],
            "give a ROSTER or --rotate/--rotate-instructor, not both",
        ),
        (["roster.csv", "--revoke", "alice"], "--revoke takes no ROSTER"),
        (["--rotate", "zed", "--out", "t.csv"], "--rotate: no token was ever issued to zed: nothing changed"),
        (["--revoke", "../x"], "--revoke: '../x' is not a usable student id"),
    ],
)
def test_serve_tokens_says_what_is_wrong_in_one_line(tmp_path, capsys, monkeypatch, args, says):
    root = course_for_service(tmp_path / "course")
    monkeypatch.chdir(tmp_path)
    assert main(["--course", str(root), "serve", "tokens", *args]) == 1
    assert says in capsys.readouterr().err


def test_a_retired_link_says_why_and_an_unknown_one_is_not_found(tmp_path):
    service = make_service(load_config(course_for_service(tmp_path / "course")), jobs=1)
    try:
        alice, bob, carol, instructor = new_token(), new_token(), new_token(), new_token()
        service.store.add_students({"alice": (alice, {}), "bob": (bob, {}), "carol": (carol, {})})
        service.store.replace_instructors(instructor)
        service.store.revoke_students(["alice"])
        service.store.rotate_students({"bob": new_token()})
        service.store.replace_instructors(new_token())
        client = Client(create_app(service))
        for token, sentence in ((alice, RETIRED_LINK[REVOKED]), (bob, RETIRED_LINK[REPLACED])):
            for path in (f"/s/{token}/", f"/s/{token}/attempts/1", f"/s/{token}/notebook"):
                page = client.get(path)
                assert (page.status_code, page.text) == (410, sentence), path
            api = client.get("/api/submissions/1", {"Authorization": f"Bearer {token}"})
            assert api.status_code == 401
            assert api.json()["error"] == sentence
            assert api.headers["www-authenticate"] == 'Bearer error="invalid_token"'
        page = client.get(f"/i/{instructor}/")
        assert (page.status_code, page.text) == (410, RETIRED_INSTRUCTOR_LINK)
        assert client.get(f"/i/{alice}/").status_code == 404  # a student's token is no instructor's
        assert client.get(f"/s/{instructor}/").status_code == 404
        assert client.get(f"/s/{new_token()}/").status_code == 404
        assert client.get(f"/s/{carol}/").status_code == 200
        with service.store.engine.connect() as db:  # only hashes are kept of retired tokens too
            kept = json.dumps([list(row) for row in db.execute(select(store_module.retired_tokens))], default=str)
        assert alice not in kept
        assert hash_token(alice) in kept
    finally:
        service.store.close()


def test_the_tokens_file_header_is_the_one_documented():
    assert HEADER == ["student_id", "token", "new"]


def test_a_roster_run_updates_the_lms_columns_and_leaves_the_tokens(tmp_path, capsys):
    root = course_for_service(tmp_path / "course")
    roster, out = tmp_path / "roster.csv", tmp_path / "tokens.csv"
    roster.write_text("student_id,lms_id\nalice,101\nbob,102\n", encoding="utf-8")
    assert main(["--course", str(root), "serve", "tokens", str(roster), "--out", str(out)]) == 0
    store = Store(f"sqlite:///{root / 'service.db'}")
    try:
        before = {sid: row.token_hash for sid, row in store.token_rows().items()}
        roster.write_text("student_id,lms_id\nalice,201\nbob,102\n", encoding="utf-8")  # a corrected LMS id
        capsys.readouterr()
        assert main(["--course", str(root), "serve", "tokens", str(roster), "--out", str(out)]) == 0
        said = capsys.readouterr().out
        assert "LMS columns updated from the roster (tokens unchanged): alice\n" in said
        assert "tokens.csv: 0 new student link(s)" in said
        assert store.students() == {"alice": {"lms_id": "201"}, "bob": {"lms_id": "102"}}
        assert {sid: row.token_hash for sid, row in store.token_rows().items()} == before
        assert [row[2] for row in csv.reader(out.read_text().splitlines()[1:])] == ["", ""]  # none new
    finally:
        store.close()


def test_a_revocation_into_a_file_that_is_not_a_tokens_file_changes_nothing(tmp_path, capsys):
    root = course_for_service(tmp_path / "course")
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id\nalice\n", encoding="utf-8")
    assert main(["--course", str(root), "serve", "tokens", str(roster), "--out", str(tmp_path / "tokens.csv")]) == 0
    notes = tmp_path / "notes.csv"
    notes.write_text("name,grade\n", encoding="utf-8")
    assert main(["--course", str(root), "serve", "tokens", "--revoke", "alice", "--out", str(notes)]) == 1
    assert "is not a tokens file" in capsys.readouterr().err
    store = Store(f"sqlite:///{root / 'service.db'}")
    try:
        assert not store.token_rows()["alice"].revoked
    finally:
        store.close()
