"""A week-one term end to end (issue 40's first "Done when"): nbgrader's exchange, our grading, the service, and
nbgrader's own tools after ours, on one course.

A Canvas-style roster ("Last, First" names with commas, quotes and non-ASCII), variants on (the course secret in a
file of mode 600), `release --students`, a real `nbgrader release_assignment` (the default notebook only), each
student's own copy handed out beside it and saved over the fetched notebook, worked for their own numbers and sent
with `nbgrader submit`; one student works the default notebook instead; one notebook dropped into submitted/ by
hand; `grade --roster`. Then the service on the same course: `serve tokens` for the roster, a student who was not in
the term uploads, and so does one who was; a late student is added by re-running `serve tokens` and
`release --students` with a longer roster while it runs. Then:

- each personalised notebook reaches only its student (the exchange, the students' folders, the service's page);
- every earlier link still answers, and the late student's link gives them their own notebook;
- the dashboard's Canvas and Moodle CSVs give no 0 to a student the service never saw (the term's grade, or blank);
- `nbgrader release_feedback` exits 0 for the class, `nbgrader export` (read with `csv.DictReader`) and formgrader
  (its API, and the page of each graded notebook) give our grades-autograd.csv's scores student by student.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from course.cli import main
from course.core.config import load_config
from course.pipeline.assignment import load_course_assignment
from course.pipeline.variants import derive, numbers_source
from tests.support.helpers import (
    CORRECT_CODE,
    ROOT,
    exchange_course,
    fetch_and_submit,
    fill,
    formgrader_server,
    load,
    nbgrader,
    solve,
    write,
    wrong_literal,
)
from tests.support.helpers import write_roster as write_roster_rows

pytestmark = pytest.mark.slow

SECRET = "the week-one term's course secret"  # noqa: S105 - the test's own
DUE = "2026-11-20 23:59:00 UTC"
ON_TIME = "2026-11-20 20:00:00.000000 UTC"
COLUMNS = ["student_id", "name", "lms_id", "sis_user_id", "section", "email"]  # as a Canvas export has them
ROSTER = [
    ["alice", "Liddell, Alice", "1001", "S-1001", "Autograd 101", "alice@example.edu"],
    ["bob", 'O\'Brien, Robert "Bob"', "1002", "S-1002", "Autograd 101", "bob@example.edu"],
    ["carol", "Plato", "1003", "S-1003", "Autograd 101", "carol@example.edu"],
    ["dave", "Dvořák, Antonín", "1004", "S-1004", "Autograd 102", "dave@example.edu"],
    ["erin", "King, Martin Luther, Jr.", "1005", "S-1005", "Autograd 102", "erin@example.edu"],
    ["frank", "Nguyễn, Văn Frank", "1006", "S-1006", "Autograd 102", "frank@example.edu"],
]
LATE = ["gus", "García Márquez, Gabriel", "1007", "S-1007", "Autograd 102", "gus@example.edu"]
NAMES = {  # nbgrader's student table and export: (first_name, last_name)
    "alice": ("Alice", "Liddell"),
    "bob": ("Robert 'Bob'", "O'Brien"),
    "carol": ("", "Plato"),
    "dave": ("Antonín", "Dvořák"),
    "erin": ("Martin Luther Jr.", "King"),
    "frank": ("Văn Frank", "Nguyễn"),
}
OWN_COPY = ("alice", "bob")  # through the exchange, each working the copy personalised for them
DEFAULT_COPY = "erin"  # through the exchange, working the fetched default notebook (answers right for the defaults)
HAND_DROPPED = "dave"  # his own copy, answered, put into submitted/ by the instructor (no timestamp.txt, no secret)
SERVICE_ONLY = "frank"  # nothing in the term; uploads his own copy to the service
EVERYONE = [row[0] for row in [*ROSTER, LATE]]
AUTOGRAD = load_course_assignment(load_config(ROOT), "autograd")


def numbers_of(student: str) -> dict:
    return derive(AUTOGRAD.content, SECRET.encode(), student, set(AUTOGRAD.default_params))


def answers_for(student: str, wrong: tuple[str, ...] = ()) -> dict[str, str]:
    """Answers worked out for the student's own numbers (`wrong`: these answers off by one)."""
    values = solve(numbers_of(student))
    return {name: repr(wrong_literal(value) if name in wrong else value) for name, value in values.items()} | {
        "cubic_derivative": CORRECT_CODE["cubic_derivative"]
    }


def whose_numbers(notebook: dict) -> set[str]:
    """Whose own numbers a notebook shows: the student id on its numbers cell, or their numbers in the cell."""
    cell = next(c for c in notebook["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "numbers")
    source = "".join(cell["source"])
    marked = cell["metadata"].get("autograd_course", {}).get("student_id")
    return {s for s in EVERYONE if s == marked or source == numbers_source(numbers_of(s), AUTOGRAD.content)}


def notebooks_under(folder: Path) -> dict[Path, set[str]]:
    """Every .ipynb under `folder` -> whose numbers it shows."""
    return {path: whose_numbers(load(path)) for path in sorted(folder.rglob("*.ipynb"))}


def named_in(path: Path) -> set[str]:
    """The students a path names: a folder of theirs (`bob/`) or an exchange folder of theirs (`bob+autograd+...`)."""
    return {s for s in EVERYONE for part in path.parts if part == s or part.startswith(f"{s}+")}


def write_roster(path: Path, rows: list[list[str]]) -> Path:
    """The roster of rows in COLUMNS' order."""
    return write_roster_rows(path, [dict(zip(COLUMNS, row, strict=True)) for row in rows])


def read_csv(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as stream:
        return {row["student_id"]: row for row in csv.DictReader(stream)}


def read_tokens(path: Path) -> dict[str, str]:
    return {student: row["token"] for student, row in read_csv(path).items()}


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    """The whole term, up to a running service with the late student added; yields what the tests look at."""
    from tests.support.service import Server, notebook_bytes, request

    base = tmp_path_factory.mktemp("week-one")
    root, exchange, homes = exchange_course(base)
    secret = root / "course-secret.txt"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    settings = yaml.safe_load((root / "source" / "course.yaml").read_text())
    settings["assignments"][0]["due"] = DUE
    settings |= {"variants": True, "variant_secret_file": secret.name}
    (root / "source" / "course.yaml").write_text(yaml.safe_dump(settings))
    roster = write_roster(root / "roster.csv", ROSTER)

    with pytest.MonkeyPatch.context() as env:
        env.delenv("AUTOGRAD_COURSE_SECRET", raising=False)  # the file is the secret (the variable would win)
        assert (
            main(
                ["--course", str(root), "release", "--assignment", "autograd", "--no-verify", "--students", str(roster)]
            )
            == 0
        )
        nbgrader(root, "release_assignment", "autograd", exchange=exchange)
        released = notebooks_under(root / "personalised")
        fetched = {}
        for student in (*OWN_COPY, DEFAULT_COPY):

            def work(notebook: Path, student: str = student) -> None:
                home = notebook.parents[1]
                fetched[student] = {
                    p.relative_to(home).as_posix(): whose for p, whose in notebooks_under(notebook.parent).items()
                }
                given = load(notebook)
                if student in OWN_COPY:  # docs/authoring.md: saved over the fetched notebook, worked there
                    given = load(root / "personalised" / "autograd" / student / "autograd.ipynb")
                answers = answers_for(student, ("net_dL_dw", "cubic_grad") if student == "bob" else ())
                write(fill(given, CORRECT_CODE if student == DEFAULT_COPY else answers), notebook)

            fetch_and_submit(homes / student, student, exchange, work)
        for folder in (exchange / "autograd-course" / "inbound").iterdir():
            (folder / "timestamp.txt").write_text(ON_TIME)
        nbgrader(root, "collect", "autograd", exchange=exchange)
        own = load(root / "personalised" / "autograd" / HAND_DROPPED / "autograd.ipynb")
        write(fill(own, answers_for(HAND_DROPPED)), root / "submitted" / HAND_DROPPED / "autograd" / "autograd.ipynb")
        assert main(["--course", str(root), "grade", "--roster", str(roster), "--jobs", "2", "--quiet"]) == 0

        tokens = root / "tokens.csv"
        assert main(["--course", str(root), "serve", "tokens", str(roster), "--out", str(tokens)]) == 0
        server = Server(
            root, jobs=1, tokens=read_tokens(tokens), instructor=(root / "tokens-instructor.txt").read_text().strip()
        )
        server.start()
        try:
            first_links = dict(server.tokens)
            served = {}
            for student in server.tokens:  # "Download your notebook" on each student's page
                reply = request(f"{server.url}/s/{server.tokens[student]}/notebook")
                assert reply.status == 200, reply.text
                served[student] = json.loads(reply.text)
            attempts = {}
            for student in (SERVICE_ONLY, "bob"):  # frank, new to the course; bob, better than in the term
                reply = server.submit(student, notebook_bytes(fill(served[student], answers_for(student))))
                assert reply.status in (200, 202), reply.text
                attempts[student] = server.wait_graded(student, reply.json["id"])

            write_roster(roster, [*ROSTER, LATE])  # the late student, added while the service runs
            subprocess.run(server.command("tokens", str(roster), "--out", str(tokens)), check=True, capture_output=True)
            # ... and his own copy made for the exchange's way, the others' copies as they were handed out
            handed_out = {path: path.read_bytes() for path in (root / "personalised").rglob("*.ipynb")}
            assert (
                main(
                    [
                        "--course",
                        str(root),
                        "release",
                        "--assignment",
                        "autograd",
                        "--no-verify",
                        "--students",
                        str(roster),
                    ]
                )
                == 0
            )
            released_again = {path: path.read_bytes() for path in (root / "personalised").rglob("*.ipynb")}
            released_again[root / "release" / "autograd" / "autograd.ipynb"] = (
                root / "release" / "autograd" / "autograd.ipynb"
            ).read_bytes()
            server.tokens = read_tokens(tokens)
            reply = request(f"{server.url}/s/{server.tokens[LATE[0]]}/notebook")
            assert reply.status == 200, reply.text
            served[LATE[0]] = json.loads(reply.text)
            yield {
                "root": root,
                "exchange": exchange,
                "homes": homes,
                "base": base,
                "server": server,
                "released": released,
                "fetched": fetched,
                "served": served,
                "first_links": first_links,
                "attempts": attempts,
                "handed_out": handed_out,
                "released_again": released_again,
            }
        finally:
            server.stop()


def test_each_personalised_notebook_reaches_only_its_student(term):
    root, base = term["root"], term["base"]
    # release --students: one copy per roster student, at personalised/<assignment>/<id>/ and nowhere else
    assert term["released"] == {root / "personalised" / "autograd" / s / "autograd.ipynb": {s} for s, *_ in ROSTER}
    # the late student's copy, made by release --students with the longer roster: the earlier ones unchanged
    again = dict(term["released_again"])
    # release/ regenerated is still what nbgrader's exchange handed out
    exchanged = term["exchange"] / "autograd-course" / "outbound" / "autograd" / "autograd.ipynb"
    assert again.pop(root / "release" / "autograd" / "autograd.ipynb") == exchanged.read_bytes()
    late_copy = root / "personalised" / "autograd" / LATE[0] / "autograd.ipynb"
    assert {path: again[path] for path in term["handed_out"]} == term["handed_out"]
    assert set(again) - set(term["handed_out"]) == {late_copy}
    assert whose_numbers(json.loads(again[late_copy])) == {LATE[0]}
    # nbgrader's exchange hands everyone the default notebook, and nothing else
    assert term["fetched"] == {s: {"autograd/autograd.ipynb": set()} for s in (*OWN_COPY, DEFAULT_COPY)}
    # the service's page gives each their own, the late student too
    assert {s: whose_numbers(notebook) for s, notebook in term["served"].items()} == {s: {s} for s in EVERYONE}
    # after the whole term, no notebook anywhere (course, exchange, students' folders) shows a student's numbers
    # in a place that is not theirs
    everywhere = notebooks_under(base)
    for path, whose in everywhere.items():
        assert whose <= named_in(path.relative_to(base)), (path, whose)
    for student in OWN_COPY:  # the check above can fail: what they worked on is theirs, and was graded as theirs
        assert everywhere[term["homes"] / student / "autograd" / "autograd.ipynb"] == {student}
        assert everywhere[root / "submitted" / student / "autograd" / "autograd.ipynb"] == {student}
    ours = read_csv(root / "grades-autograd.csv")
    assert [float(ours[s]["score"]) for s in ("alice", HAND_DROPPED)] == [AUTOGRAD.max_score] * 2
    assert 0 < float(ours["bob"]["score"]) < AUTOGRAD.max_score
    assert {s: attempt["score"] for s, attempt in term["attempts"].items()} == {
        SERVICE_ONLY: AUTOGRAD.max_score,
        "bob": AUTOGRAD.max_score,
    }
    # erin worked the default notebook: graded with her own numbers, and told so first, and the instructor too
    erins = (root / "feedback" / DEFAULT_COPY / "autograd" / "autograd.html").read_text()
    assert "This notebook has the default numbers, the same in everyone&#x27;s copy, not yours" in erins
    assert 0 < float(ours[DEFAULT_COPY]["score"]) < AUTOGRAD.max_score
    assert json.loads((root / "integrity-autograd.json").read_text()) == {
        DEFAULT_COPY: [
            "submitted a notebook with the default numbers, the release everyone was given, not one personalised for "
            f"'{DEFAULT_COPY}' (graded with '{DEFAULT_COPY}''s own numbers)"
        ]
    }


def test_old_links_still_work_and_the_late_student_s_link_works(term):
    from tests.support.service import request

    server, first = term["server"], term["first_links"]
    assert {s: server.tokens[s] for s in first} == first  # re-running serve tokens changed no earlier link
    assert sorted(server.tokens) == sorted(EVERYONE)
    assert {s: request(f"{server.url}/s/{token}/").status for s, token in server.tokens.items()} == {
        s: 200 for s in EVERYONE
    }
    assert (term["root"] / "tokens-instructor.txt").read_text().strip() == server.instructor
    assert request(f"{server.url}/i/{server.instructor}/").status == 200  # the instructor's first link too
    for student, made in term["attempts"].items():  # an attempt made with a first link is still theirs to read
        assert request(f"{server.url}{made['feedback_url']}", token=first[student]).status == 200, student


def test_the_dashboards_lms_csvs_hold_no_0_for_a_student_the_service_never_saw(term):
    from tests.support.service import request

    server, ours = term["server"], read_csv(term["root"] / "grades-autograd.csv")
    base = f"{server.url}/i/{server.instructor}"
    canvas_reply, moodle_reply = request(f"{base}/export/canvas.csv"), request(f"{base}/export/moodle.csv")
    assert (canvas_reply.status, moodle_reply.status) == (200, 200), canvas_reply.text + moodle_reply.text
    by_lms_id = {row[2]: row[0] for row in [*ROSTER, LATE]}
    by_email = {row[5]: row[0] for row in [*ROSTER, LATE]}
    canvas = list(csv.DictReader(io.StringIO(canvas_reply.text)))
    assert canvas[0]["Student"] == "Points Possible"
    assert [row["Student"] for row in canvas[1:]] == [row[1] for row in [*ROSTER, LATE]]  # names as the roster's
    canvas_cells = {by_lms_id[row["ID"]]: row["autograd"] for row in canvas[1:]}
    moodle_cells = {
        by_email[row["Email address"]]: row["autograd"] for row in csv.DictReader(io.StringIO(moodle_reply.text))
    }
    # the term's grade (bob's better attempt waits for the recording that would replace it), the service's
    # attempt for frank, who had no term grade, and a blank for carol (no work) and gus (joined late)
    term_grades = {s: ours[s]["score"] for s in ("alice", "bob", HAND_DROPPED, DEFAULT_COPY)}
    want = term_grades | {"carol": "", SERVICE_ONLY: f"{term['attempts'][SERVICE_ONLY]['score']:g}", LATE[0]: ""}
    assert canvas_cells == want
    assert moodle_cells == want
    assert [s for s, cell in canvas_cells.items() if cell and float(cell) == 0 and s not in term["attempts"]] == []


def test_nbgraders_release_feedback_export_and_formgrader_agree_with_our_csv(term):
    root, exchange = term["root"], term["exchange"]
    ours = read_csv(root / "grades-autograd.csv")
    assert set(ours) == set(NAMES)  # the roster graded (the late student joined the service only)

    nbgrader(root, "release_feedback", "autograd", exchange=exchange)
    released = sorted(p.read_text() for p in (exchange / "autograd-course" / "feedback").glob("*.html"))
    graded = ("alice", "bob", HAND_DROPPED, DEFAULT_COPY)
    assert released == sorted((root / "feedback" / s / "autograd" / "autograd.html").read_text() for s in graded)

    nbgrader(root, "export", exchange=exchange)
    theirs = read_csv(root / "grades.csv")
    # `serve tokens` put the late student into nbgrader's student table too; nbgrader exports a student with no
    # submission as 0 (its own rule: an instructor sending nbgrader's export to an LMS gets that 0 from nbgrader)
    late = theirs.pop(LATE[0])
    assert (late["last_name"], late["first_name"], late["timestamp"], float(late["score"])) == (
        "García Márquez",
        "Gabriel",
        "",
        0.0,
    )
    assert set(theirs) == set(ours)
    for student, row in theirs.items():
        assert None not in row, (student, row)  # no field too many...
        assert None not in row.values(), (student, row)  # ...and none too few
        assert (row["first_name"], row["last_name"]) == NAMES[student], student
        assert float(row["raw_score"]) == float(ours[student]["raw_score"]), student
        assert float(row["late_submission_penalty"]) == float(ours[student]["late_penalty"]), student
        assert float(row["score"]) == float(ours[student]["score"]), student

    with formgrader_server(root) as (url, token):
        submissions, students, notebooks = (
            formgrader_api(url, token, path)
            for path in ("submissions/autograd", "students", "submitted_notebooks/autograd/autograd")
        )
        pages = {row["student"]: formgrader_page(url, token, row["id"]) for row in notebooks}
    # the page an instructor grades by hand: each graded notebook opens, the hand-dropped one too
    assert {student: status for student, (status, _) in pages.items()} == {s: 200 for s in graded}
    assert all("Your numbers" in page for _, page in pages.values())  # the notebook is on it, not an error page
    assert {row["student"]: row["score"] for row in notebooks} == {s: float(ours[s]["score"]) for s in graded}
    # its submissions page: each graded submission, with our score (the hand-dropped one as graded, not pending)
    listed = {row["student"]: row for row in submissions}
    assert set(listed) == set(graded)
    for student, row in listed.items():
        assert (row["first_name"], row["last_name"]) == NAMES[student], student
        assert (row["autograded"], row["score"]) == (True, float(ours[student]["score"])), (student, row)
    # its students page: everyone in its table, the late student too, with our score (0 for no work, as nbgrader's)
    by_id = {row["id"]: row for row in students}
    late = by_id.pop(LATE[0])
    assert (late["last_name"], late["score"]) == ("García Márquez", 0.0)
    assert set(by_id) == set(ours)
    for student, row in by_id.items():
        assert (row["first_name"], row["last_name"]) == NAMES[student], student
        assert row["score"] == float(ours[student]["score"]), (student, row)


def formgrader_api(url: str, token: str, path: str) -> list[dict]:
    with urllib.request.urlopen(f"{url}/formgrader/api/{path}?token={token}", timeout=120) as reply:  # noqa: S310
        return json.load(reply)


def formgrader_page(url: str, token: str, notebook_id: str) -> tuple[int, str]:
    with urllib.request.urlopen(  # noqa: S310
        f"{url}/formgrader/submissions/{notebook_id}/?token={token}",
        timeout=120,
    ) as reply:
        return reply.status, reply.read().decode("utf-8", "replace")
