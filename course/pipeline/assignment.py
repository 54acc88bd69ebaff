"""The instructor's source notebook -> the assignment model the other stages use.

Conventions (checked here, with the cell named in every error):
- a locked code cell `setup` with the imports the exercises need;
- per question `<stem>`: a solution cell `answer_<stem>` that assigns the answer names (and defines any
  function answers), a locked public check cell `form_<stem>` that names every answer and its form
  (`check_form(name="number", ...)`), and a grade cell `test_<stem>` whose visible part repeats that check
  and whose hidden tests score the answers with `Marks`.

`load_assignment` reads the instructor's source; `released_assignment` builds the same model (without the
answer key and hidden tests, which it never has) from a released notebook, for the student's self-check.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course.core.cell_metadata import NbgraderCell, nbgrader_cell
from course.core.config import AssignmentPaths, AssignmentSettings, CourseConfig
from course.core.errors import ConfigError, SourceNotebookError, SubmissionError
from course.core.syntax import parse_python
from course.forms import FUNCTION
from course.pipeline.content import EXERCISES_FILE, NO_CONTENT, Content, load_content
from course.pipeline.graph_chain import check_graphs

SOLUTION_BEGIN = "### BEGIN SOLUTION"
SOLUTION_END = "### END SOLUTION"
HIDDEN_BEGIN = "### BEGIN HIDDEN TESTS"
HIDDEN_END = "### END HIDDEN TESTS"


@dataclass(frozen=True)
class Question:
    id: str
    title: str
    points: float
    answer_cell_id: str
    form_cell_id: str
    test_cell_id: str
    answer_names: tuple[str, ...]
    function_names: tuple[str, ...]
    test_source: str
    form_source: str
    forms: tuple[tuple[str, str], ...] = ()  # (answer, the form its public check asks for), in order


def _question(
    stem: str, title: str, points: float, forms: dict[str, str], test_source: str, form_source: str
) -> Question:
    """The question of the cells `answer_<stem>`, `form_<stem>` and `test_<stem>`, whose answers are those its
    public check names (`forms`)."""
    names, functions = _checked_names(forms)
    return Question(
        id=stem,
        title=title,
        points=points,
        answer_cell_id=f"answer_{stem}",
        form_cell_id=f"form_{stem}",
        test_cell_id=f"test_{stem}",
        answer_names=names,
        function_names=functions,
        test_source=test_source,
        form_source=form_source,
        forms=tuple(forms.items()),
    )


@dataclass(frozen=True)
class Assignment:
    name: str
    notebook_path: Path
    setup_source: str
    questions: tuple[Question, ...]
    locked_sources: dict[str, str]
    default_params: dict[str, Any]
    content: Content = NO_CONTENT  # numbers' variants, chain tables, misconceptions: source/<name>/exercises.py

    @property
    def max_score(self) -> float:
        return sum(q.points for q in self.questions)

    @property
    def answer_names(self) -> tuple[str, ...]:
        return tuple(name for q in self.questions for name in q.answer_names)

    @property
    def function_names(self) -> tuple[str, ...]:
        return tuple(name for q in self.questions for name in q.function_names)

    @functools.cached_property
    def released_sources(self) -> dict[str, str]:
        """The text students receive for each locked or test cell (hidden tests removed)."""
        return {
            grade_id: strip_region(source, HIDDEN_BEGIN, HIDDEN_END) for grade_id, source in self.locked_sources.items()
        }

    def question_by_answer_cell(self, grade_id: str) -> Question:
        return next(q for q in self.questions if q.answer_cell_id == grade_id)


def nbgrader_meta(cell: dict[str, Any]) -> dict[str, Any]:
    """A cell's nbgrader metadata as the instructor's own notebook has it, or {} when it is absent or not a
    mapping. A student's notebook is read through `cell_metadata.nbgrader_cell`, which checks every field."""
    metadata = cell.get("metadata")
    meta = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    return meta if isinstance(meta, dict) else {}


def _split_regions(source: str, begin: str, end: str) -> tuple[list[str], list[str]]:
    """(lines outside, lines strictly inside) the begin/end marker regions; marker lines belong to neither."""
    outside: list[str] = []
    inside: list[str] = []
    within = False
    for line in source.splitlines():
        if begin in line:
            within = True
        elif end in line:
            within = False
        else:
            (inside if within else outside).append(line)
    return outside, inside


def strip_region(source: str, begin: str, end: str) -> str:
    """The source with the lines between the begin/end markers (and the markers) removed."""
    return "\n".join(_split_regions(source, begin, end)[0])


def region_lines(source: str, begin: str, end: str) -> list[str]:
    """The lines strictly between the begin/end markers."""
    return _split_regions(source, begin, end)[1]


def _parse(source: str, where: str) -> ast.Module:
    """A cell's syntax tree, or a SourceNotebookError that says why there is none (a student's copy of a cell,
    read by the self-check, may be nested deeper than the parser goes: RecursionError, MemoryError)."""
    try:
        return parse_python(source)
    except SyntaxError as error:
        raise SourceNotebookError(f"{where}: not valid Python ({error.msg}, line {error.lineno})") from None
    except (RecursionError, MemoryError):
        raise SourceNotebookError(f"{where}: nested too deeply for Python's parser") from None


def _assigned_names(source: str, where: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    tree = _parse(source, where)
    names: list[str] = []
    functions: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id not in names:
                    names.append(target.id)
        elif isinstance(node, ast.FunctionDef) and node.name not in functions:
            functions.append(node.name)
    return tuple(names), tuple(functions)


def _check_locked(cell: dict[str, Any], where: str, why: str) -> None:
    """A cell the grader restores from the source must be locked (read-only) in nbgrader's metadata: nbgrader's
    autograde puts back only locked and graded cells, and the grader's copy of them is the locked ones."""
    if not nbgrader_meta(cell).get("locked"):
        raise SourceNotebookError(
            f"{where}: the cell is not locked (nbgrader: read-only), so {why}; make it "
            "read-only (nbgrader's Create Assignment toolbar: Read-only; metadata "
            '"locked": true), then release again'
        )


def _template_answers(source: str, where: str, checked: dict[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(value answers, function answers) an answer cell asks for: what its lines outside the solution region
    (the template students receive) assign or define. Every answer its form check names must have a template line
    there and be set by the answer key; an answer assigned only inside the region would vanish from the release."""
    _parse(source, where)  # the cell as the answer key writes it
    released = strip_region(source, SOLUTION_BEGIN, SOLUTION_END)
    try:
        names, functions = _assigned_names(released, where)
    except SourceNotebookError as error:
        raise SourceNotebookError(
            f"{error} once its solution region is removed, as students receive it; keep "
            f"whole statements outside {SOLUTION_BEGIN} / {SOLUTION_END}"
        ) from None
    for name, shape in checked.items():
        if shape == FUNCTION and name not in functions:
            raise SourceNotebookError(
                f"{where}: the solution cell has no `def {name}(...): return ...` template for answer {name!r} "
                f"outside its {SOLUTION_BEGIN} region, so the released cell would not ask for it; add the template "
                f"above {SOLUTION_BEGIN}, then release again"
            )
        if shape != FUNCTION and name not in names:
            raise SourceNotebookError(
                f"{where}: the solution cell has no `{name} = ...` line for answer {name!r} outside its "
                f"{SOLUTION_BEGIN} region, so the released cell would not ask for it; add `{name} = ...` above "
                f"{SOLUTION_BEGIN}, then release again"
            )
    if not names and not functions:
        raise SourceNotebookError(
            f"{where}: assigns no answer variable outside its {SOLUTION_BEGIN} region (a "
            "`name = ...` line for each answer)"
        )
    key = region_lines(source, SOLUTION_BEGIN, SOLUTION_END)
    try:
        key_names, key_functions = _assigned_names(textwrap.dedent("\n".join(key)), where)
    except SourceNotebookError:
        return names, functions  # a region inside a block (a function's body): the proof's scores judge it
    for name in (*names, *functions):
        if name in checked and name not in key_names + key_functions:
            raise SourceNotebookError(
                f"{where}: the answer key (between {SOLUTION_BEGIN} and {SOLUTION_END}) does not set answer "
                f"{name!r}, so the source's own solution would leave it `...`; set it there, then release again"
            )
    return names, functions


FORM_CHECK = "check_form"


def form_checks(source: str, where: str) -> dict[str, str]:
    """The answers a form cell checks, in order: name -> form ("" when the form is computed, as in an
    f-string). The names are the keywords of its top-level `check_form(...)` calls."""
    tree = _parse(source, where)
    forms: dict[str, str] = {}
    for node in tree.body:
        call = node.value if isinstance(node, ast.Expr) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == FORM_CHECK):
            continue
        if call.args:
            raise SourceNotebookError(
                f'{where}: {FORM_CHECK} takes the answers as keywords, e.g. {FORM_CHECK}(answer_name="number")'
            )
        for keyword in call.keywords:
            if keyword.arg is None or keyword.arg == "quiet":
                continue
            value = keyword.value
            forms[keyword.arg] = value.value if isinstance(value, ast.Constant) and type(value.value) is str else ""
    return forms


def _checked_names(forms: dict[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(value answers, function answers) of a form cell's checks."""
    return (
        tuple(name for name, form in forms.items() if form != FUNCTION),
        tuple(name for name, form in forms.items() if form == FUNCTION),
    )


def cell_text(cell: dict[str, Any]) -> str:
    """A notebook cell's source as one string (nbformat allows a list of lines)."""
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _check_markers(cell: dict[str, Any], index: int, cells: list[dict[str, Any]], path: Path) -> None:
    """Every BEGIN marker is closed by its END, in a cell of the kind nbgrader clears (a solution region in
    a solution cell, hidden tests in a graded cell). nbgrader refuses the notebook otherwise, with a
    traceback that names neither the cell nor the question."""
    meta = nbgrader_meta(cell)
    for begin, end, flag, home in (
        (SOLUTION_BEGIN, SOLUTION_END, "solution", "answer"),
        (HIDDEN_BEGIN, HIDDEN_END, "grade", "test"),
    ):
        problem = _unbalanced(cell_text(cell), begin, end)
        advice = f"put {end} after the region's last line"
        if not problem and begin in cell_text(cell) and not meta.get(flag):
            problem = f"its {begin} region is in a cell that is not a {flag} cell, which nbgrader refuses"
            advice = f"move the region into the question's {home} cell"
        if problem:
            grade_id = meta.get("grade_id", "no grade_id")
            title = _title_before(cells, index) or "before the first heading"
            raise SourceNotebookError(
                f"{path}: cell {index} ({grade_id}, question {title!r}): {problem}; {advice}, then release again"
            )


def _unbalanced(source: str, begin: str, end: str) -> str:
    """What is wrong with the begin/end markers of one cell ("" when they pair up)."""
    opened: int | None = None
    for number, line in enumerate(source.splitlines(), start=1):
        if begin in line:
            if opened is not None:
                return f"{begin} on line {number} comes before the {end} of line {opened}'s region"
            opened = number
        elif end in line:
            if opened is None:
                return f"{end} on line {number} has no {begin} before it"
            opened = None
    return f"{begin} on line {opened} has no {end}" if opened is not None else ""


def _title_before(cells: list[dict[str, Any]], index: int) -> str:
    for cell in reversed(cells[:index]):
        if cell.get("cell_type") == "markdown":
            match = re.search(r"^#+\s*(.+)$", cell_text(cell), re.MULTILINE)
            if match:
                return match.group(1).strip()
    return ""


NUMBERS_CELL = "numbers"  # the grade id of the locked cell that holds the exercises' numbers, `P = {...}`


# `by_id` maps a cell's grade id to its index and cell; its keys are Any because the authoring kit's map also
# holds the cells without a grade id (under None), and only NUMBERS_CELL is looked up.
def numbers_cell_values(by_id: Mapping[Any, tuple[int, dict[str, Any]]], path: Path) -> dict[str, Any]:
    """The exercises' numbers: the literal dict `P = {...}` of the locked `numbers` cell ({} without one)."""
    if NUMBERS_CELL not in by_id:
        return {}
    index, cell = by_id[NUMBERS_CELL]
    where = f"{path}: cell {index} (numbers)"
    try:
        tree = parse_python(cell_text(cell))
        assignment = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "P")
        numbers = ast.literal_eval(assignment.value)
    except (SyntaxError, StopIteration, ValueError, RecursionError, MemoryError) as error:
        raise SourceNotebookError(f"{where}: must assign a literal dict of numbers to P ({error})") from None
    if not isinstance(numbers, dict) or not all(isinstance(v, int | float) for v in numbers.values()):
        raise SourceNotebookError(f"{where}: P must map names to numbers")
    return numbers


def load_assignment(path: Path, name: str, exercises: Path | None = None) -> Assignment:
    """Read and check the source notebook of assignment `name`, and its exercises module (`exercises`, by
    default exercises.py beside the notebook; none is fine)."""
    cells = _read_cells(path)
    by_id = _cells_by_grade_id(cells, path)
    _check_regions_and_locks(cells, by_id, path)
    locked_sources = {
        grade_id: cell_text(cell)
        for grade_id, (_, cell) in by_id.items()
        if nbgrader_meta(cell).get("locked") or nbgrader_meta(cell).get("grade")
    }
    questions = [
        _read_question(grade_id, index, cell, cells, by_id, path)
        for grade_id, (index, cell) in by_id.items()
        if grade_id.startswith("test_")
    ]
    if not questions:
        raise SourceNotebookError(f"{path}: no graded question (no cell with a grade_id starting with 'test_')")
    _check_each_answer_once(questions, path)
    content = load_content(exercises or path.parent / EXERCISES_FILE)
    default_params = numbers_cell_values(by_id, path)
    _check_numbers_fit(content, default_params, questions, path)
    return Assignment(
        name=name,
        notebook_path=path,
        default_params=default_params,
        content=content,
        setup_source=cell_text(by_id["setup"][1]),
        questions=tuple(questions),
        locked_sources=locked_sources,
    )


def _read_cells(path: Path) -> list[dict[str, Any]]:
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
        cells: list[dict[str, Any]] = notebook["cells"]
        return cells
    except FileNotFoundError:
        raise SourceNotebookError(f"{path}: the source notebook does not exist") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise SourceNotebookError(f"{path}: cannot be read as a notebook ({error})") from None


def _cells_by_grade_id(cells: list[dict[str, Any]], path: Path) -> dict[str, tuple[int, dict[str, Any]]]:
    """grade_id -> (index, cell): each id a well-formed one, and used once."""
    by_id: dict[str, tuple[int, dict[str, Any]]] = {}
    for index, cell in enumerate(cells):
        damaged = nbgrader_cell(cell).damaged_id
        if damaged:
            raise SourceNotebookError(
                f"{path}: cell {index}: its nbgrader grade_id is {damaged}; give it an id of "
                "letters, digits, _ and - (nbgrader's rule)"
            )
        grade_id = nbgrader_meta(cell).get("grade_id")
        if grade_id:
            if grade_id in by_id:
                raise SourceNotebookError(f"{path}: cell {index}: grade_id {grade_id!r} is used twice")
            by_id[grade_id] = (index, cell)
    return by_id


def _check_regions_and_locks(
    cells: list[dict[str, Any]], by_id: dict[str, tuple[int, dict[str, Any]]], path: Path
) -> None:
    """Every cell's marked regions, and the locked cells every answer is graded against (setup, numbers)."""
    for index, cell in enumerate(cells):
        _check_markers(cell, index, cells, path)
    if "setup" not in by_id:
        raise SourceNotebookError(f"{path}: no locked code cell with grade_id 'setup' (the imports of the exercises)")
    for locked_id in ("setup", NUMBERS_CELL):
        if locked_id in by_id:
            _check_locked(
                by_id[locked_id][1],
                f"{path}: cell {by_id[locked_id][0]} ({locked_id})",
                "students could change what every answer is graded against",
            )


def _read_question(
    grade_id: str,
    index: int,
    cell: dict[str, Any],
    cells: list[dict[str, Any]],
    by_id: dict[str, tuple[int, dict[str, Any]]],
    path: Path,
) -> Question:
    """The question of the test cell `grade_id`, with its answer cell and its (locked) form cell."""
    stem = grade_id.removeprefix("test_")
    where = f"{path}: cell {index} ({grade_id})"
    meta = nbgrader_meta(cell)
    if not meta.get("grade") or cell.get("cell_type") != "code":
        raise SourceNotebookError(f"{where}: a test_ cell must be an autograded code cell with points")
    if HIDDEN_BEGIN not in cell_text(cell):
        raise SourceNotebookError(f"{where}: has no {HIDDEN_BEGIN} region; the tests would be shown to students")
    # nbgrader's "Autograder tests" cells are read-only: an unlocked one is a cell students may rewrite (its
    # visible check with it), and nbgrader's own tools treat it as theirs.
    _check_locked(cell, where, "students could edit its check and nbgrader would treat it as theirs")
    answer_id, form_id = f"answer_{stem}", f"form_{stem}"
    for needed in (answer_id, form_id):
        if needed not in by_id:
            raise SourceNotebookError(f"{where}: its question has no cell with grade_id {needed!r}")
    answer_index, answer_cell = by_id[answer_id]
    if not nbgrader_meta(answer_cell).get("solution"):
        raise SourceNotebookError(f"{path}: cell {answer_index} ({answer_id}): must be a solution cell")
    if SOLUTION_BEGIN not in cell_text(answer_cell):
        raise SourceNotebookError(
            f"{path}: cell {answer_index} ({answer_id}): has no {SOLUTION_BEGIN} region holding the answer key"
        )
    answer_where = f"{path}: cell {answer_index} ({answer_id})"
    form_index, form_cell = by_id[form_id]
    _check_locked(form_cell, f"{path}: cell {form_index} ({form_id})", "students could edit the check")
    names, functions = _template_answers(
        cell_text(answer_cell),
        answer_where,
        form_checks(
            strip_region(cell_text(form_cell), HIDDEN_BEGIN, HIDDEN_END), f"{path}: cell {form_index} ({form_id})"
        ),
    )
    # The self-check knows a question's answers only from its checks (students have no answer key):
    # both checks must name exactly the answers the answer cell asks for.
    declared: dict[str, str] = {}
    for checked_id, checked_index, checked_source in (
        (form_id, form_index, cell_text(form_cell)),
        (grade_id, index, cell_text(cell)),
    ):
        checked_where = f"{path}: cell {checked_index} ({checked_id})"
        checked = form_checks(strip_region(checked_source, HIDDEN_BEGIN, HIDDEN_END), checked_where)
        if _checked_names(checked) != (names, functions):
            raise SourceNotebookError(_mismatch(checked_where, answer_id, checked, names + functions))
        declared = declared or checked  # the form cell's
    return _question(
        stem,
        _title_before(cells, answer_index) or stem,
        float(meta.get("points", 0)),
        declared,
        cell_text(cell),
        cell_text(form_cell),
    )


def _mismatch(where: str, answer_id: str, checked: dict[str, str], asked: tuple[str, ...]) -> str:
    """Why a check's answers differ from those the answer cell asks for, named as what it is: a missing template line,
    an answer the check leaves out, a form, or (only when the names agree) their order."""
    found = tuple(checked)
    lacking = [name for name in found if name not in asked]
    if lacking:
        return (
            f"{where}: its {FORM_CHECK}(...) checks {', '.join(lacking)}, but the solution cell {answer_id} has no "
            f"template line for {'it' if len(lacking) == 1 else 'them'} outside its {SOLUTION_BEGIN} region "
            f"({', '.join(f'`{name} = ...`' for name in lacking)}), so the released cell would not ask for "
            f"{'it' if len(lacking) == 1 else 'them'}; add the line above {SOLUTION_BEGIN} in {answer_id}, or "
            f"remove {'it' if len(lacking) == 1 else 'them'} from the check, then release again"
        )
    left_out = [name for name in asked if name not in found]
    if left_out:
        return (
            f"{where}: its {FORM_CHECK}(...) does not check {', '.join(left_out)}, which the solution cell "
            f"{answer_id} asks for; add {', '.join(name + '=<its form>' for name in left_out)} to it (in the answer "
            "cell's order), then release again"
        )
    if sorted(found) == sorted(asked) and found != asked:
        return (
            f"{where}: its {FORM_CHECK}(...) must name the answers of {answer_id} in the order the answer cell asks "
            f"for them: expected {', '.join(asked)}; found {', '.join(found)}"
        )
    return (
        f"{where}: its {FORM_CHECK}(...) must name the answers of {answer_id} as keywords with their form "
        '("function" for a function, and only for a `def` template): expected '
        + ", ".join(asked)
        + "; found "
        + (", ".join(f"{name}={form!r}" for name, form in checked.items()) or "none")
    )


def _check_each_answer_once(questions: list[Question], path: Path) -> None:
    seen: dict[str, str] = {}
    for question in questions:
        for answer_name in question.answer_names + question.function_names:
            if answer_name in seen:
                raise SourceNotebookError(
                    f"{path}: answer {answer_name!r} is assigned in both {seen[answer_name]} "
                    f"and {question.answer_cell_id}"
                )
            seen[answer_name] = question.answer_cell_id


def _check_numbers_fit(content: Content, default_params: dict[str, Any], questions: list[Question], path: Path) -> None:
    """The numbers cell's P against the exercises module: its constraints, and each function answer's point."""
    problems = content.constraint_violations(default_params) if default_params else []
    if problems:
        raise SourceNotebookError(f"{path}: the numbers cell's P does not fit the exercises ({'; '.join(problems)})")
    if content.graphs:  # a chain table read from torch's graph: checked here, with the notebook's numbers
        check_graphs(content, {question.id: question.answer_names for question in questions}, default_params)
    function_answers = {name for question in questions for name in question.function_names}
    for function, number in content.function_points.items():
        if function not in function_answers or number not in default_params:
            raise SourceNotebookError(
                f"{content.path}: FUNCTION_POINTS maps {function!r} to {number!r}, but "
                + (
                    f"{function!r} is no function answer of {path.name}"
                    if function not in function_answers
                    else f"the numbers cell's P has no {number!r}"
                )
                + "; name a function answer and a number of P"
            )


def load_course_assignment(config: CourseConfig, name: str | None = None) -> Assignment:
    """The course's assignment `name` (the first when None): its source notebook and exercises module."""
    return load_settings_assignment(config, config.assignment(name))


def load_settings_assignment(config: CourseConfig, settings: AssignmentSettings) -> Assignment:
    """The course's assignment whose settings are already looked up (run_context.open_run): its source notebook
    and exercises module."""
    paths = AssignmentPaths(config.root, settings)
    exercises = paths.exercises_module
    assignment = load_assignment(paths.source_notebook, settings.name, exercises)
    if config.variants and assignment.default_params and assignment.content.derive is None:
        # Refused here, where the assignment is loaded (release, grade, serve, autograder build), not at grading
        # time: there it would be every submission's autograder_error, and a release would stop half done.
        raise ConfigError(
            f"{exercises}: variants: true, but assignment {settings.name!r} has numbers (its numbers cell's P) and "
            "this file defines no derive(rng) to give each student theirs; add derive(rng) there (docs/authoring.md, "
            "per-student variants; a kit assignment declares ranges with vary= and writes VARIANTS = "
            "variants(EXERCISES)), or set variants: false in "
            "source/course.yaml, or remove the assignment from that file's assignments:"
        )
    return assignment


def is_text(source: object) -> bool:
    """Whether a cell's `source` is text as nbformat has it: a string or a list of strings."""
    return type(source) is str or (type(source) is list and all(type(line) is str for line in source))


def released_assignment(notebook: dict[str, Any], path: Path, name: str) -> Assignment:
    """The assignment as a released notebook (or a student's copy of one) shows it, for the self-check.

    Built from the notebook's nbgrader metadata and locked cells alone: the setup and numbers cells, the
    questions' test cells (their points; the release holds no hidden test), and each question's answers
    as its form cell names them (the test cell's visible check when the form cell is gone). It has no
    answer key and never needs one; `test_source` is the visible part only."""
    cells = notebook.get("cells")
    if type(cells) is not list:
        raise SubmissionError(f"{path.name}: not a notebook ('cells' is not a list)")
    # A cell that is not a mapping with text is left out here: reading the submission names it.
    cells = [cell if type(cell) is dict and is_text(cell.get("source", "")) else {} for cell in cells]
    by_id: dict[str, tuple[int, dict[str, Any]]] = {}
    metas = [nbgrader_cell(cell) for cell in cells]  # the student's copy: every field checked (cell_metadata.py)
    for index, (cell, meta) in enumerate(zip(cells, metas, strict=True)):
        if meta.grade_id is not None and meta.grade_id not in by_id:
            by_id[meta.grade_id] = (index, cell)
    if "setup" not in by_id:
        raise SubmissionError(
            f"{path.name}: the course's setup cell is missing; start again from the released "
            "notebook and copy your answers in"
        )
    questions = _released_questions(cells, by_id, metas, path)
    if not questions:
        raise SubmissionError(
            f"{path.name}: no graded question in this notebook (no cell with a grade_id "
            "starting with 'test_'); is it the notebook released for the course?"
        )
    locked_sources = {
        grade_id: cell_text(cell) for grade_id, (index, cell) in by_id.items() if metas[index].locked_or_graded
    }
    try:
        numbers = numbers_cell_values(by_id, path)
    except SourceNotebookError:
        numbers = {}  # an edited numbers cell: it runs as the student's own code
    return Assignment(
        name=name,
        notebook_path=path,
        setup_source=cell_text(by_id["setup"][1]),
        questions=tuple(questions),
        locked_sources=locked_sources,
        default_params=numbers,
    )


def _released_questions(
    cells: list[dict[str, Any]],
    by_id: dict[str, tuple[int, dict[str, Any]]],
    metas: list[NbgraderCell],
    path: Path,
) -> list[Question]:
    """The released notebook's questions, one for each graded code cell whose grade_id starts with 'test_'."""
    questions = []
    for grade_id, (index, cell) in by_id.items():
        meta = metas[index]
        if not grade_id.startswith("test_") or not meta.grade or cell.get("cell_type") != "code":
            continue
        stem = grade_id.removeprefix("test_")
        form_id, answer_id = f"form_{stem}", f"answer_{stem}"
        checks_at = by_id.get(form_id, (index, cell))
        where = f"{path.name}: cell {checks_at[0] + 1} ({form_id if form_id in by_id else grade_id})"
        try:
            declared = form_checks(cell_text(checks_at[1]), where)
        except SourceNotebookError:
            declared = {}
        if not declared:
            raise SubmissionError(
                f"{where}: no {FORM_CHECK}(...) naming the answers; was the cell edited? "
                "Start again from the released notebook and copy your answers in"
            )
        title_at = by_id.get(answer_id, (index, cell))[0]
        questions.append(
            _question(
                stem,
                _title_before(cells, title_at) or stem,
                float(meta.points or 0),
                declared,
                cell_text(cell),
                cell_text(by_id[form_id][1]) if form_id in by_id else "",
            )
        )
    return questions
