"""Per-student variants: constraints, hand solutions on any variant, copying, and the wrong student id."""

from __future__ import annotations

import itertools
import json
import shutil
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from course.core.answers import FUNCTION, VALUE, Answer, Probe
from course.core.config import load_config
from course.core.errors import ConfigError
from course.pipeline import variants
from course.pipeline.assignment import load_course_assignment
from course.pipeline.judge import judge
from course.pipeline.variants import fill_text, numbers_for
from tests.support.helpers import ALL_VALUES, ROOT, solve

AUTOGRAD = load_course_assignment(load_config(ROOT), "autograd")
CONTENT = AUTOGRAD.content  # source/autograd/exercises.py
DEFAULTS = AUTOGRAD.default_params  # the source notebook's numbers cell
constraint_violations = CONTENT.constraint_violations


def derive(secret: bytes, student_id: str) -> dict:
    return variants.derive(CONTENT, secret, student_id)


def numbers_source(params: dict) -> str:
    return variants.numbers_source(params, CONTENT)


SECRET = b"a course secret for the tests"
student_ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=24)


def answers_of(values: dict) -> dict:
    answers = {name: Answer(VALUE, value) for name, value in values.items()}
    answers["cubic_derivative"] = Answer(FUNCTION, probes=tuple(Probe(x, 3 * x**2 - 2) for x in (-1.5, 0.0, 2.0)))
    return answers


def score(assignment, values: dict, params: dict) -> float:
    return sum(q.earned for q in judge(assignment, answers_of(values), tolerance=1e-6, params=params))


def test_the_article_is_the_default_variant():
    assert solve(DEFAULTS) == ALL_VALUES
    assert constraint_violations(DEFAULTS) == []


def test_the_source_notebook_shows_the_default_numbers(assignment):
    assert assignment.locked_sources["numbers"] == numbers_source(DEFAULTS)  # laid out in exercises.py's groups


@settings(max_examples=200, deadline=None)
@given(student_ids)
def test_every_variant_keeps_the_exercises_meaningful(student_id):
    params = derive(SECRET, student_id)
    assert constraint_violations(params) == []
    assert derive(SECRET, student_id) == params  # the grader recomputes the same numbers


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(student_ids)
def test_the_hand_solution_earns_full_marks_on_any_variant(assignment, student_id):
    params = derive(SECRET, student_id)
    assert score(assignment, solve(params), params) == assignment.max_score


GROUPS = [
    ("net_x", "net_w", "net_b", "net_target"),
    ("call_w", "call_b", "call_x", "call_target"),
    ("graph_x",),
    ("accum_x", "accum_steps"),
    ("retain_x", "retain_factor"),
    ("cubic_x",),
    ("w2",),
    ("nograd_x",),
]


def other_student(params: dict, copier: str) -> dict:
    """Someone whose numbers differ from `params` in every group (the first such id after the copier's)."""
    for n in range(1000):
        theirs = derive(SECRET, f"{copier}/{n}")
        if all(tuple(theirs[k] for k in g) != tuple(params[k] for k in g) for g in GROUPS):
            return theirs
    raise AssertionError("no student with different numbers")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(student_ids)
def test_copying_another_students_answers_earns_almost_nothing(assignment, copier):
    mine = derive(SECRET, copier)
    copied = score(assignment, solve(other_student(mine, copier)), mine)
    # 14 points are the same for everyone by design: the contract's fixed slope points, the shut
    # ReLU's zeros, the booleans, None, and the derivative formula of the cubic. Little else survives.
    assert copied <= 0.5 * assignment.max_score


def test_copying_earns_little_on_average(assignment):
    ids = [f"student{n}" for n in range(60)]
    scores = [
        score(assignment, solve(derive(SECRET, a)), derive(SECRET, b))
        for a, b in itertools.pairwise(ids)
        if derive(SECRET, a) != derive(SECRET, b)
    ]
    assert sum(scores) / len(scores) <= 0.35 * assignment.max_score


def test_text_shows_the_students_numbers():
    params = {**DEFAULTS, "net_x": 3, "net_b": -2, "w2": 1.5}
    assert fill_text("x = {{net_x}}, b = {{net_b}}, w2 = {{w2}}", params) == "x = 3, b = −2, w2 = 1.5"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (6.881411303642535, "6.881411303642535"),
        (-0.1, "−0.1"),
        (1e-07, "1e-07"),
        (-3e-08, "−3e-08"),
        (10**20, "1" + "0" * 20),
    ],
)
def test_a_placeholder_shows_the_exact_number_that_reads_back_as_itself(value, shown):
    """Every number exactly as the hidden tests use it (issue 50: `:g` showed 6.88141), only a leading minus typeset."""
    filled = fill_text("b = {{b}}, b again = {{ b }}", {"b": value})
    assert filled == f"b = {shown}, b again = {shown}"
    assert type(value)(shown.replace("−", "-")) == value


def test_variants_without_a_secret_stop_with_a_clear_message(course_root, monkeypatch):
    monkeypatch.delenv("AUTOGRAD_COURSE_SECRET", raising=False)
    config = replace(load_config(course_root), variants=True)
    with pytest.raises(ConfigError, match="variants: true needs a course secret"):
        numbers_for(config, CONTENT, "alice", DEFAULTS)


@pytest.mark.slow
def test_personalised_release_and_the_wrong_student_id(course_root, monkeypatch, tmp_path):
    from course.authoring.release import release
    from course.pipeline.discovery import SubmissionRef
    from course.pipeline.grading import grade_submission
    from tests.support.helpers import fill

    monkeypatch.setenv("AUTOGRAD_COURSE_SECRET", SECRET.decode())
    config = replace(load_config(course_root), variants=True)
    release(config, verify=False, students=["alice", "bob"])
    alice_path = course_root / "personalised" / "autograd" / "alice" / "autograd.ipynb"
    assert not (course_root / "release" / "autograd" / "students").exists()  # nbgrader hands release/ to all
    alice_notebook = json.loads(alice_path.read_text())
    alice = derive(SECRET, "alice")
    text = json.dumps(alice_notebook)
    assert f"x = {alice['net_x']}, w = {alice['net_w']}" in text.replace("\\u2212", "-").replace("−", "-")
    # alice answers from her own numbers
    answers = {k: repr(v) for k, v in solve(alice).items()}
    answers["cubic_derivative"] = "def cubic_derivative(x):\n    return 3 * x ** 2 - 2\n"
    submitted = tmp_path / "alice.ipynb"
    submitted.write_text(json.dumps(fill(alice_notebook, answers)))
    assignment = load_course_assignment(config, "autograd")
    as_alice = grade_submission(SubmissionRef("alice", submitted), assignment, config)
    assert as_alice.feedback.score == 57
    assert not any("personalised for" in m for m in as_alice.feedback.messages)
    as_bob = grade_submission(SubmissionRef("bob", submitted), assignment, config)
    assert any("personalised for 'alice' but is graded as 'bob'" in m for m in as_bob.feedback.messages)
    assert as_bob.feedback.score < 57
    torch_value = next(v for q in as_bob.feedback.to_json()["questions"] for v in q["values"] if v["name"] == "net_h")
    bob = derive(SECRET, "bob")
    assert torch_value["torch_value"] == str(bob["net_w"] * bob["net_x"] + bob["net_b"])  # bob's own numbers
    # the instructor's integrity report names whose numbers bob's answers fit; everyone's own answers fit nobody else
    from course.pipeline.integrity import borrowed_numbers

    found = borrowed_numbers([as_alice.feedback, as_bob.feedback])
    assert list(found) == ["bob"]
    assert "wrong answers are right for 'alice''s numbers" in found["bob"][0]
    assert borrowed_numbers([as_alice.feedback]) == {}
    # formgrader's autograded/ copy shows the numbers alice was given, not the article's
    from course.term.nbgrader_layout import write_autograded
    from course.term.nbgrader_term import released_to

    given = released_to(config, config.assignment(), "alice")
    assert given == alice_path
    written = write_autograded(
        course_root,
        "autograd",
        "autograd.ipynb",
        "alice",
        submitted,
        given,
        as_alice.feedback,
        max_bytes=config.limits.notebook_mb * 2**20,
    )
    numbers = next(
        c
        for c in json.loads(written.read_text())["cells"]
        if c["metadata"].get("nbgrader", {}).get("grade_id") == "numbers"
    )
    assert numbers_source(alice) != numbers_source(assignment.default_params)  # the check can fail
    assert "".join(numbers["source"]) == numbers_source(alice)
    assert released_to(config, config.assignment(), "carol") == config.release_notebook()
    shutil.rmtree(course_root / "personalised")
