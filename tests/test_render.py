"""The views of one feedback model: the HTML page and Gradescope's Markdown say each thing once."""

from __future__ import annotations

import html
import re

import pytest

from course.answers import FUNCTION, MISSING, WRONG_FORM, Answer, Probe
from course.feedback import build_feedback
from course.judge import judge
from course.render import question_markdown, render_html
from test_contract import contract_answers

TOL = 1e-6


def _cubic_feedback(assignment, answer: Answer, reveal: bool) -> tuple[dict, dict]:
    answers = contract_answers(assignment)
    answers["cubic_derivative"] = answer
    feedback = build_feedback("s1", "autograd", tuple(judge(assignment, answers, tolerance=TOL)), status="graded",
                              messages=[], cell_errors=[], reveal_torch_values=reveal)
    question = next(q for q in feedback["questions"] if q["id"] == "cubic")
    return feedback, next(v for v in question["values"] if v["name"] == "cubic_derivative")


def _html_row(page: str, name: str) -> str:
    return re.search(rf"<tr><td><code>{name}</code></td>.*?</tr>", page).group(0)


def _markdown_row(feedback: dict, name: str, reveal: bool) -> str:
    question = next(q for q in feedback["questions"] if q["id"] == "cubic")
    return next(line for line in question_markdown(question, reveal).splitlines()
                if line.startswith(f"| {name.replace('_', chr(92) + '_')} |"))


WRONG = Answer(FUNCTION, probes=tuple(Probe(x, 3.0 * x * x) for x in (-2.5, 0.0, 1.5, 4.0)))
RAISED = Answer(FUNCTION, probes=(Probe(1.0, error="raised ZeroDivisionError"),))
NOT_CALLED = Answer(FUNCTION)


@pytest.mark.parametrize("reveal", [True, False], ids=["torch-values", "verdicts"])
@pytest.mark.parametrize("answer", [WRONG, RAISED, NOT_CALLED], ids=["wrong", "raised", "not-called"])
def test_a_function_answer_says_what_the_grader_found_once(assignment, answer, reveal):
    feedback, entry = _cubic_feedback(assignment, answer, reveal)
    assert entry["detail"]
    said = html.escape(entry["detail"], quote=True)
    row = _html_row(render_html(feedback), "cubic_derivative")
    assert row.count(said) == 1, row
    assert html.escape(entry["explanation"], quote=True) in row
    markdown = _markdown_row(feedback, "cubic_derivative", reveal)
    first_words = entry["detail"].split(" (")[0].split(":")[0]
    assert markdown.count(first_words) == 1, markdown


def test_a_missing_value_says_why_once_in_its_own_cell(assignment):
    answers = contract_answers(assignment)
    answers["cubic_grad"] = Answer(MISSING, detail="still `...`")
    feedback = build_feedback("s1", "autograd", tuple(judge(assignment, answers, tolerance=TOL)), status="graded",
                              messages=[], cell_errors=[])
    row = _html_row(render_html(feedback), "cubic_grad")
    assert row.count("no answer (still `...`)") == 1
    assert "<td class=\"num\" data-label='your value'>no answer (still `...`)</td>" in row


@pytest.mark.parametrize("answer", [Answer(MISSING, detail="still `...`"), Answer(WRONG_FORM, detail="int")],
                         ids=["still-as-released", "not-a-function"])
def test_a_function_answer_without_a_function_is_shown_as_one(assignment, answer):
    feedback, entry = _cubic_feedback(assignment, answer, reveal=True)
    assert entry["torch_value"] == "torch's slope at each point"  # torch has no one value to show ("None")
    row = _html_row(render_html(feedback), "cubic_derivative")
    assert "<td class=\"num\" data-label='torch'>torch&#x27;s slope at each point</td>" in row
    assert row.count(html.escape(entry["detail"], quote=True)) == 1


def test_each_reported_error_starts_its_line_with_a_capital(assignment):
    from course.render import summary_markdown

    cell_errors = [{"cell": "your answer cell for 3. A whole (tiny) network by hand", "error": "NameError: name 'y'"},
                   {"cell": "cell 12", "error": "ZeroDivisionError: division by zero"}]
    feedback = build_feedback("s1", "autograd", tuple(judge(assignment, contract_answers(assignment), tolerance=TOL)),
                              status="graded", messages=[], cell_errors=cell_errors)
    page = render_html(feedback)
    assert "<li>Your answer cell for 3. A whole (tiny) network by hand: <code>NameError" in page
    assert "<li>Cell 12: <code>ZeroDivisionError" in page
    markdown = summary_markdown(feedback)
    assert "\n- Your answer cell for 3\\. A whole \\(tiny\\) network by hand: NameError" in markdown
    assert "\n- Cell 12: ZeroDivisionError" in markdown
