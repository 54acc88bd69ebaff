"""The dashboard's recording into nbgrader's term, step by step (tests/test_term.py's last scenario).

A graded term (test_term's `term` fixture) is served; the instructor's dashboard previews and records the
service's attempts into nbgrader's gradebook, and undoes them. Each step here asserts what it checks, so the
scenario reads as its steps and still fails where any of them breaks.
"""

from __future__ import annotations

import contextlib
import csv
import json
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from course.cli import main
from tests.support.helpers import ALL_VALUES, CORRECT_CODE, nbgrader, submitted_notebook, write, wrong_literal
from tests.support.service import Reply, Server, multipart, notebook_bytes, request

ASSIGNMENT = "autograd"
UNGRADED = "test_tiny_net"  # a cell of bob's the term leaves ungraded (6 of his 56 points, waiting for a human)


def read_csv(path: Path) -> dict[str, dict[str, str]]:
    """A grades CSV (ours or nbgrader's export), by student id."""
    with path.open(newline="", encoding="utf-8") as stream:
        return {row.get("student_id") or row.get("Student"): row for row in csv.DictReader(stream)}


def read_csv_tokens(path: Path) -> dict[str, str]:
    with path.open(encoding="utf-8") as stream:
        return {row["student_id"]: row["token"] for row in csv.DictReader(stream)}


def recorded_stamp(root: Path, student: str) -> str:
    """The submission time the latest recording of the student wrote."""
    recordings = [
        json.loads(path.read_text())["students"]
        for path in sorted((root / "gradebook-history" / ASSIGNMENT).glob("*/recording.json"))
    ]
    return next(students[student]["written"] for students in reversed(recordings) if student in students)


def term_plan_digest_of_nothing() -> str:
    from course.term.term_record import digest

    return digest([])


@dataclass(frozen=True)
class TermCourse:
    """The term's course folder, its nbgrader exchange and the students' homes."""

    root: Path
    exchange: Path
    homes: Path

    @property
    def gradebook_url(self) -> str:
        return f"sqlite:///{self.root / 'gradebook.db'}"

    @property
    def grades_csv(self) -> Path:
        return self.root / f"grades-{ASSIGNMENT}.csv"

    def grades(self) -> dict[str, dict[str, str]]:
        return read_csv(self.grades_csv)

    def held(self, student: str) -> Any:
        """What nbgrader's gradebook holds of the student's submission (scores by cell)."""
        return self.every_held()[student]

    def every_held(self) -> dict[str, Any]:
        from course.term.nbgrader_bridge import held_submissions

        return held_submissions(self.gradebook_url, self.root / "gradebook.db", ASSIGNMENT, ASSIGNMENT)

    def gradebook_sql(self, statement: str) -> None:
        with contextlib.closing(sqlite3.connect(self.root / "gradebook.db")) as db:
            db.execute(statement)
            db.commit()

    def stamp(self, student: str) -> str:
        return (self.root / "submitted" / student / ASSIGNMENT / "timestamp.txt").read_text()


@dataclass(frozen=True)
class TermBefore:
    """The term as it stood before the service: its course.yaml, grades rows and bob's held submission."""

    course_yaml: str
    rows: dict[str, dict[str, str]]
    bob: Any


def leave_a_cell_ungraded(course: TermCourse) -> TermBefore:
    """Step: bob's UNGRADED cell made as the term would leave a cell for a human (nbgrader's None), which the
    recording will score and undo must leave ungraded again; the term as it then stands."""
    from nbgrader.api import Gradebook

    course_yaml, rows = (course.root / "source" / "course.yaml").read_text(), course.grades()
    with Gradebook(course.gradebook_url) as gradebook:
        cell = gradebook.find_grade(UNGRADED, ASSIGNMENT, ASSIGNMENT, "bob")
        cell.auto_score, cell.needs_manual_grade = None, True
        gradebook.db.commit()
    bob = course.held("bob")
    assert bob.scores[UNGRADED] is None
    return TermBefore(course_yaml, rows, bob)


class Dashboard:
    """The instructor's gradebook export page of a running service, as a browser would use it."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.base = f"{server.url}/i/{server.instructor}"
        self.csrf = ""

    def preview(self) -> str:
        page = request(f"{self.base}/export/gradebook").text
        if not self.csrf:
            self.csrf = re.search(r'name=csrf value="([^"]+)"', page).group(1)
        return page

    @staticmethod
    def plan(page: str) -> str:
        return re.search(r'name=plan value="([^"]+)"', page).group(1)

    def post(self, path: str, **fields: Any) -> Reply:
        if "plan" in fields and "student" not in fields:  # as the preview's form sends it: every one ticked
            fields["student"] = re.findall(r'name=student value="([^"]+)"', self.preview())
        body, kind = multipart({"csrf": self.csrf, **fields})
        return request(f"{self.base}/export/{path}", method="POST", data=body, content_type=kind)


@contextlib.contextmanager
def serving(course: TermCourse, before: TermBefore) -> Iterator[Dashboard]:
    """The service on the term's course, its due date moved on so the service's attempts are on time; the
    course.yaml put back when it stops."""
    yaml_path = course.root / "source" / "course.yaml"
    settings = yaml.safe_load(before.course_yaml)
    settings["assignments"][0]["due"] = "2099-01-01 00:00:00 UTC"
    yaml_path.write_text(yaml.safe_dump(settings))
    try:
        tokens = course.root / "tokens.csv"
        roster = course.root / "roster.csv"
        assert main(["--course", str(course.root), "serve", "tokens", str(roster), "--out", str(tokens)]) == 0
        instructor = (course.root / "tokens-instructor.txt").read_text().strip()
        server = Server(course.root, tokens=read_csv_tokens(tokens), instructor=instructor)
        server.start()
        try:
            yield Dashboard(server)
        finally:
            server.stop()
    finally:
        yaml_path.write_text(before.course_yaml)


def submit_through_the_service(server: Server) -> None:
    """Step: bob, carol and dave hand in through the service (the term had bob late, carol missing, dave at 55)."""
    bob = server.submit("bob", notebook_bytes(submitted_notebook(CORRECT_CODE))).json  # term: 56 less 11.4
    wrong = {**CORRECT_CODE, "net_dL_dw": repr(wrong_literal(ALL_VALUES["net_dL_dw"]))}
    carol = server.submit("carol", notebook_bytes(submitted_notebook(wrong))).json  # term: missing
    dave = server.submit("dave", notebook_bytes(submitted_notebook(CORRECT_CODE))).json  # term: 55
    assert (bob["status"], bob["score"], bob["attempt"], carol["score"], dave["score"]) == ("graded", 57, 1, 56, 57)


def preview_shows_what_replaces_the_term(dashboard: Dashboard) -> str:
    """Step: the preview lists each change, says a term submission is replaced; its plan."""
    preview = dashboard.preview()
    changes = re.findall(r"<tr><td>(\w+)</td><td>(.*?)</td>", preview)
    assert changes == [
        ("bob", "38.6, submitted 2026-11-22 01:00:00 UTC (term)"),
        ("carol", "nothing"),
        ("dave", "55, submitted 2026-11-21 12:00:00 UTC (term)"),
    ]
    assert "replaces the term&#x27;s submission" in preview
    return dashboard.plan(preview)


def stale_or_unconfirmed_records_nothing(
    dashboard: Dashboard, course: TermCourse, before: TermBefore, plan: str
) -> None:
    """Step: a preview that no longer holds, and a replacement not confirmed, are refused; nothing is written."""
    stale = dashboard.post("gradebook", plan="0" * 16, replace_term="yes")
    assert stale.status == 409
    assert "not what the preview you confirmed showed" in stale.text
    unconfirmed = dashboard.post("gradebook", plan=plan)
    assert unconfirmed.status == 409
    assert "confirm it" in unconfirmed.text
    assert course.grades() == before.rows


def record_while_the_gradebook_refuses_carol(dashboard: Dashboard, course: TermCourse, plan: str) -> None:
    """Step: the gradebook itself refuses carol's new submission (a trigger, as a registrar's lock would): bob
    and dave are recorded, carol keeps her record whole, files included, and the report says so."""
    course.gradebook_sql(
        "CREATE TRIGGER registrar_lock BEFORE INSERT ON submitted_assignment "
        "WHEN NEW.student_id = 'carol' BEGIN SELECT RAISE(ABORT, 'locked by the registrar'); END"
    )
    done = dashboard.post("gradebook", plan=plan, replace_term="yes")
    course.gradebook_sql("DROP TRIGGER registrar_lock")
    assert done.status == 200, done.text
    assert "Recorded 2 students (bob, dave) as recording 1" in done.text, done.text
    assert "Not recorded: carol (the gradebook refused it: " in done.text
    assert "locked by the registrar" in done.text
    assert not (course.root / "submitted" / "carol").exists()
    assert not (course.root / "feedback" / "carol").exists()
    assert course.grades()["carol"]["status"] == "missing"
    assert course.held("bob").scores[UNGRADED] is not None  # scored by the recording


def record_the_one_refused(dashboard: Dashboard) -> None:
    """Step: the next preview holds only carol, says recording 1 left her out; recording her needs no tick."""
    preview = dashboard.preview()
    assert re.findall(r"<tr><td>(\w+)</td>", preview) == ["carol"]
    assert "recording 1" in preview
    assert "(not recorded: carol)" in preview
    done = dashboard.post("gradebook", plan=dashboard.plan(preview))  # replaces no term grade: no tick needed
    assert "Recorded 1 student (carol) as recording 2" in done.text, done.text


def every_export_agrees(course: TermCourse, roster: list[dict[str, str]]) -> None:
    """Step: formgrader, nbgrader export, our CSV and the Canvas CSV agree for every student."""
    from tests.support.helpers import formgrader_api

    root = course.root
    ours = course.grades()
    assert {s: ours[s]["score"] for s in ours} == {"alice": "57", "bob": "57", "carol": "56", "dave": "57"}
    submissions = {s["student"]: s for s in formgrader_api(root).get_submissions(ASSIGNMENT)}
    assert set(submissions) == {"alice", "bob", "carol", "dave"}
    for student, row in ours.items():  # nothing "needs autograding", our raw scores
        assert submissions[student]["autograded"], student
        assert not submissions[student]["needs_manual_grade"], student
        assert submissions[student]["score"] == float(row["raw_score"]), student
    nbgrader(root, "export", exchange=course.exchange)
    theirs = read_csv(root / "grades.csv")
    assert {s: float(theirs[s]["score"]) for s in ours} == {s: float(row["score"]) for s, row in ours.items()}
    assert main(["--course", str(root), "export", "--format", "canvas", "--roster", str(root / "roster.csv")]) == 0
    with (root / f"canvas-{ASSIGNMENT}.csv").open(newline="") as stream:
        canvas = {row[1]: row[5] for row in list(csv.reader(stream))[2:]}
    assert canvas == {s["lms_id"]: ours[s["student_id"]]["score"] for s in roster}
    assert (root / "feedback" / "carol" / ASSIGNMENT / f"{ASSIGNMENT}.html").is_file()


def nothing_new_changes_nothing(dashboard: Dashboard, course: TermCourse) -> None:
    """Step: a second recording with nothing new changes nothing."""
    recorded = course.every_held()
    recorded_csv = course.grades_csv.read_bytes()
    assert "id=nothing-new" in dashboard.preview()
    repeat = dashboard.post("gradebook", plan=term_plan_digest_of_nothing())
    assert "Nothing to record" in repeat.text, repeat.text
    assert course.grades_csv.read_bytes() == recorded_csv
    assert course.every_held() == recorded
    assert sorted(p.name for p in (course.root / "gradebook-history" / ASSIGNMENT).iterdir()) == ["0001", "0002"]


@dataclass(frozen=True)
class NewerWork:
    """dave's work handed in after the recordings: his grades row, submission time and held submission."""

    row: dict[str, str]
    stamp: str
    held: Any


def dave_hands_in_newer_work(course: TermCourse, submitted_at: dict[str, str]) -> NewerWork:
    """Step: dave hands in newer work through nbgrader, and the instructor collects and grades it."""
    root, exchange, home = course.root, course.exchange, course.homes / "dave"
    write(submitted_notebook({**CORRECT_CODE, "cubic_grad": "0"}), home / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    nbgrader(home, "submit", ASSIGNMENT, "--student=dave", f"--Exchange.cache={home / 'cache'}", exchange=exchange)
    nbgrader(root, "collect", "--update", ASSIGNMENT, exchange=exchange)
    stamp = course.stamp("dave")
    assert stamp not in (submitted_at["dave"], recorded_stamp(root, "dave"))
    assert main(["--course", str(root), "grade", str(root / "submitted" / "dave"), "--jobs", "1"]) == 0
    row = course.grades()["dave"]
    assert row["score"] != "57"
    return NewerWork(row, stamp, course.held("dave"))


def undo_both_recordings(dashboard: Dashboard) -> None:
    """Step: undo gives the term back to those whose record is as the recordings left it, file for file; a
    second click undoes nothing more."""
    undone = dashboard.post("gradebook", undo="2")
    assert undone.status == 200
    assert "Undid recording 2: the records of carol are back as they were before it." in undone.text, undone.text
    undone = dashboard.post("gradebook", undo="1")
    assert undone.status == 200
    assert "Undid recording 1: the records of bob are back as they were before it." in undone.text, undone.text
    assert (
        "Left as they are: dave (submitted/, autograded/, feedback/ and the gradebook&#x27;s scores and "
        "times changed since the recording" in undone.text
    ), undone.text
    again = dashboard.post("gradebook", undo="1")  # a second click, or the page reloaded: nothing more is undone
    assert again.status == 409
    assert "Nothing undone: there is no recording to undo" in again.text, again.text


def the_term_is_given_back(
    course: TermCourse, before: TermBefore, newer: NewerWork, submitted_at: dict[str, str]
) -> None:
    """Step, with the service stopped: the others' term is as it was (bob's ungraded cell ungraded again, carol
    without a submission), dave's newer work untouched, and nbgrader's export agrees."""
    from nbgrader.api import Gradebook

    from tests.support.helpers import formgrader_api

    ours = course.grades()
    assert {s: row for s, row in ours.items() if s != "dave"} == {s: r for s, r in before.rows.items() if s != "dave"}
    assert ours["dave"] == newer.row  # dave's newer work is his, untouched
    assert course.stamp("dave") == newer.stamp
    assert course.held("dave") == newer.held
    assert course.stamp("bob") == submitted_at["bob"]
    assert course.held("bob") == before.bob
    with Gradebook(course.gradebook_url) as gradebook:  # the cell the term left ungraded is ungraded again
        cell = gradebook.find_grade(UNGRADED, ASSIGNMENT, ASSIGNMENT, "bob")
        assert (cell.auto_score, cell.needs_manual_grade) == (None, True)
    assert not (course.root / "submitted" / "carol").exists()
    submissions = {s["student"]: s for s in formgrader_api(course.root).get_submissions(ASSIGNMENT)}
    assert set(submissions) == {"alice", "bob", "dave"}
    nbgrader(course.root, "export", exchange=course.exchange)
    theirs = read_csv(course.root / "grades.csv")
    assert {s: float(theirs[s]["score"]) for s in ours} == {s: float(row["score"]) for s, row in ours.items()} | {
        "bob": 38.6
    }  # bob's gradebook as the term left it: the 6 points of his ungraded cell not counted
    assert all(submissions[s]["autograded"] for s in submissions)
