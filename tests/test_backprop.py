"""The third assignment, `backprop`, built with the authoring kit: its published numbers are torch's, its notebook
is what the kit writes from its definitions, and the sample right and wrong notebooks grade as expected."""

from __future__ import annotations

import json

import pytest

from course.authoring.kit import load_exercises, write_cells
from course.core.config import load_config
from course.pipeline.assignment import HIDDEN_BEGIN, HIDDEN_END, load_course_assignment, region_lines
from course.pipeline.content import load_content
from course.pipeline.hidden_tests import reads_no_answer, scored_without_idea
from tests.samples.make_samples import BACKPROP, BACKPROP_SCORES
from tests.support.helpers import BACKPROP_SOURCE, ROOT

EXERCISES_MODULE = ROOT / "source" / "backprop" / "exercises.py"


@pytest.fixture(scope="module")
def references() -> dict[str, object]:
    """Every answer's reference, from the definitions' builds at their own numbers (the published ones)."""
    found: dict[str, object] = {}
    for exercise in load_exercises(EXERCISES_MODULE):
        found.update({name: value.tolist() for name, value in exercise.references().items()})
    return found


# The published numbers, at the precision they are published with: CS231n's notes on backpropagation (the gate
# circuit, exact; the 2-D sigmoid neuron, 3 decimals) and the micrograd README (4 decimals).
PUBLISHED = [
    ("gate_f", -12, 0),
    ("gate_df_dx", -4, 0),
    ("gate_df_dy", -4, 0),
    ("gate_df_dz", 3, 0),
    ("neuron_df_dx", [0.393, -0.590], 3),
    ("neuron_df_dw", [-0.197, -0.393, 0.197], 3),
    ("mg_g", 24.7041, 4),
    ("mg_dg_da", 138.8338, 4),
    ("mg_dg_db", 645.5773, 4),
]


@pytest.mark.parametrize(("name", "published", "decimals"), PUBLISHED)
def test_the_published_numbers_are_torchs(references, name, published, decimals):
    value = references[name]
    rounded = [round(v, decimals) for v in value] if isinstance(value, list) else round(value, decimals)
    assert rounded == published


def test_the_source_notebook_is_what_the_kit_writes_from_the_definitions():
    import nbformat

    notebook = json.loads(BACKPROP_SOURCE.read_text(encoding="utf-8"))
    assert write_cells(notebook, load_exercises(EXERCISES_MODULE), EXERCISES_MODULE) == notebook
    nbformat.validate(nbformat.from_dict(notebook))  # the kit's cells are valid nbformat 4.5 (ids included)


def test_the_assignment_loads_with_its_three_questions_and_its_hidden_tests_are_the_builds():
    assignment = load_course_assignment(load_config(ROOT), "backprop")
    assert [q.id for q in assignment.questions] == ["gate", "neuron", "micrograd"]
    assert assignment.max_score == 27
    assert "def micrograd_expression(a, b):" in assignment.questions[2].test_source
    assert assignment.default_params == {
        "gate_x": -2,
        "gate_y": 5,
        "gate_z": -4,
        "neuron_w0": 2,
        "neuron_w1": -3,
        "neuron_w2": -3,
        "neuron_x0": -1,
        "neuron_x1": -2,
        "micrograd_a": -4,
        "micrograd_b": 2,
    }
    content = load_content(EXERCISES_MODULE)
    assert content.number_groups[0] == ("gate_x", "gate_y", "gate_z")
    # the kit's hidden tests read nothing of the student's: the judge runs each once per set of numbers
    for question in assignment.questions:
        region = "\n".join(region_lines(question.test_source, HIDDEN_BEGIN, HIDDEN_END))
        assert reads_no_answer(region, frozenset(assignment.answer_names)), question.id
        assert scored_without_idea(question.test_source) == (), question.id


@pytest.mark.slow
def test_the_sample_right_notebook_earns_full_marks_and_the_wrong_one_its_partial_score():
    from course.pipeline.discovery import SubmissionRef
    from course.pipeline.grading import grade_submission

    config = load_config(ROOT)
    assignment = load_course_assignment(config, "backprop")
    scores = {}
    for name in BACKPROP_SCORES:
        graded = grade_submission(SubmissionRef(name, BACKPROP / f"{name}.ipynb"), assignment, config)
        scores[name] = graded.feedback.score
        if name == "wrong":
            wrong = {
                value.name for question in graded.feedback.questions for value in question.values if not value.correct
            }
            assert wrong == {"gate_df_dx", "gate_df_dz", "neuron_df_dw", "mg_dg_db"}
            # The gate's chain table: nobody wrote it (no CHAINS entry), it is read from the build's graph, and its
            # numbers are torch's (CS231n: df/dq = z = -4, df/dz = q = 3, then 1 and 1 through the adder).
            assert not assignment.content.chains
            gate = next(q for q in graded.feedback.to_json()["questions"] if q["id"] == "gate")["chain_table"]
            assert [(row["torch_local_derivative"], row["torch_gradient"]) for row in gate["rows"]] == [
                ("-4", "-4"),
                ("3", "3"),
                ("1", "-4"),
                ("1", "-4"),
            ]
            assert gate["first_wrong"] == 1  # the student's df/dz (-4 for 3) is where the walk first goes wrong
    assert scores == BACKPROP_SCORES


def test_under_variants_each_student_gets_numbers_that_keep_the_exercises_and_torchs_answers_score_full(
    monkeypatch,
):
    """backprop's derive(rng): with variants on it loads (an assignment without derive is refused), every student's
    numbers pass its constraints, and the answers its builds give at a student's numbers earn every point from the
    hidden tests replayed with those numbers (the grader's own process: no sandbox needed to judge)."""
    from dataclasses import replace

    from course.core.answers import VALUE, Answer
    from course.pipeline.judge import judge
    from course.pipeline.variants import numbers_for

    monkeypatch.setenv("AUTOGRAD_COURSE_SECRET", "a secret of at least thirty-two characters, for tests")
    config = replace(load_config(ROOT), variants=True)
    assignment = load_course_assignment(config, "backprop")
    exercises = load_exercises(EXERCISES_MODULE)
    drawn = set()
    for student in ("ada", "grace", "alan", "barbara", "edsger"):
        params = numbers_for(config, assignment.content, student, assignment.default_params)
        assert assignment.content.constraint_violations(params) == []
        drawn.add(tuple(sorted(params.items())))
        answers = {}
        for exercise in exercises:
            own = {name: params[key] for name, key in exercise.number_names().items()}
            answers.update({name: Answer(VALUE, value.tolist()) for name, value in exercise.references(own).items()})
        questions = judge(assignment, answers, tolerance=config.tolerance, params=params)
        assert sum(q.earned for q in questions) == sum(q.points for q in questions) == 27, student
    assert len(drawn) > 1  # the students' numbers differ


def test_micrograds_feedback_shows_the_whole_walk_and_checks_the_sums_in_both_modes():
    """micrograd's exercise asks only for the chain's ends; its feedback still shows the whole walk read from torch's
    graph: the gradients on the way "not asked" (torch's numbers only where the feedback shows torch's values), the
    student's answers checked where each leaf's paths add up, and the first wrong one marked."""
    from course.core.answers import VALUE, Answer
    from course.core.status import Status
    from course.pipeline.feedback import build_feedback
    from course.pipeline.feedback_model import Feedback
    from course.pipeline.graph_chain import with_derived_chains
    from course.pipeline.judge import judge
    from course.pipeline.render import render_html

    config = load_config(ROOT)
    assignment = load_course_assignment(config, "backprop")
    exercises = {exercise.id: exercise for exercise in load_exercises(EXERCISES_MODULE)}
    answers = {
        name: Answer(VALUE, value.tolist())
        for name, value in exercises["micrograd"].references({"a": -4, "b": 2}).items()
    }
    answers["mg_dg_db"] = Answer(VALUE, 645.5773 - 1)  # one wrong sum
    results = tuple(r for r in judge(assignment, answers, tolerance=config.tolerance) if r.id == "micrograd")
    content = with_derived_chains(assignment.content, assignment.default_params)
    for reveal in (True, False):
        feedback = build_feedback(
            "ada",
            "backprop",
            results,
            status=Status.GRADED,
            messages=[],
            cell_errors=[],
            reveal_torch_values=reveal,
            content=content,
        )
        table = feedback.questions[0].chain_table
        assert table is not None
        asked = [row for row in table.rows if row.asked]
        assert [(row.node, row.correct) for row in asked] == [
            ("a (5 paths add up)", True),
            ("b (4 paths add up)", False),
        ]
        assert table.rows[table.first_wrong].node == "b (4 paths add up)"
        on_the_way = [row for row in table.rows if not row.asked]
        assert len(on_the_way) == 17
        assert {row.your_gradient for row in on_the_way} == {"not asked"}
        if reveal:
            assert float(on_the_way[0].torch_gradient) == pytest.approx(0.5 - 10 / 49**2)
        else:
            assert {row.torch_gradient for row in table.rows} == {None}
            assert {row.torch_local_derivative for row in table.rows} == {None}
        document = feedback.to_json()
        assert Feedback.from_json(json.loads(json.dumps(document))) == feedback  # read back as it was written
        page = render_html(feedback)
        assert "not asked" in page
        assert "b (4 paths add up)" in page
        assert ("0.4958" in page) is reveal
