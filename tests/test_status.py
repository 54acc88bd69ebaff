"""course.core.status: the status words are the strings our files already hold, byte for byte, and a status read back
that is not one of them is refused with a sentence that says where."""

from __future__ import annotations

import ast
import itertools
import json
import subprocess
import sys

import pytest
from sqlalchemy import select, update

from course.core.errors import CourseError
from course.core.files import compact_json
from course.core.status import GRADING_GIVES, RAN, SCORED, Status
from course.pipeline.feedback_model import Feedback
from course.platforms.service import store as store_module
from course.platforms.service.policy import ServicePolicy
from course.platforms.service.store import Attempt, GradedAttempt, Store, new_token
from course.term.gradebook import GradeRow, write_grades_csv
from tests.support.helpers import ROOT

STATUS_SOURCE = ROOT / "course" / "core" / "status.py"
GOLDEN_FEEDBACK = ROOT / "tests" / "goldens" / "bob.verdicts.feedback.json"


def test_the_words_are_those_written_to_csvs_feedback_the_gradebook_and_the_service():
    # The wire and on-disk strings of every file written before this enum existed; never to change.
    assert [s.value for s in Status] == ["graded", "timed_out", "failed", "autograder_error", "missing"]
    assert set(GRADING_GIVES) == set(Status) - {Status.MISSING}
    assert set(SCORED) == set(GRADING_GIVES) - {Status.AUTOGRADER_ERROR}  # our failure carries no score
    assert set(RAN) == {Status.GRADED, Status.TIMED_OUT}


def test_each_status_says_what_it_means_for_the_student():
    body = next(
        node
        for node in ast.parse(STATUS_SOURCE.read_text(encoding="utf-8")).body
        if isinstance(node, ast.ClassDef) and node.name == "Status"
    ).body
    said = {}
    for member, doc in itertools.pairwise(body):
        if isinstance(member, ast.Assign) and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant):
            said[member.targets[0].id] = doc.value.value
    assert set(said) == {s.name for s in Status}
    assert "Only our machinery makes one" in said["AUTOGRADER_ERROR"]


def test_a_golden_feedback_file_holds_a_status_and_writes_back_byte_for_byte():
    text = GOLDEN_FEEDBACK.read_text(encoding="utf-8")
    data = json.loads(text)
    assert Status.read(data["status"]) is Status.GRADED
    typed = {**data, "status": Status.read(data["status"])}
    assert json.dumps(typed, indent=2, ensure_ascii=False, sort_keys=True) + "\n" == text  # as test_goldens writes
    assert compact_json(typed) == compact_json(data)  # as feedback.json is written


def test_a_grades_csv_written_with_the_enum_is_the_csv_written_with_the_words(tmp_path):
    def rows(status_of):
        return [
            GradeRow(sid, {"slopes": 3} if status_of(sid) != "missing" else {}, 3, 57, status_of(sid))
            for sid in ("alice", "bob", "carol", "dan", "erin")
        ]

    words = dict(zip(("alice", "bob", "carol", "dan", "erin"), [s.value for s in Status], strict=True))
    write_grades_csv(tmp_path / "words.csv", ("slopes",), rows(words.__getitem__))
    write_grades_csv(tmp_path / "enum.csv", ("slopes",), rows(lambda sid: Status(words[sid])))
    written = (tmp_path / "enum.csv").read_bytes()
    assert written == (tmp_path / "words.csv").read_bytes()
    assert b'"autograder_error"' in written
    assert b"Status." not in written


def test_the_service_database_holds_the_word(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'service.db'}")
    try:
        store.set_student("alice", new_token(), {})
        attempt = store.submit("alice", "autograd", b"{}", ServicePolicy())
        assert isinstance(attempt, Attempt)
        store.claim_next()
        assert store.record(
            attempt.id,
            GradedAttempt(
                status=Status.TIMED_OUT,
                score=1.0,
                raw_score=1.0,
                late_penalty=0.0,
                max_score=57.0,
                integrity=(),
                seconds=0.1,
                feedback=Feedback("alice", "autograd", Status.TIMED_OUT, 1.0, 57.0, (), (), True, ()),
            ),
        )
        with store.begin() as db:
            raw = db.execute(select(store_module.attempts.c.status, store_module.attempts.c.feedback)).one()
        assert (type(raw.status), raw.status) == (str, "timed_out")
        assert json.loads(raw.feedback)["status"] == "timed_out"
        assert '"status": "timed_out"' in raw.feedback
        assert store.attempt(attempt.id).status is Status.TIMED_OUT
    finally:
        store.close()


@pytest.mark.parametrize(
    "value",
    [
        "Graded",
        "graded ",
        " missing",
        "GRADED",
        "timed out",
        "error",
        "",
        None,
        1,
        ["graded"],
        {"status": "graded"},
        b"graded",
    ],
)
def test_a_value_that_is_not_a_status_word_is_refused(value):
    with pytest.raises(ValueError, match="is not a"):
        Status.read(value)


@pytest.mark.parametrize(
    ("written", "says"),
    [
        (
            "excellent",
            "attempt 1's status 'excellent' is not one of queued, grading, graded, timed_out, failed, "
            "autograder_error: mend that row",
        ),
        ("missing", "attempt 1's status 'missing' is not one of"),  # a grades row's word: no attempt is stored as one
        ("Graded", "attempt 1's status 'Graded' is not one of"),
    ],
)
def test_a_service_row_whose_status_the_service_never_writes_is_named_not_used(tmp_path, written, says):
    store = Store(f"sqlite:///{tmp_path / 'service.db'}")
    try:
        store.set_student("alice", new_token(), {})
        attempt = store.submit("alice", "autograd", b"{}", ServicePolicy())
        assert isinstance(attempt, Attempt)
        with store.begin() as db:
            db.execute(update(store_module.attempts).values(status=written))
        with pytest.raises(CourseError, match="the service's database: ") as refused:
            store.attempts_of("alice")
        assert says in str(refused.value)
    finally:
        store.close()


def test_the_status_module_sits_at_the_bottom_of_the_package():
    """It imports nothing of course, so every layer may use it: importing it loads no module of course beyond what
    `import course` itself loads."""
    tree = ast.parse(STATUS_SOURCE.read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported == {"__future__", "enum"}
    check = "import json, sys, {}; print(json.dumps(sorted(m for m in sys.modules if m.startswith('course'))))"
    loaded = []
    for module in ("course", "course.core.status"):
        done = subprocess.run(
            [sys.executable, "-c", check.format(module)], capture_output=True, text=True, timeout=60, cwd=ROOT
        )
        assert done.returncode == 0, done.stderr
        loaded.append(set(json.loads(done.stdout)))
    assert loaded[1] - loaded[0] == {"course.core", "course.core.status"}  # the layer package (a docstring) and it
