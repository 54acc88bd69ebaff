"""A week-one class with a Canvas-style roster, run with nbgrader's own commands around `autograd-course grade`.

Names as rosters write them ("Last, First", "First Last", one word, non-ASCII, quotes) reach nbgrader's student
table as a person would expect, and `nbgrader export` (which writes its fields unquoted) gives a CSV that
`csv.DictReader` reads into the right columns, with our scores student by student. One submission the instructor
put into submitted/ by hand (no timestamp.txt, no secret) and one whose secret a student emptied no longer stop
`nbgrader release_feedback` for the class: it exits 0 and every graded student's page is in the exchange.
"""

from __future__ import annotations

import csv
import os
import shutil
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from course.cli import main
from tests.support.helpers import ROOT, SAMPLE_SCORES, exchange_course, fetch_and_submit, nbgrader, write_roster

pytestmark = pytest.mark.slow

SAMPLES = ROOT / "tests" / "samples" / "submitted"
DUE = "2026-11-20 23:59:00 UTC"
ON_TIME = "2026-11-20 20:00:00.000000 UTC"
HAND_DROPPED_AT = datetime(2026, 12, 1, 8, 0).timestamp()  # after the deadline: the file's time is a label only
ROSTER = [  # as a Canvas export writes it; carol submits nothing
    {"student_id": "alice", "name": "Liddell, Alice", "email": "alice@example.edu"},
    {"student_id": "bob", "name": 'O\'Brien, Robert "Bob"', "email": "bob@example.edu"},
    {"student_id": "carol", "name": "Plato", "email": "carol@example.edu"},
    {"student_id": "dave", "name": "Dvořák, Antonín", "email": "dave@example.edu"},
    {"student_id": "erin", "name": "Erin Eastwood", "email": "erin,eastwood@example.edu"},
]
NAMES = {  # what nbgrader's student table and export hold: (first_name, last_name, email)
    "alice": ("Alice", "Liddell", "alice@example.edu"),
    "bob": ("Robert 'Bob'", "O'Brien", "bob@example.edu"),
    "carol": ("", "Plato", "carol@example.edu"),
    "dave": ("Antonín", "Dvořák", "dave@example.edu"),
    "erin": ("Erin", "Eastwood", ""),  # an address nbgrader could not carry whole is left out
}
THROUGH_THE_EXCHANGE = ("alice", "bob", "erin")
HAND_DROPPED = "dave"


def read_csv(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as stream:
        return {row["student_id"]: row for row in csv.DictReader(stream)}


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    root, exchange, homes = exchange_course(tmp_path_factory.mktemp("names"))  # release/ as committed
    settings = yaml.safe_load((root / "source" / "course.yaml").read_text())
    settings["assignments"][0]["due"] = DUE
    settings["late_policy"] = {"mode": "penalty", "percent": 10, "per": "day"}
    (root / "source" / "course.yaml").write_text(yaml.safe_dump(settings))
    write_roster(root / "roster.csv", ROSTER)

    nbgrader(root, "release_assignment", "autograd", exchange=exchange)
    for student in THROUGH_THE_EXCHANGE:
        fetch_and_submit(homes / student, student, exchange,
                         lambda fetched, student=student: shutil.copy(SAMPLES / student / "autograd" / "autograd.ipynb",
                                                                      fetched))
    for folder in (exchange / "autograd-course" / "inbound").iterdir():
        (folder / "timestamp.txt").write_text(ON_TIME)
        if folder.name.startswith("erin+"):
            (folder / "submission_secret.txt").write_text("")  # the inbound folder is the student's to write
    nbgrader(root, "collect", "autograd", exchange=exchange)
    # A notebook the instructor puts into submitted/ by hand (it came by email): no timestamp.txt, no secret.
    dropped = root / "submitted" / HAND_DROPPED / "autograd" / "autograd.ipynb"
    dropped.parent.mkdir(parents=True)
    shutil.copy(SAMPLES / HAND_DROPPED / "autograd" / "autograd.ipynb", dropped)
    os.utime(dropped, (HAND_DROPPED_AT, HAND_DROPPED_AT))

    assert main(["--course", str(root), "grade", "--roster", str(root / "roster.csv"), "--jobs", "1"]) == 0
    return root, exchange, homes


def test_nbgrader_export_parses_into_the_right_columns_with_our_scores(term):
    root, exchange, _ = term
    nbgrader(root, "export", exchange=exchange)
    theirs, ours = read_csv(root / "grades.csv"), read_csv(root / "grades-autograd.csv")
    assert set(theirs) == set(ours) == set(NAMES)
    for student, row in theirs.items():
        assert None not in row, (student, row)  # no field too many...
        assert None not in row.values(), (student, row)  # ...and none too few
        assert (row["first_name"], row["last_name"], row["email"]) == NAMES[student], student
        assert float(row["raw_score"]) == float(ours[student]["raw_score"]), student
        assert float(row["late_submission_penalty"]) == float(ours[student]["late_penalty"]), student
        assert float(row["score"]) == float(ours[student]["score"]), student
    assert {student: float(ours[student]["score"]) for student in ("alice", "bob", "dave", "erin")} == {
        student: SAMPLE_SCORES[student] for student in ("alice", "bob", "dave", "erin")}  # on time, dave too
    assert (ours["carol"]["status"], ours["carol"]["score"]) == ("missing", "0")


def test_nbgrader_lists_the_students_by_their_names(term):
    root, exchange, _ = term
    listed = nbgrader(root, "db", "student", "list", exchange=exchange)
    for student, (first, last, _) in NAMES.items():
        assert f"{student} ({last}, {first}) --" in listed, listed


def test_release_feedback_releases_every_page_hand_dropped_included(term):
    from nbgrader.utils import notebook_hash, parse_utc

    root, exchange, homes = term
    nbgrader(root, "release_feedback", "autograd", exchange=exchange)
    released = exchange / "autograd-course" / "feedback"
    graded = sorted(path.name for path in (root / "feedback").iterdir())
    assert graded == ["alice", "bob", "dave", "erin"]
    pages = {student: (root / "feedback" / student / "autograd" / "autograd.html").read_text() for student in graded}
    assert sorted(path.read_text() for path in released.glob("*.html")) == sorted(pages.values())
    for student in ("alice", "bob"):  # each fetches their own page with nbgrader's fetch_feedback
        home = homes / student
        nbgrader(home, "fetch_feedback", "autograd", f"--student={student}", f"--Exchange.cache={home / 'cache'}",
                 exchange=exchange)
        assert [page.read_text() for page in (home / "autograd" / "feedback").glob("*/autograd.html")] == [
            pages[student]]
    # dave's page went under a hash of a secret of its own (nobody else can compute it); its timestamp.txt is the
    # file's time, a label: his work counted as on time (no penalty above)
    folder = root / "feedback" / HAND_DROPPED / "autograd"
    secret = (folder / "submission_secret.txt").read_text()
    assert (released / f"{notebook_hash(secret=secret, notebook_id='autograd')}.html").read_text() == pages["dave"]
    assert parse_utc((folder / "timestamp.txt").read_text()) == datetime.utcfromtimestamp(HAND_DROPPED_AT)
    assert not (root / "submitted" / HAND_DROPPED / "autograd" / "timestamp.txt").exists()  # submitted/ untouched
