"""The public answer contracts (the exercise tables of docs/authoring.md) against the source notebooks."""

from __future__ import annotations

import ast

import pytest

from course.core.answers import VALUE, Answer
from course.pipeline.assignment import SOLUTION_BEGIN, SOLUTION_END, region_lines
from course.pipeline.judge import judge
from tests.support.helpers import ALL_VALUES, CONTRACT, CONTRACT_FUNCTIONS, contract_answers


def test_every_contract_exercise_is_a_question(assignment):
    assert [q.id for q in assignment.questions] == list(CONTRACT)


@pytest.mark.parametrize("exercise", list(CONTRACT))
def test_each_variable_has_an_answer_cell_and_a_hidden_test(assignment, exercise):
    question = next(q for q in assignment.questions if q.id == exercise)
    expected_names = list(CONTRACT[exercise])
    assert list(question.answer_names) == expected_names
    assert list(question.function_names) == list(CONTRACT_FUNCTIONS.get(exercise, {}))
    for name in expected_names + list(question.function_names):
        assert f'"{name}", {name},' in question.test_source, f"no hidden test scores {name}"
        assert name in question.form_source, f"no public form check for {name}"


def test_answer_key_in_source_equals_the_contract(assignment):
    key = {}
    for question in assignment.questions:
        answer_cell = next(
            c for c in _source_cells() if c["metadata"].get("nbgrader", {}).get("grade_id") == question.answer_cell_id
        )
        solution = "\n".join(region_lines("".join(answer_cell["source"]), SOLUTION_BEGIN, SOLUTION_END))
        for node in ast.parse(solution).body:
            if isinstance(node, ast.Assign):
                key[node.targets[0].id] = ast.literal_eval(node.value)
    assert key == ALL_VALUES


def _source_cells():
    import json

    from tests.support.helpers import SOURCE_NOTEBOOK

    return json.loads(SOURCE_NOTEBOOK.read_text())["cells"]


def test_contract_values_earn_full_marks_against_torch(assignment):
    results = judge(assignment, contract_answers(assignment), tolerance=1e-6)
    assert [r.error for r in results] == [None] * len(results)
    assert sum(r.earned for r in results) == assignment.max_score


def test_points_add_up(assignment):
    results = judge(assignment, contract_answers(assignment), tolerance=1e-6)
    for question, result in zip(assignment.questions, results, strict=True):
        assert sum(v.points for v in result.values) == question.points
    assert assignment.max_score == 57
    challenges = {q.id: q.points for q in assignment.questions if q.id in ("cubic", "w2_net")}
    others = [q.points for q in assignment.questions if q.id not in challenges]
    assert min(challenges.values()) > max(others), "the challenge exercises weigh most"


# ----------------------------------------------------------------------------- the second assignment


@pytest.fixture(scope="module")
def training():
    from course.core.config import load_config
    from course.pipeline.assignment import load_course_assignment
    from tests.support.helpers import ROOT

    return load_course_assignment(load_config(ROOT), "training")


def _authoring_table(heading: str) -> dict[int, list[str]]:
    """The answer names of an exercise table in docs/authoring.md: row number -> the backticked names of its last
    column."""
    import re

    from tests.support.helpers import ROOT

    text = (ROOT / "docs" / "authoring.md").read_text(encoding="utf-8")
    section = text.split(heading, 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].isdigit():
            rows[int(cells[0])] = [re.sub(r"\(x\)$", "", name) for name in re.findall(r"`([^`]+)`", cells[2])]
    return rows


@pytest.mark.parametrize(
    ("heading", "name"),
    [
        ("## The exercises", "autograd"),
        ("### The second assignment", "training"),
        ("### The third assignment", "backprop"),
    ],
)
def test_the_exercise_tables_name_every_answer_in_order(heading, name, assignment, training):
    from course.core.config import load_config
    from course.pipeline.assignment import load_course_assignment
    from tests.support.helpers import ROOT

    chosen = {"autograd": assignment, "training": training}.get(name) or load_course_assignment(load_config(ROOT), name)
    table = _authoring_table(heading)
    assert list(table) == list(range(1, len(chosen.questions) + 1))
    for number, question in enumerate(chosen.questions, start=1):
        assert table[number] == list(question.answer_names + question.function_names), question.id


def test_training_questions_and_names_are_the_contract(training):
    from tests.support.helpers import TRAINING_CONTRACT

    assert [q.id for q in training.questions] == list(TRAINING_CONTRACT)
    for question in training.questions:
        assert list(question.answer_names) == list(TRAINING_CONTRACT[question.id])
        assert question.function_names == ()
        for answer in question.answer_names:
            assert f'"{answer}", {answer},' in question.test_source, f"no hidden test scores {answer}"
            assert answer in question.form_source, f"no public form check for {answer}"


def test_training_answer_key_equals_the_contract():
    import json

    from tests.support.helpers import TRAINING_SOURCE, TRAINING_VALUES

    key = {}
    for cell in json.loads(TRAINING_SOURCE.read_text())["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("solution"):
            solution = "\n".join(region_lines("".join(cell["source"]), SOLUTION_BEGIN, SOLUTION_END))
            for node in ast.parse(solution).body:
                if isinstance(node, ast.Assign):
                    key[node.targets[0].id] = ast.literal_eval(node.value)
    assert key == TRAINING_VALUES


def test_training_contract_values_earn_full_marks_and_the_challenges_weigh_most(training):
    from tests.support.helpers import TRAINING_VALUES

    results = judge(training, {n: Answer(VALUE, v) for n, v in TRAINING_VALUES.items()}, tolerance=1e-6)
    assert [r.error for r in results] == [None] * len(results)
    assert sum(r.earned for r in results) == training.max_score == 58
    challenges = [q.points for q in training.questions if q.id in ("training_loop", "accumulate_on_purpose")]
    others = [q.points for q in training.questions if q.id not in ("training_loop", "accumulate_on_purpose")]
    assert min(challenges) > max(others)
