"""Family 6: broken input. Nothing readable -> score 0 with a specific, student-readable reason."""

from __future__ import annotations

import copy
import csv
import json

import pytest

from course.pipeline.discovery import discover
from course.term.batch import grade_batch
from tests.support.adversarial import baseline_notebook, fast_config, grade, per_question
from tests.support.helpers import ROOT, load, write

NOTEBOOK_V3 = json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"cells": []}]})

BROKEN = {
    "empty file": (b"", "the file is empty"),
    "binary file": (bytes(range(256)) * 4, "not UTF-8 text"),
    "not JSON": ("print('hello')\n", "not valid JSON"),
    "JSON that is not a notebook": ('{"name": "alice", "answers": [1, 2, 3]}', "without the cells of a Jupyter"),
    "a JSON list": ("[1, 2, 3]", "without the cells of a Jupyter"),
    "nbformat 3": (NOTEBOOK_V3, "notebook format 3 is not supported"),
    "no cells": ('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}', "none of the answer cells"),
    "JSON nested too deeply": ("[" * 100_000 + "]" * 100_000, "not a notebook"),
    "invalid UTF-8": (b'{"nbformat": 4, "cells": ["\xff\xfe"]}', "not UTF-8 text"),
    "cells that are not cells": ('{"nbformat": 4, "metadata": {}, "cells": [42]}', "cell 0 is not a notebook cell"),
    "metadata that is not a mapping": (
        '{"nbformat": 4, "metadata": {}, "cells": [{"cell_type": "code", "source": "x = 1", "metadata": 5}]}',
        "none of the answer cells",
    ),
    "source that is not text": (
        '{"nbformat": 4, "metadata": {}, "cells": [{"cell_type": "code", "source": 7}]}',
        "neither text nor a list of lines",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_unreadable_submissions_score_zero_with_a_reason(case, tmp_path):
    content, reason = BROKEN[case]
    graded, _ = grade(content, tmp_path)
    assert graded.status == "failed"
    assert graded.feedback.score == 0
    assert reason in graded.feedback.messages[0]
    assert "Traceback" not in json.dumps(graded.feedback.to_json())


def test_a_notebook_of_another_assignment(tmp_path):
    other = baseline_notebook()
    for cell in other["cells"]:
        cell.get("metadata", {}).pop("nbgrader", None)
    graded, _ = grade(other, tmp_path)
    assert graded.status == "failed"
    assert "none of the answer cells of assignment 'autograd'" in graded.feedback.messages[0]


def test_the_notebook_of_another_assignment_of_the_course_is_named_as_that_ones(tmp_path):
    """The training notebook graded as autograd's: the feedback says whose notebook it is (issue 40, item 9),
    never as if it were a broken autograd.ipynb; it is graded as unreadable (0, status failed), as before."""
    training = json.loads((ROOT / "release" / "training" / "training.ipynb").read_text(encoding="utf-8"))
    graded, _ = grade(training, tmp_path)
    assert graded.status == "failed"
    assert graded.feedback.messages[0] == (
        "Your submission could not be graded: this is the notebook of assignment 'training', not of 'autograd' "
        "(its answer cells are those of 'training'). Submit your notebook of 'autograd' (autograd.ipynb) here, and "
        "the one of 'training' where 'training' is submitted"
    )


def test_too_many_cells(tmp_path):
    notebook = baseline_notebook()
    notebook["cells"] += [{"cell_type": "code", "metadata": {}, "outputs": [], "source": "pass"}] * 100_000
    graded, seconds = grade(notebook, tmp_path)
    assert graded.status == "failed"
    assert f"{len(notebook['cells'])} cells, more than the limit of 2000" in graded.feedback.messages[0]
    assert seconds < 30


@pytest.mark.slow
def test_fifty_megabytes_of_outputs_are_ignored(baseline, tmp_path):
    notebook = baseline_notebook()
    notebook["cells"][3]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x" * (50 * 1024**2)}]
    graded, _ = grade(notebook, tmp_path)
    assert per_question(graded) == baseline


def test_over_the_size_limit(tmp_path):
    from dataclasses import replace

    config = fast_config()
    config = replace(config, limits=replace(config.limits, notebook_mb=1))
    notebook = baseline_notebook()
    notebook["cells"][3]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x" * (2 * 1024**2)}]
    graded, _ = grade(notebook, tmp_path, config=config)
    assert graded.status == "failed"
    assert "over the limit of 1 MB; clear the outputs" in graded.feedback.messages[0]


def test_a_symlink_to_the_answer_key_is_refused(tmp_path):
    from tests.support.helpers import SOURCE_NOTEBOOK

    (tmp_path / "student.ipynb").symlink_to(SOURCE_NOTEBOOK)
    from course.pipeline.assignment import load_assignment
    from course.pipeline.discovery import SubmissionRef
    from course.pipeline.grading import grade_submission

    config = fast_config()
    graded = grade_submission(
        SubmissionRef("student", tmp_path / "student.ipynb"),
        load_assignment(config.source_notebook(), "autograd"),
        config,
    )
    # Refused, never read; and since nbgrader's collect copies regular files, a link in the submissions is the
    # grader's layout (or someone's doing there): the instructor is told, the student gets no 0 for it.
    assert graded.status == "autograder_error"
    assert "is a symbolic link" in graded.internal_error
    assert any("not your fault" in message for message in graded.feedback.messages)


def test_wrong_extension(tmp_path):
    path = write(baseline_notebook(), tmp_path / "alice.txt")
    refs = discover([path], "autograd", "autograd.ipynb")
    from course.pipeline.assignment import load_assignment
    from course.pipeline.grading import grade_submission

    config = fast_config()
    graded = grade_submission(refs[0], load_assignment(config.source_notebook(), "autograd"), config)
    assert graded.status == "failed"
    assert "expected a Jupyter notebook (.ipynb), not a .txt file" in graded.feedback.messages[0]


def test_duplicate_student_ids_and_unusable_names_in_a_batch(tmp_path, course_root):
    """One canonical id check at discovery: an unusable name or a repeated id is refused and reported, never
    renamed onto another id (`j~doe` must not overwrite `j_doe`), and a legitimate non-ASCII id is graded."""
    from dataclasses import replace

    config = replace(fast_config(), root=course_root)
    folder = tmp_path / "in"
    alice = baseline_notebook()
    write(alice, folder / "alice.ipynb")
    write(copy.deepcopy(load(folder / "alice.ipynb")), tmp_path / "elsewhere" / "alice.ipynb")
    for name in ("-rf", "j~doe", "j_doe", "+A2+B3", "@SUM", "alice\n", "josé", "jose\u0301", "\x1b[2Kevil"):
        write(alice, folder / f"{name}.ipynb")
    summary = grade_batch(config, [folder, tmp_path / "elsewhere" / "alice.ipynb"], tmp_path / "out")
    by_id = {g.student_id: g for g in summary.graded}
    assert sorted(by_id) == ["alice", "j_doe", "josé"]
    assert all(g.status == "graded" for g in by_id.values())
    refused = {ref.path.name: ref.problem for ref in summary.refused}
    assert "was already graded from" in refused["alice.ipynb"]
    for name in ("-rf", "j~doe", "+A2+B3", "@SUM", "alice\n", "\x1b[2Kevil"):
        assert "is not a usable student id" in refused[f"{name}.ipynb"], name
    assert "Unicode's composed form" in refused["jose\u0301.ipynb"]
    feedback_dirs = sorted(p.name for p in (tmp_path / "out" / "feedback").iterdir())
    assert feedback_dirs == ["alice", "j_doe", "josé"]
    rows = (tmp_path / "out" / "grades-autograd.csv").read_text(encoding="utf-8").splitlines()
    assert [row[0] for row in csv.reader(rows[1:])] == ["alice", "j_doe", "josé"]
    # Everything said about the refused names is safe for a terminal: no escape character reaches it.
    printed = "\n".join(summary.lines())
    assert "\x1b" not in printed
    assert "\\x1b[2Kevil" in printed


def test_a_syntax_error_is_named_before_the_answers_it_cost(tmp_path, grader):
    from tests.support.helpers import CORRECT_CODE, submitted_notebook

    graded, _ = grader(submitted_notebook({**CORRECT_CODE, "net_dL_dw": "12 +* 3"}), tmp_path)
    first = graded.feedback.messages[0]
    assert first.startswith("Your answer cell for 3. A whole (tiny) network by hand, line ")
    assert "has a syntax error" in first
    tiny = next(q for q in graded.feedback.to_json()["questions"] if q["id"] == "tiny_net")
    assert tiny["earned"] == 0
    assert graded.feedback.score == 57 - tiny["points"]


def test_a_function_answer_still_returning_the_stub_is_said_so(sandbox_run):
    from course.core.answers import MISSING
    from course.core.config import Limits
    from course.pipeline.submission import Cell

    cells = [
        Cell(
            0,
            "answers",
            "def slope(x):\n    return ...\n\ndef other(x):\n    return object()\n\n"
            "def unwritten(x):\n    raise NotImplementedError\n\n"
            "def partly(x):\n    return ... if x < 0 else 2 * x\n",
        )
    ]
    ran = sandbox_run(
        cells,
        ("slope", "other", "unwritten", "partly"),
        {"slope": [1.0, 2.0], "other": [2.0], "unwritten": [1.0], "partly": [-1.0, 1.0]},
        Limits(),
    )
    # Still as released at every point: no answer yet, in the words of a value still `...`.
    assert (ran.answers["slope"].status, ran.answers["slope"].detail) == (MISSING, "still `...`")
    assert (ran.answers["unwritten"].status, ran.answers["unwritten"].detail) == (
        MISSING,
        "still raises NotImplementedError",
    )
    assert ran.answers["other"].probes[0].error == "returned a value of type object, not a plain number"
    # Written, but still `...` at some point: an answer, wrong there.
    assert ran.answers["partly"].probes[0].error == (
        "returned `...` (replace `return ...` with your derivative), not a plain number"
    )
    assert ran.answers["partly"].probes[1].value == 2
