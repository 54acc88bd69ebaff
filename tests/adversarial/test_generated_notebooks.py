"""A student's input never becomes our failure: notebooks generated over nbformat's structure, graded.

Hypothesis makes notebooks from the released one (filled with honest answers): metadata of every JSON type
(nbgrader's fields included: grade_id, grade, solution, locked, task, points, schema_version, checksum,
cell_type), cells added, dropped, retyped and given odd ids, text with NULs, lone surrogates and a
megabyte of one letter, syntax deeper or longer than the parser goes (elif chains, nested brackets, long
operator chains), notebook metadata, and the file's encoding. Every notebook of a run is written into one
class and graded by ONE `grade` run into the course's nbgrader gradebook (a warm pool shares the cost), then
for every student: the status is `graded` or `failed` with a sentence, never `autograder_error`; the grades
CSV and nbgrader's gradebook hold the same scores; formgrader's autograded/ notebook is valid nbformat.

The fast loop grades a small sample, the slow suite a few hundred (PROPERTY_EXAMPLES sets how many), each run from
a seed of its own (so runs together cover far more than one run), printed with a failure and in the assertion:
PROPERTY_SEED=<seed> with the same PROPERTY_EXAMPLES makes the same notebooks again. A failing student's notebook is
named in the assertion and kept under the test's tmp folder.
"""

from __future__ import annotations

import copy
import csv
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from course.core.config import load_config
from course.term.batch import grade_batch
from tests.support.adversarial import BASELINE_ANSWERS
from tests.support.helpers import copy_course, submitted_notebook

FAST_EXAMPLES = 40
# 300 a run: 2 000 took 90-110 s of the suite's CPU-bound time (CONTRIBUTING.md) for examples that a seed changing
# per run spreads over the runs anyway; a deeper search is PROPERTY_EXAMPLES=2000 (about 2 min)
SLOW_EXAMPLES = int(os.environ.get("PROPERTY_EXAMPLES", "300"))
SEED = int(os.environ.get("PROPERTY_SEED") or random.SystemRandom().randrange(2**32))
BASE = submitted_notebook(BASELINE_ANSWERS)
NBGRADER_FIELDS = (
    "grade_id",
    "grade",
    "solution",
    "locked",
    "task",
    "points",
    "schema_version",
    "checksum",
    "cell_type",
)
GRADE_IDS = sorted(
    {cell["metadata"]["nbgrader"]["grade_id"] for cell in BASE["cells"] if "nbgrader" in cell.get("metadata", {})}
)

ODD_TEXT = [
    "",
    "\x00",
    "\ud800",
    "\udfff x",
    "\u202e\u2066",
    "=cmd|' /C calc'!A0",
    "../../etc/passwd",
    "\r\n\r",
    "x" * 1_000_000,
    "test_slopes",
    "answer_tiny_net",
    "setup",
    "numbers",
    "é" * 300,
    "<script>1</script>",
]
texts = st.text(max_size=24) | st.sampled_from(ODD_TEXT)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**400), 10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | texts
    | st.sampled_from(GRADE_IDS)
)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4), max_leaves=8
)


def _deep_code(kind: str, size: int) -> str:
    """Python the parser may or may not take: each valid Python runs in a moment (nothing loops)."""
    if kind == "elif":
        return "x = 1\nif x == 0:\n    y = 0\n" + "".join(f"elif x == {k}:\n    y = {k}\n" for k in range(1, size))
    if kind == "parentheses":
        return "x = " + "(" * size + "1" + ")" * size
    if kind == "lists":
        return "x = " + "[" * size + "]" * size
    if kind == "plus":
        return "x = 1" + " + 1" * (size * 50)
    if kind == "minus":
        return "x = " + "-" * (size * 50) + "1"
    if kind == "attributes":
        return "x = torch" + ".grad" * (size * 20)
    if kind == "indent":
        return "".join(" " * i + "if True:\n" for i in range(size)) + " " * size + "slope_at_3 = 6\n"
    if kind == "with torch":
        return (
            "import torch\n"
            + "".join(" " * i + "with torch.no_grad():\n" for i in range(size))
            + " " * size
            + "net_h = torch.tensor(5.0).item()\n"
        )
    return "x = '" + "a" * (size * 1000) + "'"


deep_code = st.builds(
    _deep_code,
    st.sampled_from(["elif", "parentheses", "lists", "plus", "minus", "attributes", "indent", "with torch", "long"]),
    st.integers(1, 1200),
)
sources = st.one_of(texts, st.lists(texts, max_size=4), deep_code, json_values)


@st.composite
def notebooks(draw) -> tuple[dict, str]:
    """(a notebook as JSON data, how its file is encoded)."""
    notebook = copy.deepcopy(BASE)
    cells = notebook["cells"]
    for _ in range(draw(st.integers(0, 5))):
        op = draw(
            st.sampled_from(
                [
                    "metadata",
                    "nbgrader",
                    "field",
                    "field",
                    "field",
                    "cell_type",
                    "id",
                    "source",
                    "deep",
                    "deep",
                    "add",
                    "drop",
                    "duplicate",
                    "notebook_metadata",
                    "outputs",
                ]
            )
        )
        if not cells:
            break
        index = draw(st.integers(0, len(cells) - 1))
        cell = cells[index]
        if op == "metadata":
            cell["metadata"] = draw(json_values)
        elif op == "nbgrader":
            cell["metadata"] = {**_mapping(cell.get("metadata")), "nbgrader": draw(json_values)}
        elif op == "field":
            meta = _mapping(cell.get("metadata"))
            cell["metadata"] = {
                **meta,
                "nbgrader": {
                    **_mapping(meta.get("nbgrader")),
                    draw(st.sampled_from(NBGRADER_FIELDS)): draw(json_values),
                },
            }
        elif op == "cell_type":
            cell["cell_type"] = draw(st.sampled_from(["code", "markdown", "raw"]) | json_values)
        elif op == "id":
            cell["id"] = draw(json_values)
        elif op == "source":
            cell["source"] = draw(sources)
        elif op == "deep":
            cell["source"] = draw(deep_code) if draw(st.booleans()) else cell.get("source", "")
            cells.insert(
                index,
                {
                    "cell_type": "code",
                    "execution_count": None,
                    "outputs": [],
                    "metadata": draw(st.just({}) | json_values),
                    "source": draw(deep_code),
                },
            )
        elif op == "add":
            cells.insert(
                index,
                {
                    "cell_type": draw(st.sampled_from(["code", "markdown", "raw"])),
                    "metadata": draw(json_values),
                    "source": draw(sources),
                },
            )
        elif op == "drop":
            del cells[index]
        elif op == "duplicate":
            cells.insert(draw(st.integers(0, len(cells))), copy.deepcopy(cell))
        elif op == "notebook_metadata":
            notebook["metadata"] = draw(json_values)
        elif op == "outputs":
            cell["outputs"] = draw(json_values)
    return notebook, draw(st.sampled_from(["utf-8"] * 8 + ["ascii"] * 4 + ["utf-8-sig", "utf-16"]))


def _mapping(value: object) -> dict:
    return value if type(value) is dict else {}


def _encoded(notebook: dict, encoding: str) -> bytes:
    if encoding == "ascii":
        return json.dumps(notebook).encode("ascii")  # every non-ASCII character (lone surrogates too) escaped
    text = json.dumps(notebook, ensure_ascii=False)
    return text.encode(encoding, "surrogatepass")  # a lone surrogate as its (invalid UTF-8) bytes


@dataclass
class GradedClass:
    seed: int
    root: Path
    notebooks: dict[str, Path]
    csv: dict[str, dict[str, str]]
    gradebook: dict[str, dict[str, float]]
    feedback: dict[str, dict]


def grade_generated_class(root: Path, examples: int) -> GradedClass:
    """`examples` generated notebooks, each a student of one class, graded by one `grade` run."""
    copy_course(root)
    made: dict[str, Path] = {}
    print(f"generated notebooks: PROPERTY_SEED={SEED} PROPERTY_EXAMPLES={examples}")  # shown with a failure

    @seed(SEED)
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(notebooks())
    def generate(example: tuple[dict, str]) -> None:
        student = f"s{len(made):05d}"
        path = root / "submitted" / student / "autograd" / "autograd.ipynb"
        path.parent.mkdir(parents=True)
        path.write_bytes(_encoded(*example))
        made[student] = path

    generate()
    config = load_config(root)
    grade_batch(config, [], root, record_gradebook=True, jobs=2)
    with (root / "grades-autograd.csv").open(newline="", encoding="utf-8") as stream:
        rows = {row["student_id"]: row for row in csv.DictReader(stream)}
    from nbgrader.api import Gradebook

    with Gradebook(config.gradebook_url) as gradebook:
        scores = {
            submission.student_id: {
                grade.name: float(grade.auto_score or 0)
                for notebook in submission.notebooks
                for grade in notebook.grades
            }
            for submission in gradebook.find_assignment("autograd").submissions
        }
    feedback = {
        student: json.loads((root / "feedback" / student / "autograd" / "feedback.json").read_text("utf-8"))
        for student in made
    }
    return GradedClass(SEED, root, made, rows, scores, feedback)


def check_class(graded: GradedClass) -> None:
    import nbformat

    assert set(graded.csv) == set(graded.notebooks)
    problems = []
    for student, path in graded.notebooks.items():
        row, feedback = graded.csv[student], graded.feedback[student]
        status = row["status"]
        said = f"{student} ({path}): "
        if status not in ("graded", "failed"):
            problems.append(said + f"status {status}: {feedback.get('messages')}")
        if status == "failed" and not (feedback["messages"] and feedback["messages"][0].strip()):
            problems.append(said + "failed without a sentence")
        if "Traceback" in json.dumps(feedback):
            problems.append(said + "a traceback in the feedback")
        if feedback["status"] != status:
            problems.append(said + f"feedback says {feedback['status']}, the CSV {status}")
        cells = graded.gradebook.get(student)
        if cells is None:
            problems.append(said + "not in the gradebook")
            continue
        if abs(sum(cells.values()) - float(row["raw_score"])) > 1e-9:
            problems.append(said + f"gradebook {sum(cells.values())}, CSV {row['raw_score']}")
        for name, score in cells.items():
            if abs(score - float(row[name.removeprefix("test_")] or 0)) > 1e-9:
                problems.append(said + f"{name}: gradebook {score}, CSV {row[name.removeprefix('test_')]}")
        autograded = graded.root / "autograded" / student / "autograd" / "autograd.ipynb"
        try:
            nbformat.validate(nbformat.read(autograded, as_version=4))
        except Exception as error:
            problems.append(said + f"autograded/ is not a valid notebook: {type(error).__name__}: {error}"[:500])
    again = f"PROPERTY_SEED={graded.seed} PROPERTY_EXAMPLES={len(graded.notebooks)} makes these notebooks again"
    assert not problems, "\n".join([again, *problems[:20]])


def test_generated_notebooks_are_graded_or_failed_with_a_sentence(tmp_path):
    check_class(grade_generated_class(tmp_path / "course", FAST_EXAMPLES))


@pytest.mark.slow
def test_hundreds_of_generated_notebooks_are_graded_or_failed_with_a_sentence(tmp_path):
    check_class(grade_generated_class(tmp_path / "course", SLOW_EXAMPLES))
