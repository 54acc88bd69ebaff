"""Two `serve tokens` runs on one course at once (an assistant adds a late section while the instructor rotates
a lost link): each run read the tokens file and the database's hashes at its start and wrote its own view, so
one could leave out a link the other had just issued, or put back the rotated student's old, dead row (at
d763e9f). One run at a time per course now: a second waits for the first (saying so), then starts from what it
left; after a bounded wait it stops with a sentence, changing nothing."""

from __future__ import annotations

import hmac
import subprocess
import sys
import threading
from pathlib import Path

from course.cli import main
from course.core.config import load_config
from course.platforms.service import tokens
from course.platforms.service.store import Store, hash_token
from course.platforms.service.tokens import issue_tokens, read_tokens_file, rotate_tokens
from course.platforms.service.worker import SCRATCH
from course.term.roster import Student

ROUNDS = 6  # pairs of runs at once; one round of the old code's race was enough to lose a link most times


def course(tmp_path: Path) -> Path:
    from tests.support.service import course_for_service

    return course_for_service(tmp_path / "course")


def working_links_missing(root: Path, out: Path) -> list[str]:
    """The students whose working token (by the database's hash) is not the token the tokens file gives them."""
    written = read_tokens_file(out)
    store = Store(f"sqlite:///{root / 'service.db'}")
    try:
        rows = store.token_rows()
    finally:
        store.close()
    return sorted(
        sid
        for sid, row in rows.items()
        if not row.revoked and not (sid in written and hmac.compare_digest(hash_token(written[sid]), row.token_hash))
    )


def test_two_runs_at_once_both_end_with_every_working_link_in_the_file(tmp_path):
    """A roster run adding new students and a --rotate of an earlier one, started together (threads released by
    one barrier), round after round: every working token is in the tokens file after each round."""
    root = course(tmp_path)
    config = load_config(root)
    out = tmp_path / "tokens.csv"
    issue_tokens(config, [Student("alice", {})], out)
    errors: list[BaseException] = []
    for round_ in range(ROUNDS):
        start = threading.Barrier(2)
        roster = [Student("alice", {}), *(Student(f"s{round_}x{i}", {}) for i in range(3))]

        def run(call, *args, start=start):
            start.wait()
            try:
                call(config, *args, out)
            except BaseException as problem:
                errors.append(problem)

        threads = [
            threading.Thread(target=run, args=(issue_tokens, roster)),
            threading.Thread(target=run, args=(rotate_tokens, ["alice"])),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert working_links_missing(root, out) == [], f"round {round_}"
    assert len(read_tokens_file(out)) == 1 + 3 * ROUNDS


def test_a_run_while_another_holds_the_course_waits_then_proceeds(tmp_path):
    """The real command, while the course's tokens lock is held: it says it waits, writes nothing meanwhile, and
    once the lock is let go it issues the links."""
    from course.core.files import locked
    from course.platforms.service.tokens import LOCK_FILE

    root = course(tmp_path)
    roster, out = tmp_path / "roster.csv", tmp_path / "tokens.csv"
    roster.write_text("student_id\nalice\nbob\n", encoding="utf-8")
    (root / SCRATCH).mkdir(exist_ok=True)
    released = threading.Event()
    holding = threading.Event()

    def hold() -> None:
        with locked(root / SCRATCH / LOCK_FILE):
            holding.set()
            released.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(60)
        command = subprocess.Popen(
            [sys.executable, "-m", "course", "--course", str(root), "serve", "tokens", str(roster), "--out", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        said = ""
        while "waiting for it to end" not in said:  # each read blocks until the run says more (or ends: "")
            line = command.stderr.readline()
            assert line, f"the run ended without waiting: {said}"
            said += line
        assert f"another serve tokens run on {root} is under way" in said
        assert not out.exists()  # nothing written while the other run holds the course
    finally:
        released.set()
        holder.join()
    stdout, stderr = command.communicate(timeout=300)
    assert command.returncode == 0, stderr
    assert "2 new student link(s)" in stdout
    assert working_links_missing(root, out) == []
    assert sorted(read_tokens_file(out)) == ["alice", "bob"]


def test_a_run_that_waits_too_long_stops_with_a_sentence_and_changes_nothing(tmp_path, monkeypatch, capsys):
    from course.core.files import locked
    from course.platforms.service.tokens import LOCK_FILE

    root = course(tmp_path)
    roster, out = tmp_path / "roster.csv", tmp_path / "tokens.csv"
    roster.write_text("student_id\nalice\n", encoding="utf-8")
    (root / SCRATCH).mkdir(exist_ok=True)
    monkeypatch.setattr(tokens, "RUN_WAIT_SECONDS", 0.3)
    with locked(root / SCRATCH / LOCK_FILE):
        assert main(["--course", str(root), "serve", "tokens", str(roster), "--out", str(out)]) == 1
    said = capsys.readouterr().err
    assert "another serve tokens run on" in said
    assert "is still under way after 0.3 s" in said
    assert "nothing changed" in said
    assert not out.exists()
    assert not (root / "service.db").exists() or working_links_missing(root, out) == []
    assert main(["--course", str(root), "serve", "tokens", str(roster), "--out", str(out)]) == 0  # free again
    assert list(read_tokens_file(out)) == ["alice"]
