"""Records we write and read back, attacked: one student's fault never stops or bends another's record in the
dashboard's recording into the term, a recording that stopped half-way can be undone, and a shard's record is
validated at `merge` like a submission (ids, paths, scores, statuses, the class it was cut from)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.helpers import add_cell, submitted_notebook
from tests.support.recording_form import message, post_form, recording_page

# A cell whose nbgrader metadata is of a JSON type nobody expects: what a student can put in any upload.
ODD_METADATA = {"nbgrader": {"grade_id": ["odd"], "grade": False, "solution": False, "locked": False}}


def held(root: Path) -> dict:
    from course.term.nbgrader_bridge import held_submissions

    return held_submissions(f"sqlite:///{root / 'gradebook.db'}", root / "gradebook.db", "autograd", "autograd")


def folders(root: Path, student: str) -> dict[str, bool]:
    return {name: (root / name / student / "autograd").exists() for name in ("submitted", "autograded", "feedback")}


def grades_rows(root: Path) -> dict[str, dict[str, str]]:
    import csv

    path = root / "grades-autograd.csv"
    if not path.exists():
        return {}
    with path.open(encoding="utf-8", newline="") as stream:
        return {row["student_id"]: row for row in csv.DictReader(stream)}


def assert_records_agree(root: Path) -> None:
    """For every student: submitted/'s time is the gradebook's, and the CSV's score is the gradebook's."""
    from course.term.term_record import _stamp

    gradebook, rows = held(root), grades_rows(root)
    students = {p.name for p in (root / "submitted").iterdir()} if (root / "submitted").is_dir() else set()
    for student in students | set(gradebook):
        stamp = root / "submitted" / student / "autograd" / "timestamp.txt"
        on_disk = stamp.read_text().strip() if stamp.is_file() else None
        in_gradebook = _stamp(gradebook[student].timestamp) if student in gradebook else None
        assert on_disk == in_gradebook, f"{student}: submitted/ says {on_disk}, the gradebook {in_gradebook}"
        if student in gradebook:
            assert float(rows[student]["score"]) == pytest.approx(gradebook[student].score), student


@pytest.mark.slow
def test_one_students_fault_never_stops_or_bends_anothers_record(tmp_path):
    """The issue's attack: an upload with odd nbgrader metadata (bob), a file where a student's feedback folder
    should be (dave: his files cannot be written), a named pipe in a student's submitted/ folder (erin: her
    record cannot be kept). The recording answers, records the honest students with their files and gradebook
    rows agreeing, names each one it could not record with why, and leaves their records exactly as they were;
    its undo then puts the honest students back. (At b99931e: a 500, nobody recorded, alice's submitted/
    replaced while the gradebook had nothing of hers.)"""
    from tests.support.service import Server, course_for_service, notebook_bytes

    root = course_for_service(tmp_path / "course")
    server = Server(root, jobs=1)
    students = ["alice", "bob", "carol", "dave", "erin"]
    server.issue_tokens(students)
    stray = root / "feedback" / "dave" / "autograd"
    stray.parent.mkdir(parents=True)
    stray.write_text("a stray file where dave's feedback folder goes\n")
    pipe = root / "submitted" / "erin" / "autograd" / "pipe"
    pipe.parent.mkdir(parents=True)
    (pipe.parent / "notes.txt").write_text("erin's own\n")
    os.mkfifo(pipe)
    server.start()
    try:
        odd = add_cell(submitted_notebook(), "x = 1", metadata=ODD_METADATA)
        replies = {
            student: server.submit(student, notebook_bytes(odd if student == "bob" else submitted_notebook()))
            for student in students
        }
        for student, reply in replies.items():
            if student != "bob":
                assert (reply.status, reply.json["status"], reply.json["score"]) == (200, "graded", 57), reply.text
        bob_counted = replies["bob"].status == 200 and replies["bob"].json["status"] == "graded"  # or refused
        _, _, _, plan = recording_page(server)
        done = post_form(server, plan=plan)
        assert done.status == 200, message(done)
        said = message(done)
        recorded = re.search(r"Recorded \d+ students? \(([^)]*)\)", said)
        assert recorded is not None, said
        recorded_students = set(recorded.group(1).split(", "))
        assert {"alice", "carol"} <= recorded_students <= {"alice", "bob", "carol"}, said
        assert "dave (their files could not be written:" in said, said
        assert "erin (what their record holds could not be kept:" in said, said
        if bob_counted and "bob" not in recorded_students:
            assert "bob (their files could not be written:" in said, said
        # The honest students: files, gradebook and CSV agree; the named ones: exactly as they were.
        gradebook = held(root)
        for student in recorded_students:
            assert all(folders(root, student).values()), student
            assert gradebook[student].score == 57, student
        for student in {"bob", "dave", "erin"} - recorded_students:
            assert student not in gradebook, student
            assert student not in grades_rows(root), student
        assert stray.read_text() == "a stray file where dave's feedback folder goes\n"
        assert not (root / "submitted" / "dave").exists()
        assert (root / "submitted" / "erin" / "autograd").is_dir()
        assert pipe.is_fifo()
        assert sorted(p.name for p in (root / "submitted" / "erin" / "autograd").iterdir()) == ["notes.txt", "pipe"]
        if "bob" not in recorded_students:
            assert not any(folders(root, "bob").values())
        assert_records_agree(root)
        _, preview, _, _ = recording_page(server)
        assert "stopped half-way" not in preview  # it finished: those it could not record are as they were

        # Undo puts the recorded students back as they were: no submission, no files, no CSV row.
        undone = post_form(server, undo="1")
        assert undone.status == 200, message(undone)
        assert f"the records of {', '.join(sorted(recorded_students))} are back" in message(undone), message(undone)
        assert held(root) == {}
        for student in recorded_students:
            assert not any(folders(root, student).values()), student
        assert stray.is_file()
        assert pipe.is_fifo()
        assert_records_agree(root)
    finally:
        server.stop()


STOPPED_RECORDING = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path

    from course.term import term_record
    from course.pipeline.assignment import load_course_assignment
    from course.core.config import load_config
    from course.platforms.service.store import Store
    from course.term.term_record import Counted

    root = Path(sys.argv[1])
    config = load_config(root)
    settings = config.assignment("autograd")
    assignment = load_course_assignment(config, "autograd")
    store = Store(f"sqlite:///{root / 'service.db'}", "autograd")
    counted = [Counted(a.student_id, a.number, a.id, a.submitted_at, a.status, a.score, a.late_penalty or 0.0,
                       a.feedback) for a in store.attempts_of() if a.status == "graded"]
    asked = []

    def notebook_of(attempt_id):
        asked.append(attempt_id)
        if sys.argv[2] == "kill" and len(asked) == 2:  # the process ends while it records the second student
            os.kill(os.getpid(), signal.SIGKILL)
        return store.notebook_of(attempt_id)

    def disk_full(*args, **kwargs):  # what every student shares fails once their files and rows are written
        raise OSError(28, "No space left on device")

    if sys.argv[2] == "disk-full":
        term_record.write_grades_csv = disk_full
    with term_record.exclusive(config, "autograd"):
        try:
            term_record.record(config, settings, {q.id: q.test_cell_id for q in assignment.questions},
                               assignment.max_score, term_record.plan(config, settings, counted), notebook_of,
                               replace_term=True)
        except Exception as problem:
            print(f"{type(problem).__name__}: {problem}")
""")


@pytest.mark.slow
def test_a_recording_that_stopped_half_way_is_undone(tmp_path):
    """A disk that fills up as the CSV is written, after every student's files and gradebook row: everyone is
    put back. Then the recording's process is killed while it records the second of three students: the first
    one's files are in place, the gradebook holds nothing. The dashboard says the recording stopped half-way, its
    undo puts the first student's files back, and a new recording then records everyone. (At b99931e the undo
    refused: "every record it wrote has changed", and alice's files stayed without a gradebook row.)"""
    from tests.support.service import Server, course_for_service, notebook_bytes

    root = course_for_service(tmp_path / "course")
    server = Server(root, jobs=1)
    server.issue_tokens(["alice", "bob", "carol"])
    server.start()
    try:
        for student in ("alice", "bob", "carol"):
            assert server.submit(student, notebook_bytes(submitted_notebook())).json["score"] == 57
        # The disk fills up when the CSV is written, after every student's files and gradebook row: everyone
        # is put back, and the recording is gone (nothing to undo).
        full = subprocess.run(
            [sys.executable, "-c", STOPPED_RECORDING, str(root), "disk-full"],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert full.returncode == 0, full.stderr
        assert full.stdout.startswith(
            "CourseError: nobody was recorded: [Errno 28] No space left on device; every record is as it was"
        ), full.stdout + full.stderr
        for student in ("alice", "bob", "carol"):
            assert not any(folders(root, student).values()), student
        assert held(root) == {}
        assert grades_rows(root) == {}
        assert not (root / "gradebook-history" / "autograd" / "0001").exists()

        stopped = subprocess.run(
            [sys.executable, "-c", STOPPED_RECORDING, str(root), "kill"],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert stopped.returncode == -9, stopped.stderr
        assert all(folders(root, "alice").values())  # the half that was written
        assert held(root) == {}
        _, preview, _, _ = recording_page(server)
        undone = post_form(server, undo="1")
        assert undone.status == 200, message(undone)
        assert "Undid recording 1: the records of alice" in message(undone), message(undone)
        for student in ("alice", "bob", "carol"):
            assert not any(folders(root, student).values()), student
        assert "recording 1" in preview
        assert "stopped half-way" in preview, preview  # what the dashboard said before the undo
        assert held(root) == {}
        assert_records_agree(root)
        _, _, _, plan = recording_page(server)
        done = post_form(server, plan=plan)
        assert "Recorded 3 students (alice, bob, carol) as recording 2" in message(done), message(done)
        assert {s: h.score for s, h in held(root).items()} == {"alice": 57, "bob": 57, "carol": 57}
        assert_records_agree(root)
    finally:
        server.stop()


def test_an_undo_number_that_is_no_number_of_ours_is_refused_in_a_sentence(tmp_path):
    """The undo form's recording number, with the instructor's valid CSRF token: "²" is a digit to `isdigit` and
    no number to `int` (at d763e9f: a 500); "١" `int` reads as 1, and undid recording 1. Each is refused with the
    page's sentence and recording 1 stands, until the form's own "1" undoes it."""
    from tests.support.service import Server, course_for_service, notebook_bytes

    root = course_for_service(tmp_path / "course")
    server = Server(root, jobs=1)
    server.issue_tokens(["alice"])
    server.start()
    try:
        assert server.submit("alice", notebook_bytes(submitted_notebook())).json["score"] == 57
        _, _, _, plan = recording_page(server)
        assert "as recording 1" in message(post_form(server, plan=plan))
        for number in ("²", "١", "1" * 40, "-1", ""):
            refused = post_form(server, undo=number)
            assert refused.status == 409, (number[:5], refused.text[:300])
            said = re.findall(r"Nothing undone[^<]*", refused.text)
            assert len(said) == 1, refused.text[-2000:]
            assert said[0].startswith(
                "Nothing undone: the form was for recording -1, and the one to undo now is recording 1"
            ), said
        assert held(root)["alice"].score == 57  # still recorded
        undone = post_form(server, undo="1")
        assert "Undid recording 1: the records of alice are back" in message(undone), message(undone)
    finally:
        server.stop()


def test_a_history_folder_named_with_a_digit_int_refuses_is_left_alone(tmp_path):
    """Folders under gradebook-history/autograd/ that no recording made: "²" (a digit to `isdigit`, which
    numbering the next recording trusted) and "1²" (which the recordings' pattern [0-9]* matches): at d763e9f
    the preview or the recording was a 500. Now they are not recordings: left as they are, and the recording is
    number 1, which undo then finds."""
    from tests.support.service import Server, course_for_service, notebook_bytes, request

    root = course_for_service(tmp_path / "course")
    server = Server(root, jobs=1)
    server.issue_tokens(["alice"])
    history = root / "gradebook-history" / "autograd"
    for name in ("²", "1²"):
        (history / name).mkdir(parents=True)
        (history / name / "recording.json").write_text("{}\n", encoding="utf-8")
    server.start()
    try:
        assert server.submit("alice", notebook_bytes(submitted_notebook())).json["score"] == 57
        assert request(f"{server.url}/i/{server.instructor}/export/gradebook").status == 200  # the preview
        _, preview, _, plan = recording_page(server)
        assert plan, preview[:500]
        done = post_form(server, plan=plan)
        assert done.status == 200, message(done)
        assert "Recorded 1 student (alice) as recording 1" in message(done), message(done)
        assert sorted(p.name for p in history.iterdir()) == ["0001", "1²", "²"]
        assert (history / "1²" / "recording.json").read_text(encoding="utf-8") == "{}\n"
        undone = post_form(server, undo="1")
        assert undone.status == 200, message(undone)
        assert "Undid recording 1: the records of alice are back" in message(undone), message(undone)
    finally:
        server.stop()


def test_a_recording_file_of_another_shape_is_named_not_a_500(tmp_path):
    """gradebook-history/<a>/0001/recording.json is read back: input. One that is JSON of another shape ({}, a
    list, a student without an entry of ours) was a KeyError: the preview answered 500. Now the page names the
    file and says what to do, and recording stays possible once it is moved aside."""
    from tests.support.service import Server, course_for_service, notebook_bytes, request

    root = course_for_service(tmp_path / "course")
    server = Server(root, jobs=1)
    server.issue_tokens(["alice"])
    history = root / "gradebook-history" / "autograd"
    (history / "0001").mkdir(parents=True)
    server.start()
    try:
        assert server.submit("alice", notebook_bytes(submitted_notebook())).json["score"] == 57
        for odd in (
            "{}",
            "[]",
            '{"recorded_at": "x", "students": {"alice": {}}}',
            '{"recorded_at": "x", "students": {"alice": {"written": "", "held": null, "csv_row": null}}, '
            '"refused": []}',
        ):
            (history / "0001" / "recording.json").write_text(odd, encoding="utf-8")
            page = request(f"{server.url}/i/{server.instructor}/export/gradebook")
            assert page.status != 500, (odd, page.text[:500])
            assert "is not a recording this program wrote" in page.text, (odd, page.text[-1500:])
            assert "move it aside" in page.text
        (history / "0001").rename(tmp_path / "aside")
        _, _, _, plan = recording_page(server)
        assert "as recording 1" in message(post_form(server, plan=plan))
    finally:
        server.stop()


# ----------------------------------------------------------------------------------------- shards read back

SAMPLES = Path(__file__).resolve().parents[1] / "samples" / "submitted"


def sharded_course(root: Path, students: tuple[str, ...] = ("alice", "bob")) -> Path:
    import shutil

    from tests.support.helpers import copy_course

    copy_course(root)
    for student in students:
        shutil.copytree(SAMPLES / student, root / "submitted" / student)
    return root


def merge(root: Path, *outs: Path, capsys) -> tuple[int, str]:
    from course.cli import main

    capsys.readouterr()
    code = main(["--course", str(root), "merge", *map(str, outs)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.fixture(scope="module")
def genuine_shard(tmp_path_factory):
    """A course of two students graded as `grade --shard 1/1`, the record as the shard wrote it."""
    from course.cli import main

    root = sharded_course(tmp_path_factory.mktemp("shard") / "course")
    out = root.parent / "out"
    assert main(["--course", str(root), "grade", "--shard", "1/1", "--out", str(out), "--jobs", "1", "--quiet"]) == 0
    return root, json.loads((out / "shard-autograd.json").read_text())


def forged(genuine: dict, change) -> dict:
    import copy

    record = copy.deepcopy(genuine)
    change(record)
    return record


def _ten_times(record: dict) -> None:
    one = record["graded"][0]
    for question in one["questions"]:
        question["earned"] *= 10
    for question in one["feedback"]["questions"]:
        question["earned"] *= 10
    for key in ("score", "raw_score"):
        if key in one["feedback"]:
            one["feedback"][key] *= 10


def _escape_id(record: dict) -> None:
    record["graded"][0]["student_id"] = "../../escaped"
    record["graded"][0]["feedback"]["student_id"] = "../../escaped"


def _set(*keys, value):
    def change(record: dict) -> None:
        target = record
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return change


FORGERIES = {  # what is edited -> the field merge must name
    "the issue's attack: an id with .. parts and ten times the points": (
        lambda r: (_escape_id(r), _ten_times(r)),
        "`graded[0].student_id`",
    ),
    "an id with .. parts": (_escape_id, "`graded[0].student_id`"),
    "ten times the points": (_ten_times, "`graded[0].questions[0].earned`"),
    "a total above the questions' sum": (
        _set("graded", 0, "feedback", "score", value=570),
        "`graded[0].feedback.score`",
    ),
    "a path out of the course": (_set("graded", 0, "path", value="../outside/autograd.ipynb"), "`graded[0].path`"),
    "an absolute path": (_set("graded", 0, "path", value="/etc/passwd"), "`graded[0].path`"),
    "a status nobody gives": (_set("graded", 0, "status", value="excellent"), "`graded[0].status`"),
    "a grades row's status, which grading never gives": (
        _set("graded", 0, "status", value="missing"),
        "`graded[0].status`",
    ),
    "a status of another type": (_set("graded", 0, "status", value=["graded"]), "`graded[0].status`"),
    "a score of another type": (
        _set("graded", 0, "questions", 0, "earned", value="1e9"),
        "`graded[0].questions[0].earned`",
    ),
    "a negative late penalty": (_set("graded", 0, "late_penalty", value=-100), "`graded[0].late_penalty`"),
    "a student of another class": (_set("graded", 0, "student_id", value="mallory"), "`graded[0]`"),
    "another class's digest": (_set("class", value="0123456789abcdef"), "`class` of"),
    "a folder out of the course": (_set("sources", 0, value="../elsewhere"), "`sources[0]`"),
    # The feedback a student is shown, read back as grading writes it (course/pipeline/feedback_model.py). On 7fe442b an
    # answer without its fields passed the check, and writing its page raised a KeyError: the student was merged
    # as an autograder error, their files written.
    "a feedback answer without its fields": (
        _set("graded", 0, "feedback", "questions", 0, "values", value=[{"name": "slope_at_3"}]),
        "`graded[0].feedback.questions[0].values[0].your_value` is missing",
    ),
    "a feedback note that is markup": (
        _set("graded", 0, "feedback", "questions", 0, "misconceptions", value=["<script>alert(1)</script>"]),
        "`graded[0].feedback.questions[0].misconceptions[0]` is not an object",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("forgery", FORGERIES)
def test_merge_refuses_a_forged_shard_record_naming_the_file_and_the_field(genuine_shard, forgery, tmp_path, capsys):
    """A genuine `grade --shard 1/1` record, edited: merge refuses with one sentence naming the shard's file and
    the field, and writes nothing, in the course or out of it. (At b99931e an id with `..` parts and ten times
    the points merged with exit 0, wrote feedback and a notebook outside the course, and recorded 570/57.)"""
    root, genuine = genuine_shard
    change, field = FORGERIES[forgery]
    out = tmp_path / "out"
    out.mkdir()
    record = out / "shard-autograd.json"
    record.write_text(json.dumps(forged(genuine, change)))
    before = sorted(p for p in root.parent.rglob("*") if not p.is_relative_to(out))
    code, said = merge(root, out, capsys=capsys)
    assert code == 1, said
    assert str(record) in said, said
    assert field in said, said
    assert len(said.strip().splitlines()) == 1, said
    assert sorted(p for p in root.parent.rglob("*") if not p.is_relative_to(out)) == before  # nothing written
    assert not (root / "gradebook.db").exists()


@pytest.mark.slow
def test_the_genuine_shard_record_merges(genuine_shard, tmp_path, capsys):
    """The checks refuse forgeries, not shards: the record as the shard wrote it merges."""
    import shutil

    root, genuine = genuine_shard
    course = tmp_path / "course"
    shutil.copytree(root, course, symlinks=True)
    out = tmp_path / "out"
    out.mkdir()
    (out / "shard-autograd.json").write_text(json.dumps(genuine))
    code, said = merge(course, out, capsys=capsys)
    assert code == 0, said
    rows = grades_rows(course)
    assert sorted(rows) == ["alice", "bob"]
    assert all(float(row["score"]) <= 57 for row in rows.values())


def test_shards_are_cut_by_student_so_a_duplicate_id_stays_in_one_shard():
    """Every submission carrying one student id lands in one shard, whatever the number of shards: `grade`
    refuses a duplicate beside the first, and merge needs both in the same slice. (At b99931e the two copies
    always landed in different shards.)"""
    from course.pipeline.discovery import SubmissionRef
    from course.term.shards import Shard, shard_of

    refs = [
        SubmissionRef(student, Path(f"/c/submitted/{student}{copy}.ipynb"), "a copy" if copy else "")
        for student in ("ana", "ben", "cy", "dee", "eve")
        for copy in ("", "-2")
    ]
    for count in (2, 3, 4, 7):
        slices = [shard_of(refs, Shard(k, count)) for k in range(1, count + 1)]
        assert sorted(ref.path for one in slices for ref in one) == sorted(ref.path for ref in refs)
        for student in ("ana", "ben", "cy", "dee", "eve"):
            holding = [k for k, one in enumerate(slices) if any(ref.student_id == student for ref in one)]
            assert len(holding) == 1, (count, student, holding)


@pytest.mark.slow
def test_a_class_with_a_duplicate_id_is_graded_in_shards_and_merged(tmp_path, capsys):
    """Two submissions carrying alice's id (her folder and a loose alice.ipynb beside it), graded in two shards:
    merge records alice once and names the copy it refused, as an unsharded `grade` does."""
    import shutil

    from course.cli import main

    root = sharded_course(tmp_path / "course")
    shutil.copy(SAMPLES / "bob" / "autograd" / "autograd.ipynb", root / "submitted" / "alice.ipynb")
    outs = [tmp_path / f"out-{k}" for k in (1, 2)]
    for k, out in enumerate(outs, start=1):
        assert (
            main(
                [
                    "--course",
                    str(root),
                    "grade",
                    "--assignment",
                    "autograd",
                    "--shard",
                    f"{k}/2",
                    "--out",
                    str(out),
                    "--jobs",
                    "1",
                    "--quiet",
                ]
            )
            == 0
        )
    code, said = merge(root, *outs, capsys=capsys)
    assert code == 0, said
    assert sorted(grades_rows(root)) == ["alice", "bob"]
    assert "already graded from" in said, said
