"""course.forms, the one definition of the answer forms: the form check in the student's notebook
(course.notebook.check_form, on live values, in the student's kernel and as the grader hands it to the
sandbox), the self-check's report (course.pipeline.selfcheck.form_gap, on plain values) and the judge's words
(course.pipeline.judge.declared_forms) all accept the same values and say each form in the same words. And of the one
comparison with torch's value: the judge's score and plain nbgrader's Marks agree."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import course
from course.notebook import TOLERANCE, FormError, Marks, check_form
from course.pipeline.assignment import Question
from course.pipeline.judge import declared_forms, matches
from course.pipeline.selfcheck import form_gap
from course.sandbox.handed_in import notebook_module_cell

NAN, INF = float("nan"), float("inf")

# (form, plain value, whether it has the form): what a teacher would say, written here once by hand, not
# derived from course.forms, so that a rule changed in one place only is caught.
TABLE = [
    ("number", 2, True),
    ("number", -0.5, True),
    ("number", 0.0, True),
    ("number", True, False),
    ("number", None, False),
    ("number", "12", False),
    ("number", NAN, False),
    ("number", INF, False),
    ("number", [1], False),
    ("number or None", None, True),
    ("number or None", 3.5, True),
    ("number or None", "None", False),
    ("number or None", False, False),
    ("number or None", -INF, False),
    ("True or False", True, True),
    ("True or False", False, True),
    ("True or False", 1, False),
    ("True or False", "False", False),
    ("True or False", None, False),
    ("class name or None", "MulBackward0", True),
    ("class name or None", None, True),
    ("class name or None", "Add Backward", False),
    ("class name or None", "", False),
    ("class name or None", 0, False),
    ("class name or None", ["AddBackward0"], False),
    ("list of 3 numbers", [1, 2.5, -3], True),
    ("list of 3 numbers", [1, 2], False),
    ("list of 3 numbers", [1, 2, 3, 4], False),
    ("list of 3 numbers", [1, None, 3], False),
    ("list of 3 numbers", [1, True, 3], False),
    ("list of 3 numbers", [1, NAN, 3], False),
    ("list of 3 numbers", 7.5, False),
    ("list of 3 numbers", "1, 2, 3", False),
    ("list of 1 number", [4], True),
    ("list of 1 number", 4, False),
    ("function", 3, False),
    ("function", None, False),
    ("function", [1, 2], False),
]
WORDS = {  # how each form is said, by hand
    "number": "a number",
    "number or None": "a number or None",
    "True or False": "True or False",
    "class name or None": "a class name in quotes (a string) or None",
    "list of 3 numbers": "a list of 3 numbers",
    "list of 1 number": "a list of 1 numbers",
    "function": "a function of x",
}


def _notebook_problems(form: str, value: object) -> list[str]:
    namespace = {"check_form": check_form, "x": value}
    try:
        exec(f"check_form(x={form!r}, quiet=True)", namespace)  # noqa: S102 - a form cell of the course
    except FormError as error:
        return list(error.problems)
    return []


@pytest.mark.parametrize(("form", "value", "fits"), TABLE, ids=repr)
def test_the_notebook_and_the_self_check_hold_an_answer_to_its_form_alike(form, value, fits):
    problems, gap = _notebook_problems(form, value), form_gap(value, form)
    assert (problems == []) == fits, problems
    assert (gap == "") == fits, gap
    if not fits:
        assert problems[0].startswith(f"x should be {WORDS[form]}, but "), problems
        assert gap.startswith(f"not {WORDS[form]} ("), gap
        # the same count or item is said at fault: "it has 2", "item 2"
        assert re.findall(r"(?:it has|item) \d+", problems[0]) == re.findall(r"(?:it has|item) \d+", gap)


def test_the_judge_says_each_declared_form_in_the_same_words():
    question = Question(
        "q",
        "Q",
        1,
        "answer_q",
        "form_q",
        "test_q",
        (),
        (),
        "",
        "",
        forms=tuple((f"x{i}", form) for i, form in enumerate(WORDS)),
    )
    assert declared_forms(question) == {f"x{i}": words for i, words in enumerate(WORDS.values())}


def test_a_form_no_check_knows_is_refused_by_the_notebook_and_ignored_by_the_report():
    with pytest.raises(
        ValueError,
        match="'nmber' is not a form; use one of number, number or None, True or False, "
        "class name or None, function or 'list of N numbers'",
    ):
        _notebook_problems("nmber", 1)
    assert form_gap(None, "nmber") == ""
    assert form_gap(None, "") == ""  # a form computed in the cell (an f-string): nothing to hold the answer to


def test_the_sandboxs_copy_of_the_modules_holds_answers_to_the_same_table(tmp_path):
    """The grader hands course.forms and course.notebook to the sandbox as text: made from that text, in a
    fresh interpreter that cannot import the course, check_form agrees with the table too."""
    table = [(form, value, fits) for form, value, fits in TABLE if value == value and value not in (INF, -INF)]
    program = (
        "import json, sys\n"
        f"exec({notebook_module_cell()!r}, {{}})\n"
        "from course.notebook import FormError, check_form\n"
        "import course.forms\n"
        "seen = []\n"
        f"for form, value in json.loads({json.dumps([[f, v] for f, v, _ in table])!r}):\n"
        "    try:\n"
        "        exec(f'check_form(x={form!r}, quiet=True)', {'check_form': check_form, 'x': value})\n"
        "        seen.append(True)\n"
        "    except FormError:\n"
        "        seen.append(False)\n"
        "print(json.dumps([seen, course.forms.__file__, sys.modules['course.notebook'].forms is course.forms]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", program], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[fits for _, _, fits in table], "course/forms.py", True]


def test_no_module_of_the_course_writes_a_form_rule_of_its_own():
    """The forms' names and words are spelled out only in course/forms.py: any other module that compares with
    one, parses "list of N numbers" or says a form in words of its own has a rule of its own. ("True or False"
    is left out: it is also how the judge says a bool's form where no check declares one.)"""
    spelled = {
        "number or None",
        "class name or None",
        "list of (\\d+) numbers?",
        "a function of x",
        "a class name in quotes (a string) or None",
        "list of N numbers",
    }
    found = []
    for path in sorted(Path(course.__file__).parent.rglob("*.py")):
        if path.name == "forms.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and type(node.value) is str and node.value in spelled:
                found.append(f"{path.name}: {node.value!r}")
    assert found == []


# (the student's plain answer, torch's plain value, whether it is right), by hand
RIGHT = [
    (2, 2.0, True),
    (2.0000001, 2, True),
    (2.1, 2, False),
    (True, 1, False),
    (1, True, False),
    (None, None, True),
    (0, None, False),
    (False, False, True),
    (0, False, False),
    ("AddBackward0", "AddBackward0", True),
    ("addbackward0", "AddBackward0", False),
    (None, "AddBackward0", False),
    ([1, 2.5], [1, 2.5], True),
    ([1, 2], [1, 2, 3], False),
    ((1, 2), [1, 2], False),
    (NAN, NAN, False),
]


@pytest.mark.parametrize(("answer", "expected", "right"), RIGHT, ids=repr)
def test_the_judge_and_plain_nbgrader_agree_on_what_is_right(answer, expected, right):
    marks = Marks()
    marks.value("x", answer, expected, "a hint")
    assert matches(answer, expected, TOLERANCE) is right
    assert (marks.earned == 1) is right
