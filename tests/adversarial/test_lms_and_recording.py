"""Where the service meets the term's record (issue 40, items 6 and 7), attacked.

A real term: notebooks dropped into submitted/ and graded by `autograd-course grade --roster` (nbgrader's own
gradebook), then the service on the same course, used by only some of the class. The dashboard's Canvas and
Moodle CSVs never give a grade to a student nobody graded (at e1a50ec: alice's 57 and frank's nothing both
became 0, and bob's attempt overwrote a term grade nobody had agreed to replace), and a row read back that
grading could not have written stops the export. The recording into nbgrader's gradebook records only the
ticked students: an unticked student's gradebook row (read through nbgrader's API), files and CSV row stay byte
for byte (at e1a50ec: one tick recorded everyone); its form is bounded and refuses, in a sentence, thousands of
ticks, a duplicate, a student with nothing to record and markup."""

from __future__ import annotations

import csv
import io
import re
import shutil
from pathlib import Path

import pytest

from course.cli import main
from tests.support.helpers import ALL_VALUES, CONTRACT_FUNCTIONS, ROOT, submitted_notebook, wrong_literal

pytestmark = pytest.mark.slow

SAMPLES = ROOT / "tests" / "samples" / "submitted"
ROSTER = [  # alice, bob, erin hand in through nbgrader (the term); carol, erin, bob and gus use the service
    {"student_id": "alice", "name": "Archer, Alice", "lms_id": "1001", "email": "alice@example.edu"},
    {"student_id": "bob", "name": "Baker, Bob", "lms_id": "1002", "email": "bob@example.edu"},
    {"student_id": "carol", "name": "Cole, Carol", "lms_id": "1003", "email": "carol@example.edu"},
    {"student_id": "erin", "name": "Eden, Erin", "lms_id": "1005", "email": "erin@example.edu"},
    {"student_id": "frank", "name": "Fox, Frank", "lms_id": "1006", "email": "frank@example.edu"},
    {"student_id": "gus", "name": "Gray, Gus", "lms_id": "1007", "email": "gus@example.edu"},
]
# dave, in a section that never got links: graded in the term (the grade's roster has him), no link on the service
UNLINKED = {"student_id": "dave", "name": "Dunn, Dave", "lms_id": "1004", "email": "dave@example.edu"}
TERM = {"alice": 57, "bob": 45, "dave": 57, "erin": 4}  # the bundled samples' scores (helpers.SAMPLE_SCORES)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    from tests.support.service import Server, course_for_service, notebook_bytes

    root = course_for_service(tmp_path_factory.mktemp("lms") / "course")
    for student in TERM:
        shutil.copytree(SAMPLES / student, root / "submitted" / student)
    roster, term_roster = root / "roster.csv", root / "term-roster.csv"
    for path, students in ((roster, ROSTER), (term_roster, [*ROSTER, UNLINKED])):
        with path.open("w", newline="", encoding="utf-8") as stream:
            writer = csv.DictWriter(stream, fieldnames=list(ROSTER[0]))
            writer.writeheader()
            writer.writerows(students)
    assert main(["--course", str(root), "grade", "--roster", str(term_roster), "--jobs", "1", "--quiet"]) == 0
    assert {s: float(row["score"]) for s, row in grades_rows(root).items() if row["status"] != "missing"} == TERM
    tokens = root / "tokens.csv"
    assert main(["--course", str(root), "serve", "tokens", str(roster), "--out", str(tokens)]) == 0
    with tokens.open(encoding="utf-8") as stream:
        issued = {row["student_id"]: row["token"] for row in csv.DictReader(stream)}
    server = Server(root, jobs=1, tokens=issued, instructor=(root / "tokens-instructor.txt").read_text().strip())
    server.start()
    try:
        wrong = {name: repr(wrong_literal(value)) for name, value in ALL_VALUES.items()} | {  # a genuine 0
            name: f"def {name}(x):\n    return 0\n" for functions in CONTRACT_FUNCTIONS.values() for name in functions
        }
        uploads = {
            "bob": notebook_bytes(submitted_notebook()),  # better than his term notebook: 57
            "erin": (SAMPLES / "erin" / "autograd" / "autograd.ipynb").read_bytes(),  # the term's very notebook
            "carol": notebook_bytes(submitted_notebook(wrong)),  # nothing in the term; 0 here, genuinely
            "gus": notebook_bytes(submitted_notebook()),  # nothing in the term; 57 here
        }
        scores = {}
        for student, notebook in uploads.items():
            reply = server.submit(student, notebook)
            assert reply.status in (200, 202), reply.text
            scores[student] = server.wait_graded(student, reply.json["id"])["score"]
        assert scores == {"bob": 57, "erin": 4, "carol": 0, "gus": 57}
        yield root, server
    finally:
        server.stop()


def grades_rows(root: Path) -> dict[str, dict[str, str]]:
    with (root / "grades-autograd.csv").open(newline="", encoding="utf-8") as stream:
        return {row["student_id"]: row for row in csv.DictReader(stream)}


def lms_cells(server) -> tuple[dict[str, str], dict[str, str]]:
    """{student: cell} of the dashboard's Canvas CSV (by Canvas's ID) and Moodle CSV (by email)."""
    from tests.support.service import request

    base = f"{server.url}/i/{server.instructor}"
    by_id = {row["lms_id"]: row["student_id"] for row in ROSTER}
    by_email = {row["email"]: row["student_id"] for row in ROSTER}
    canvas_reply, moodle_reply = request(f"{base}/export/canvas.csv"), request(f"{base}/export/moodle.csv")
    assert (canvas_reply.status, moodle_reply.status) == (200, 200), canvas_reply.text + moodle_reply.text
    canvas = list(csv.DictReader(io.StringIO(canvas_reply.text)))
    assert canvas[0]["Student"] == "Points Possible"
    moodle = list(csv.DictReader(io.StringIO(moodle_reply.text)))
    return (
        {by_id[row["ID"]]: row["autograd"] for row in canvas[1:]},
        {by_email[row["Email address"]]: row["autograd"] for row in moodle},
    )


def gradebook_of(root: Path, student: str) -> tuple | None:
    """The student's submission as nbgrader's own API reads it: score, timestamp, late penalty, each grade."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        try:
            submission = gradebook.find_submission("autograd", student)
        except MissingEntry:
            return None
        notebook = submission.notebooks[0]
        return (
            submission.score,
            submission.timestamp,
            notebook.late_submission_penalty,
            sorted((grade.name, grade.auto_score, grade.manual_score) for grade in notebook.grades),
        )


def files_of(root: Path, student: str) -> dict[str, bytes]:
    found = {}
    for name in ("submitted", "autograded", "feedback"):
        for path in sorted((root / name / student).rglob("*")):
            if path.is_file():
                found[str(path.relative_to(root))] = path.read_bytes()
    return found


def preview(server) -> tuple[str, str, str]:
    from tests.support.service import request

    page = request(f"{server.url}/i/{server.instructor}/export/gradebook").text
    csrf = re.search(r'name=csrf value="([^"]+)"', page).group(1)
    plan = re.search(r'name=plan value="([^"]+)"', page)
    return page, csrf, plan.group(1) if plan else ""


def post(server, fields: dict):
    from tests.support.service import multipart, request

    body, kind = multipart(fields)
    return request(f"{server.url}/i/{server.instructor}/export/gradebook", method="POST", data=body, content_type=kind)


def said(reply) -> str:
    found = re.search(r"role=status>(.*?)</div>", reply.text, re.S)
    return found.group(1) if found else reply.text[:600]


def test_the_dashboards_lms_csvs_give_no_grade_to_a_student_nobody_graded(course):
    """alice (57 in the term, never on the service) keeps 57, frank (nothing anywhere) is blank, carol's genuine 0
    on the service is 0, and bob's better attempt waits for the recording that replaces his term grade."""
    _, server = course
    canvas, moodle = lms_cells(server)
    want = {"alice": "57", "bob": "45", "carol": "0", "erin": "4", "frank": "", "gus": "57"}
    assert canvas == want
    assert moodle == want
    assert [s for s, cell in canvas.items() if cell == "0"] == ["carol"]  # no 0 but the one the service gave
    from tests.support.service import request

    dashboard = request(f"{server.url}/i/{server.instructor}/").text
    assert "never a 0 for work nobody graded" in dashboard


def test_a_term_student_with_no_link_is_left_out_and_named_not_a_409(course):
    """dave is graded in the term (57) but his section never got links, so the service has no LMS id of his: the
    dashboard's Canvas and Moodle CSVs still answer for the class (at d763e9f: 409, "dave graded but not in the
    roster", for everyone), with no row for him (none without ids, no 0), and the dashboard names him."""
    from tests.support.service import request

    root, server = course
    assert grades_rows(root)["dave"]["score"] == "57"
    base = f"{server.url}/i/{server.instructor}"
    for fmt in ("canvas", "moodle"):
        reply = request(f"{base}/export/{fmt}.csv")
        assert reply.status == 200, reply.text
        rows = list(csv.DictReader(io.StringIO(reply.text)))
        assert not [row for row in rows if "dave" in "".join(row.values()).lower() or "1004" in row.values()]
        assert len(rows) == len(ROSTER) + (fmt == "canvas")  # one row a linked student, and Points Possible
    canvas, moodle = lms_cells(server)
    want = {"alice": "57", "bob": "45", "carol": "0", "erin": "4", "frank": "", "gus": "57"}
    assert (canvas, moodle) == (want, want)
    dashboard = request(f"{base}/").text
    said = re.search(r"<p class=note id=lms-left-out role=status>(.*?)</p>", dashboard, re.S)
    assert said is not None, dashboard[:2000]
    assert "Left out of the Canvas and Moodle CSVs: dave." in said.group(1)
    assert "no LMS id" in said.group(1)


def test_the_lms_export_refuses_a_term_row_grading_could_not_have_written(course):
    """A grades-autograd.csv row read back is input: a score above its maximum, a formula or nan stops the
    export with a sentence naming the file and the student; nothing is sent to the LMS."""
    from tests.support.service import request

    root, server = course
    path = root / "grades-autograd.csv"
    kept = path.read_bytes()
    try:
        for forged in ("570", "=1+1", "nan", "1e999", "-3"):
            rows = grades_rows(root)
            rows["alice"]["score"] = forged
            with path.open("w", newline="", encoding="utf-8") as stream:
                writer = csv.DictWriter(stream, fieldnames=list(rows["alice"]))
                writer.writeheader()
                writer.writerows(rows.values())
            reply = request(f"{server.url}/i/{server.instructor}/export/canvas.csv")
            assert reply.status == 409, (forged, reply.text)
            assert f"grades-autograd.csv: alice's score '{forged}' is not a score within 0 and 57" in reply.text
    finally:
        path.write_bytes(kept)
    assert lms_cells(server)[0]["alice"] == "57"


def test_the_recording_form_refuses_what_no_preview_sent(course):
    """Thousands of ticks, a duplicate, a student with nothing to record, markup, no tick at all: each refused
    with a sentence (any markup escaped), and nothing in the term changes."""
    root, server = course
    before = {s["student_id"]: (gradebook_of(root, s["student_id"]), files_of(root, s["student_id"])) for s in ROSTER}
    page, csrf, plan = preview(server)
    ticks = re.findall(r'name=student value="([^"]+)" checked', page)
    assert ticks == ["bob", "carol", "erin", "gus"]  # every one ticked by default
    cases = [
        (["bob"] * 5000, 413, "the form is larger than this class"),
        (["bob", "carol", "bob"], 409, "the form ticks bob more than once"),
        (["bob", "alice"], 409, "the form ticks alice, who is not in the preview"),
        (["<img src=x onerror=alert(1)>"], 409, "the form ticks &lt;img src=x onerror=alert(1)&gt;, who is not"),
        ([], 409, "no student was ticked"),
    ]
    for chosen, status, words in cases:
        reply = post(server, {"csrf": csrf, "plan": plan, "replace_term": "yes", "student": chosen})
        assert reply.status == status, (chosen[:3], reply.status, reply.text[:300])
        assert words in reply.text, (chosen[:3], said(reply))
        assert "<img src=x" not in reply.text
    assert post(server, {"plan": plan, "student": ticks}).status == 403  # no CSRF token: refused as before
    after = {s["student_id"]: (gradebook_of(root, s["student_id"]), files_of(root, s["student_id"])) for s in ROSTER}
    assert after == before
    assert not (root / "gradebook-history" / "autograd").exists() or not any(
        (root / "gradebook-history" / "autograd").iterdir()
    )


def test_recording_records_only_the_ticked_students(course):
    """The preview says how each student's counted attempt differs from their term submission; bob, unticked,
    keeps his gradebook row (nbgrader's API), his files and his CSV row byte for byte; carol, erin and gus are
    recorded; undo puts them back and still leaves bob alone."""
    root, server = course
    page, csrf, plan = preview(server)
    bob_gradebook, bob_files, bob_row = gradebook_of(root, "bob"), files_of(root, "bob"), grades_rows(root)["bob"]
    assert bob_gradebook is not None
    assert bob_gradebook[0] == 45
    erin_before = gradebook_of(root, "erin")

    reply = post(server, {"csrf": csrf, "plan": plan, "replace_term": "yes", "student": ["carol", "erin", "gus"]})
    assert gradebook_of(root, "bob") == bob_gradebook
    assert files_of(root, "bob") == bob_files
    assert grades_rows(root)["bob"] == bob_row
    assert reply.status == 200, said(reply)
    assert "Recorded 3 students (carol, erin, gus) as recording 1" in said(reply), said(reply)
    assert "Not ticked, left exactly as they are: bob." in said(reply), said(reply)
    assert gradebook_of(root, "carol")[0] == 0
    assert gradebook_of(root, "gus")[0] == 57
    erin_after = gradebook_of(root, "erin")
    assert (erin_after[0], erin_after[1] != erin_before[1]) == (4, True)  # the service's attempt, its time
    # What the preview had said of each, against the term's submission (score and notebook).
    differs = dict(re.findall(r"<tr><td>(\w+)</td>.*?<td class=differs>(.*?)</td>", page))
    assert differs == {
        "bob": "another score (45 in the term, 57 here), another notebook",
        "carol": "no submission in the term&#x27;s record yet",
        "erin": "the same score (4), the same notebook: only the submission time changes",
        "gus": "no submission in the term&#x27;s record yet",
    }
    canvas, _ = lms_cells(server)
    assert canvas == {"alice": "57", "bob": "45", "carol": "0", "erin": "4", "frank": "", "gus": "57"}
    page, _, _ = preview(server)
    assert re.findall(r"<tr><td>(\w+)</td>", page) == ["bob"]  # still his to record, when the instructor wants

    undone = post(server, {"csrf": csrf, "undo": "1"})
    assert undone.status == 200, said(undone)
    assert "the records of carol, erin, gus are back" in said(undone), said(undone)
    assert gradebook_of(root, "carol") is None
    assert gradebook_of(root, "erin") == erin_before
    assert gradebook_of(root, "bob") == bob_gradebook
    assert files_of(root, "bob") == bob_files
    assert grades_rows(root)["bob"] == bob_row
