"""Issue 43's acceptance: a class where slips were planted, graded by `autograd-course grade` as a grader runs it
(real sandbox, real torch). Every planted group of three or more students is listed with its exact count and
explained by the slip that makes it; no right answer, no shared random wrong value and no single student's random
value is put down to a slip. The slipped values are worked out by hand (tests/support/slips.py), never by the
search's code. `backprop` has no misconception rules of its author's, so every group is the search's to explain."""

from __future__ import annotations

import contextlib
import csv
import io
import json

import pytest

from course.cli import main
from course.pipeline.slips import DROPPED_LOCAL, FORWARD_FOR_SLOPE, GATE_IGNORED, ONE_BRANCH, SIGN_FLIPPED
from tests.samples.make_samples import BACKPROP_RIGHT
from tests.support.helpers import BACKPROP_RELEASE, copy_course, fill, load, write
from tests.support.slips import micrograd_dg_da

# (answer, the value as a student types it, how many students, the slip's kind): each student slips once.
PLANTED = [
    ("gate_df_dx", "1", 3, DROPPED_LOCAL),  # df/dq = z taken as 1
    ("gate_df_dz", "-4", 4, FORWARD_FOR_SLOPE),  # z's own value where q's belongs
    ("mg_dg_da", repr(micrograd_dg_da(3, 27)), 3, GATE_IGNORED),  # relu(b + a), shut, passed as open
    ("mg_dg_da", repr(micrograd_dg_da(3, -23)), 3, SIGN_FLIPPED),  # de/dd taken as +1
    ("mg_dg_da", repr(micrograd_dg_da(1, 23)), 3, ONE_BRANCH),  # c + c with one use of c followed
]
SHARED_RANDOM = ("gate_df_dx", "17.25", 3)  # three students, the same value no slip makes
LONE_RANDOM = [("gate_df_dz", "0.123456"), ("mg_dg_da", "1234")]
RIGHT_STUDENTS = 4


@pytest.fixture(scope="module")
def planted_class(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted") / "course"
    copy_course(root)
    release = load(BACKPROP_RELEASE)
    folder = root / "planted"
    students: dict[str, dict[str, str]] = {}
    for index in range(RIGHT_STUDENTS):
        students[f"right{index}"] = BACKPROP_RIGHT
    for number, (answer, value, count, _) in enumerate(PLANTED):
        for index in range(count):
            students[f"slip{number}-{index}"] = {**BACKPROP_RIGHT, answer: value}
    answer, value, count = SHARED_RANDOM
    for index in range(count):
        students[f"shared{index}"] = {**BACKPROP_RIGHT, answer: value}
    for index, (answer, value) in enumerate(LONE_RANDOM):
        students[f"lone{index}"] = {**BACKPROP_RIGHT, answer: value}
    for student, answers in students.items():
        write(fill(release, answers), folder / f"{student}.ipynb")
    out = root / "results"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["--course", str(root), "grade", str(folder), "--assignment", "backprop", "--out", str(out)]) == 0
    analysis = json.loads((out / "item-analysis-backprop.json").read_text(encoding="utf-8"))
    return students, analysis, out


def _answer(analysis: dict, name: str) -> dict:
    return next(item for item in analysis["answers"] if item["answer"] == name)


@pytest.mark.slow
def test_every_planted_group_is_counted_and_explained_by_its_slip(planted_class):
    students, analysis, _ = planted_class
    assert analysis["students"] == len(students)
    for number, (answer, value, count, kind) in enumerate(PLANTED):
        groups = [g for g in _answer(analysis, answer)["wrong_values"] if g["value"] == pytest.approx(float(value))]
        assert len(groups) == 1, (answer, value)
        group = groups[0]
        assert group["count"] == count
        assert group["students"] == sorted(f"slip{number}-{index}" for index in range(count))
        assert group["slip"] is not None, (answer, value, kind)
        assert group["slip"]["kind"] == kind, (answer, value, group["slip"])
        assert group["rule"] is None


@pytest.mark.slow
def test_no_right_answer_and_no_random_value_is_put_down_to_a_slip(planted_class):
    students, analysis, _ = planted_class
    answer, value, count = SHARED_RANDOM
    shared = [g for g in _answer(analysis, answer)["wrong_values"] if g["value"] == float(value)]
    assert [(g["count"], g["slip"]) for g in shared] == [(count, None)]  # searched, and honestly unexplained
    for answer, value in LONE_RANDOM:
        lone = [g for g in _answer(analysis, answer)["wrong_values"] if g["value"] == float(value)]
        assert [(g["count"], g["slip"]) for g in lone] == [(1, None)]
    # Each answer's right students: every student but those planted or random on it.
    for item in analysis["answers"]:
        wrong_here = sum(g["count"] for g in item["wrong_values"])
        assert item["right"] == len(students) - wrong_here, item["answer"]
        assert item["blanks"] == 0


@pytest.mark.slow
def test_the_summary_page_and_the_csv_show_the_slips(planted_class):
    _, _, out = planted_class
    page = (out / "class-summary-backprop.html").read_text(encoding="utf-8")
    assert 'id="chart-slips"' in page
    assert "the ReLU" in page  # the gate-ignored slip's words, drawn and listed
    with (out / "item-analysis-backprop.csv").open(encoding="utf-8", newline="") as csv_file:
        rows = list(csv.DictReader(csv_file))
    slips = {(row["answer"], row["slip"], row["count"]) for row in rows if row["row"] == "slip"}
    assert slips == {(answer, kind, str(count)) for answer, _, count, kind in PLANTED}
