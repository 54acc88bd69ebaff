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
    course_assignments,
    exchange_course,
    fetch_and_submit,
    nbgrader,
    require_tool,
    submitted_notebook,
    write,
    write_roster,
    wrong_literal,
)
from tests.support.term_recording import (
    TermBefore,
    TermCourse,
    dave_hands_in_newer_work,
    every_export_agrees,
    leave_a_cell_ungraded,
    nothing_new_changes_nothing,
    preview_shows_what_replaces_the_term,
    read_csv,
    record_the_one_refused,
    record_while_the_gradebook_refuses_carol,
    serving,
    stale_or_unconfirmed_records_nothing,
    submit_through_the_service,
    the_term_is_given_back,
    undo_both_recordings,
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
        (name, False) for name in sorted(course_assignments(root))
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


@pytest.fixture
def term_before_the_service(term) -> tuple[TermCourse, TermBefore]:
    """The graded term with one of bob's cells left for a human, as it stands before the service runs."""
    course = TermCourse(*term)
    return course, leave_a_cell_ungraded(course)


@pytest.mark.slow
def test_the_services_attempts_are_recorded_into_the_term_and_undone(term_before_the_service):
    """The term (grade --roster), then the service on the same course, then the dashboard's recording: a
    preview, a confirmation to replace a term grade; the gradebook refuses one student, who keeps their record
    whole while the others are recorded, and a second recording takes that one; then formgrader, nbgrader
    export, our CSV and the Canvas CSV agree for every student; a recording with nothing new changes nothing.
    A later `grade` replaces one recorded student's work; undo gives the term back to the others (a cell the
    term left ungraded is ungraded again) and leaves that newer work alone. Last in the module: it changes the
    course's due date while the service runs, and puts it back. Its steps: tests/support/term_recording.py."""
    course, before = term_before_the_service
    with serving(course, before) as dashboard:
        submit_through_the_service(dashboard.server)
        plan = preview_shows_what_replaces_the_term(dashboard)
        stale_or_unconfirmed_records_nothing(dashboard, course, before, plan)
        record_while_the_gradebook_refuses_carol(dashboard, course, plan)
        record_the_one_refused(dashboard)
        every_export_agrees(course, ROSTER)
        nothing_new_changes_nothing(dashboard, course)
        newer = dave_hands_in_newer_work(course, SUBMITTED_AT)
        undo_both_recordings(dashboard)
    the_term_is_given_back(course, before, newer, SUBMITTED_AT)
