"""Release: nbgrader generate_assignment, then the soundness proof (real kernel, real torch)."""

from __future__ import annotations

import ast
import json

import pytest

from course.authoring.release import find_leaks, release
from course.core.config import load_config
from course.core.errors import CourseError, ReleaseError
from course.pipeline.assignment import load_course_assignment
from tests.support.helpers import (
    RELEASE_NOTEBOOK,
    ROOT,
    SOURCE_NOTEBOOK,
    TRAINING_RELEASE,
    course_assignments,
    load,
    release_drift,
)


def _edit_source(course_root, replacements: dict[str, str]) -> None:
    path = course_root / "source" / "autograd" / "autograd.ipynb"
    text = path.read_text(encoding="utf-8")
    for old, new in replacements.items():
        assert old in text, old
        text = text.replace(old, new)
    path.write_text(text, encoding="utf-8")


@pytest.mark.parametrize("name", course_assignments())
def test_every_assignment_of_course_yaml_has_its_release_committed(course_root, name):
    """Fails when someone adds or edits an assignment of source/course.yaml without releasing and committing it."""
    assert release_drift(course_root, name) is None


def test_committed_release_is_in_sync_with_source(course_config):
    """Fails when someone edits source/ without running `autograd-course release`."""
    report = release(course_config, verify=False)
    assert json.loads(report.release_notebook.read_text()) == json.loads(RELEASE_NOTEBOOK.read_text()), (
        "release/ is out of date: run `autograd-course release` and commit release/"
    )


def test_release_leaks_no_solution_and_no_hidden_test():
    assert find_leaks(SOURCE_NOTEBOOK, RELEASE_NOTEBOOK) == []
    text = RELEASE_NOTEBOOK.read_text()
    for secret in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS", "net_dL_dw = 12", "marks.value(", "w2_dL_dw = 1.0"):
        assert secret not in text


def test_a_solution_outside_its_region_is_caught(course_config, course_root, tmp_path):
    leaked = tmp_path / "leaky.ipynb"
    notebook = json.loads(RELEASE_NOTEBOOK.read_text())
    for cell in notebook["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "answer_tiny_net":
            cell["source"] = (
                cell["source"] + "\nnet_dL_dw = 12\n"
                if isinstance(cell["source"], str)
                else ([*cell["source"], "\nnet_dL_dw = 12\n"])
            )
    leaked.write_text(json.dumps(notebook))
    assert find_leaks(SOURCE_NOTEBOOK, leaked) == ["answer_tiny_net: the release still contains 'net_dL_dw = 12'"]


@pytest.mark.slow
def test_release_is_verified_with_nbgrader_autograde_and_says_each_stage_on_stderr(course_root, capfd):
    """A release takes tens of seconds: each stage is a log line on stderr (course/core/logs.py), the result on stdout,
    with the proof's scores. (One release for what were two tests, each releasing: the proof's scores and quiet
    kernels, and the stages.)"""
    from course.cli import main

    assert main(["--course", str(course_root), "release", "--assignment", "autograd"]) == 0
    captured = capfd.readouterr()  # nbgrader's kernels write to the file descriptors, not through sys.stderr
    stages = [
        line.split("course.authoring.release: ", 1)[1]
        for line in captured.err.splitlines()
        if "course.authoring.release: " in line
    ]
    assert stages == [
        "release autograd: nbgrader generate_assignment",
        "release autograd: proof: nbgrader generate_assignment in a scratch course",
        "release autograd: proof: nbgrader autograde of the source's solutions",
        "release autograd: proof: nbgrader autograde of the untouched release",
        f"release autograd: recording its cells in the course gradebook, then {course_root / 'release' / 'autograd'}",
    ], captured.err
    assert " INFO course.authoring.release: " in captured.err
    assert "released " in captured.out
    assert "verified with nbgrader autograde: source solutions 57/57, untouched release 0/57" in captured.out
    # nbgrader's kernels use unix sockets (configured), so ipykernel has no TCP warning to give
    assert "without encryption" not in captured.out + captured.err
    assert (
        main(
            [
                "--course",
                str(course_root),
                "--log-level",
                "warning",
                "release",
                "--assignment",
                "autograd",
                "--no-verify",
            ]
        )
        == 0
    )
    assert "course.authoring.release" not in capfd.readouterr().err


@pytest.mark.slow
def test_instructor_changes_a_number_consistently(course_config, course_root):
    # exercise 8 with target 6 instead of 5: loss (7-6)^2 = 1, dL/dw = 2*1*3 = 6, dL/db = 2
    _edit_source(
        course_root,
        {
            '\\"call_target\\": 5': '\\"call_target\\": 6',
            "one_call_loss = 4\\n": "one_call_loss = 1\\n",
            "one_call_w_grad = 12\\n": "one_call_w_grad = 6\\n",
            "one_call_b_grad = 4\\n": "one_call_b_grad = 2\\n",
        },
    )
    report = release(course_config)
    assert (report.solution_score, report.untouched_score) == (57, 0)
    assert "(y − 6)²" in report.release_notebook.read_text()  # the text shows the new number too


def test_release_names_the_answers_verdicts_only_feedback_explains_by_their_verdict_alone(course_root, capsys):
    """A hidden test without idea= leaves verdicts-only feedback with ✓ or ✗ alone for that answer (its hint may
    tell the answer, so it is never shown there): the release says which, and still releases."""
    from course.cli import main

    idea = (
        ', idea=\\"The chain rule through the ReLU: what its local slope is at this h, and what multiplying by '
        'it does to every gradient behind it.\\"'
    )
    release_it = ["--course", str(course_root), "release", "--assignment", "autograd", "--no-verify"]
    assert main(release_it) == 0
    assert "note:" not in capsys.readouterr().out  # the course's hidden tests give every answer an idea
    _edit_source(course_root, {idea: ""})
    assert main(release_it) == 0
    assert (
        "note: verdicts-only feedback explains closed_dL_dw by ✓ or ✗ alone: their hidden tests give no idea= "
        "(docs/authoring.md, hidden tests)"
    ) in capsys.readouterr().out


def snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_an_answer_key_that_disagrees_with_torch_stops_the_release(course_config, course_root):
    before = snapshot(course_root / "release")
    _edit_source(course_root, {'\\"call_target\\": 5': '\\"call_target\\": 6'})
    with pytest.raises(ReleaseError, match="own solutions earn 54 of 57 points") as failure:
        release(course_config)
    assert "test_one_call (question '8. One `backward()` fills every parameter'): 0 of 3" in str(failure.value)
    assert snapshot(course_root / "release") == before  # the unverified notebook never reached release/


def test_a_missing_end_solution_names_the_cell_and_question_and_leaves_release_alone(course_root, capsys):
    from course.cli import main

    before = snapshot(course_root / "release")
    edit_source_cell(
        course_root, "answer_tiny_net", lambda lines: [line for line in lines if "END SOLUTION" not in line]
    )
    assert main(["--course", str(course_root), "release"]) == 1
    err = capsys.readouterr().err
    assert (
        "(answer_tiny_net, question '3. A whole (tiny) network by hand'): ### BEGIN SOLUTION on line 8 has no "
        "### END SOLUTION; put ### END SOLUTION after the region's last line" in err
    )
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert snapshot(course_root / "release") == before


def test_a_solution_region_outside_a_solution_cell_is_named_before_nbgrader_runs(course_config, course_root):
    before = snapshot(course_root / "release")
    edit_source_cell(
        course_root,
        "form_tiny_net",
        lambda lines: [*lines, "\n### BEGIN SOLUTION\n", "secret_hint = 12\n", "### END SOLUTION\n"],
    )
    with pytest.raises(CourseError) as failure:  # nbgrader itself would stop with a traceback
        release(course_config, verify=False)
    assert (
        "(form_tiny_net, question '3. A whole (tiny) network by hand'): its ### BEGIN SOLUTION region is in a "
        "cell that is not a solution cell, which nbgrader refuses; move the region into the question's answer "
        "cell, then release again"
    ) in str(failure.value)
    assert snapshot(course_root / "release") == before


def test_a_leak_is_reported_with_its_question(assignment):
    from course.authoring.release import _with_question

    assert _with_question(assignment, "answer_tiny_net: the release still contains 'net_dL_dw = 12'") == (
        "answer_tiny_net (question '3. A whole (tiny) network by hand'): the release still contains 'net_dL_dw = 12'"
    )


def edit_source_cell(course_root, grade_id: str, change) -> None:
    """Rewrite the source lines of one cell of the course copy's source notebook."""
    path = course_root / "source" / "autograd" / "autograd.ipynb"
    notebook = json.loads(path.read_text())
    for cell in notebook["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == grade_id:
            cell["source"] = change(cell["source"])
    path.write_text(json.dumps(notebook, indent=1))


# ----------------------------------------------------------------------------- by hand first, then torch


def _torch_cells(notebook: dict) -> list[tuple[list[str], list[str]]]:
    """The code cells a student is given to run torch (not the course's cells, not the empty ones for their
    own code): the answers each `check_with_torch(...)` compares, and what each prints."""
    cells = []
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or cell["metadata"].get("nbgrader") or not source.strip():
            continue
        calls = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)]
        named = [k.arg for c in calls if getattr(c.func, "id", "") == "check_with_torch" for k in c.keywords]
        printed = [ast.unparse(c) for c in calls if getattr(c.func, "id", "") == "print"]
        cells.append((named, printed))
    return cells


@pytest.mark.parametrize(
    ("name", "released", "given"), [("autograd", RELEASE_NOTEBOOK, 8), ("training", TRAINING_RELEASE, 4)]
)
def test_each_torch_cell_compares_the_hand_values_and_prints_none_of_torchs(name, released, given):
    """The student writes the hand value first, then torch checks it: each torch cell given compares every
    answer of its exercise with torch and prints no torch value to copy (only `z.grad_fn`, the node, which
    answers nothing). In the challenges the student writes the torch code; the text asks for the same check."""
    questions = load_course_assignment(load_config(ROOT), name).questions
    cells = _torch_cells(load(released))
    assert [named for named, _ in cells] == [list(q.answer_names) for q in questions[:given]]
    assert [printed for _, printed in cells if printed] == ([["print(z.grad_fn)"]] if name == "autograd" else [])
    notebook = load(released)["cells"]
    own = [
        index
        for index, c in enumerate(notebook)
        if c["cell_type"] == "code" and not c["metadata"].get("nbgrader") and not "".join(c["source"]).strip()
    ]
    assert len(own) == {"autograd": 3, "training": 2}[name]
    for index in own:  # the text nearest above an empty cell for the student's torch code asks for the check
        above = next(c for c in reversed(notebook[:index]) if c["cell_type"] == "markdown")
        assert "check_with_torch(" in "".join(above["source"]), index
