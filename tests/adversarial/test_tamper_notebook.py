"""Family 2: tampering with the notebook's cells and nbgrader metadata."""

from __future__ import annotations

import copy

import pytest

from tests.support.adversarial import baseline_notebook, per_question, with_cell
from tests.support.helpers import SOURCE_NOTEBOOK, load

pytestmark = pytest.mark.slow


def _meta(cell):
    return cell.setdefault("metadata", {}).setdefault("nbgrader", {})


def _grade_id(cell):
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")


def edit_test_cells(nb):
    for cell in nb["cells"]:
        if _grade_id(cell).startswith("test_"):
            cell["source"] = "marks = Marks()\nmarks.earned = 1000\nmarks.total()"


def delete_test_and_form_cells(nb):
    nb["cells"] = [c for c in nb["cells"] if not _grade_id(c).startswith(("test_", "form_"))]


def duplicate_cells(nb):
    extra = [copy.deepcopy(c) for c in nb["cells"] if _grade_id(c) in ("answer_slopes", "test_slopes", "setup")]
    nb["cells"].extend(extra)


def move_tests_first(nb):
    nb["cells"].sort(key=lambda c: not _grade_id(c).startswith("test_"))


def retype_cells(nb):
    for cell in nb["cells"]:
        if _grade_id(cell).startswith("test_") or _grade_id(cell) == "setup":
            cell["cell_type"] = "markdown"
            cell.pop("outputs", None)
            cell.pop("execution_count", None)


def inflate_points(nb):
    for cell in nb["cells"]:
        if _grade_id(cell).startswith("test_"):
            _meta(cell)["points"] = 1000


def answer_cells_claim_to_be_tests(nb):
    for cell in nb["cells"]:
        if _grade_id(cell).startswith("answer_"):
            _meta(cell).update({"grade": True, "locked": True, "points": 100, "checksum": "0" * 32})


def make_test_cells_claim_to_be_solutions(nb):
    for cell in nb["cells"]:
        if _grade_id(cell).startswith("test_"):
            _meta(cell).update({"solution": True, "grade": False, "checksum": "f" * 32})


def extra_cell_claims_to_be_a_test(nb):
    nb["cells"].append(
        {
            "cell_type": "code",
            "execution_count": None,
            "outputs": [],
            "source": "bonus = 100\nbonus",
            "metadata": {
                "nbgrader": {
                    "grade": True,
                    "grade_id": "test_bonus",
                    "points": 100,
                    "locked": True,
                    "solution": False,
                    "schema_version": 3,
                }
            },
        }
    )


def pasted_hidden_tests(nb):
    source = load(SOURCE_NOTEBOOK)
    hidden = [copy.deepcopy(c) for c in source["cells"] if _grade_id(c).startswith("test_")]
    nb["cells"].extend(hidden)


TAMPERS = {
    "edited test cells": edit_test_cells,
    "deleted test and form cells": delete_test_and_form_cells,
    "duplicated cells": duplicate_cells,
    "test cells moved first": move_tests_first,
    "test and setup cells re-typed to markdown": retype_cells,
    "points inflated": inflate_points,
    "answer cells claim to be tests": answer_cells_claim_to_be_tests,
    "test cells claim to be solutions": make_test_cells_claim_to_be_solutions,
    "extra cell claims to be a test": extra_cell_claims_to_be_a_test,
    "hidden tests pasted from the source": pasted_hidden_tests,
}


@pytest.mark.parametrize("tamper", list(TAMPERS))
def test_notebook_tampering_earns_nothing(tamper, baseline, tmp_path, grader):
    notebook = baseline_notebook()
    TAMPERS[tamper](notebook)
    graded, _ = grader(notebook, tmp_path)
    assert graded.status == "graded"
    assert per_question(graded) == baseline
    assert graded.feedback.max_score == 57


def test_a_deleted_answer_cell_counts_as_unanswered(baseline, tmp_path, grader):
    notebook = baseline_notebook()
    notebook["cells"] = [c for c in notebook["cells"] if _grade_id(c) != "answer_tiny_net"]
    graded, _ = grader(notebook, tmp_path)
    assert per_question(graded) == {**baseline, "tiny_net": 0}
    tiny = next(q for q in graded.feedback.to_json()["questions"] if q["id"] == "tiny_net")
    assert all(v["detail"] == "no answer (its answer cell was deleted)" for v in tiny["values"])


def test_answers_set_in_a_cell_after_the_answer_cell_are_the_notebooks_answers(baseline, tmp_path, grader):
    """Not a tamper: the values a notebook really holds when it has run are its answers."""
    graded, _ = grader(with_cell("net_dL_dw = 12"), tmp_path)
    assert per_question(graded) == {**baseline, "tiny_net": baseline["tiny_net"] + 1}
