"""The trusted judge: partial credit per value, exact comparisons, markers for unreadable answers."""

from __future__ import annotations

import math

import pytest

from course.core.answers import FUNCTION, MISSING, UNREADABLE, VALUE, WRONG_FORM, Answer, Probe
from course.pipeline.judge import judge, matches, to_plain
from tests.support.helpers import ALL_VALUES, contract_answers, wrong_literal

TOL = 1e-6


def total(assignment, answers, **kwargs):
    return sum(r.earned for r in judge(assignment, answers, tolerance=TOL, **kwargs))


@pytest.mark.parametrize("name", sorted(ALL_VALUES))
def test_each_single_wrong_value_loses_exactly_its_points(assignment, name):
    answers = contract_answers(assignment)
    answers[name] = Answer(VALUE, wrong_literal(ALL_VALUES[name]))
    results = judge(assignment, answers, tolerance=TOL)
    lost = [v for r in results for v in r.values if not v.correct]
    assert [v.name for v in lost] == [name]
    assert total(assignment, answers) == assignment.max_score - lost[0].points


def test_a_wrong_function_loses_its_points(assignment):
    answers = contract_answers(assignment, cubic=lambda x: 3 * x**2)
    results = {r.id: r for r in judge(assignment, answers, tolerance=TOL)}
    cubic = {v.name: v for v in results["cubic"].values}["cubic_derivative"]
    assert not cubic.correct
    assert "disagrees with torch at 4 of the 4 points" in cubic.detail
    assert results["cubic"].earned == 3


def test_function_that_raised_at_a_point(assignment):
    answers = contract_answers(assignment)
    answers["cubic_derivative"] = Answer(FUNCTION, probes=(Probe(1.0, error="raised ZeroDivisionError"),))
    cubic = judge(assignment, answers, tolerance=TOL)[8]
    assert cubic.earned == 3
    assert cubic.values[1].detail == "disagrees with torch at 1 of the 1 points the grader uses"
    assert [(p.x, p.error, p.correct) for p in cubic.values[1].probes] == [(1.0, "raised ZeroDivisionError", False)]


def test_the_judge_marks_the_points_drawn_with_the_course_secret(assignment):
    answers = contract_answers(assignment)
    answers["cubic_derivative"] = Answer(FUNCTION, probes=(Probe(4.0, 46.0), Probe(0.0, 1.0), Probe(-1.5, 0.0)))
    cubic = judge(assignment, answers, tolerance=TOL, private_points={"cubic_derivative": frozenset({-1.5})})[8]
    assert [(p.x, p.correct, p.private) for p in cubic.values[1].probes] == [
        (4.0, True, False),
        (0.0, False, False),
        (-1.5, False, True),
    ]


@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        (Answer(MISSING, detail="still `...`"), "no answer (still `...`)"),
        (Answer(WRONG_FORM, detail="Tensor"), "wrong form: a value of type Tensor, where a number was expected"),
        (Answer(UNREADABLE, detail="the grader could not read this answer (list too long)"), "could not read"),
    ],
)
def test_unanswered_values_score_zero_with_a_reason(assignment, answer, detail):
    answers = contract_answers(assignment)
    answers["net_h"] = answer
    result = judge(assignment, answers, tolerance=TOL)[2]
    net_h = result.values[0]
    assert (net_h.earned, net_h.correct) == (0, False)
    assert detail in net_h.detail
    assert result.earned == 6


def test_a_wrong_form_says_the_form_the_public_check_asks_for_never_the_answer(assignment):
    """y_grad_without_retain's answer is None: a wrong form must not say that None was expected."""
    answers = contract_answers(assignment)
    answers["y_grad_without_retain"] = Answer(WRONG_FORM, detail="Tensor")
    answers["forward_values"] = Answer(WRONG_FORM, detail="tuple")
    values = {v.name: v for q in judge(assignment, answers, tolerance=TOL) for v in q.values}
    assert values["y_grad_without_retain"].detail == (
        "wrong form: a value of type Tensor, where a number or None was expected"
    )
    assert values["forward_values"].detail == (
        "wrong form: a value of type tuple, where a list of 3 numbers was expected"
    )


@pytest.mark.parametrize(
    ("student", "expected", "ok"),
    [
        (12, 12.0, True),
        (12.0000001, 12.0, True),
        (12.01, 12.0, False),
        (True, 1.0, False),  # a bool is not a number answer
        (None, None, True),
        (0, None, False),
        (False, False, True),
        (0, False, False),
        ([6, 12, 18], [6.0, 12.0, 18.0], True),
        ([6, 12], [6.0, 12.0, 18.0], False),
        (float("nan"), 1.0, False),
        (float("inf"), float("inf"), False),
        ("12", 12.0, False),
        ("PowBackward0", "PowBackward0", True),  # a class name, compared exactly
        ("powbackward0", "PowBackward0", False),
        ("PowBackward0 ", "PowBackward0", False),
        (None, "PowBackward0", False),
        ("None", None, False),
        (0, "0", False),
        ([None, "AddBackward0"], [None, "AddBackward0"], True),
    ],
)
def test_matches(student, expected, ok):
    assert matches(student, expected, TOL) is ok


def test_to_plain_turns_tensors_into_numbers():
    import torch

    assert to_plain(torch.tensor(3.0)) == 3.0
    assert to_plain([torch.tensor(1.0), None, True]) == [1.0, None, True]
    assert to_plain(type(torch.tensor(1.0, requires_grad=True).exp().grad_fn).__name__) == "ExpBackward0"
    with pytest.raises(TypeError):
        to_plain(object())


def test_hand_work_deduction_costs_only_flagged_values(assignment):
    answers = contract_answers(assignment)
    full = total(assignment, answers)
    assert total(assignment, answers, computed={"net_dL_dw"}, deduction=0.0) == full
    assert math.isclose(total(assignment, answers, computed={"net_dL_dw"}, deduction=0.5), full - 0.5)


def test_hidden_test_errors_become_a_visible_autograder_error(assignment):
    from dataclasses import replace

    broken = replace(
        assignment.questions[0],
        test_source=("### BEGIN HIDDEN TESTS\nmarks = Marks()\nraise RuntimeError('bug')\n### END HIDDEN TESTS\n"),
    )
    from course.pipeline.judge import judge_question

    result = judge_question(broken, contract_answers(assignment), tolerance=TOL, params=assignment.default_params)
    assert result.earned == 0
    assert "RuntimeError: bug" in result.error


def test_one_backward_call_for_two_is_diagnosed_as_overwriting(assignment):
    """Exercise 11 answered with a single step's gradients (what exercise 3 computes) is the same reading of
    accumulation as overwriting that exercise 6 catches."""
    from course.pipeline.misconceptions import diagnose

    single_step = {"twice_w_grad": ALL_VALUES["net_dL_dw"], "twice_b_grad": ALL_VALUES["net_dL_db"]}
    found = diagnose(
        judge(assignment, contract_answers(assignment, {**ALL_VALUES, **single_step}), tolerance=TOL),
        assignment.content.rules,
    )
    ids = {d.id for diagnoses in found.values() for d in diagnoses}
    assert {"second_backward_overwrites", "second_backward_overwrites_b"} <= ids
    honest = diagnose(judge(assignment, contract_answers(assignment), tolerance=TOL), assignment.content.rules)
    assert not any(d.id.startswith("second_backward") for diagnoses in honest.values() for d in diagnoses)


def test_a_function_answer_of_the_wrong_form_says_a_function_was_expected(assignment):
    answers = contract_answers(assignment)
    answers["cubic_derivative"] = Answer(WRONG_FORM, detail="int")
    cubic = judge(assignment, answers, tolerance=TOL)[8]
    derivative = next(v for v in cubic.values if v.name == "cubic_derivative")
    assert derivative.detail == "wrong form: a value of type int, where a function of x was expected"


# ----------------------------------------------------------------------------- references once per parameter set


def _hidden(body: str) -> str:
    return f"### BEGIN HIDDEN TESTS\n{body}\n### END HIDDEN TESTS\n"


def _every_kind_of_class(assignment):
    """Answers of every kind a class hands in: right, wrong, missing, of the wrong form, functions right,
    wrong, raising and at other points."""
    yield contract_answers(assignment)
    for name in sorted(ALL_VALUES)[::3]:
        answers = contract_answers(assignment)
        answers[name] = Answer(VALUE, wrong_literal(ALL_VALUES[name]))
        yield answers
    answers = contract_answers(assignment, cubic=lambda x: 3 * x**2)
    answers["net_h"] = Answer(MISSING, detail="still `...`")
    answers["slope_at_3"] = Answer(WRONG_FORM, detail="Tensor")
    yield answers
    answers = contract_answers(assignment)
    answers["cubic_derivative"] = Answer(
        FUNCTION, probes=(Probe(3.5, 34.75), Probe(1, error="raised ZeroDivisionError"))
    )
    yield answers


def test_replayed_references_score_exactly_as_running_the_hidden_tests_per_student(assignment, monkeypatch):
    from course.pipeline import judge as judge_module
    from course.pipeline.assignment import HIDDEN_BEGIN, HIDDEN_END, region_lines
    from course.pipeline.hidden_tests import reads_no_answer

    names = frozenset(assignment.answer_names + assignment.function_names)
    for question in assignment.questions:  # the course's own cells are all of the kind that is replayed
        assert reads_no_answer("\n".join(region_lines(question.test_source, HIDDEN_BEGIN, HIDDEN_END)), names)
    params = [assignment.default_params, {**assignment.default_params, "net_x": 3, "cubic_x": -1, "accum_steps": 4}]
    replayed = [
        judge(assignment, answers, tolerance=TOL, computed=frozenset({"net_dL_dw"}), deduction=0.5, params=numbers)
        for numbers in params
        for answers in _every_kind_of_class(assignment)
    ]
    assert judge_module._RECORDED  # the replay was used
    monkeypatch.setattr(judge_module, "_recorded", lambda *_: None)  # every cell run for every student
    per_student = [
        judge(assignment, answers, tolerance=TOL, computed=frozenset({"net_dL_dw"}), deduction=0.5, params=numbers)
        for numbers in params
        for answers in _every_kind_of_class(assignment)
    ]
    assert replayed == per_student
    assert replayed[0] != replayed[len(replayed) // 2]  # the parameters changed the references


@pytest.mark.parametrize(
    ("body", "replayed"),
    [
        ("marks = Marks()\nmarks.value('a', a, torch.tensor(P['x']) * 2, 'h')\nmarks.total()", True),
        ("marks = Marks()\nmarks.value('a', a, torch.tensor(a) * 2, 'h')\nmarks.total()", False),
        ("marks = Marks()\nmarks.value('b', b, a, 'h')\nmarks.total()", False),
        ("marks = Marks()\nmarks.value('a', a, 1, 'h')\nif marks.total() > 0:\n    marks.value('b', b, 2, 'h')", False),
        ("marks = Marks()\nmarks.value('a', a, globals()['b'], 'h')", False),
        ("marks = Marks()\ng = (i for i in ())\nmarks.value('a', a, g.gi_frame.f_globals['b'], 'h')", False),
        ("marks = Marks()\nmarks.value('a', a, torch.rand(1), 'h')", False),
        ("marks = Marks()\nmarks = a\nmarks.value('a', a, 1, 'h')", False),
        ("import sys\nmarks = Marks()\nmarks.value('a', a, 1, 'h')", False),
        ("marks = Marks()\nmarks.value('a', answer=a, reference=1, hint='h')", False),
        ("marks = Marks()\ndef f(x):\n    return a * x\nmarks.function('f', f, f, 'h')", False),
        (
            "marks = Marks()\ndef ref(x):\n    return torch.tensor(float(x)) ** 2\nmarks.function('f', f, ref, 'h')",
            True,
        ),
    ],
)
def test_only_cells_that_read_nothing_of_the_student_are_replayed(body, replayed):
    from course.pipeline.hidden_tests import reads_no_answer

    assert reads_no_answer(body, frozenset({"a", "b", "f"})) is replayed


def test_a_cell_that_reads_an_answer_is_run_for_each_student(assignment):
    from dataclasses import replace

    from course.pipeline.judge import judge_question

    echo = replace(
        assignment.questions[0],
        test_source=_hidden(
            "marks = Marks()\n"
            "marks.value('slope_at_3', slope_at_3, torch.tensor(float(slope_at_minus_2)), 'h')\n"
            "marks.value('slope_at_minus_2', slope_at_minus_2, -4, 'h')\n"
            "marks.value('slope_at_0', slope_at_0, 0, 'h')\nmarks.total()"
        ),
    )
    for value in (-4, 7):
        answers = contract_answers(assignment)
        answers["slope_at_3"] = answers["slope_at_minus_2"] = Answer(VALUE, value)
        result = judge_question(echo, answers, tolerance=TOL, params=assignment.default_params)
        assert result.values[0].correct
        assert result.values[0].expected == value
