"""What a student reads is the number graded: the numbers the Markdown of a released notebook shows, checked against
the numbers of P its hidden tests grade with.

A student works from the numbers the question shows. A `{{placeholder}}` prints its number exactly
(course/pipeline/variants.py's `show`: the shortest text that reads back as the same float), but an author may also
type a number into the prose or a table ("b = 6.88137", "| rate | 0.1 |"): when it is not the number the hidden tests
use, within the grading tolerance, a student who works honestly from it loses the mark. `shown_problems` finds, in
every Markdown cell:

- placeholder: a `{{name}}` of P whose shown text is not its number (and a `{{name:spec}}`, which nothing fills:
  placeholders take no format, they always print the exact value; and a `{{name}}` that is no number of P);
- prose: a numeric literal right after a named number (`b = 6.88137`, `**x = 3**`, `rate: 0.125`, `b ≈ 6.88`);
- table: a row `| b | 6.88137 |`, or a one-row table whose header names the number above it.

A named number is a key of P (`k`), or, in the cells of a question, a key its test cell reads and its short forms
(`demo_b` -> `b`, `my_goal` -> `goal`). Each problem is one sentence naming where (the notebook, the cell,
the question or kit exercise, a student's copy), the shown text and the graded value. `kit write`, `review` and
`release` refuse such a notebook (course/authoring/review.py, release.py).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from course.authoring.errors import AuthoringError
from course.core.errors import ReleaseError
from course.forms import matches
from course.pipeline.assignment import Assignment, Question, cell_text, nbgrader_meta
from course.pipeline.variants import PLACEHOLDER, show

P_KEY = re.compile(r"""P\[\s*["']([^"']+)["']\s*\]""")  # a number of P as a test cell reads it: P["gate_x"]
NUMBER = r"[-−+]?(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][-−+]?\d+)?"
LONE_NUMBER = re.compile(rf"[`*$]*({NUMBER})[`*$]*")
# A name, then = ≈ or :, then a literal that stands alone (bold or not): not the start of an expression (`x = 2x`,
# `q = 3 + y`, `b = 2**3`).
NAMED = re.compile(
    rf"(?<![\w.\\])([A-Za-z_][A-Za-z0-9_]*)[`*$]*[ \t]*(=|≈|:)[ \t]*[`*$]*({NUMBER})"
    r"(?![\w·×/^(²³]|\.\d|\*+[\w(])(?![ \t]*[-−+*/·×^][ \t]*[\w(.]|[ \t]+\*\*[ \t]*[\w(.])"
)
FORMATTED = re.compile(r"\{\{\s*(\w+)\s*[:!][^{}\n]*\}\}")  # {{b:.5g}}, {{b!r}}: a placeholder with a format
SEPARATOR = re.compile(r"\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?")
EMPHASIS = "`*$_ "
KIT_CELL = re.compile(r"kit-([a-z0-9-]+)-question")


def shown_problems(
    cells: Sequence[dict[str, Any]],
    questions: Sequence[Question],
    params: Mapping[str, Any],
    tolerance: float,
    *,
    notebook: Path,
    exercises: Path | None = None,
    copy_of: str | None = None,
) -> list[str]:
    """One sentence per number a Markdown cell of `cells` (the released notebook, placeholders not yet filled) shows
    otherwise than `params` holds it, beyond `tolerance`. `exercises`: the kit's module, named for a kit question;
    `copy_of`: the student whose personalised copy shows `params`."""
    numbers = {key: value for key, value in params.items() if type(value) in (int, float)}
    owner = _owners(cells, questions)
    problems: list[str] = []
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "markdown":
            continue
        question = owner.get(index)
        at = _where(index, cell, question, notebook, exercises, copy_of)
        names = _names(question, numbers)
        kit = question.id if question and exercises and KIT_CELL.fullmatch(str(cell.get("id", ""))) else None
        problems += _placeholders(cell_text(cell), params, numbers, tolerance, at, kit)
        problems += _literals(cell_text(cell), names, numbers, tolerance, at, kit)
    return problems


def _owners(cells: Sequence[dict[str, Any]], questions: Sequence[Question]) -> dict[int, Question]:
    """Markdown cell index -> the question it belongs to: the first whose test cell comes after it."""
    at = {nbgrader_meta(cell).get("grade_id"): index for index, cell in enumerate(cells)}
    tests = sorted((at[question.test_cell_id], question) for question in questions if question.test_cell_id in at)
    owner: dict[int, Question] = {}
    for index in range(len(cells)):
        following = [question for test_at, question in tests if test_at > index]
        if following:
            owner[index] = following[0]
    return owner


def _where(
    index: int,
    cell: Mapping[str, Any],
    question: Question | None,
    notebook: Path,
    exercises: Path | None,
    copy_of: str | None,
) -> str:
    kit = KIT_CELL.fullmatch(str(cell.get("id", "")))
    if kit is not None and exercises is not None and question is not None:
        place = f"{exercises}: exercise {question.id!r}, its question (cell {index} of {notebook.name})"
    elif question is not None:
        place = f"{notebook}: cell {index} (question {question.title!r})"
    else:
        place = f"{notebook}: cell {index}"
    return f"{place}, in {copy_of}'s personalised copy" if copy_of else place


def _names(question: Question | None, numbers: Mapping[str, Any]) -> dict[str, list[str]]:
    """The names a number goes by in a cell: every key of P, and the short forms of the keys its question reads."""
    names: dict[str, list[str]] = {key: [key] for key in numbers}
    read = dict.fromkeys(P_KEY.findall(question.test_source)) if question is not None else {}
    for key in read:
        if key not in numbers:
            continue
        parts = key.split("_")
        for start in range(1, len(parts)):
            short = "_".join(parts[start:])
            if short and short not in numbers:
                names.setdefault(short, []).append(key)
    return names


def _placeholders(
    text: str, params: Mapping[str, Any], numbers: Mapping[str, Any], tolerance: float, at: str, kit: str | None
) -> list[str]:
    problems = []
    for found in FORMATTED.finditer(text):
        name = found.group(1)
        problems.append(
            f"{at}: the placeholder {found.group(0)} has a format, which nothing fills: students would read it as "
            f"it is; write {{{{{_own(name, kit)}}}}}, which prints the exact value"
            + (f" ({name} = {show(numbers[name])})" if name in numbers else "")
        )
    for found in PLACEHOLDER.finditer(text):
        name = found.group(1)
        if name not in params:
            problems.append(
                f"{at}: the placeholder {found.group(0)} is no number of the numbers cell's P, so students would "
                "read it as it is; fix the name or add the number to P"
            )
            continue
        if name not in numbers:
            continue
        shown = show(numbers[name])
        if not _same(shown, numbers[name], tolerance):
            said = f"the placeholder {found.group(0)} shows {shown}"
            problems.append(_sentence(at, said, shown, name, numbers, tolerance))
    return problems


def _literals(
    text: str, names: Mapping[str, list[str]], numbers: Mapping[str, Any], tolerance: float, at: str, kit: str | None
) -> list[str]:
    """Literals right after a named number, in the prose and in tables, that are not that number."""
    problems = []
    lines = text.splitlines()
    for line in lines:
        where = "the table" if line.lstrip().startswith("|") else "the prose"
        for found in NAMED.finditer(line):
            name, sign, literal = found.groups()
            if name in names:
                said = f"{where} shows {name} {sign} {literal}"
                problems += _check(at, said, literal, names[name], numbers, tolerance, kit)
    for name, literal in _table_pairs(lines, names):
        problems += _check(at, f"the table shows {name} as {literal}", literal, names[name], numbers, tolerance, kit)
    return problems


def literals_of(text: str, names: set[str]) -> list[tuple[str, str]]:
    """(name, what is shown) of each literal `text` shows next to one of `names`, in its prose or its tables."""
    lines = text.splitlines()
    found = [(m.group(1), m.group(0)) for line in lines for m in NAMED.finditer(line) if m.group(1) in names]
    return found + [(name, f"| {name} | {literal} |") for name, literal in _table_pairs(lines, dict.fromkeys(names))]


def _table_pairs(lines: Sequence[str], names: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, literal) of each table row `| name | literal |` and of a one-row table under a header of names."""
    pairs: list[tuple[str, str]] = []
    tables: list[list[list[str]]] = []
    rows: list[list[str]] = []
    for line in [*lines, ""]:
        if line.lstrip().startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            tables.append(rows)
            rows = []
    for table in tables:
        body = [row for row in table if not SEPARATOR.fullmatch("|".join(row))]
        header = table[0] if len(table) > 1 and SEPARATOR.fullmatch("|".join(table[1])) else None
        for row in body:
            for left, right in itertools.pairwise(row):
                literal = LONE_NUMBER.fullmatch(right)
                if left.strip(EMPHASIS) in names and literal:
                    pairs.append((left.strip(EMPHASIS), literal.group(1)))
        data = body[1:] if header is not None else []
        if header is not None and len(data) == 1:
            for head, value in zip(header, data[0], strict=False):
                literal = LONE_NUMBER.fullmatch(value)
                if head.strip(EMPHASIS) in names and literal:
                    pairs.append((head.strip(EMPHASIS), literal.group(1)))
    return pairs


def _check(
    at: str, said: str, literal: str, keys: list[str], numbers: Mapping[str, Any], tolerance: float, kit: str | None
) -> list[str]:
    if any(_same(literal, numbers[key], tolerance) for key in keys):
        return []
    fix = f"show it with {{{{{_own(keys[0], kit)}}}}}"
    return [_sentence(at, said, literal, keys[0], numbers, tolerance, fix)]


def _own(key: str, kit: str | None) -> str:
    """The placeholder of a number as the author writes it: a kit question names the exercise's own (`b`)."""
    return key[len(kit) + 1 :] if kit and key.startswith(f"{kit}_") else key


def _read(text: str) -> float | None:
    try:
        return float(text.replace("−", "-"))
    except ValueError:
        return None


def _same(text: str, value: float, tolerance: float) -> bool:
    read = _read(text)
    return read is not None and matches(read, value, tolerance)


def _sentence(
    at: str, said: str, text: str, key: str, numbers: Mapping[str, Any], tolerance: float, fix: str = ""
) -> str:
    value, read = numbers[key], _read(text)
    off = f"{abs(read - value):.2g} off, " if read is not None else ""
    return (
        f"{at}: {said}, but the hidden tests grade with P[{key!r}] = {value!r} ({off}beyond the tolerance "
        f"{tolerance:g}): a student who works from the number shown loses the mark; "
        + (f"{fix}, which prints the exact value" if fix else "placeholders must print the exact value")
    )


MAX_LISTED = 10  # problems listed in one refusal


def refuse_shown(
    template: Mapping[str, Any],
    assignment: Assignment,
    tolerance: float,
    copies: Mapping[str, Mapping[str, Any]],
    release_notebook: Path,
) -> None:
    """Refuse a release whose notebook (nbgrader's output, placeholders not yet filled) shows, at the default numbers
    or in a student's personalised copy (`copies`: student id -> their numbers), a number other than the one graded."""
    found = template.get("cells")
    cells = [cell for cell in found if type(cell) is dict] if type(found) is list else []
    runs: list[tuple[Mapping[str, Any], str | None]] = [(assignment.default_params, None)]
    runs += [(params, student) for student, params in copies.items()]
    problems = [
        problem
        for params, student in runs
        for problem in shown_problems(
            cells,
            assignment.questions,
            params,
            tolerance,
            notebook=assignment.notebook_path,
            exercises=assignment.content.path,
            copy_of=student,
        )
    ]
    if problems:
        more = f"\n  (and {len(problems) - MAX_LISTED} more)" if len(problems) > MAX_LISTED else ""
        raise ReleaseError(
            f"{release_notebook} would show students numbers other than those graded (release/ was left as it "
            "was):\n  " + "\n  ".join(problems[:MAX_LISTED]) + more
        )


def refuse_written(
    notebook: Mapping[str, Any], assignment: Assignment, tolerance: float, notebook_path: Path, exercises_path: Path
) -> None:
    """Refuse what `kit write` would write (`notebook`, read back as `assignment`) when it shows a number other than the
    one graded: the source notebook is left as it was."""
    shown = shown_problems(
        notebook["cells"],
        assignment.questions,
        assignment.default_params,
        tolerance,
        notebook=notebook_path,
        exercises=exercises_path,
    )
    if shown:
        raise AuthoringError(
            f"{exercises_path}: the notebook written from it would show students numbers other than those graded, "
            f"so {notebook_path} was left as it was:\n  " + "\n  ".join(shown)
        )
