"""Files and rows we read back hold numbers no grading writes, or nesting deeper than the parser goes: each is
refused with a sentence (or counted as unreadable), never an OverflowError or RecursionError from our code.
JSON's integers have no bound: math.isfinite(10**400) raises rather than answers."""

from __future__ import annotations

import json

import pytest

from course.core.config import load_config
from course.core.errors import CourseError
from course.pipeline.assignment import load_course_assignment
from course.pipeline.feedback_model import Feedback, FeedbackError, finite_number
from course.platforms.service.store import _feedback
from course.term.nbgrader_term import read_integrity
from course.term.shards import _check_result
from course.term.summary import read_class_feedback
from tests.support.helpers import ROOT

HUGE = 10**400
DEEP = "[" * 100_000 + "]" * 100_000


def document(**changed):
    base = {
        "student_id": "s",
        "assignment": "backprop",
        "status": "graded",
        "score": 1,
        "max_score": 1,
        "messages": [],
        "cell_errors": [],
        "reveals_torch_values": True,
        "questions": [],
    }
    return {**base, **changed}


@pytest.mark.parametrize(
    "value",
    [HUGE, -HUGE, 2**53 + 1, float("nan"), float("inf"), True, "1"],
    ids=["10**400", "-10**400", "2**53+1", "nan", "inf", "true", "text"],
)
def test_a_number_grading_never_writes_is_not_a_finite_number(value):
    assert not finite_number(value)
    with pytest.raises(FeedbackError, match="score"):
        Feedback.from_json(json.loads(json.dumps(document(score=value))))


def test_the_class_summary_counts_such_files_unreadable(tmp_path):
    for student, text in (("alice", json.dumps(document(score=HUGE))), ("bob", DEEP)):
        folder = tmp_path / "feedback" / student / "backprop"
        folder.mkdir(parents=True)
        (folder / "feedback.json").write_text(text)
    assert read_class_feedback(tmp_path, "backprop") == ([], ["alice", "bob"])


def test_a_shard_record_with_a_huge_number_is_refused_with_a_sentence():
    assignment = load_course_assignment(load_config(ROOT), "backprop")
    one = {
        "status": "graded",
        "internal_error": "",
        "sandbox": "",
        "integrity": [],
        "submitted": None,
        "questions": [],
        "feedback": document(score=HUGE),
        "seconds": HUGE,
    }
    with pytest.raises(CourseError):
        _check_result("shard.json: `graded[0]", one, assignment)


@pytest.mark.parametrize("text", [json.dumps(document(max_score=HUGE)), DEEP], ids=["huge number", "nested deep"])
def test_a_service_row_with_such_feedback_is_refused_naming_the_row(text):
    with pytest.raises(FeedbackError, match="attempt 7"):
        _feedback(7, text)


def test_an_integrity_file_that_is_not_ours_reads_as_no_findings(tmp_path):
    path = tmp_path / "integrity-autograd.json"
    for junk, expected in (
        (DEEP, {}),
        ("[1, 2]", {}),
        ('{"alice": ["patched torch", 3], "bob": 5}', {"alice": ["patched torch"]}),
    ):
        path.write_text(junk)
        assert read_integrity(tmp_path, "autograd") == expected
