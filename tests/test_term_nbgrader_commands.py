"""After our commands, every nbgrader command of the term still works, for the whole class, as real processes.

A class of the sample students with a Canvas-style roster: four submit through nbgrader's exchange (a temporary
`--Exchange.root`, the course id of nbgrader_config.py), and hal too, who then empties the secret of his submission
(the inbound folder is the student's to write); dave's notebook is dropped into submitted/ by hand (no
timestamp.txt, no secret), carol submits nothing in the term. `autograd-course grade --roster` grades them into the
gradebook. Then:

- names as rosters write them ("Last, First", "First Last", one word, non-ASCII, quotes) reach nbgrader's student
  table as a person would expect, and `nbgrader export` (which writes its fields unquoted) gives a CSV that
  `csv.DictReader` reads into the right columns, with our scores student by student;
- the hand-dropped submission and the one with an emptied secret do not stop `nbgrader release_feedback`: it exits
  0 and every graded student's page is in the exchange (the hand-dropped one's under a secret of its own, its
  timestamp.txt the file's time, a label only: his work counts as on time);
- each nbgrader command an instructor runs in a term, run as the README runs them (`.venv/bin/...`, the venv not
  activated): `db student list`, `export` (read with csv.DictReader, student by student against our grades CSV),
  formgrader (a Jupyter server with nbgrader's extension, asked through the API its pages use, and each
  submission's page), `generate_feedback` (which leaves our pages alone), `release_feedback` and each student's
  `fetch_feedback`, and `collect` again (plain and `--update`: nothing breaks, nothing doubles, nothing we wrote is
  replaced). Then the service's attempts are recorded into the gradebook from the dashboard (carol's first work,
  bob's better one, a late student's) and every command runs again.

(The names and release_feedback cases were tests/test_term_names.py, three tests on a term of their own: they
are assertions on this term's first round now.)
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from tests.support.helpers import (
    ROOT,
    SAMPLE_SCORES,
    copy_course,
    exchange_course,
    fetch_and_submit,
    formgrader_server,
    write_roster,
)

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent  # the venv's bin: nbgrader, jupyter, autograd-course (and alembic, below)
SAMPLES = ROOT / "tests" / "samples" / "submitted"
COURSE_ID = "autograd-course"  # nbgrader_config.py's (tests/test_term.py checks it against source/course.yaml)
DUE = "2026-11-20 23:59:00 UTC"
ON_TIME = "2026-11-20 20:00:00.000000 UTC"
THROUGH_THE_EXCHANGE = ("alice", "bob", "erin", "frank")  # frank's "notebook" is not one: graded 0, with a message
EMPTIED = "hal"  # submits alice's sample through the exchange, then empties his submission_secret.txt
HAND_DROPPED = "dave"
HAND_DROPPED_AT = datetime(2026, 12, 1, 8, 0).timestamp()  # after the deadline: the file's time is a label only
SAMPLE_OF = {student: student for student in SAMPLE_SCORES} | {EMPTIED: "alice"}
SCORES = {student: SAMPLE_SCORES[sample] for student, sample in SAMPLE_OF.items()}
ROSTER = [  # as a Canvas export writes it
    {"student_id": "alice", "name": "Liddell, Alice", "email": "alice@example.edu", "lms_id": "1001"},
    {"student_id": "bob", "name": 'O\'Brien, Robert "Bob"', "email": "bob@example.edu", "lms_id": "1002"},
    # nothing in the term: the service's later
    {"student_id": "carol", "name": "Plato", "email": "carol@example.edu", "lms_id": "1003"},
    {"student_id": "dave", "name": "Dvořák, Antonín", "email": "dave@example.edu", "lms_id": "1004"},
    {"student_id": "erin", "name": "Erin Eastwood", "email": "erin,eastwood@example.edu", "lms_id": "1005"},
    {"student_id": "frank", "name": "Frank Fox", "email": "frank@example.edu", "lms_id": "1006"},
    {"student_id": "hal", "name": "Hal", "email": "hal@example.edu", "lms_id": "1008"},
]
NAMES = {  # what nbgrader's student table and export hold: (first_name, last_name, email)
    "alice": ("Alice", "Liddell", "alice@example.edu"),
    "bob": ("Robert 'Bob'", "O'Brien", "bob@example.edu"),
    "carol": ("", "Plato", "carol@example.edu"),
    "dave": ("Antonín", "Dvořák", "dave@example.edu"),
    "erin": ("Erin", "Eastwood", ""),  # an address nbgrader could not carry whole is left out
    "frank": ("Frank", "Fox", "frank@example.edu"),
    "hal": ("", "Hal", "hal@example.edu"),
}
STUDENTS = [row["student_id"] for row in ROSTER]
# joins after the term's grading
LATE = {"student_id": "gina", "name": "Gina Gray", "email": "gina@example.edu", "lms_id": "1007"}


def environment() -> dict[str, str]:
    """As the README runs the commands: `.venv/bin/...`, the venv not activated (its bin not on PATH; nbgrader's
    first opening of a gradebook runs `alembic` from PATH, which the course's nbgrader_config.py provides)."""
    return {**os.environ, "PATH": without_the_venv(os.environ.get("PATH", ""))}


def without_the_venv(path: str) -> str:
    return os.pathsep.join(
        entry for entry in path.split(os.pathsep) if entry and Path(entry).resolve() != BIN.resolve()
    )


def run(cwd: Path, *command: str) -> str:
    done = subprocess.run(command, cwd=cwd, env=environment(), capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def nbgrader(cwd: Path, *args: str, exchange: Path) -> str:
    return run(cwd, str(BIN / "nbgrader"), *args, f"--course={COURSE_ID}", f"--Exchange.root={exchange}")


def read_csv(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as stream:
        return {row["student_id"]: row for row in csv.DictReader(stream)}


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under `folder` (relative path -> sha256): what a command may not change."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    root, exchange, homes = exchange_course(tmp_path_factory.mktemp("term-commands"))
    settings = yaml.safe_load((root / "source" / "course.yaml").read_text())
    settings["assignments"][0]["due"] = DUE
    settings["late_policy"] = {"mode": "penalty", "percent": 10, "per": "day"}
    (root / "source" / "course.yaml").write_text(yaml.safe_dump(settings))
    write_roster(root / "roster.csv", ROSTER)

    run(root, str(BIN / "autograd-course"), "release", "--assignment", "autograd")  # the term is about autograd
    nbgrader(root, "release_assignment", "autograd", exchange=exchange)
    for student in (*THROUGH_THE_EXCHANGE, EMPTIED):
        sample = SAMPLES / SAMPLE_OF[student] / "autograd" / "autograd.ipynb"
        fetch_and_submit(
            homes / student,
            student,
            exchange,
            lambda fetched, sample=sample: shutil.copy(sample, fetched),
            run=nbgrader,
        )
    for folder in (exchange / COURSE_ID / "inbound").iterdir():
        (folder / "timestamp.txt").write_text(ON_TIME)
        if folder.name.startswith(f"{EMPTIED}+"):
            (folder / "submission_secret.txt").write_text("")  # the inbound folder is the student's to write
    nbgrader(root, "collect", "autograd", exchange=exchange)
    dropped = root / "submitted" / HAND_DROPPED / "autograd" / "autograd.ipynb"  # it came by email
    dropped.parent.mkdir(parents=True)
    shutil.copy(SAMPLES / HAND_DROPPED / "autograd" / "autograd.ipynb", dropped)
    os.utime(dropped, (HAND_DROPPED_AT, HAND_DROPPED_AT))

    run(root, str(BIN / "autograd-course"), "grade", "--roster", "roster.csv", "--jobs", "1")
    return root, exchange, homes


def formgrader(root: Path):
    """formgrader as the README's instructor starts it: the venv not activated."""
    return formgrader_server(root, environment())


def formgrader_get(url: str, token: str, path: str):
    """What formgrader's pages ask its API for (they send the same request from the instructor's browser)."""
    request = urllib.request.Request(f"{url}/formgrader/api/{path}", headers={"Authorization": f"token {token}"})  # noqa: S310
    with urllib.request.urlopen(request, timeout=120) as reply:  # noqa: S310 - loopback
        return json.loads(reply.read())


def formgrade_page(url: str, token: str, submission_id: str) -> int:
    """The status of formgrader's page of one submitted notebook (the autograded notebook, for grading by hand)."""
    try:
        with urllib.request.urlopen(  # noqa: S310
            f"{url}/formgrader/submissions/{submission_id}/?token={token}",
            timeout=120,
        ) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


@dataclass
class Seen:
    """What one round of the term's commands showed, for the assertions of the round's test."""

    listed: str  # `nbgrader db student list`
    theirs: dict[str, dict[str, str]]  # `nbgrader export`'s grades.csv, by student
    released: list[str]  # the pages in the exchange after `nbgrader release_feedback`
    pages: dict[str, str]  # our feedback page of each graded student
    fetched: dict[str, list[str]] = field(default_factory=dict)  # what each fetcher's fetch_feedback brought


def every_command_of_the_term(
    root: Path, exchange: Path, homes: Path, *, students: list[str], submitted: set[str], fetchers: tuple[str, ...]
) -> Seen:
    """nbgrader's commands of a term, each a real process, for the whole class, against our grades CSV.

    `submitted`: the students with work in the term's record; `fetchers`: those who fetch their feedback
    through the exchange (a hand-dropped submission's student has no submission of their own to find it by)."""
    ours = read_csv(root / "grades-autograd.csv")
    assert set(ours) == set(students)
    ours_before = (root / "grades-autograd.csv").read_bytes()

    listed = nbgrader(root, "db", "student", "list", exchange=exchange)
    for student in students:
        assert re.search(rf"^{student} \(.*\) --", listed, re.MULTILINE), (student, listed)

    nbgrader(root, "export", exchange=exchange)
    theirs = read_csv(root / "grades.csv")
    assert set(theirs) == set(ours)
    for student, row in theirs.items():
        assert None not in row, (student, row)  # no field too many...
        assert None not in row.values(), (student, row)  # ...and none too few
        assert float(row["raw_score"]) == float(ours[student]["raw_score"]), student
        assert float(row["late_submission_penalty"]) == float(ours[student]["late_penalty"]), student
        assert float(row["score"]) == float(ours[student]["score"]), student
    assert (root / "grades-autograd.csv").read_bytes() == ours_before  # nbgrader's export writes its own file

    with formgrader(root) as (url, token):
        listed_students = {s["id"]: s for s in formgrader_get(url, token, "students")}
        submissions = {s["student"]: s for s in formgrader_get(url, token, "submissions/autograd")}
        notebooks = {n["student"]: n for n in formgrader_get(url, token, "submitted_notebooks/autograd/autograd")}
        opened = {student: formgrade_page(url, token, notebook["id"]) for student, notebook in notebooks.items()}
    assert set(listed_students) == set(students)
    assert {s for s, entry in submissions.items() if entry["submitted"]} == submitted
    for student in submitted:
        entry = submissions[student]
        assert entry["autograded"], (student, entry)  # not "needs autograding": formgrader would grade it again
        assert not entry["needs_manual_grade"], (student, entry)
        assert entry["score"] == float(ours[student]["raw_score"]), (student, entry)
        assert listed_students[student]["score"] == float(ours[student]["raw_score"]), student
        assert opened[student] == 200, (student, opened)  # the page a TA grades by hand opens

    feedback = tree_digest(root / "feedback")
    nbgrader(root, "generate_feedback", "autograd", exchange=exchange)  # grading.md: no need, and harmless
    assert tree_digest(root / "feedback") == feedback  # our pages left alone as up to date

    nbgrader(root, "release_feedback", "autograd", exchange=exchange)
    released = exchange / COURSE_ID / "feedback"
    graded = {path.name for path in (root / "feedback").iterdir()}
    assert graded == submitted
    pages = {s: (root / "feedback" / s / "autograd" / "autograd.html").read_text() for s in graded}
    seen = Seen(listed, theirs, [page.read_text() for page in released.glob("*.html")], pages)
    assert set(seen.released) >= set(pages.values())
    for student in fetchers:
        home = homes / student
        shutil.rmtree(home / "autograd" / "feedback", ignore_errors=True)  # what this round fetches, only
        nbgrader(
            home,
            "fetch_feedback",
            "autograd",
            f"--student={student}",
            f"--Exchange.cache={home / 'cache'}",
            exchange=exchange,
        )
        fetched = [page.read_text() for page in (home / "autograd" / "feedback").glob("*/autograd.html")]
        assert pages[student] in fetched, student
        seen.fetched[student] = fetched

    records = {folder: tree_digest(root / folder) for folder in ("submitted", "autograded", "feedback")}
    gradebook = (root / "gradebook.db").read_bytes()
    for again in ((), ("--update",)):  # a second collect after ours: nothing breaks, doubles or is replaced
        nbgrader(root, "collect", *again, "autograd", exchange=exchange)
        assert {folder: tree_digest(root / folder) for folder in records} == records, again
        nbgrader(root, "export", exchange=exchange)
        assert read_csv(root / "grades.csv") == theirs, again
    assert (root / "gradebook.db").read_bytes() == gradebook
    return seen


def test_nbgrader_commands_after_grade(term):
    """Every command of the term after `grade --roster`, and what its first round shows: the roster's names in
    nbgrader's student table and export, and release_feedback for the whole class, the hand-dropped submission and
    the emptied secret included (once tests/test_term_names.py, three tests on a term of its own)."""
    from nbgrader.utils import notebook_hash, parse_utc

    root, exchange, homes = term
    ours = read_csv(root / "grades-autograd.csv")
    assert {s: float(row["score"]) for s, row in ours.items() if s != "carol"} == {
        s: SCORES[s] for s in STUDENTS if s != "carol"
    }  # dave's hand-dropped notebook counted, on time
    assert (ours["carol"]["status"], ours["carol"]["score"]) == ("missing", "0")
    seen = every_command_of_the_term(
        root,
        exchange,
        homes,
        students=STUDENTS,
        submitted={s for s in STUDENTS if s != "carol"},
        fetchers=THROUGH_THE_EXCHANGE,
    )

    # names as rosters write them ("Last, First", quotes, one word, non-ASCII), as a person would expect them, in
    # nbgrader's student table and in its export (its fields unquoted), read into the right columns
    for student, (first, last, _) in NAMES.items():
        assert f"{student} ({last}, {first}) --" in seen.listed, seen.listed
    assert set(seen.theirs) == set(NAMES)
    for student, row in seen.theirs.items():
        assert (row["first_name"], row["last_name"], row["email"]) == NAMES[student], student

    # the class's first release_feedback released every graded student's page and nothing else, each fetcher got
    # exactly their own
    assert sorted(seen.released) == sorted(seen.pages.values())
    assert seen.fetched == {student: [seen.pages[student]] for student in THROUGH_THE_EXCHANGE}
    # dave's page went under a hash of a secret of its own (nobody else can compute it); its timestamp.txt is the
    # file's time, a label: his work counted as on time (no penalty above)
    folder = root / "feedback" / HAND_DROPPED / "autograd"
    secret = (folder / "submission_secret.txt").read_text()
    released = exchange / COURSE_ID / "feedback"
    assert (released / f"{notebook_hash(secret=secret, notebook_id='autograd')}.html").read_text() == seen.pages["dave"]
    assert parse_utc((folder / "timestamp.txt").read_text()) == datetime.utcfromtimestamp(HAND_DROPPED_AT)
    assert not (root / "submitted" / HAND_DROPPED / "autograd" / "timestamp.txt").exists()  # submitted/ untouched


def submit_the_form(page: str, post) -> object:
    """The dashboard's recording form sent as a browser sends it with every box ticked (a confirmation, or a
    choice of students, whichever the form asks for)."""
    form = re.search(r'(?s)<form method=post action="gradebook">(.*?)</form>', page)
    assert form, page
    fields: dict[str, list[str]] = {}
    for tag in re.findall(r"<input\b[^>]*>", form.group(1)):
        name = re.search(r'name="?([^"\s>]+)', tag)
        value = re.search(r'value="([^"]*)"|value=([^\s>]+)', tag)
        if name and value:  # a name given by several boxes (one per student) is sent once per ticked box
            fields.setdefault(name.group(1), []).append(html.unescape(value.group(1) or value.group(2)))
    return post(**{name: values[0] if len(values) == 1 else values for name, values in fields.items()})


def test_nbgrader_commands_after_the_dashboards_recording(term):
    """The service's attempts recorded into the gradebook (carol's first work, bob's better one, and the work of
    gina, who joined the course late: on the service's roster, not in the term's), then every nbgrader command
    again. After the test above: the same term, one step later."""
    from tests.support.helpers import CORRECT_CODE, submitted_notebook
    from tests.support.service import Server, multipart, notebook_bytes, request

    root, exchange, homes = term
    yaml_path = root / "source" / "course.yaml"
    settings = yaml.safe_load(yaml_path.read_text())
    settings["assignments"][0]["due"] = "2099-01-01 00:00:00 UTC"  # the service's attempts are on time
    yaml_path.write_text(yaml.safe_dump(settings))
    write_roster(root / "service-roster.csv", [*ROSTER, LATE])
    run(root, str(BIN / "autograd-course"), "serve", "tokens", "service-roster.csv", "--out", "tokens.csv")
    with (root / "tokens.csv").open(encoding="utf-8") as stream:
        tokens = {row["student_id"]: row["token"] for row in csv.DictReader(stream)}
    server = Server(root, tokens=tokens, instructor=(root / "tokens-instructor.txt").read_text().strip())
    server.start()
    try:
        for student in ("bob", "carol", "gina"):
            done = server.submit(student, notebook_bytes(submitted_notebook(CORRECT_CODE))).json
            assert (done["status"], done["score"]) == ("graded", 57), done
        base = f"{server.url}/i/{server.instructor}"
        preview = request(f"{base}/export/gradebook").text
        csrf = re.search(r'name=csrf value="([^"]+)"', preview).group(1)

        def post(**fields: str | list[str]):
            body, kind = multipart({"csrf": csrf, **fields})
            return request(f"{base}/export/gradebook", method="POST", data=body, content_type=kind)

        done = submit_the_form(preview, post)
        assert done.status == 200, done.text
        assert "Recorded 3 students (bob, carol, gina)" in done.text, done.text
    finally:
        server.stop()
    ours = read_csv(root / "grades-autograd.csv")
    assert (ours["bob"]["score"], ours["carol"]["score"], ours["gina"]["score"]) == ("57", "57", "57")
    everyone = [*STUDENTS, LATE["student_id"]]
    every_command_of_the_term(
        root, exchange, homes, students=everyone, submitted=set(everyone), fetchers=THROUGH_THE_EXCHANGE
    )


def test_nbgrader_opens_a_new_courses_gradebook_from_the_venv_without_activating_it(tmp_path):
    """The README runs `.venv/bin/nbgrader collect autograd` without an activated venv; on a course whose gradebook
    does not exist yet (a TA's clone, release/ committed) nbgrader runs `alembic` from PATH to make it. The course's
    nbgrader_config.py puts the venv's bin on nbgrader's PATH: the command works, the gradebook is whole."""
    import sqlite3

    root, exchange = copy_course(tmp_path / "course"), tmp_path / "exchange"
    shutil.copy(ROOT / "nbgrader_config.py", root)
    exchange.mkdir()
    path = without_the_venv(os.environ.get("PATH", ""))
    assert shutil.which("alembic", path=path) is None  # no alembic but the venv's: this test can fail
    for command in ("release_assignment", "collect"):
        done = subprocess.run(
            [str(BIN / "nbgrader"), command, "autograd", f"--Exchange.root={exchange}"],
            cwd=root,
            env={**os.environ, "PATH": path},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    assert "No submissions of 'autograd'" in done.stderr
    with contextlib.closing(sqlite3.connect(root / "gradebook.db")) as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() != []
