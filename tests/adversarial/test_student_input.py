"""A student's input never becomes our failure (issue 39): what a notebook's content can trigger is the student's,
a score with a sentence, never an `autograder_error`, and the grade's records (grades CSV, nbgrader's gradebook,
the LMS export, formgrader's autograded/) never disagree.

- odd nbgrader metadata: a grade_id (or another nbgrader field, or the metadata itself) of any JSON type, on a
  cell of an otherwise untouched notebook, graded end to end by `grade` into the course's gradebook;
- deep or long syntax: one valid cell of a few hundred `elif`s (the hand-work check recursed past the
  interpreter's limit on it), and cells deeper than Python's parser goes (the check is then incomplete and
  says so; the grade is given without it).
"""

from __future__ import annotations

import csv
import json
import shutil

import nbformat
import pytest

from course.cli import main
from course.pipeline import handwork
from course.pipeline.grading import INCOMPLETE_CHECK_TEXT
from course.pipeline.submission import Cell
from course.term import lms
from course.term.nbgrader_bridge import grade_cell_scores
from course.term.roster import Student
from tests.support.adversarial import baseline_notebook, per_question, with_cell
from tests.support.helpers import copy_course, write

LOCKED_CELL = 5  # the released notebook's locked form cell of "1. A gradient is a slope" (form_slopes)
ANSWER_CELL = 4  # that question's answer cell (answer_slopes, 3 points)

ODD_VALUES = {
    "list": ["x"],
    "mapping": {"a": 1},
    "number": 5,
    "null": None,
    "boolean": True,
    "huge-text": "x" * 200_000,
    "odd-text": "../\u202e\x00 =1",
    "nan": float("nan"),
    "surrogate": "\ud800",
}


def _mangled(cell_index: int, change) -> dict:
    notebook = baseline_notebook()
    change(notebook["cells"][cell_index])
    return notebook


def _set(path: tuple[str, ...], value):
    def change(cell: dict) -> None:
        target = cell
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


CASES = {
    **{
        f"grade-id-{kind}": (LOCKED_CELL, _set(("metadata", "nbgrader", "grade_id"), value))
        for kind, value in ODD_VALUES.items()
    },
    "answer-grade-id-list": (ANSWER_CELL, _set(("metadata", "nbgrader", "grade_id"), [1, 2])),
    **{
        f"{field}-list": (LOCKED_CELL, _set(("metadata", "nbgrader", field), [{"a": []}]))
        for field in ("grade", "solution", "locked", "points", "schema_version", "checksum", "cell_type")
    },
    "points-huge": (LOCKED_CELL, _set(("metadata", "nbgrader", "points"), 10**400)),
    "nbgrader-list": (LOCKED_CELL, _set(("metadata", "nbgrader"), [1])),
    "metadata-number": (LOCKED_CELL, _set(("metadata",), 7)),
    "metadata-nan": (LOCKED_CELL, _set(("metadata", "scrolled"), float("inf"))),
    "metadata-surrogate": (LOCKED_CELL, _set(("metadata", "tags"), ["\udfff"])),
    "cell-id-odd": (LOCKED_CELL, _set(("id",), "\x00 not an id")),
    "source-surrogate": (ANSWER_CELL, lambda cell: cell.update(source=cell["source"] + "\n# \ud800\n")),
}


LOST = {"answer-grade-id-list": 47, "source-surrogate": 47}  # question 1's answers: no answer cell, or one Python
# cannot compile (its cell error says so); everything else keeps the baseline's 50


def test_odd_nbgrader_metadata_is_graded_and_every_record_agrees(tmp_path):
    """Each case is one student of one class, graded by `grade` at the course root (gradebook included)."""
    root = tmp_path / "course"
    copy_course(root)
    for student, (index, change) in CASES.items():
        path = root / "submitted" / student / "autograd" / "autograd.ipynb"
        path.parent.mkdir(parents=True)
        # ASCII JSON: a lone surrogate travels as its \\ud800 escape, as Python's json and JupyterLab write it
        path.write_text(json.dumps(_mangled(index, change)), encoding="ascii")
    assert main(["--course", str(root), "grade", "--quiet", "--jobs", "2"]) == 0
    with (root / "grades-autograd.csv").open(newline="", encoding="utf-8") as stream:
        rows = {row["student_id"]: row for row in csv.DictReader(stream)}
    gradebook = f"sqlite:///{root / 'gradebook.db'}"
    roster = [Student(student, {"lms_id": str(number)}) for number, student in enumerate(CASES)]
    exported = {row.student.student_id: row.score for row in lms.export_rows(root / "grades-autograd.csv", roster)}
    for student in CASES:
        row = rows[student]
        assert row["status"] == "graded", (student, row)
        # nothing is lost: a locked cell's metadata costs nothing, a mangled answer cell's id only its question
        assert float(row["score"]) == LOST.get(student, 50), (student, row)
        assert sum(grade_cell_scores(gradebook, "autograd", student).values()) == float(row["score"]), student
        assert exported[student] == row["score"], student
        autograded = root / "autograded" / student / "autograd" / "autograd.ipynb"
        nbformat.validate(nbformat.read(autograded, as_version=4))
    feedback = json.loads((root / "feedback" / "grade-id-list" / "autograd" / "feedback.json").read_text())
    assert any("cell 6's nbgrader grade_id is a list" in message for message in feedback["messages"])


ELIF_CHAIN = "x = 1\nif x == 0:\n    y = 0\n" + "".join(f"elif x == {k}:\n    y = {k}\n" for k in range(1, 700))


def test_a_valid_elif_chain_is_graded(tmp_path, grader, baseline):
    """~20 KB of `elif`s runs fine in Python; the hand-work check once recursed past the interpreter's limit on
    it and made the notebook an autograder error."""
    assert 15_000 < len(ELIF_CHAIN) < 25_000
    graded, _ = grader(with_cell(ELIF_CHAIN), tmp_path)
    assert graded.status == "graded", graded.internal_error
    assert per_question(graded) == baseline
    assert INCOMPLETE_CHECK_TEXT not in graded.feedback.messages  # the check read it all


def test_the_hand_work_check_follows_a_deep_chain_to_its_end():
    """Iterative, not shallower: torch in the last branch of the chain is still seen."""
    source = ELIF_CHAIN + "else:\n    import torch\n    net_h = torch.tensor(5.0).item()\n"
    parsed = handwork.parse_cells((Cell(0, "cell 1", source),))
    assert parsed.trees
    assert parsed.complete
    assert handwork.computed_answers(parsed, ("net_h",)).computed == {"net_h"}


DEEPER_THAN_THE_PARSER = {
    "a long chain of additions": "x = 1" + " + 1" * 60_000,
    "attribute on attribute": "x = y" + ".z" * 40_000,
    "a tower of unary minus": "x = " + "-" * 60_000 + "1",
}


@pytest.mark.parametrize("case", list(DEEPER_THAN_THE_PARSER))
def test_syntax_deeper_than_the_parser_leaves_the_check_incomplete_not_the_grade(case, tmp_path, grader, baseline):
    graded, _ = grader(with_cell(DEEPER_THAN_THE_PARSER[case]), tmp_path)
    assert graded.status == "graded", graded.internal_error
    assert per_question(graded) == baseline
    assert INCOMPLETE_CHECK_TEXT in graded.feedback.messages


def test_deep_syntax_in_a_batch_with_the_gradebook(tmp_path):
    """The elif chain through `grade` at the course root, as the issue saw it: graded, recorded, in agreement."""
    root = tmp_path / "course"
    copy_course(root)
    write(with_cell(ELIF_CHAIN), root / "submitted" / "elif" / "autograd" / "autograd.ipynb")
    shutil.copytree(root / "submitted" / "elif", root / "submitted" / "honest")
    write(baseline_notebook(), root / "submitted" / "honest" / "autograd" / "autograd.ipynb")
    assert main(["--course", str(root), "grade", "--quiet", "--jobs", "2"]) == 0
    with (root / "grades-autograd.csv").open(newline="", encoding="utf-8") as stream:
        rows = {row["student_id"]: row for row in csv.DictReader(stream)}
    for student in ("elif", "honest"):
        assert rows[student]["status"] == "graded"
        assert float(rows[student]["score"]) == 50
        assert sum(grade_cell_scores(f"sqlite:///{root / 'gradebook.db'}", "autograd", student).values()) == 50
