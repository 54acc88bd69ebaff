"""From slip to rule (course/pipeline/slip_rules.py): a draft appended to a copy of an assignment's exercises module
loads as one of its MISCONCEPTIONS, and the real judge and diagnosis fire it for the slip's value and not for
torch's, at the numbers it was found with and, where it is a relation to torch's values, at other students'."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from course.core.answers import VALUE, Answer
from course.pipeline.assignment import Assignment, load_assignment
from course.pipeline.judge import judge_question
from course.pipeline.misconceptions import diagnose
from course.pipeline.slip_rules import draft_rule
from course.pipeline.slip_search import explainer
from tests.support.helpers import ROOT

TOLERANCE = 1e-6


def drafted_copy(name: str, draft: str, tmp_path: Path) -> Assignment:
    """The assignment with the draft appended to a copy of its exercises module."""
    folder = tmp_path / name
    shutil.copytree(ROOT / "source" / name, folder)
    exercises = folder / "exercises.py"
    exercises.write_text(exercises.read_text(encoding="utf-8") + "\n\n" + draft, encoding="utf-8")
    return load_assignment(folder / f"{name}.ipynb", name, exercises)


def diagnosed(course: Assignment, question_id: str, answer: str, value, numbers: dict) -> set[str]:
    """The rule ids the real judge and diagnosis give a student whose every answer of the question is torch's but
    `answer`, which is `value`."""
    question = next(q for q in course.questions if q.id == question_id)
    search = explainer(course, tolerance=TOLERANCE)
    references = search.source(question_id, answer, numbers).reference  # type: ignore[union-attr]
    answers = {name: Answer(VALUE, references.get(name)) for name in question.answer_names}
    answers[answer] = Answer(VALUE, value)
    result = judge_question(question, answers, tolerance=TOLERANCE, params=numbers)
    assert result.error is None
    return {diagnosis.id for found in diagnose((result,), course.content.rules).values() for diagnosis in found}


def test_a_drafted_relation_rule_fires_for_the_slip_at_every_students_numbers(tmp_path):
    course = load_assignment(ROOT / "source/autograd/autograd.ipynb", "autograd")
    P = dict(course.default_params)
    # dh/dw = x taken as 1: dL/dw = the gradient at h = 2(5 - 2) = 6 (torch: 12).
    draft = draft_rule(explainer(course, tolerance=TOLERANCE), "tiny_net", "net_dL_dw", P, 6.0, students=7)
    assert draft is not None
    ast.parse(draft)
    assert "expected(v, 'net_dL_dh')" in draft  # a relation, not the class's number
    assert "7 students" in draft
    drafted = drafted_copy("autograd", draft, tmp_path)
    rule = drafted.content.rules[-1]
    assert rule.id == "dropped_local_net_dL_dw"
    assert rule.value == "net_dL_dw"
    assert len(drafted.content.rules) == len(course.content.rules) + 1  # appended, the author's kept
    assert rule.id in diagnosed(drafted, "tiny_net", "net_dL_dw", 6.0, P)
    assert rule.id not in diagnosed(drafted, "tiny_net", "net_dL_dw", 12.0, P)
    assert rule.id not in diagnosed(drafted, "tiny_net", "net_dL_dw", 17.25, P)
    # Another student's numbers (autograd derives them): x = 3, w = 2, b = -1, target 2: h = 5, dL/dh = 2(5 - 2) = 6,
    # dL/dw = 18; the same slip gives 6.
    other = {**P, "net_x": 3, "net_w": 2, "net_b": -1, "net_target": 2}
    assert rule.id in diagnosed(drafted, "tiny_net", "net_dL_dw", 6.0, other)
    assert rule.id not in diagnosed(drafted, "tiny_net", "net_dL_dw", 18.0, other)


def test_a_drafted_factor_rule_for_one_backward_of_two(tmp_path):
    course = load_assignment(ROOT / "source/autograd/autograd.ipynb", "autograd")
    P = dict(course.default_params)
    # Two backward() calls of the tiny network: 12 + 12 = 24; one of them: 12, half of torch's at any numbers.
    draft = draft_rule(explainer(course, tolerance=TOLERANCE), "predict_twice", "twice_w_grad", P, 12.0)
    assert draft is not None
    assert "expected(v, 'twice_w_grad') * (1 / 2)" in draft
    drafted = drafted_copy("autograd", draft, tmp_path)
    rule = drafted.content.rules[-1]
    assert rule.id in diagnosed(drafted, "predict_twice", "twice_w_grad", 12.0, P)
    assert rule.id not in diagnosed(drafted, "predict_twice", "twice_w_grad", 24.0, P)


def test_a_draft_for_a_module_without_misconceptions(tmp_path):
    course = load_assignment(ROOT / "source/backprop/backprop.ipynb", "backprop")
    assert course.content.rules == ()
    P = dict(course.default_params)
    # The multiplier f = q*z with df/dq = z taken as 1: x receives 1 (torch: z = -4).
    draft = draft_rule(explainer(course, tolerance=TOLERANCE), "gate", "gate_df_dx", P, 1.0)
    assert draft is not None
    assert "*MISCONCEPTIONS" not in draft
    drafted = drafted_copy("backprop", draft, tmp_path)
    (rule,) = drafted.content.rules
    assert rule.id in diagnosed(drafted, "gate", "gate_df_dx", 1.0, P)
    assert rule.id not in diagnosed(drafted, "gate", "gate_df_dx", -4.0, P)
    # backprop derives numbers too: gate at x = 1, y = 2, z = 3: df/dx = z = 3; the slip gives 1.
    other = {**P, "gate_x": 1, "gate_y": 2, "gate_z": 3}
    assert rule.id in diagnosed(drafted, "gate", "gate_df_dx", 1.0, other)
    assert rule.id not in diagnosed(drafted, "gate", "gate_df_dx", 3.0, other)


def test_a_value_that_holds_only_at_its_numbers_says_so(tmp_path):
    course = load_assignment(ROOT / "source/autograd/autograd.ipynb", "autograd")
    P = dict(course.default_params)
    # The shut ReLU's gate ignored: dL/dw = 2(0 - 2) * -1 = 4, which is no fixed relation to torch's values (0).
    draft = draft_rule(explainer(course, tolerance=TOLERANCE), "closed_relu", "closed_dL_dw", P, 4.0)
    assert draft is not None
    assert "student_equals(v, 'closed_dL_dw', 4.0)" in draft
    assert "check it for others" in " ".join(line.lstrip("# ") for line in draft.splitlines())
    drafted = drafted_copy("autograd", draft, tmp_path)
    rule = drafted.content.rules[-1]
    assert rule.id in diagnosed(drafted, "closed_relu", "closed_dL_dw", 4.0, P)
    assert rule.id not in diagnosed(drafted, "closed_relu", "closed_dL_dw", 0.0, P)


@pytest.mark.parametrize("value", [12.0, 17.25, "6.0", None])
def test_no_draft_for_a_value_no_slip_explains(value):
    course = load_assignment(ROOT / "source/autograd/autograd.ipynb", "autograd")
    search = explainer(course, tolerance=TOLERANCE)
    assert draft_rule(search, "tiny_net", "net_dL_dw", dict(course.default_params), value) is None


def test_a_draft_is_the_same_every_time():
    course = load_assignment(ROOT / "source/training/training.ipynb", "training")
    P = dict(course.default_params)
    drafts = {
        draft_rule(explainer(course, tolerance=TOLERANCE), "accumulate_on_purpose", "averaged_w_grad", P, 8.0)
        for _ in range(2)
    }
    assert len(drafts) == 1
    (draft,) = drafts
    assert draft is not None
    # (12 - 4) / 2 = 4 by torch; the halving left out gives 8, the summed loss's gradient, at any numbers.
    assert "expected(v, 'summed_w_grad')" in draft
    assert "sum_for_mean_averaged_w_grad" not in (ROOT / "source/training/exercises.py").read_text(encoding="utf-8")
