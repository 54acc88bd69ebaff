"""The views of one feedback model: the HTML page and Gradescope's Markdown say each thing once."""

from __future__ import annotations

import html
import re

import pytest

from course.core.answers import FUNCTION, MISSING, VALUE, WRONG_FORM, Answer, Probe, describe
from course.core.config import load_config
from course.pipeline.assignment import load_course_assignment
from course.pipeline.feedback import build_feedback
from course.pipeline.feedback_model import CellError, Feedback, QuestionFeedback
from course.pipeline.judge import judge
from course.pipeline.render import question_markdown, question_view, render_html
from tests.support.helpers import ALL_VALUES, ROOT, TRAINING_VALUES, contract_answers, wrong_literal

TOL = 1e-6


def _cubic_feedback(assignment, answer: Answer, reveal: bool) -> tuple[Feedback, dict]:
    answers = contract_answers(assignment)
    answers["cubic_derivative"] = answer
    feedback = build_feedback(
        "s1",
        "autograd",
        tuple(judge(assignment, answers, tolerance=TOL)),
        status="graded",
        messages=[],
        cell_errors=[],
        reveal_torch_values=reveal,
    )
    question = next(q for q in feedback.to_json()["questions"] if q["id"] == "cubic")
    return feedback, next(v for v in question["values"] if v["name"] == "cubic_derivative")


def _html_row(page: str, name: str) -> str:
    return re.search(rf"<tr><td><code>{name}</code></td>.*?</tr>", page).group(0)


def _markdown_row(feedback: Feedback, name: str, reveal: bool) -> str:
    question = next(q for q in feedback.questions if q.id == "cubic")
    return next(
        line
        for line in question_markdown(question, reveal).splitlines()
        if line.startswith(f"| {name.replace('_', chr(92) + '_')} |")
    )


WRONG = Answer(FUNCTION, probes=tuple(Probe(x, 3.0 * x * x) for x in (-2.5, 0.0, 1.5, 4.0)))
RAISED = Answer(FUNCTION, probes=(Probe(1.0, error="raised ZeroDivisionError"),))
NOT_CALLED = Answer(FUNCTION)


# Right at the exercise's own point and at 2.5; wrong at zero and at four points drawn for the student.
WRONG_AT_SOME = Answer(
    FUNCTION,
    probes=(
        Probe(4.0, 46.0),
        Probe(0.0, 5.0),
        Probe(-1.5, 3.0),
        Probe(2.5, 16.75),
        Probe(-6.0, 0.0),
        Probe(7.0, 0.0),
        Probe(-0.5, error="raised `Boom` <i>"),
    ),
)
PRIVATE = {"cubic_derivative": frozenset({-1.5, 2.5, -6.0, 7.0, -0.5})}


def _unescaped(markdown: str) -> str:
    return re.sub(r"\\(.)", r"\1", markdown).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


@pytest.mark.parametrize("reveal", [True, False], ids=["torch-values", "verdicts"])
def test_the_points_a_function_was_wrong_at_are_stated_on_the_page_and_in_markdown(assignment, reveal):
    answers = contract_answers(assignment)
    answers["cubic_derivative"] = WRONG_AT_SOME
    feedback = build_feedback(
        "s1",
        "autograd",
        tuple(judge(assignment, answers, tolerance=TOL, private_points=PRIVATE)),
        status="graded",
        messages=[],
        cell_errors=[],
        reveal_torch_values=reveal,
    )
    # A public point (zero) is named, with torch's value where the feedback shows torch's values; a point drawn for the
    # student never is, nor what either side gave there (either tells the point), in either mode.
    zero = "at x = 0 yours gave 5, torch's slope is -2" if reveal else "at x = 0 yours gave 5"
    drawn = "at a negative x drawn for you, yours disagrees with torch's slope"
    said = f"disagrees with torch at 5 of the 7 points the grader uses: {zero}; {drawn}; {drawn}; and at 2 more"
    row = _html_row(render_html(feedback), "cubic_derivative")
    assert html.escape(said) in row
    markdown = _unescaped(_markdown_row(feedback, "cubic_derivative", reveal))
    assert said in markdown
    for x in ("-1.5", "-6", "7", "-0.5", "2.5"):
        assert f"x = {x}" not in row + markdown
    for value in ("4.75", "106", "yours gave 3", "yours gave 0"):
        assert value not in row + markdown


def test_a_student_error_at_a_stated_point_stays_text(assignment):
    answers = contract_answers(assignment)
    answers["cubic_derivative"] = Answer(FUNCTION, probes=(Probe(-0.5, error="raised `Boom` <i>|"),))
    feedback = build_feedback(
        "s1", "autograd", tuple(judge(assignment, answers, tolerance=TOL)), status="graded", messages=[], cell_errors=[]
    )
    assert "at x = -0.5 yours raised `Boom` &lt;i&gt;|, torch&#x27;s slope is" in _html_row(
        render_html(feedback), "cubic_derivative"
    )
    markdown = _markdown_row(feedback, "cubic_derivative", True)
    assert r"yours raised \`Boom\` &lt;i&gt;\|" in markdown


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
    feedback = build_feedback(
        "s1", "autograd", tuple(judge(assignment, answers, tolerance=TOL)), status="graded", messages=[], cell_errors=[]
    )
    row = _html_row(render_html(feedback), "cubic_grad")
    assert row.count("no answer (still <code>...</code>)") == 1
    assert "<td class=\"num\" data-label='your value'>no answer (still <code>...</code>)</td>" in row


@pytest.mark.parametrize("reveal", [True, False], ids=["torch-values", "verdicts"])
def test_the_code_a_value_still_as_released_names_is_code_on_the_page_and_literal_in_markdown(assignment, reveal):
    answers = contract_answers(assignment)
    answers["net_dL_dw"] = Answer(MISSING, detail="still `...`")  # a value cell, and a row of the chain table
    answers["cubic_derivative"] = Answer(
        FUNCTION,
        probes=(
            Probe(-2.5, error="returned `...` (replace `return ...` with your derivative), not a plain number"),
            Probe(0.0, -2.0),
            Probe(1.5, 4.75),
            Probe(4.0, 46.0),
        ),
    )
    feedback = build_feedback(
        "s1",
        "autograd",
        tuple(judge(assignment, answers, tolerance=TOL)),
        status="graded",
        messages=[],
        cell_errors=[],
        reveal_torch_values=reveal,
        content=assignment.content,
    )
    page = render_html(feedback)
    body = page[page.index("<main>") :]
    assert "`" not in re.sub(r"<h2>.*?</h2>", "", body)  # titles aside (course text, shown as code too)
    assert _html_row(page, "net_dL_dw").count("no answer (still <code>...</code>)") == 1
    chain = re.search(r"<table class=chain>.*?</table>", page[page.index('id="q-tiny_net"') :]).group(0)
    assert "no answer (still <code>...</code>)" in chain
    assert (
        "at x = -2.5 yours returned <code>...</code> (replace <code>return ...</code> with your derivative), "
        "not a plain number"
    ) in _html_row(page, "cubic_derivative")
    # Gradescope's Markdown keeps every character literal: the backticks are shown, not Markdown.
    net = next(q for q in feedback.questions if q.id == "tiny_net")
    assert r"no answer \(still \`\.\.\.\`\)" in question_markdown(net, reveal)
    function_row = _markdown_row(feedback, "cubic_derivative", reveal)
    assert r"returned \`\.\.\.\` \(replace \`return \.\.\.\` with" in function_row


def test_only_the_graders_own_phrases_become_code(assignment):
    """A notebook's own text (a wrong form's type name, an error it raised) stays text on the page, backticks
    and all: only the fixed phrases for an answer still as released are code."""
    answers = contract_answers(assignment)
    answers["net_dL_dw"] = Answer(WRONG_FORM, detail="`<b>x</b>`")
    answers["cubic_derivative"] = Answer(FUNCTION, probes=(Probe(1.0, error="raised `Boom` <i>"),))
    feedback = build_feedback(
        "s1", "autograd", tuple(judge(assignment, answers, tolerance=TOL)), status="graded", messages=[], cell_errors=[]
    )
    page = render_html(feedback)
    assert "a value of type `&lt;b&gt;x&lt;/b&gt;`, where" in _html_row(page, "net_dL_dw")
    row = _html_row(page, "cubic_derivative")
    assert "at x = 1 yours raised `Boom` &lt;i&gt;, torch&#x27;s slope is 1</div>" in row


@pytest.mark.parametrize(
    "answer",
    [Answer(MISSING, detail="still `...`"), Answer(WRONG_FORM, detail="int")],
    ids=["still-as-released", "not-a-function"],
)
def test_a_function_answer_without_a_function_is_shown_as_one(assignment, answer):
    feedback, entry = _cubic_feedback(assignment, answer, reveal=True)
    assert entry["torch_value"] == "torch's slope at each point"  # torch has no one value to show ("None")
    row = _html_row(render_html(feedback), "cubic_derivative")
    assert "<td class=\"num\" data-label='torch'>torch&#x27;s slope at each point</td>" in row
    assert row.count(html.escape(entry["detail"], quote=True).replace("`...`", "<code>...</code>")) == 1


def test_each_reported_error_starts_its_line_with_a_capital(assignment):
    from course.pipeline.render import summary_markdown

    cell_errors = [
        CellError("your answer cell for 3. A whole (tiny) network by hand", "NameError: name 'y'"),
        CellError("cell 12", "ZeroDivisionError: division by zero"),
    ]
    feedback = build_feedback(
        "s1",
        "autograd",
        tuple(judge(assignment, contract_answers(assignment), tolerance=TOL)),
        status="graded",
        messages=[],
        cell_errors=cell_errors,
    )
    page = render_html(feedback)
    assert "<li>Your answer cell for 3. A whole (tiny) network by hand: <code>NameError" in page
    assert "<li>Cell 12: <code>ZeroDivisionError" in page
    markdown = summary_markdown(feedback)
    assert "\n- Your answer cell for 3\\. A whole \\(tiny\\) network by hand: NameError" in markdown
    assert "\n- Cell 12: ZeroDivisionError" in markdown


# ----------------------------------------------------------------------------- misconception notes, verdicts only

# Slips whose note, said whole, hands the answer over: the size is right and the sign wrong (the engine's sign
# slip); "y.grad is None"; one backward() call's gradient where two were asked for ("twice as much").
SLIPS = {
    "slope_at_minus_2": -ALL_VALUES["slope_at_minus_2"],
    "y_grad_without_retain": 7.0,
    "twice_w_grad": ALL_VALUES["net_dL_dw"],
    "twice_b_grad": ALL_VALUES["net_dL_db"],
}


def _slipped_feedback(assignment, reveal: bool) -> Feedback:
    answers = contract_answers(assignment, {**ALL_VALUES, **SLIPS})
    return build_feedback(
        "s1",
        "autograd",
        tuple(judge(assignment, answers, tolerance=TOL)),
        status="graded",
        messages=[],
        cell_errors=[],
        reveal_torch_values=reveal,
        content=assignment.content,
    )


def _shown(feedback: Feedback, reveal: bool) -> tuple[str, str]:
    """What a student reads: the page's text, and the questions' Markdown unescaped (as Gradescope shows it)."""
    page = html.unescape(re.sub(r"<[^>]+>", "", render_html(feedback)))
    markdown = "\n".join(question_markdown(q, reveal) for q in feedback.questions)
    return page, re.sub(r"\\(.)", r"\1", markdown)


def test_notes_with_torch_values_say_the_slip_and_the_idea(assignment):
    feedback = _slipped_feedback(assignment, reveal=True)
    notes = [m for q in feedback.to_json()["questions"] for m in q["misconceptions"]]
    assert {m["id"] for m in notes} == {
        "sign_slip",
        "unretained_grad_kept",
        "second_backward_overwrites",
        "second_backward_overwrites_b",
    }
    for shown in _shown(feedback, reveal=True):
        for note in notes:
            assert note["diagnosis"] in shown
            assert note["idea"] in shown
        assert "right size but the wrong sign" in shown
        assert "y.grad is None" in shown


def test_verdicts_only_notes_give_the_idea_never_the_answer(assignment):
    """Verdicts only: no note narrows the answer down. A catalogue note shows its idea (the concept the slip
    violates, the same words for everyone), once per question, never its diagnosis (which relates the answer
    to torch's); the sign slip, found from the numbers alone, is not shown at all."""
    feedback = _slipped_feedback(assignment, reveal=False)
    notes = {m["id"]: m for q in feedback.to_json()["questions"] for m in q["misconceptions"]}
    accumulate = notes["second_backward_overwrites"]["idea"]
    assert accumulate == notes["second_backward_overwrites_b"]["idea"]  # two notes of one question, one idea
    for shown in _shown(feedback, reveal=False):
        for note in notes.values():
            assert note["diagnosis"] not in shown, note["id"]
        assert "wrong sign" not in shown
        assert "is None" not in shown
        assert "twice as much" not in shown
        assert notes["sign_slip"]["idea"] not in shown
        assert notes["unretained_grad_kept"]["idea"] in shown
        assert shown.count(accumulate) == 1


def test_verdicts_only_feedback_json_keeps_the_notes_whole_for_the_class_summary(assignment):
    """feedback.json is the instructor's (nbgrader hands back the page, the service shows the page, Gradescope
    gets results.json): the class summary counts every note, with its diagnosis, whatever students are shown."""
    hidden = _slipped_feedback(assignment, reveal=False)
    shown = _slipped_feedback(assignment, reveal=True)
    assert [q.misconceptions for q in hidden.questions] == [q.misconceptions for q in shown.questions]


# ----------------------------------------------------------------------------- fixed hints, verdicts only


# What tells an answer besides its figures, as a demanding instructor reads a hint: "zero times anything is
# zero" tells a 0, "thrown away" a None, "does not track gradients" a False, "came from a power" PowBackward0.
def _words_for(expected) -> tuple[str, ...]:
    if expected is None:
        return ("None", "discarded", "thrown away")
    if type(expected) is bool:
        return ("True",) if expected else ("False", "do not", "does not", "is not", "are not")
    return ("zero", "nothing") if expected == 0 else ()


def _telling(text: str, expected) -> list[str]:
    """The words of `text` that tell `expected` (a number, a list of them, a bool, None or a class name)."""
    if type(expected) is str:  # a class name, and the operation it undoes ("Pow" in "power")
        patterns = [rf"\b{re.escape(expected)}\b", rf"(?i)\b{re.escape(expected.removesuffix('Backward0'))}"]
    else:
        figures = (
            []
            if type(expected) is bool or expected is None
            else [describe(item) for item in (expected if type(expected) is list else [expected])]
        )
        if type(expected) is list:
            figures.append(describe(expected))
        patterns = [rf"(?<![\w.]){re.escape(figure)}(?![\w.])" for figure in figures] + [
            rf"\b{re.escape(word)}\b" for word in _words_for(expected)
        ]
    return [match.group(0) for pattern in patterns for match in [re.search(pattern, text)] if match]


def _offered(question: QuestionFeedback, name: str) -> str:
    """All a verdicts-only view says about the answer `name` beyond the student's own value: its explanation
    and the notes under it, the question's notes, and the chain-table steps that name it."""
    view = question_view(question, reveal=False)
    said = [text for _, text in view.slips]
    for row in view.tables[0].rows:
        if row[0].text == name:
            said += [row[-1].text, *(text for _, text in row[-1].notes)]
    for step in question.to_json().get("chain_table", {}).get("rows", []):
        if name in (step["gradient"], step["forward"]):
            said.append(step["local_derivative"])
    return "\n".join(said)


def _wrong(value):
    """A wrong hand answer for torch's `value` that names no misunderstanding of its own."""
    if type(value) is str:
        return "SubBackward0" if value != "SubBackward0" else "DivBackward0"
    return 3.25 if value is None else wrong_literal(value)


# The classic slips of each notebook, which bring their misconception notes along.
SLIPPED = {
    "autograd": {
        "accumulated_grads": [6, 6, 6],
        "zeroed_grads": [6, 12, 18],
        "net_dL_dw": 6,
        "w2_dL_da": 1.0,
        "w2_dL_dw": 2.0,
        "cubic_grad": 48,
        "retain_y_grad": None,
        "closed_dL_dw": 2,
        "closed_dL_db": 2,
        "slope_at_minus_2": 4,
        "y_grad_without_retain": 7.0,
        "twice_w_grad": 12,
        "twice_b_grad": 6,
        "local_slopes": [6, 2, 1],
    },
    "training": {
        "data_is_leaf": False,
        "x_grad_fn": "AccumulateGrad",
        "y_grad_fn": "Pow",
        "square_saved": 9,
        "leaky_dL_dh": -4.08,
        "leaky_dL_dw": 0,
        "detach_grad": 6,
        "cube_detach_grad": 27,
        "nozero_w": [1.5, 1.875, 1.78125],
        "sgd_w": [1.5, 0.375, -0.75],
        "accumulated_w_grad": -4,
        "averaged_w_grad": 8,
    },
}
TRAINING = load_course_assignment(load_config(ROOT), "training")


@pytest.mark.parametrize("slips", [False, True], ids=["each-a-little-off", "classic-slips"])
@pytest.mark.parametrize("which", ["autograd", "training"])
def test_verdicts_only_feedback_never_tells_a_wrong_answer(assignment, which, slips):
    """For every question, what verdicts-only feedback says about a wrong answer (its explanation, the notes, the
    chain table) tells neither torch's value nor, in words, the verdict. Fixed hints may ("ReLU's local slope is
    0 for a negative input"): the explanation there is the hidden test's `idea`, never its hint."""
    graded = assignment if which == "autograd" else TRAINING
    truth = ALL_VALUES if which == "autograd" else TRAINING_VALUES
    given = {name: _wrong(value) for name, value in truth.items()} | (SLIPPED[which] if slips else {})
    answers = {name: Answer(VALUE, value) for name, value in given.items()}
    answers.update({name: Answer(FUNCTION, probes=(Probe(1.0, 0.5),)) for name in graded.function_names})
    results = judge(graded, answers, tolerance=TOL)
    feedback = build_feedback(
        "s1",
        which,
        tuple(results),
        status="graded",
        messages=[],
        cell_errors=[],
        reveal_torch_values=False,
        content=graded.content,
    )
    told = {}
    for question in feedback.questions:
        for value in question.values:
            if value.status == VALUE and not value.correct:
                found = _telling(_offered(question, value.name), truth[value.name])
                told.update({value.name: found} if found else {})
    assert told == {}
    noted = {m.id for q in feedback.questions for m in q.misconceptions}
    assert len(noted) >= (10 if slips else 1), noted  # the notes were there to be read


@pytest.mark.parametrize("which", ["autograd", "training"])
def test_every_answer_has_an_idea_for_verdicts_only_feedback(assignment, which):
    """The course's hidden tests give each answer an idea, so verdicts-only feedback is not left silent; with
    torch's values the explanation stays the hint."""
    graded = assignment if which == "autograd" else TRAINING
    truth = ALL_VALUES if which == "autograd" else TRAINING_VALUES
    answers = {name: Answer(VALUE, _wrong(value)) for name, value in truth.items()}
    answers.update({name: Answer(FUNCTION) for name in graded.function_names})
    results = [v for q in judge(graded, answers, tolerance=TOL) for v in q.values]
    assert [v.name for v in results if not v.idea] == []
    assert [v.name for v in results if v.idea == v.hint] == []
    for reveal in (True, False):
        feedback = build_feedback(
            "s1",
            which,
            tuple(judge(graded, answers, tolerance=TOL)),
            status="graded",
            messages=[],
            cell_errors=[],
            reveal_torch_values=reveal,
        )
        shown = {v.name: v.explanation for q in feedback.questions for v in q.values}
        assert shown == {v.name: v.hint if reveal else v.idea for v in results}


def test_a_feedback_of_many_errors_is_capped_where_it_is_made_and_says_how_many_more(assignment):
    """2000 raising cells made 1 MB of feedback, read again at every reload of the student's page: the model keeps
    the first errors and their number, and both views say it."""
    import json

    from course.pipeline.render import summary_markdown

    errors = [CellError(f"cell {i}", "ZeroDivisionError: " + "x" * 480, "h") for i in range(2000)]
    feedback = build_feedback(
        "s1",
        "autograd",
        tuple(judge(assignment, contract_answers(assignment), tolerance=TOL)),
        status="graded",
        messages=[],
        cell_errors=errors,
    )
    assert feedback.cell_errors == tuple(errors[:20])
    assert feedback.cell_errors_left_out == 1980
    assert feedback.to_json()["cell_errors_left_out"] == 1980
    assert len(json.dumps(feedback.to_json())) < 60_000
    said = "… and 1,980 more errors (only the first 20 are listed"
    assert said in render_html(feedback)
    assert said.replace("(", "\\(") in summary_markdown(feedback)  # Markdown: every character literal
    few = build_feedback("s1", "autograd", (), status="graded", messages=[], cell_errors=errors[:20])
    assert "cell_errors_left_out" not in few.to_json()
    assert "more error" not in render_html(few)
