"""A grade is a function of the notebook and the student: the same bytes of the same student under the same
course earn the same score and the same feedback on every regrade, through every front end; and a function answer
wrong for some inputs is caught on every run, not on the runs that happen to call it there.

Until the points were fixed (course/pipeline/probes.py: per course, then per student and numbers), function answers
were called at five points drawn afresh per submission: a function wrong only for negative inputs passed about 2.6%
of the time, and the same notebook's feedback (and, for a function wrong at a few points, its score) changed from
one grading to the next.
"""

from __future__ import annotations

import html
from dataclasses import replace

import pytest

from course.core.answers import describe
from course.pipeline.assignment import load_assignment
from course.pipeline.feedback_model import Feedback
from course.pipeline.render import question_markdown, render_html
from tests.support.adversarial import fast_config, grade
from tests.support.gradescope import unescape_markdown
from tests.support.helpers import CORRECT_CODE, write

pytestmark = pytest.mark.slow

# Right for x >= 0 (so at the exercise's own point, 4, and at zero), wrong for every negative x.
RIGHT_FOR_POSITIVE_ONLY = "def cubic_derivative(x):\n    return 3 * x ** 2 - 2 if x >= 0 else 0.0\n"
# Right everywhere but far out on the negative side: wrong at a few of the grid's points only.
WRONG_FAR_LEFT = "def cubic_derivative(x):\n    return 3 * x ** 2 - 2 if x > -5 else 1.0\n"


def _notebook(function: str) -> dict:
    from tests.support.helpers import submitted_notebook

    return submitted_notebook({**CORRECT_CODE, "cubic_derivative": function})


def _cubic(graded) -> dict:
    question = next(q for q in graded.feedback.to_json()["questions"] if q["id"] == "cubic")
    return next(v for v in question["values"] if v["name"] == "cubic_derivative")


def _folder(tmp_path, name):
    folder = tmp_path / f"run-{name}"
    folder.mkdir()
    return folder


def _without_id(feedback: Feedback) -> dict:
    return {key: value for key, value in feedback.to_json().items() if key != "student_id"}


@pytest.mark.parametrize("function", [WRONG_FAR_LEFT, RIGHT_FOR_POSITIVE_ONLY], ids=["wrong-far-left", "wrong-left"])
def test_a_regrade_gets_the_same_score_and_feedback_and_another_student_points_of_his_own(grader, tmp_path, function):
    notebook = _notebook(function)
    runs = {
        student: [grader(notebook, _folder(tmp_path, f"{student}-{n}"), student=student)[0] for n in range(count)]
        for student, count in (("alice", 3), ("bob", 2))
    }
    assert {g.status for graded in runs.values() for g in graded} == {"graded"}
    for graded in runs.values():
        first = graded[0]
        for other in graded[1:]:
            assert other.feedback.score == first.feedback.score
            assert [q.earned for q in other.questions] == [q.earned for q in first.questions]
            assert other.feedback.to_json() == first.feedback.to_json()
            assert render_html(other.feedback) == render_html(first.feedback)
    alice, bob = ([p["x"] for p in _cubic(runs[student][0])["probes"]] for student in ("alice", "bob"))
    assert alice[:2] == bob[:2] == [4.0, 0.0]  # the exercise's own point (cubic_x), then zero
    assert min(alice) < 0 < max(alice)
    assert min(bob) < 0 < max(bob)
    assert not set(alice[4:]) & set(bob[4:])  # the drawn points: each student's own (course/pipeline/probes.py)


def test_a_function_wrong_only_for_negative_inputs_always_fails(grader, tmp_path):
    """Every grading calls it at a negative point and says where (a plausible one, public): for each student, the
    same points and the same feedback every time."""
    notebook = _notebook(RIGHT_FOR_POSITIVE_ONLY)
    details: dict[str, set[str]] = {}
    points: dict[str, set[tuple[float, ...]]] = {}
    for n, student in enumerate(["alice", "alice", "alice", "bob", "carol"]):
        graded, _ = grader(notebook, _folder(tmp_path, n), student=student)
        cubic = _cubic(graded)
        assert graded.status == "graded"
        assert (cubic["correct"], cubic["earned"]) == (False, 0.0)
        assert {q.id: q.earned for q in graded.questions}["cubic"] == 3  # cubic_grad's 3 of 8
        assert "at x = -" in cubic["detail"]  # the negative point it was wrong at, stated
        details.setdefault(student, set()).add(cubic["detail"])
        points.setdefault(student, set()).add(tuple(p["x"] for p in cubic["probes"]))
    assert all(len(seen) == 1 for seen in [*details.values(), *points.values()])
    assert all(min(next(iter(seen))) < 0 for seen in points.values())
    assert len({next(iter(seen)) for seen in points.values()}) == 3


def _with_secret(tmp_path, name: str = "course.key"):
    """The course, copied, with a course secret in a private file (and variants still off)."""
    from tests.support.helpers import copy_course

    root = copy_course(tmp_path / "course")
    secret = root / name
    secret.write_text("a course secret for the probe points\n")
    secret.chmod(0o600)
    yaml = root / "source" / "course.yaml"
    yaml.write_text(yaml.read_text() + f"\nvariant_secret_file: {name}\n")
    return root


def test_with_a_secret_the_points_are_the_courses_own_and_a_verdicts_page_never_names_them(tmp_path, monkeypatch):
    """With a course secret the drawn points differ from the public ones and are the same on every regrade; no
    feedback names them, neither with torch's values nor on a verdicts-only page: only their sign."""
    from course.core.config import load_config

    monkeypatch.delenv("AUTOGRAD_COURSE_SECRET", raising=False)
    public = fast_config()
    root = _with_secret(tmp_path)
    config = replace(load_config(root), limits=public.limits)
    assert config.variant_secret_file
    assignment = load_assignment(config.source_notebook(), "autograd")
    notebook = _notebook(RIGHT_FOR_POSITIVE_ONLY)
    keyed = [
        grade(notebook, _folder(tmp_path, f"keyed-{n}"), config=config, assignment=assignment)[0] for n in range(2)
    ]
    plain, _ = grade(notebook, _folder(tmp_path, "public"), config=public)
    assert _without_id(keyed[0].feedback) == _without_id(keyed[1].feedback)
    keyed_points = [p["x"] for p in _cubic(keyed[0])["probes"]]
    assert keyed_points[:2] == [4.0, 0.0]
    assert keyed_points != [p["x"] for p in _cubic(plain)["probes"]]
    assert [p["private"] for p in _cubic(keyed[0])["probes"]] == [False] * 4 + [True] * (len(keyed_points) - 4)
    assert "torch's slope is" in _cubic(keyed[0])["detail"]  # grade's feedback shows torch's values (auto)

    from course.pipeline.discovery import SubmissionRef
    from course.pipeline.grading import grade_submission

    path = write(notebook, tmp_path / "verdicts.ipynb")
    verdicts = grade_submission(SubmissionRef("student", path), assignment, config, reveal_torch_values=False)
    cubic = next(q for q in verdicts.feedback.questions if q.id == "cubic")
    page = render_html(verdicts.feedback)
    shown = page[page.index('id="q-cubic"') :] + unescape_markdown(question_markdown(cubic, False))
    assert "at a negative x drawn for you, yours disagrees with torch's slope" in shown
    for x in keyed_points[4:]:
        assert f"x = {x:g}" not in shown
        assert describe(x) not in shown
    assert verdicts.feedback.score == keyed[0].feedback.score


def test_gradescope_calls_the_function_at_the_points_grade_uses(tmp_path):
    """run_autograder (Gradescope) and `grade` agree on the score and on the points stated in the feedback."""
    from course.pipeline.discovery import SubmissionRef
    from course.pipeline.grading import grade_submission
    from course.platforms.gradescope import run_autograder
    from tests.support.gradescope import make_root

    notebook = _notebook(RIGHT_FOR_POSITIVE_ONLY)
    root = make_root(tmp_path, {"autograd.ipynb": notebook})
    results = run_autograder(root)
    config = fast_config()
    assignment = load_assignment(config.source_notebook(), "autograd")
    path = write(notebook, tmp_path / "local.ipynb")
    local = grade_submission(
        SubmissionRef("student", path),
        assignment,
        config,
        reveal_torch_values=config.reveals_torch_values(gradescope=True),
    )
    assert results["score"] == local.feedback.score
    test = next(t for t in results["tests"] if t["name"].startswith("9."))
    cubic = next(q for q in local.feedback.questions if q.id == "cubic")
    assert test["output"] == question_markdown(cubic, False)
    assert "at x = -" in unescape_markdown(test["output"])


def test_the_service_calls_the_function_at_the_points_grade_uses(tmp_path):
    """An upload to `serve` is graded at the points `grade` uses: the same score and the same stated points."""
    from course.pipeline.discovery import SubmissionRef
    from course.pipeline.grading import grade_submission
    from tests.support.service import Server, course_for_service, notebook_bytes, request

    notebook = _notebook(RIGHT_FOR_POSITIVE_ONLY)
    server = Server(course_for_service(tmp_path / "course"))
    server.issue_tokens(["alice"])
    server.start()
    try:
        reply = server.submit("alice", notebook_bytes(notebook))
        assert reply.status in (200, 201, 202), reply.text
        done = server.wait_graded("alice", reply.json["id"])
        page = request(server.url + done["feedback_url"], token=server.tokens["alice"]).text
    finally:
        server.stop()
    config = fast_config()
    assignment = load_assignment(config.source_notebook(), "autograd")
    path = write(notebook, tmp_path / "local.ipynb")
    local = grade_submission(
        SubmissionRef("alice", path),
        assignment,
        config,
        reveal_torch_values=config.reveals_torch_values(gradescope=True),
    )
    assert done["score"] == local.feedback.score
    detail = _cubic(local)["detail"]
    assert "at x = -" in detail
    assert html.escape(detail) in page
