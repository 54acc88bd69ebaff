"""A whole term's assignment, run as an instructor runs it with nbgrader and our CLI.

release (ours) -> nbgrader release_assignment -> students fetch and submit through the exchange -> nbgrader
collect (timestamps: one on time, one late, one late but inside an extension, one roster student missing)
-> autograd-course grade -> formgrader's API, nbgrader export, nbgrader release_feedback / fetch_feedback,
nbgrader validate, and the Canvas CSV, all checked against our grades.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from course.cli import main
from tests.support.helpers import (
    ALL_VALUES,
    CORRECT_CODE,
    ROOT,
    exchange_course,
    fetch_and_submit,
    nbgrader,
    require_tool,
    submitted_notebook,
    write,
    write_roster,
    wrong_literal,
)

DUE = "2026-11-20 23:59:00 UTC"
SUBMITTED_AT = {  # what nbgrader's clock said when each student submitted
    "alice": "2026-11-20 20:00:00.000000 UTC",  # on time
    "bob": "2026-11-22 01:00:00.000000 UTC",  # 1 day 1 hour late: two started days at 10% of 57
    "dave": "2026-11-21 12:00:00.000000 UTC",  # 12 hours late, inside his 48-hour extension
}
ROSTER = [  # carol is on the roster and submits nothing
    {
        "student_id": "alice",
        "name": "Alice Archer",
        "lms_id": "1001",
        "sis_user_id": "S-1",
        "sis_login_id": "aa1",
        "section": "Autograd 101",
        "email": "alice@example.edu",
    },
    {
        "student_id": "bob",
        "name": "Bob Baker",
        "lms_id": "1002",
        "sis_user_id": "S-2",
        "sis_login_id": "bb2",
        "section": "Autograd 101",
        "email": "bob@example.edu",
    },
    {
        "student_id": "carol",
        "name": "Carol Cole",
        "lms_id": "1003",
        "sis_user_id": "S-3",
        "sis_login_id": "cc3",
        "section": "Autograd 101",
        "email": "carol@example.edu",
    },
    {
        "student_id": "dave",
        "name": "Dave Doe",
        "lms_id": "1004",
        "sis_user_id": "S-4",
        "sis_login_id": "dd4",
        "section": "Autograd 101",
        "email": "dave@example.edu",
    },
]


def read_csv(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as stream:
        return {row.get("student_id") or row.get("Student"): row for row in csv.DictReader(stream)}


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    root, exchange, homes = exchange_course(tmp_path_factory.mktemp("term"))
    settings = yaml.safe_load((root / "source" / "course.yaml").read_text())
    settings["assignments"][0].update(due=DUE, extensions={"dave": 48})
    settings["late_policy"] = {"mode": "penalty", "percent": 10, "per": "day"}
    (root / "source" / "course.yaml").write_text(yaml.safe_dump(settings))
    write_roster(root / "roster.csv", ROSTER)

    # The instructor releases (ours, then nbgrader's exchange). Without the proof's two nbgrader autogrades: the
    # proof is test_release.py's, and test_term_nbgrader_commands.py's term releases with it, as the README does.
    assert main(["--course", str(root), "release", "--assignment", "autograd", "--no-verify"]) == 0  # about autograd
    nbgrader(root, "release_assignment", "autograd", exchange=exchange)

    # Students fetch, answer and submit through the exchange.
    answers = {
        "alice": CORRECT_CODE,
        "bob": {**CORRECT_CODE, "net_dL_dw": repr(wrong_literal(ALL_VALUES["net_dL_dw"]))},
        "dave": {**CORRECT_CODE, "twice_w_grad": "12"},
    }

    def fetch_answer_submit(student: str) -> None:
        def answer(fetched: Path) -> None:
            assert "net_h = ..." in fetched.read_text()
            write(submitted_notebook(answers[student]), fetched)

        fetch_and_submit(homes / student, student, exchange, answer)

    with ThreadPoolExecutor(len(answers)) as students:  # each in their own home, at the same time, as in a class
        list(students.map(fetch_answer_submit, answers))  # list(): a failed assertion is raised here
    for folder in (exchange / "autograd-course" / "inbound").iterdir():
        (folder / "timestamp.txt").write_text(SUBMITTED_AT[folder.name.split("+")[0]])

    # The instructor collects and grades with our CLI, in the README's default layout.
    nbgrader(root, "collect", "autograd", exchange=exchange)
    assert (root / "submitted" / "bob" / "autograd" / "timestamp.txt").read_text() == SUBMITTED_AT["bob"]
    assert main(["--course", str(root), "grade", "--roster", str(root / "roster.csv"), "--jobs", "1"]) == 0
    return root, exchange, homes


@pytest.mark.slow
def test_grades_csv_has_raw_score_penalty_and_missing_work(term):
    root, _, _ = term
    ours = read_csv(root / "grades-autograd.csv")
    assert set(ours) == {"alice", "bob", "carol", "dave"}
    assert (ours["alice"]["raw_score"], ours["alice"]["late_penalty"], ours["alice"]["score"]) == ("57", "0", "57")
    assert (ours["bob"]["raw_score"], ours["bob"]["late_penalty"], ours["bob"]["score"]) == ("56", "11.4", "44.6")
    assert (ours["dave"]["raw_score"], ours["dave"]["late_penalty"], ours["dave"]["score"]) == ("55", "0", "55")
    assert (ours["carol"]["status"], ours["carol"]["score"]) == ("missing", "0")
    summary = json.loads((root / "class-summary-autograd.json").read_text())
    assert summary["missing"] == ["carol"]


@pytest.mark.slow
def test_feedback_says_how_late_and_what_it_cost(term):
    root, _, _ = term
    bob = json.loads((root / "feedback" / "bob" / "autograd" / "feedback.json").read_text())
    assert (bob["raw_score"], bob["late_penalty"], bob["score"]) == (56, 11.4, 44.6)
    assert any(m.startswith("Submitted 1 day 1 hour after the deadline") for m in bob["messages"])
    dave = json.loads((root / "feedback" / "dave" / "autograd" / "feedback.json").read_text())
    assert not any("deadline" in m for m in dave["messages"])


@pytest.mark.slow
def test_formgrader_shows_every_submission_autograded_with_our_scores(term):
    from tests.support.helpers import formgrader_api

    root, _, _ = term
    ours = read_csv(root / "grades-autograd.csv")
    api = formgrader_api(root)
    submissions = {s["student"]: s for s in api.get_submissions("autograd")}
    for student in ("alice", "bob", "dave"):
        assert submissions[student]["autograded"], student
        assert not submissions[student]["needs_manual_grade"], student
        assert submissions[student]["score"] == float(ours[student]["raw_score"]), student
    assert "carol" not in submissions  # on the roster: formgrader's Students view lists her, with nothing submitted
    students = {s["id"]: s for s in api.get_students()}
    # the roster's names and emails, not "None, None"
    assert [
        (
            students[s["student_id"]]["first_name"],
            students[s["student_id"]]["last_name"],
            students[s["student_id"]]["email"],
        )
        for s in ROSTER
    ] == [(s["name"].split()[0], s["name"].split()[1], s["email"]) for s in ROSTER]
    # one entry per assignment of the course (nbgrader sorts them by name), none submitted
    assert [(s["name"], s["submitted"]) for s in api.get_student_submissions("carol")] == [
        ("autograd", False),
        ("backprop", False),
        ("training", False),
    ]
    notebooks = api.get_notebook_submissions("autograd", "autograd")
    assert {n["student"] for n in notebooks} == {"alice", "bob", "dave"}
    assert not any(n["needs_manual_grade"] for n in notebooks)


@pytest.mark.slow
def test_nbgrader_export_agrees_with_our_grades_and_leaves_them_alone(term):
    root, exchange, _ = term
    ours_before = (root / "grades-autograd.csv").read_bytes()
    nbgrader(root, "export", exchange=exchange)
    assert (root / "grades-autograd.csv").read_bytes() == ours_before
    theirs = read_csv(root / "grades.csv")
    ours = read_csv(root / "grades-autograd.csv")
    assert set(theirs) == set(ours)
    for student, row in ours.items():
        assert float(theirs[student]["raw_score"]) == float(row["raw_score"]), student
        assert float(theirs[student]["late_submission_penalty"]) == float(row["late_penalty"]), student
        assert float(theirs[student]["score"]) == float(row["score"]), student
    assert theirs["bob"]["duedate"].startswith("2026-11-20 23:59:00")


@pytest.mark.slow
def test_feedback_is_released_and_fetched_through_the_exchange(term):
    root, exchange, homes = term
    nbgrader(root, "release_feedback", "autograd", exchange=exchange)
    for student in ("alice", "bob", "dave"):
        home = homes / student
        nbgrader(
            home,
            "fetch_feedback",
            "autograd",
            f"--student={student}",
            f"--Exchange.cache={home / 'cache'}",
            exchange=exchange,
        )
        pages = list((home / "autograd" / "feedback").glob("*/autograd.html"))
        assert len(pages) == 1, student
        page = pages[0].read_text()
        ours = (root / "feedback" / student / "autograd" / "autograd.html").read_text()
        assert page == ours
        for secret in ("BEGIN HIDDEN TESTS", "marks.value(", "BEGIN SOLUTION"):
            assert secret not in page
    bob_page = next((homes / "bob" / "autograd" / "feedback").glob("*/autograd.html")).read_text()
    assert "11.4 of your 56 points were taken off" in bob_page


@pytest.mark.slow
def test_nbgrader_validate_fails_the_blank_release_and_passes_a_well_formed_notebook(term):
    root, exchange, homes = term
    blank = nbgrader(root / "release" / "autograd", "validate", "autograd.ipynb", exchange=exchange)
    assert "VALIDATION FAILED" in blank
    answered = nbgrader(homes / "bob" / "autograd", "validate", "autograd.ipynb", exchange=exchange)
    assert "Success! Your notebook passes all the tests." in answered  # bob's wrong value is well formed


@pytest.mark.slow
def test_the_canvas_csv_has_the_right_rows(term):
    root, _, _ = term
    assert main(["--course", str(root), "export", "--format", "canvas", "--roster", str(root / "roster.csv")]) == 0
    with (root / "canvas-autograd.csv").open(newline="") as stream:
        rows = list(csv.reader(stream))
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "autograd"]
    assert rows[1] == ["Points Possible", "", "", "", "", "57"]
    ours = read_csv(root / "grades-autograd.csv")
    assert rows[2:] == [
        [s["name"], s["lms_id"], s["sis_user_id"], s["sis_login_id"], s["section"], ours[s["student_id"]]["score"]]
        for s in ROSTER
    ]
    assert [r[5] for r in rows[2:]] == ["57", "44.6", "0", "55"]


def test_nbgrader_config_names_the_course_of_course_yaml():
    namespace = {"get_config": lambda: __import__("traitlets.config", fromlist=["Config"]).Config()}
    exec((ROOT / "nbgrader_config.py").read_text(), namespace)  # noqa: S102 - the repository's own config file
    course_id = yaml.safe_load((ROOT / "source" / "course.yaml").read_text())["course_id"]
    assert namespace["c"].CourseDirectory.course_id == course_id


@pytest.mark.slow
def test_after_the_terms_commands_git_status_lists_no_secret_or_student_file(term):
    """The README's term, then export and serve tokens, in a course root that is a git work tree with the
    project's .gitignore: what `git add -A` would take is the course's own source/, release/ and config."""
    root, _, _ = term
    if shutil.which("git") is None:
        require_tool("git", "this test asks git what it would commit (apt-get install git)")
    shutil.copy(ROOT / ".gitignore", root / ".gitignore")
    subprocess.run(["git", "init", "--quiet"], cwd=root, check=True)
    roster = str(root / "roster.csv")
    assert main(["--course", str(root), "export", "--format", "canvas", "--roster", roster]) == 0
    assert main(["--course", str(root), "serve", "tokens", roster, "--out", str(root / "tokens.csv")]) == 0
    written = {
        "tokens.csv",
        "tokens-instructor.txt",
        "service.db",
        "gradebook.db",
        "roster.csv",
        "grades-autograd.csv",
        "canvas-autograd.csv",
        "class-summary-autograd.html",
        "class-summary-autograd.json",
        "item-analysis-autograd.json",
        "item-analysis-autograd.csv",
        "submitted",
        "autograded",
        "feedback",
    }
    assert written <= {path.name for path in root.iterdir()}  # the commands wrote what is checked below
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=root, check=True, capture_output=True, text=True
    ).stdout.splitlines()
    committable = [line[3:] for line in status]
    assert "source/course.yaml" in committable
    assert [
        path
        for path in committable
        if not path.startswith(("source/", "release/")) and path not in (".gitignore", "nbgrader_config.py")
    ] == []


@pytest.mark.slow
def test_the_services_attempts_are_recorded_into_the_term_and_undone(term):
    """The term (grade --roster), then the service on the same course, then the dashboard's recording: a
    preview, a confirmation to replace a term grade; the gradebook refuses one student, who keeps their record
    whole while the others are recorded, and a second recording takes that one; then formgrader, nbgrader
    export, our CSV and the Canvas CSV agree for every student; a recording with nothing new changes nothing.
    A later `grade` replaces one recorded student's work; undo gives the term back to the others (a cell the
    term left ungraded is ungraded again) and leaves that newer work alone. Last in the module: it changes the
    course's due date while the service runs, and puts it back."""
    import contextlib
    import re
    import sqlite3

    from nbgrader.api import Gradebook

    from course.term.nbgrader_bridge import held_submissions
    from tests.support.helpers import formgrader_api
    from tests.support.service import Server, multipart, notebook_bytes, request

    root, exchange, homes = term
    gradebook_url = f"sqlite:///{root / 'gradebook.db'}"

    def held(student: str):
        return held_submissions(gradebook_url, root / "gradebook.db", "autograd", "autograd")[student]

    def gradebook_sql(statement: str) -> None:
        with contextlib.closing(sqlite3.connect(root / "gradebook.db")) as db:
            db.execute(statement)
            db.commit()

    yaml_path = root / "source" / "course.yaml"
    term_yaml, term_rows = yaml_path.read_text(), read_csv(root / "grades-autograd.csv")
    # A cell of bob's the term left ungraded (nbgrader's None, waiting for a human: 6 of his 56 points), which
    # the recording will score and undo must leave ungraded again.
    ungraded = "test_tiny_net"
    with Gradebook(gradebook_url) as gradebook:
        cell = gradebook.find_grade(ungraded, "autograd", "autograd", "bob")
        cell.auto_score, cell.needs_manual_grade = None, True
        gradebook.db.commit()
    bob_in_the_term = held("bob")
    assert bob_in_the_term.scores[ungraded] is None
    settings = yaml.safe_load(term_yaml)
    settings["assignments"][0]["due"] = "2099-01-01 00:00:00 UTC"  # the service's attempts are on time
    yaml_path.write_text(yaml.safe_dump(settings))
    tokens = root / "tokens.csv"
    assert main(["--course", str(root), "serve", "tokens", str(root / "roster.csv"), "--out", str(tokens)]) == 0
    server = Server(
        root, tokens=read_csv_tokens(tokens), instructor=(root / "tokens-instructor.txt").read_text().strip()
    )
    server.start()
    try:
        bob = server.submit("bob", notebook_bytes(submitted_notebook(CORRECT_CODE))).json  # term: 56 less 11.4
        wrong = {**CORRECT_CODE, "net_dL_dw": repr(wrong_literal(ALL_VALUES["net_dL_dw"]))}
        carol = server.submit("carol", notebook_bytes(submitted_notebook(wrong))).json  # term: missing
        dave = server.submit("dave", notebook_bytes(submitted_notebook(CORRECT_CODE))).json  # term: 55
        assert (bob["status"], bob["score"], bob["attempt"], carol["score"], dave["score"]) == ("graded", 57, 1, 56, 57)
        base = f"{server.url}/i/{server.instructor}"
        preview = request(f"{base}/export/gradebook").text
        changes = re.findall(r"<tr><td>(\w+)</td><td>(.*?)</td>", preview)
        assert changes == [
            ("bob", "38.6, submitted 2026-11-22 01:00:00 UTC (term)"),
            ("carol", "nothing"),
            ("dave", "55, submitted 2026-11-21 12:00:00 UTC (term)"),
        ]
        assert "replaces the term&#x27;s submission" in preview
        csrf = re.search(r'name=csrf value="([^"]+)"', preview).group(1)
        plan = re.search(r'name=plan value="([^"]+)"', preview).group(1)

        def post(path: str, **fields):
            if "plan" in fields and "student" not in fields:  # as the preview's form sends it: every one ticked
                page = request(f"{base}/export/gradebook").text
                fields["student"] = re.findall(r'name=student value="([^"]+)"', page)
            body, kind = multipart({"csrf": csrf, **fields})
            return request(f"{base}/export/{path}", method="POST", data=body, content_type=kind)

        stale = post("gradebook", plan="0" * 16, replace_term="yes")  # a preview that no longer holds
        assert stale.status == 409
        assert "not what the preview you confirmed showed" in stale.text
        unconfirmed = post("gradebook", plan=plan)
        assert unconfirmed.status == 409
        assert "confirm it" in unconfirmed.text
        assert read_csv(root / "grades-autograd.csv") == term_rows

        # The gradebook itself refuses carol's new submission (a trigger, as a registrar's lock would): bob and
        # dave are recorded, carol keeps her record whole, files included, and the report says so.
        gradebook_sql(
            "CREATE TRIGGER registrar_lock BEFORE INSERT ON submitted_assignment "
            "WHEN NEW.student_id = 'carol' BEGIN SELECT RAISE(ABORT, 'locked by the registrar'); END"
        )
        done = post("gradebook", plan=plan, replace_term="yes")
        gradebook_sql("DROP TRIGGER registrar_lock")
        assert done.status == 200, done.text
        assert "Recorded 2 students (bob, dave) as recording 1" in done.text, done.text
        assert "Not recorded: carol (the gradebook refused it: " in done.text
        assert "locked by the registrar" in done.text
        assert not (root / "submitted" / "carol").exists()
        assert not (root / "feedback" / "carol").exists()
        assert read_csv(root / "grades-autograd.csv")["carol"]["status"] == "missing"
        assert held("bob").scores[ungraded] is not None  # scored by the recording
        preview = request(f"{base}/export/gradebook").text
        assert re.findall(r"<tr><td>(\w+)</td>", preview) == ["carol"]
        assert "recording 1" in preview
        assert "(not recorded: carol)" in preview
        plan = re.search(r'name=plan value="([^"]+)"', preview).group(1)
        done = post("gradebook", plan=plan)  # replaces no term grade: no tick needed
        assert "Recorded 1 student (carol) as recording 2" in done.text, done.text

        ours = read_csv(root / "grades-autograd.csv")
        assert {s: ours[s]["score"] for s in ours} == {"alice": "57", "bob": "57", "carol": "56", "dave": "57"}
        api = formgrader_api(root)
        submissions = {s["student"]: s for s in api.get_submissions("autograd")}
        assert set(submissions) == {"alice", "bob", "carol", "dave"}
        for student, row in ours.items():  # nothing "needs autograding", our raw scores
            assert submissions[student]["autograded"], student
            assert not submissions[student]["needs_manual_grade"], student
            assert submissions[student]["score"] == float(row["raw_score"]), student
        nbgrader(root, "export", exchange=exchange)
        theirs = read_csv(root / "grades.csv")
        assert {s: float(theirs[s]["score"]) for s in ours} == {s: float(row["score"]) for s, row in ours.items()}
        assert main(["--course", str(root), "export", "--format", "canvas", "--roster", str(root / "roster.csv")]) == 0
        with (root / "canvas-autograd.csv").open(newline="") as stream:
            canvas = {row[1]: row[5] for row in list(csv.reader(stream))[2:]}
        assert canvas == {s["lms_id"]: ours[s["student_id"]]["score"] for s in ROSTER}
        assert (root / "feedback" / "carol" / "autograd" / "autograd.html").is_file()

        # A second recording with nothing new changes nothing.
        recorded = held_submissions(gradebook_url, root / "gradebook.db", "autograd", "autograd")
        recorded_csv = (root / "grades-autograd.csv").read_bytes()
        again = request(f"{base}/export/gradebook").text
        assert "id=nothing-new" in again
        repeat = post("gradebook", plan=term_plan_digest_of_nothing())
        assert "Nothing to record" in repeat.text, repeat.text
        assert (root / "grades-autograd.csv").read_bytes() == recorded_csv
        assert held_submissions(gradebook_url, root / "gradebook.db", "autograd", "autograd") == recorded
        assert sorted(p.name for p in (root / "gradebook-history" / "autograd").iterdir()) == ["0001", "0002"]

        # Later, dave hands in newer work through nbgrader, and the instructor collects and grades it.
        home = homes / "dave"
        write(submitted_notebook({**CORRECT_CODE, "cubic_grad": "0"}), home / "autograd" / "autograd.ipynb")
        nbgrader(home, "submit", "autograd", "--student=dave", f"--Exchange.cache={home / 'cache'}", exchange=exchange)
        nbgrader(root, "collect", "--update", "autograd", exchange=exchange)
        newer_stamp = (root / "submitted" / "dave" / "autograd" / "timestamp.txt").read_text()
        assert newer_stamp not in (SUBMITTED_AT["dave"], recorded_stamp(root, "dave"))
        assert main(["--course", str(root), "grade", str(root / "submitted" / "dave"), "--jobs", "1"]) == 0
        newer = read_csv(root / "grades-autograd.csv")["dave"]
        assert newer["score"] != "57"
        newer_held = held("dave")

        # Undo gives the term back to those whose record is as the recordings left it, file for file.
        undone = post("gradebook", undo="2")
        assert undone.status == 200
        assert "Undid recording 2: the records of carol are back as they were before it." in undone.text, undone.text
        undone = post("gradebook", undo="1")
        assert undone.status == 200
        assert "Undid recording 1: the records of bob are back as they were before it." in undone.text, undone.text
        assert (
            "Left as they are: dave (submitted/, autograded/, feedback/ and the gradebook&#x27;s scores and "
            "times changed since the recording" in undone.text
        ), undone.text
        again = post("gradebook", undo="1")  # a second click, or the page reloaded: nothing more is undone
        assert again.status == 409
        assert "Nothing undone: there is no recording to undo" in again.text, again.text
    finally:
        server.stop()
        yaml_path.write_text(term_yaml)
    ours = read_csv(root / "grades-autograd.csv")
    assert {s: row for s, row in ours.items() if s != "dave"} == {s: r for s, r in term_rows.items() if s != "dave"}
    assert ours["dave"] == newer  # dave's newer work is his, untouched
    assert (root / "submitted" / "dave" / "autograd" / "timestamp.txt").read_text() == newer_stamp
    assert held("dave") == newer_held
    assert (root / "submitted" / "bob" / "autograd" / "timestamp.txt").read_text() == SUBMITTED_AT["bob"]
    assert held("bob") == bob_in_the_term
    with Gradebook(gradebook_url) as gradebook:  # the cell the term left ungraded is ungraded again
        cell = gradebook.find_grade(ungraded, "autograd", "autograd", "bob")
        assert (cell.auto_score, cell.needs_manual_grade) == (None, True)
    assert not (root / "submitted" / "carol").exists()
    submissions = {s["student"]: s for s in formgrader_api(root).get_submissions("autograd")}
    assert set(submissions) == {"alice", "bob", "dave"}
    nbgrader(root, "export", exchange=exchange)
    theirs = read_csv(root / "grades.csv")
    assert {s: float(theirs[s]["score"]) for s in ours} == {s: float(row["score"]) for s, row in ours.items()} | {
        "bob": 38.6
    }  # bob's gradebook as the term left it: the 6 points of his ungraded cell not counted
    assert all(submissions[s]["autograded"] for s in submissions)


def recorded_stamp(root: Path, student: str) -> str:
    """The submission time the latest recording of the student wrote."""
    recordings = [
        json.loads(path.read_text())["students"]
        for path in sorted((root / "gradebook-history" / "autograd").glob("*/recording.json"))
    ]
    return next(students[student]["written"] for students in reversed(recordings) if student in students)


def read_csv_tokens(path: Path) -> dict[str, str]:
    with path.open(encoding="utf-8") as stream:
        return {row["student_id"]: row["token"] for row in csv.DictReader(stream)}


def term_plan_digest_of_nothing() -> str:
    from course.term.term_record import digest

    return digest([])
