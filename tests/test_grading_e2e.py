"""End to end: submit, grade, and read the results back from the grades CSV, feedback and nbgrader's gradebook."""

from __future__ import annotations

import csv
import json
import re
import shutil

import pytest

from course.cli import main
from course.term import nbgrader_bridge
from course.term.batch import grade_batch
from tests.support.helpers import (
    ALL_VALUES,
    CORRECT_CODE,
    ROOT,
    SAMPLE_SCORES,
    copy_course,
    submitted_notebook,
    write,
    wrong_literal,
)

SAMPLES = ROOT / "tests" / "samples" / "submitted"
EXPECTED_SAMPLE_SCORES = SAMPLE_SCORES

pytestmark = pytest.mark.slow


def read_csv(path):
    with path.open(newline="") as stream:
        return {row["student_id"]: row for row in csv.DictReader(stream)}


@pytest.fixture
def graded_samples(graded_sample_class):
    """The sample class graded once by `autograd-course grade` (tests/conftest.py): (its config, its root, what the
    command printed). Read only: a test that writes works on a copy."""
    from course.core.config import load_config

    root, printed = graded_sample_class
    return load_config(root), root, printed


def test_sample_class_scores(graded_samples):
    _, root, printed = graded_samples
    rows = read_csv(root / "grades-autograd.csv")
    assert {student: float(row["score"]) for student, row in rows.items()} == EXPECTED_SAMPLE_SCORES
    assert rows["frank"]["status"] == "failed"
    assert all(rows[s]["status"] == "graded" for s in EXPECTED_SAMPLE_SCORES if s != "frank")
    assert set(rows["alice"]) == {
        "student_id",
        "slopes",
        "graph_walk",
        "tiny_net",
        "closed_relu",
        "retain_grad",
        "accumulation",
        "no_grad_detach",
        "one_call",
        "cubic",
        "w2_net",
        "predict_twice",
        "raw_score",
        "late_penalty",
        "score",
        "max_score",
        "status",
    }
    lines = [line.strip() for line in printed.splitlines()]  # (indented under "autograd:" in a course of two)
    first = lines.index("6 submissions: 5 graded, 1 failed, 0 timed out, 0 autograder errors")
    assert lines[first + 1].startswith("failed: frank: ")  # who failed, and why, in the terminal
    assert "not a notebook" in lines[first + 1]


def test_every_feedback_json_validates_against_the_shipped_schema(graded_samples):
    """Every feedback.json the sample class gets (graded, failed) holds to course/schemas/feedback.schema.json and
    reads back as the same document, byte for byte as written."""
    import jsonschema

    from course.core.files import compact_json
    from course.pipeline.feedback_model import Feedback, schema_text

    _, root, _ = graded_samples
    schema = json.loads(schema_text())
    paths = sorted((root / "feedback").glob("*/autograd/feedback.json"))
    assert {path.parent.parent.name for path in paths} == set(EXPECTED_SAMPLE_SCORES) | {"frank"}
    for path in paths:
        text = path.read_text(encoding="utf-8")
        jsonschema.validate(json.loads(text), schema)
        read = Feedback.from_json(json.loads(text), where=str(path))
        assert compact_json(read.to_json()) == text
        assert Feedback.from_json(read.to_json()) == read


def test_gradebook_matches_grades_csv(graded_samples):
    config, root, _ = graded_samples
    rows = read_csv(root / "grades-autograd.csv")
    for student, row in rows.items():
        scores = nbgrader_bridge.grade_cell_scores(config.gradebook_url, "autograd", student)
        assert sum(scores.values()) == float(row["score"])
        assert scores["test_tiny_net"] == float(row["tiny_net"])


def test_feedback_files_for_every_student(graded_samples):
    _, root, _ = graded_samples
    for student in EXPECTED_SAMPLE_SCORES:
        folder = root / "feedback" / student / "autograd"
        feedback = json.loads((folder / "feedback.json").read_text())
        assert feedback["score"] == EXPECTED_SAMPLE_SCORES[student]
        page = (folder / "autograd.html").read_text()
        assert page.startswith("<!DOCTYPE html>")
        assert "<script" not in page
        assert "http" not in page
    frank = json.loads((root / "feedback" / "frank" / "autograd" / "feedback.json").read_text())
    assert "not a notebook" in frank["messages"][0]
    bob = json.loads((root / "feedback" / "bob" / "autograd" / "feedback.json").read_text())
    found = {m["id"] for q in bob["questions"] for m in q["misconceptions"]}
    assert {
        "accumulation_overwrites",
        "forgot_times_x",
        "w2_factor_missing",
        "cubic_dropped_linear_term",
        "retained_grad_is_none",
        "gradient_through_closed_relu",
        "sign_slip",
    } <= found
    dave = json.loads((root / "feedback" / "dave" / "autograd" / "feedback.json").read_text())
    notes = [v["name"] for q in dave["questions"] for v in q["values"] if v.get("hand_work_note")]
    assert notes == ["net_dL_dw", "net_dL_db"]


def test_tampering_adds_nothing(graded_samples):
    _, root, _ = graded_samples
    erin = json.loads((root / "feedback" / "erin" / "autograd" / "feedback.json").read_text())
    values = {v["name"]: v for q in erin["questions"] for v in q["values"]}
    # Her honest literals (all 0) are right exactly where the true answer is 0: slope_at_0 and the closed ReLU.
    assert {name for name, v in values.items() if v["correct"]} == {
        "slope_at_0",
        "closed_a",
        "closed_dL_dw",
        "closed_dL_db",
    }
    assert values["net_dL_dw"]["status"] == "wrong_form"


def test_one_off_grading_stays_out_of_the_course_gradebook(course_config, course_root, tmp_path, capsys):
    alice = SAMPLES / "alice" / "autograd" / "autograd.ipynb"
    assert (
        main(["--course", str(course_root), "grade", str(alice), "--out", str(tmp_path / "trial"), "--jobs", "0"]) == 0
    )
    assert "gradebook: not recorded" in capsys.readouterr().out
    assert (tmp_path / "trial" / "grades-autograd.csv").exists()
    assert not (course_root / "gradebook.db").exists()
    # asked for, it is recorded; and --no-gradebook keeps even a course-root run out
    assert (
        main(
            [
                "--course",
                str(course_root),
                "grade",
                str(alice),
                "--out",
                str(tmp_path / "trial"),
                "--jobs",
                "0",
                "--gradebook",
            ]
        )
        == 0
    )
    assert sum(nbgrader_bridge.grade_cell_scores(course_config.gradebook_url, "autograd", "alice").values()) == 57


def test_roster_students_without_a_submission_are_listed_as_missing(course_root, tmp_path, capsys):
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id,name\nalice,Alice A.\nzoe,Zoe Z.\n")
    alice = SAMPLES / "alice" / "autograd" / "autograd.ipynb"
    out = tmp_path / "trial"
    assert (
        main(
            [
                "--course",
                str(course_root),
                "grade",
                str(alice),
                "--out",
                str(out),
                "--jobs",
                "0",
                "--roster",
                str(roster),
            ]
        )
        == 0
    )
    assert "1 missing (on the roster, nothing submitted): zoe" in capsys.readouterr().out
    rows = read_csv(out / "grades-autograd.csv")
    assert (rows["zoe"]["status"], rows["zoe"]["score"], rows["zoe"]["max_score"]) == ("missing", "0", "57")
    assert rows["alice"]["status"] == "graded"
    summary = json.loads((out / "class-summary-autograd.json").read_text())
    assert summary["missing"] == ["zoe"]
    assert summary["students"] == 1  # the score statistics are over the submissions
    assert "Did not submit (1)" in (out / "class-summary-autograd.html").read_text()
    assert not (out / "feedback" / "zoe").exists()


def test_integrity_report_is_for_the_instructor_only(graded_samples):
    _, root, _ = graded_samples
    report = json.loads((root / "integrity-autograd.json").read_text())
    assert set(report) == {"erin"}
    assert "cell 65: patches torch.allclose = ..." in report["erin"]
    assert set(json.loads((root / "class-summary-autograd.json").read_text())["integrity"]) == {"erin"}
    summary = (root / "class-summary-autograd.html").read_text()
    assert "Integrity report (instructor only)" in summary
    assert "class AlwaysEqual(float) overriding __eq__, __sub__" in summary
    for name in ("feedback.json", "autograd.html"):  # the student's own feedback stays neutral
        text = (root / "feedback" / "erin" / "autograd" / name).read_text()
        assert "patches" not in text
        assert "rigged" not in text
        assert "ntegrity" not in text


def test_the_class_summary_names_students_for_the_instructor_only(graded_samples):
    """The summary says who showed each misconception and links every page; no student's feedback folder
    (what nbgrader release_feedback hands out) and no Gradescope result names another student."""
    _, root, _ = graded_samples
    summary = json.loads((root / "class-summary-autograd.json").read_text())
    assert {m["id"]: m["students"] for m in summary["misconceptions"]}["forgot_times_x"] == ["bob"]
    assert summary["not_counted"]["failed"] == ["frank"]
    assert summary["students"] == 5
    for student in EXPECTED_SAMPLE_SCORES:
        others = re.compile(r"\b(" + "|".join(s for s in EXPECTED_SAMPLE_SCORES if s != student) + r")\b")
        for path in (root / "feedback" / student).rglob("*"):
            if path.is_file():
                assert not others.search(path.read_text(encoding="utf-8", errors="replace")), path
    others = re.compile(r"\b(alice|carol|dave|erin|frank)\b")
    for golden in (ROOT / "tests" / "goldens").glob("bob.*"):  # bob's feedback and Gradescope results
        assert not others.search(golden.read_text(encoding="utf-8")), golden


def test_regrading_is_idempotent(graded_samples, tmp_path):
    from course.core.config import load_config

    root = shutil.copytree(graded_samples[1], tmp_path / "course")  # it writes: a copy of the graded class
    before = (root / "grades-autograd.csv").read_text()
    grade_batch(load_config(root), [root / "submitted" / "alice", root / "submitted" / "carol"], root)
    assert (root / "grades-autograd.csv").read_text() == before


def test_feedback_json_is_deterministic(graded_samples, tmp_path):
    config, root, _ = graded_samples
    grade_batch(config, [root / "submitted" / "bob"], tmp_path / "again")
    first = json.loads((root / "feedback" / "bob" / "autograd" / "feedback.json").read_text())
    second = json.loads((tmp_path / "again" / "feedback" / "bob" / "autograd" / "feedback.json").read_text())

    def without_run_specifics(feedback):
        # the function answer is called at points drawn afresh for every grading run
        for question in feedback["questions"]:
            for value in question["values"]:
                value.pop("probes", None)
        return feedback

    assert without_run_specifics(first) == without_run_specifics(second)


def test_our_scores_equal_nbgrader_autograde_on_honest_notebooks(tmp_path):
    """Question by question, on notebooks nbgrader grades correctly (no tampering)."""
    root = tmp_path / "course"
    copy_course(root)
    honest = {
        "alice": SAMPLES / "alice" / "autograd" / "autograd.ipynb",
        "bob": SAMPLES / "bob" / "autograd" / "autograd.ipynb",
        "carol": SAMPLES / "carol" / "autograd" / "autograd.ipynb",
        "dave": SAMPLES / "dave" / "autograd" / "autograd.ipynb",
    }
    for name in ("net_dL_dw", "accumulated_grads", "y_grad_without_retain", "w2_loss"):
        wrong = {**CORRECT_CODE, name: repr(wrong_literal(ALL_VALUES[name]))}
        path = write(submitted_notebook(wrong), tmp_path / "single" / f"{name}.ipynb")
        honest[f"wrong-{name.replace('_', '-')}"] = path
    for student, path in honest.items():
        target = root / "submitted" / student / "autograd" / "autograd.ipynb"
        target.parent.mkdir(parents=True)
        shutil.copy(path, target)

    from course.core.config import load_config

    config = load_config(root)
    grade_batch(config, [], root / "out")
    ours = json.loads  # for readability below
    nbgrader_db = f"sqlite:///{tmp_path / 'nbgrader.db'}"
    nbgrader_bridge.generate_assignment(root, nbgrader_db, "autograd")
    for student in honest:
        nbgrader_bridge.autograde(root, nbgrader_db, "autograd", student)
        theirs = nbgrader_bridge.grade_cell_scores(nbgrader_db, "autograd", student)
        feedback = ours((root / "out" / "feedback" / student / "autograd" / "feedback.json").read_text())
        mine = {f"test_{q['id']}": q["earned"] for q in feedback["questions"]}
        assert mine == theirs, student
