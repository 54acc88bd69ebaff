"""The feedback document as types (course/pipeline/feedback_model.py): what build_feedback makes validates against the
shipped JSON Schema and survives to_json -> from_json; the files of this and earlier versions read back; anything
grading could not have written is refused with a sentence naming the field, never a KeyError. (That every
feedback.json of the sample class validates: tests/test_grading_e2e.py, on the class it grades anyway.)"""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest

from course.core.answers import FUNCTION, VALUE, Answer, Probe
from course.core.files import compact_json
from course.core.status import Status
from course.pipeline.feedback import MAX_CELL_ERRORS, build_feedback
from course.pipeline.feedback_model import CellError, Feedback, FeedbackError, schema_text
from course.pipeline.judge import judge
from course.pipeline.render import render_html, summary_markdown
from tests.support.helpers import ALL_VALUES, ROOT

GOLDENS = ROOT / "tests" / "goldens"
# feedback.json as b99931e wrote it (the commit whose service.db tests/service/test_migrations.py upgrades): its
# probes have no `private` yet. A service's stored rows of that version hold documents like these.
EARLIER = sorted((GOLDENS / "earlier").glob("*.feedback.json"))
CURRENT = sorted(GOLDENS.glob("bob.*.feedback.json"))
# The order of feedback.json's keys since the first release (later keys are appended where they are set).
KEY_ORDER = [
    "student_id",
    "assignment",
    "status",
    "score",
    "max_score",
    "messages",
    "cell_errors",
    "cell_errors_left_out",
    "reveals_torch_values",
    "questions",
    "raw_score",
    "late_penalty",
]


def validator() -> jsonschema.protocols.Validator:
    schema = json.loads(schema_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def assert_valid(data: dict) -> None:
    errors = sorted(validator().iter_errors(data), key=lambda e: list(e.absolute_path))
    assert not errors, [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:5]]


def _answers(assignment, wrong: bool) -> dict[str, Answer]:
    values = {
        name: (value * 2 + 1 if wrong and isinstance(value, float) else value) for name, value in ALL_VALUES.items()
    }
    if wrong:  # the sign slip, a note found from the numbers alone
        values["slope_at_minus_2"] = -ALL_VALUES["slope_at_minus_2"]
    answers = {name: Answer(VALUE, value) for name, value in values.items()}
    answers["cubic_derivative"] = Answer(
        FUNCTION, probes=tuple(Probe(x, 3 * x**2 - (3 if wrong else 2)) for x in (-2.5, 0.0, 1.5, 4.0))
    )
    return answers


def every_part(assignment, reveal: bool) -> Feedback:
    """A document with every optional part: wrong answers (chain tables that break, misconceptions, a function
    wrong at its points), answers computed with torch, more cell errors than are kept, and the late policy."""
    answers = _answers(assignment, wrong=True)
    errors = [
        CellError(f"cell {i}", "ZeroDivisionError: division by zero", "h" if i % 2 else "")
        for i in range(MAX_CELL_ERRORS + 3)
    ]
    questions = judge(assignment, answers, tolerance=1e-6, computed=frozenset({"slope_at_3"}))
    made = build_feedback(
        "s1",
        "autograd",
        questions,
        status=Status.TIMED_OUT,
        messages=["a sentence"],
        cell_errors=errors,
        reveal_torch_values=reveal,
        content=assignment.content,
    )
    return made.with_late_policy(1.5, "one day late: 1.5 points off")


@pytest.mark.parametrize("reveal", [True, False], ids=["torch-values", "verdicts"])
def test_what_build_feedback_makes_validates_and_reads_back_as_itself(assignment, reveal):
    made = every_part(assignment, reveal)
    data = made.to_json()
    parts = json.dumps(data)
    for part in (
        "chain_table",
        "hand_work_note",
        "probes",
        "detail",
        "cell_errors_left_out",
        "raw_score",
        '"hint"',
        '"from_numbers": true',
    ):  # the check can fail: every optional part is there
        assert part in parts, part
    assert_valid(data)
    assert_valid(json.loads(compact_json(data)))  # as written to disk
    assert Feedback.from_json(data) == made
    assert Feedback.from_json(json.loads(compact_json(data))) == made
    assert [key for key in KEY_ORDER if key in data] == list(data)
    plain = build_feedback(
        "s1",
        "autograd",
        judge(assignment, _answers(assignment, wrong=False), tolerance=1e-6),
        status=Status.GRADED,
        messages=[],
        cell_errors=[],
        reveal_torch_values=reveal,
    )
    assert_valid(plain.to_json())
    assert Feedback.from_json(plain.to_json()) == plain
    assert {"cell_errors_left_out", "raw_score", "late_penalty"}.isdisjoint(plain.to_json())


@pytest.mark.parametrize("path", CURRENT, ids=lambda p: p.name)
def test_the_goldens_validate_and_read_back_to_the_same_bytes(path):
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    assert_valid(data)
    read = Feedback.from_json(data, where=str(path))
    assert json.dumps(read.to_json(), indent=2, ensure_ascii=False, sort_keys=True) + "\n" == text
    assert Feedback.from_json(read.to_json()) == read


@pytest.mark.parametrize("path", EARLIER, ids=lambda p: p.name)
def test_feedback_of_an_earlier_version_reads_and_renders(path):
    """A stored row or feedback.json of b99931e: probes without `private` read as public points."""
    assert EARLIER, "the earlier version's files are there to be read"
    data = json.loads(path.read_text(encoding="utf-8"))
    read = Feedback.from_json(data, where=str(path))
    probes = [p for q in read.questions for v in q.values for p in v.probes]
    assert probes
    assert not any(p.private for p in probes)
    assert read.student_id == "bob"
    assert read.questions
    assert "Feedback for <strong>bob</strong>" in render_html(read)
    assert summary_markdown(read).startswith(f"**{read.score:g} / {read.max_score:g}** points.")


def _golden() -> dict:
    return json.loads(CURRENT[0].read_text(encoding="utf-8"))


def _drop(*keys):
    def change(data):
        target = data
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]

    return change


def _set(*keys, value):
    def change(data):
        target = data
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return change


MALFORMED = {  # an edit of a good document -> the field the refusal names
    "no student": (_drop("student_id"), "`student_id` is missing"),
    "a status nobody gives": (_set("status", value="excellent"), "`status` is not one of"),
    "a grades row's status": (_set("status", value="missing"), "`status` is not one of graded, timed_out,"),
    "a score that is text": (_set("score", value="57"), "`score` is not a finite number"),
    "a score that is true": (_set("score", value=True), "`score` is not a finite number"),
    "a message that is a number": (_set("messages", value=["a sentence", 1]), "`messages[1]` is not text"),
    "questions that are an object": (_set("questions", value={}), "`questions` is not a list"),
    "a question without points": (_drop("questions", 1, "points"), "`questions[1].points` is missing"),
    "an answer that is a list": (_set("questions", 0, "values", 2, value=[]), "`questions[0].values[2]` is not an"),
    "an answer shown as a number": (
        _set("questions", 0, "values", 0, "your_value", value=6),
        "`questions[0].values[0].your_value` is neither text nor null",
    ),
    "a note without its idea": (
        _drop("questions", 0, "misconceptions", 0, "idea"),
        "`questions[0].misconceptions[0].idea` is missing",
    ),
    "a chain that breaks past its end": (
        _set("questions", 2, "chain_table", "first_wrong", value=99),
        "`questions[2].chain_table.first_wrong` is not one of the table's",
    ),
    "a chain row that is not correct or not": (
        _set("questions", 2, "chain_table", "rows", 0, "correct", value="yes"),
        "`questions[2].chain_table.rows[0].correct` is not true or false",
    ),
    "a chain row asked, said so": (
        _set("questions", 2, "chain_table", "rows", 0, "asked", value=True),
        "`questions[2].chain_table.rows[0].asked` is written only as false",
    ),
    "a cell error without its text": (_set("cell_errors", value=[{"cell": "cell 1"}]), "`cell_errors[0].error`"),
    "errors left out, negative": (_set("cell_errors_left_out", value=-3), "`cell_errors_left_out` is not a count"),
}


@pytest.mark.parametrize("edit", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_document_grading_could_not_have_written_is_refused_naming_the_field(edit):
    change, said = edit
    data = _golden()
    assert "chain_table" in data["questions"][2]  # the edits reach what they mean to
    Feedback.from_json(copy.deepcopy(data))  # the check can fail: unedited, it reads
    change(data)
    with pytest.raises(FeedbackError) as refused:
        Feedback.from_json(data, where="feedback/bob/autograd/feedback.json")
    assert str(refused.value).startswith(f"feedback/bob/autograd/feedback.json: {said}"), str(refused.value)
    assert str(refused.value).endswith("; grade again to write it")
    if "first_wrong" not in said:  # a row past the table's end is beyond what a schema can say
        assert list(validator().iter_errors(data)), "the schema refuses it too"


@pytest.mark.parametrize("value", [None, [], "feedback", 3])
def test_a_document_that_is_no_object_is_refused(value):
    with pytest.raises(FeedbackError, match=r"^row 7: is not an object, not a feedback document grading writes; mend"):
        Feedback.from_json(value, where="row 7", then="mend that row")


def test_the_schema_is_read_from_the_package():
    """schema_text reads the package's own file (importlib.resources); that the wheel ships it: test_wheel.py."""
    assert schema_text() == (ROOT / "course" / "schemas" / "feedback.schema.json").read_text(encoding="utf-8")
    assert json.loads(schema_text())["title"] == "feedback.json"
