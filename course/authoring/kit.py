"""The authoring kit: one definition per exercise -> the source notebook's cells, always in the cell conventions.

An instructor writes each exercise once, in the assignment's exercises module (`source/<name>/exercises.py`),
as an `Exercise`: its title and question (Markdown), the numbers it is built from, the answers it asks for
(`Ask(name, form, points, hint, idea)`) and `build`, a plain function that builds the computation from those
numbers with torch and returns each answer's reference value by name:

    def gate(x, y, z):
        x, y, z = (torch.tensor(float(v), dtype=torch.float64, requires_grad=True) for v in (x, y, z))
        f = (x + y) * z
        f.backward()
        return {"gate_f": f, "gate_df_dx": x.grad, "gate_df_dy": y.grad, "gate_df_dz": z.grad}

    EXERCISES = [Exercise(id="gate", title="1. Two gates", question="... x = {{x}} ...", build=gate,
                          numbers={"x": -2, "y": 5, "z": -4}, answers=[Ask("gate_f", points=1, ...), ...])]

`write_cells` writes, per exercise, a Markdown question, the solution cell `answer_<id>` (a `name = ...`
template line per answer, then the answer key between the solution markers, computed by `build` itself), the
locked `form_<id>` check and the autograded `test_<id>` cell, whose hidden region is `build`'s own source, called
with the numbers of the locked `numbers` cell, and one `marks.value(...)` per answer. So the hidden test is the
definition, and no typo can separate the two. The exercise's numbers go in `P` as `<id>_<name>` (`gate_x`), and
`{{x}}` in its question becomes `{{gate_x}}`, which a personalised copy fills with the student's number.

Writing is idempotent (a second run changes nothing) and keeps every other cell of the notebook as it is:
hand-written exercises, their numbers, the setup cell. A cell the kit writes is found again by its nbgrader
grade id (or, for the question's Markdown, its cell id), and rewritten in place.

Chain tables: `GRAPHS = kit_graphs(EXERCISES)` (course/pipeline/graph_chain.py) reads each exercise's table from the
graph its `build` leaves (a build that calls backward() other than once gets none, and `kit write` says which
exercises get no table, and why); a hand-written `chain`, which `chains(EXERCISES)` gathers for `CHAINS`, overrides
the derived table.
"""

from __future__ import annotations

import copy
import inspect
import json
import keyword
import re
import tempfile
import textwrap
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course.authoring.draws import check_declaration, check_feasible
from course.authoring.draws import variants as variants  # an exercises module's VARIANTS = variants(EXERCISES)
from course.authoring.errors import AuthoringError
from course.authoring.ranges import Property, Range
from course.authoring.shown import literals_of, refuse_written
from course.core.errors import SourceNotebookError
from course.core.files import atomic_write_text, kept_mode
from course.forms import FUNCTION, NAMES, form, gap
from course.pipeline.assignment import (
    HIDDEN_BEGIN,
    HIDDEN_END,
    NUMBERS_CELL,
    SOLUTION_BEGIN,
    SOLUTION_END,
    cell_text,
    nbgrader_meta,
)
from course.pipeline.content import ChainStep

ID_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,39}")  # its cells' ids, kit-<id>-question, stay within nbformat's 64
RESERVED = frozenset({"P", "Marks", "marks", "references", "torch", "math"})  # names the kit's hidden tests use
PARTS = ("question", "answer", "form", "test")  # the cells the kit writes per exercise, in order
KIT_ID = re.compile(r"kit-[a-z0-9-]+-(question|answer|form|test)")
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")

# What the test cell's visible part and the hidden region say to a reader of the source (not to students: the
# visible comment is theirs too, so it says nothing of the answer).
VISIBLE_NOTE = (
    "# Validate fails here while an answer is missing or of the wrong form;\n"
    "# it never says whether an answer is right (the hidden tests do that)."
)
HIDDEN_NOTE = "# Graded: hidden tests rebuild this exercise in torch and compare with your values."
WRITTEN_BY = "# Written by the authoring kit from {where}: edit the definition there, then `autograd-course kit write`."


@dataclass(frozen=True)
class Ask:
    """One answer an exercise asks for: its variable `name`, its `form` (course/forms.py: "number", "list of 2
    numbers", ...), its `points`, the `hint` shown beside torch's value, the `idea` verdicts-only feedback shows in
    its place (the concept, never the value), and `prompt`, a comment on the student's template line."""

    name: str
    form: str = "number"
    points: float = 1
    hint: str = ""
    idea: str = ""
    prompt: str = ""


@dataclass(frozen=True)
class Exercise:
    """One exercise, defined once. `id` is the stem of its cells (`answer_<id>`, `form_<id>`, `test_<id>`);
    `build(**numbers)` builds the computation with torch and returns {answer name: reference value} (tensors are
    fine); its source becomes the hidden tests, so it may use only its arguments, `torch` and `math`."""

    id: str
    title: str
    question: str
    build: Callable[..., Mapping[str, Any]]
    answers: Sequence[Ask]
    numbers: Mapping[str, int | float] = field(default_factory=dict)
    chain: Sequence[ChainStep] = ()  # a hand-written chain table: it overrides the one read from build's graph
    # Variants (course/authoring/ranges.py): which numbers each student draws afresh, over what, and what must hold.
    vary: Mapping[str, Range] = field(default_factory=dict)
    require: Sequence[Property] = ()
    # Its answers need float64 and its question says so (type the arithmetic, or enough decimals): the author's
    # review (course/authoring/review.py) does not warn that they are not exact in float32.
    float64: bool = False

    @property
    def points(self) -> float:
        return sum(ask.points for ask in self.answers)

    def number_names(self) -> dict[str, str]:
        """The exercise's own names of its numbers -> their names in the numbers cell's P (`x` -> `gate_x`)."""
        return {name: f"{self.id}_{name}" for name in self.numbers}

    def references(self, numbers: Mapping[str, int | float] | None = None) -> dict[str, Any]:
        """`build` run at `numbers` (the exercise's own names; its defaults when None): answer name -> value."""
        return dict(self.build(**dict(self.numbers if numbers is None else numbers)))


# ----------------------------------------------------------------------------- checking a definition


def check_exercises(exercises: Sequence[Exercise], where: Path) -> dict[str, dict[str, Any]]:
    """Every definition checked, with what its build returns at its own numbers as plain values (exercise id ->
    answer -> value): the answer key. Raises AuthoringError naming the file, the exercise and what to do."""
    from course.pipeline.judge import to_plain

    seen_ids: set[str] = set()
    seen_answers: dict[str, str] = {}
    keys: dict[str, dict[str, Any]] = {}
    for exercise in exercises:
        if not isinstance(exercise, Exercise):
            raise AuthoringError(
                f"{where}: EXERCISES holds {type(exercise).__name__}, not an Exercise; "
                "make every item Exercise(...) (course.authoring.kit)"
            )
        at = f"{where}: exercise {exercise.id!r}"
        _check_definition(exercise, at, seen_ids, seen_answers)
        _check_names(exercise, at)
        keys[exercise.id] = _answer_key(exercise, at, to_plain)
        _check_standalone(exercise, keys[exercise.id], at, to_plain)
        check_declaration(exercise, at)
        check_feasible(exercise, at)  # a bounded search of its ranges: refused when they cannot keep its require
    return keys


def _check_definition(exercise: Exercise, at: str, seen_ids: set[str], seen_answers: dict[str, str]) -> None:
    """The exercise's id (well formed, not used before), its build, its answers and its numbers."""
    if not ID_PATTERN.fullmatch(exercise.id):
        raise AuthoringError(
            f"{at}: its id must be lower-case letters, digits and _, at most 40 (it names "
            "the cells answer_<id>, form_<id>, test_<id>); rename it"
        )
    if exercise.id in seen_ids:
        raise AuthoringError(f"{at}: the id is used twice; give each exercise its own")
    seen_ids.add(exercise.id)
    if not callable(exercise.build) or not isinstance(exercise.numbers, Mapping):
        raise AuthoringError(f"{at}: build must be a function and numbers a dict of its numbers by name")
    if not exercise.answers:
        raise AuthoringError(f"{at}: it asks for no answer; add at least one Ask(...)")
    for ask in exercise.answers:
        _check_ask(ask, exercise, at, seen_answers)
    for name, value in exercise.numbers.items():
        if not name.isidentifier() or type(value) not in (int, float):
            raise AuthoringError(
                f"{at}: number {name!r} = {value!r}: numbers are plain ints or floats named like Python variables"
            )


def _check_names(exercise: Exercise, at: str) -> None:
    """Build's source and arguments, the question's placeholders and the answers' names against its numbers."""
    _source_of(exercise, at)  # its build can be written into the hidden tests
    parameters = set(inspect.signature(exercise.build).parameters)
    if parameters != set(exercise.numbers):
        raise AuthoringError(
            f"{at}: build takes ({', '.join(sorted(parameters))}) but numbers names "
            f"({', '.join(sorted(exercise.numbers))}); name each argument of build after a "
            "number of the exercise"
        )
    for name in PLACEHOLDER.findall(exercise.question):
        if name not in exercise.numbers:
            raise AuthoringError(
                f"{at}: its question shows {{{{{name}}}}}, which is none of its numbers "
                f"({', '.join(exercise.numbers) or 'none'}); add it to numbers or fix the name"
            )
    varying = literals_of(exercise.question, set(exercise.vary) & set(exercise.numbers))
    if varying:  # a literal beside a number drawn per student: right for one student at most
        name, said = varying[0]
        raise AuthoringError(
            f"{at}: its question shows {said}, but {name} varies per student (vary=): every other student would work "
            f"from a number that is not theirs; write {{{{{name}}}}}, which prints each student's exact number"
        )
    build_name = exercise.build.__name__
    clash = sorted({ask.name for ask in exercise.answers} & (RESERVED | {build_name}))
    if build_name in RESERVED or clash:
        named = f"build's name {build_name!r}" if build_name in RESERVED else f"answer {', '.join(clash)}"
        raise AuthoringError(
            f"{at}: the {named} is a name the hidden tests use themselves "
            f"({', '.join(sorted(RESERVED))} and build's name); rename it"
        )


def _check_standalone(exercise: Exercise, key: dict[str, Any], at: str, to_plain: Callable[[Any], Any]) -> None:
    """`build`'s source, run alone as the hidden tests run it (their namespace has torch and math, not the
    exercises module), gives the answer key: a build that leans on a name of its module fails here, not in the
    release proof."""
    import builtins
    import math

    import torch

    namespace: dict[str, Any] = {"__builtins__": builtins, "torch": torch, "math": math}
    try:
        exec(compile(_source_of(exercise, at), f"<build of {exercise.id}>", "exec"), namespace)  # noqa: S102 - the instructor's own
        returned = namespace[exercise.build.__name__](**dict(exercise.numbers))
        alone = {name: to_plain(returned[name]) for name in key}
    except Exception as error:
        raise AuthoringError(
            f"{at}: build, run alone as the hidden tests run it, raised {type(error).__name__}: "
            f"{error}; build may use only its arguments, torch and math (move anything else of "
            "the module inside it)"
        ) from None
    if to_plain(list(alone.values())) != to_plain([_one(key[name], alone[name]) for name in key]):
        raise AuthoringError(
            f"{at}: build, run alone as the hidden tests run it, gives other values than in the "
            "exercises module; make it depend only on its arguments"
        )


def _one(key: Any, alone: Any) -> Any:
    """The key's value in the shape `alone` has (a number the key unwrapped from a one-element list)."""
    return [key] if isinstance(alone, list) and not isinstance(key, list) else key


def _check_ask(ask: Ask, exercise: Exercise, at: str, seen: dict[str, str]) -> None:
    if not isinstance(ask, Ask):
        raise AuthoringError(f"{at}: answers must be Ask(...) items; found {type(ask).__name__}")
    if not ask.name.isidentifier() or keyword.iskeyword(ask.name):
        raise AuthoringError(f"{at}: answer {ask.name!r} is not a Python variable name; rename it")
    if ask.name in seen:
        raise AuthoringError(
            f"{at}: answer {ask.name!r} is asked by exercise {seen[ask.name]!r} too; answer "
            "names are unique in an assignment"
        )
    seen[ask.name] = exercise.id
    if ask.form == FUNCTION or form(ask.form) is None:
        kinds = ", ".join(f'"{name}"' for name in NAMES if name != FUNCTION)
        raise AuthoringError(
            f"{at}: answer {ask.name!r} has the form {ask.form!r}; the kit writes {kinds} (a "
            "function answer is written by hand: docs/authoring.md, cell conventions)"
        )
    if not ask.points > 0:
        raise AuthoringError(f"{at}: answer {ask.name!r} is worth {ask.points!r} points; give it more than 0")
    if not ask.hint or not ask.idea:
        raise AuthoringError(
            f"{at}: answer {ask.name!r} needs a hint (shown beside torch's value) and an idea "
            "(shown in verdicts-only feedback: the concept, never the value)"
        )


def _answer_key(exercise: Exercise, at: str, to_plain: Callable[[Any], Any]) -> dict[str, Any]:
    try:
        returned = exercise.references()
    except Exception as error:
        frames = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.name == exercise.build.__name__]
        line = f" (line {frames[-1].lineno} of {frames[-1].filename}: {frames[-1].line})" if frames else ""
        raise AuthoringError(f"{at}: build raised {type(error).__name__}: {error}{line}; fix build") from None
    asked = [ask.name for ask in exercise.answers]
    if sorted(returned) != sorted(asked):
        missing = [name for name in asked if name not in returned]
        extra = [name for name in returned if name not in asked]
        raise AuthoringError(
            f"{at}: build must return exactly its answers by name; "
            + "; ".join(
                part
                for part in (
                    f"no value for {', '.join(missing)}" if missing else "",
                    f"{', '.join(map(str, extra))} asked by no Ask" if extra else "",
                )
                if part
            )
        )
    key = {}
    for ask in exercise.answers:
        value = to_plain(returned[ask.name])
        shape = form(ask.form)
        if isinstance(value, list) and len(value) == 1 and shape is not None and shape.length is None:
            value = value[0]  # a one-element tensor for a number
        if shape is not None and gap(value, shape) is not None:
            raise AuthoringError(
                f"{at}: build returns {value!r} for {ask.name!r}, which is not {shape.words} (its "
                "form); return that form, or change the Ask's form"
            )
        key[ask.name] = value
    return key


def _source_of(exercise: Exercise, at: str) -> str:
    """`build`'s source as it goes into the hidden tests: a plain module-level function, no decorator."""
    build = exercise.build
    try:
        source = textwrap.dedent(inspect.getsource(build))
    except (OSError, TypeError):
        source = ""
    if not source.startswith("def ") or build.__name__ == "<lambda>" or "." in build.__qualname__:
        raise AuthoringError(
            f"{at}: build must be a plain function defined at the top of the exercises module "
            "(`def name(...):`, no lambda, decorator or nesting): its source becomes the hidden tests"
        )
    return source.rstrip() + "\n"


# ----------------------------------------------------------------------------- the cells


def notebook_cell(cell_type: str, source: str, cell_id: str, meta: dict[str, Any] | None) -> dict[str, Any]:
    """A cell as Jupyter saves it, with its nbgrader metadata (`meta`, from nbgrader_metadata) when it has any."""
    cell: dict[str, Any] = {
        "cell_type": cell_type,
        "id": cell_id,
        "metadata": {"nbgrader": meta} if meta else {},
        "source": source.splitlines(keepends=True),
    }  # as Jupyter saves it
    if cell_type == "code":
        cell["execution_count"] = None
        cell["outputs"] = []
    return cell


def nbgrader_metadata(
    grade_id: str, *, solution: bool = False, grade: bool = False, locked: bool = True, points: float | None = None
) -> dict[str, Any]:
    """A cell's nbgrader metadata as nbgrader writes it (schema 3); points as an int when whole."""
    meta: dict[str, Any] = {
        "grade": grade,
        "grade_id": grade_id,
        "locked": locked,
        "schema_version": 3,
        "solution": solution,
    }
    if points is not None:
        meta["points"] = int(points) if float(points).is_integer() else points
    return meta


def _form_call(exercise: Exercise, quiet: bool = False) -> str:
    parts = [f'{ask.name}="{ask.form}"' for ask in exercise.answers] + (["quiet=True"] if quiet else [])
    one_line = f"check_form({', '.join(parts)})"
    if len(one_line) <= 100:
        return one_line
    return "check_form(\n" + "".join(f"    {part},\n" for part in parts) + ")"


def _literal(value: Any) -> str:
    return repr(value)


def exercise_cells(exercise: Exercise, key: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """The four cells of one exercise: question, answer (template lines + key), locked form check, graded test."""
    names = exercise.number_names()
    question = PLACEHOLDER.sub(lambda m: "{{" + names.get(m.group(1), m.group(1)) + "}}", exercise.question.strip())
    width = max(len(ask.name) for ask in exercise.answers)
    templates = [
        f"{ask.name} = ...".ljust(width + 6) + f"  # {ask.prompt}" if ask.prompt else f"{ask.name} = ..."
        for ask in exercise.answers
    ]
    answer = "\n".join(
        [*templates, SOLUTION_BEGIN, *(f"{name} = {_literal(value)}" for name, value in key.items()), SOLUTION_END]
    )
    build = exercise.build.__name__
    arguments = ", ".join(f'{name}=P["{number}"]' for name, number in names.items())
    marks = [
        f'marks.value("{ask.name}", {ask.name}, references["{ask.name}"], {ask.hint!r}, '
        f"points={_literal(ask.points)}, idea={ask.idea!r})"
        for ask in exercise.answers
    ]
    test = "\n".join(
        [
            VISIBLE_NOTE,
            _form_call(exercise, quiet=True),
            "",
            HIDDEN_NOTE,
            HIDDEN_BEGIN,
            WRITTEN_BY.format(where=where),
            _source_of(exercise, where).rstrip(),
            "",
            f"references = {build}({arguments})",
            "marks = Marks()",
            *marks,
            "marks.total()",
            HIDDEN_END,
        ]
    )
    stem = exercise.id
    return [
        notebook_cell("markdown", f"## {exercise.title}\n\n{question}", kit_cell_id(stem, "question"), None),
        notebook_cell(
            "code",
            answer,
            kit_cell_id(stem, "answer"),
            nbgrader_metadata(f"answer_{stem}", solution=True, locked=False),
        ),
        notebook_cell("code", _form_call(exercise), kit_cell_id(stem, "form"), nbgrader_metadata(f"form_{stem}")),
        notebook_cell(
            "code",
            test,
            kit_cell_id(stem, "test"),
            nbgrader_metadata(f"test_{stem}", grade=True, points=exercise.points),
        ),
    ]


def kit_cell_id(stem: str, part: str) -> str:
    """The nbformat id of a cell the kit writes (ids allow letters, digits, - and _; the kit's use -)."""
    return f"kit-{stem.replace('_', '-')}-{part}"


def _stem_of(cell: dict[str, Any]) -> str:
    """The exercise a cell the kit wrote belongs to: its grade id's stem, else its cell id's."""
    grade_id = str(nbgrader_meta(cell).get("grade_id") or "")
    for part in ("answer_", "form_", "test_"):
        if grade_id.startswith(part):
            return grade_id.removeprefix(part)
    return str(cell.get("id", "")).removeprefix("kit-").rsplit("-", 1)[0].replace("-", "_")


def is_kit_cell(cell: dict[str, Any], stem: str) -> bool:
    grade_id = nbgrader_meta(cell).get("grade_id")
    if grade_id in (f"answer_{stem}", f"form_{stem}", f"test_{stem}"):
        return True
    return cell.get("id") == kit_cell_id(stem, "question")


P_KEY = re.compile(r"""P\[\s*["']([^"']+)["']\s*\]""")  # a number of P as a cell reads it: P["gate_x"]
LAYOUT_KEY = re.compile(r"""["']([^"']+)["']\s*:""")  # a name on a line of the numbers cell's P = {...}


def _numbers_cell(
    cells: list[dict[str, Any]],
    exercises: Sequence[Exercise],
    where: Path,
    groups: Sequence[Sequence[str]] = (),
    notes: list[str] | None = None,
) -> None:
    """Put every exercise's numbers into the locked numbers cell's P, keeping the numbers of hand-written exercises
    and the layout of the module's NUMBER_GROUPS (`groups`) and of the cell as it is, the kit's groups added (a
    notebook without such a cell gets one after its setup cell). A kit key that P holds already for another
    exercise is refused, and a number a kit exercise no longer has is removed from P (and said in `notes`)."""
    from course.pipeline.assignment import numbers_cell_values
    from course.pipeline.content import Content
    from course.pipeline.variants import numbers_source

    ours = _kit_numbers(exercises, where)
    by_id = {nbgrader_meta(cell).get("grade_id"): (index, cell) for index, cell in enumerate(cells)}
    params = dict(numbers_cell_values(by_id, Path("the numbers cell")) if NUMBERS_CELL in by_id else {})
    owned = _owned_keys(exercises, by_id, params, where)
    removed = _remove_stale(cells, exercises, params, owned, notes)
    if not ours and not removed:
        return
    params.update(ours)
    layout = _numbers_layout(exercises, groups, by_id, ours)
    source = numbers_source(params, Content(number_groups=tuple(tuple(group) for group in layout)))
    if NUMBERS_CELL in by_id:
        cell = by_id[NUMBERS_CELL][1]
        if cell_text(cell) != source:
            cell["source"] = source.splitlines(keepends=True)
        return
    setup_at = by_id["setup"][0] if "setup" in by_id else -1
    cells.insert(setup_at + 1, notebook_cell("code", source, "numbers", nbgrader_metadata(NUMBERS_CELL)))


def _kit_numbers(exercises: Sequence[Exercise], where: Path) -> dict[str, int | float]:
    """The kit exercises' numbers by their key in P; two exercises' numbers under one key are refused."""
    ours: dict[str, int | float] = {}
    for exercise in exercises:
        for name, number in exercise.number_names().items():
            if number in ours:
                raise AuthoringError(
                    f"{where}: exercise {exercise.id!r}: its number {name!r} goes in the numbers cell's P as "
                    f"{number!r}, which another kit exercise's number is named too; rename one of them"
                )
            ours[number] = exercise.numbers[name]
    return ours


def _owned_keys(
    exercises: Sequence[Exercise],
    by_id: Mapping[Any, tuple[int, dict[str, Any]]],
    params: Mapping[str, Any],
    where: Path,
) -> dict[str, set[str]]:
    """The keys of P each kit exercise's test cell reads; a kit number over a hand-written one's key is refused."""
    # A key of P is a kit exercise's own when the test cell the kit wrote for it reads it; any other key of P
    # belongs to a hand-written exercise, whose number the kit must never overwrite.
    kit_tests = {exercise.id: by_id.get(f"test_{exercise.id}") for exercise in exercises}
    owned = {
        stem: set(P_KEY.findall(cell_text(found[1]))) if found and is_kit_cell(found[1], stem) else set()
        for stem, found in kit_tests.items()
    }
    for exercise in exercises:
        for name, number in exercise.number_names().items():
            if number in params and number not in owned[exercise.id]:
                raise AuthoringError(
                    f"{where}: exercise {exercise.id!r}: its number {name!r} goes in the numbers cell's P as "
                    f"{number!r}, which P already holds for a hand-written exercise (the kit would overwrite "
                    f"its number); rename the number {name!r} (or the exercise's id)"
                )
    return owned


def _remove_stale(
    cells: list[dict[str, Any]],
    exercises: Sequence[Exercise],
    params: dict[str, Any],
    owned: Mapping[str, set[str]],
    notes: list[str] | None,
) -> bool:
    """Remove from `params` the kit keys no exercise has any more (said in `notes`); whether any was removed."""
    elsewhere = "\n".join(  # what the other cells read: a key a hand-written cell uses is never removed
        cell_text(cell)
        for cell in cells
        if nbgrader_meta(cell).get("grade_id") != NUMBERS_CELL
        and not any(is_kit_cell(cell, exercise.id) for exercise in exercises)
    )
    removed = False
    for exercise in exercises:
        current = set(exercise.number_names().values())
        stale = sorted(
            key
            for key in owned[exercise.id]
            if key.startswith(f"{exercise.id}_")
            and key not in current
            and key in params
            and not re.search(rf"\b{re.escape(key)}\b", elsewhere)
        )
        for key in stale:
            del params[key]
            removed = True
        if stale and notes is not None:
            notes.append(
                f"removed {', '.join(stale)} from the numbers cell's P: exercise {exercise.id!r} no longer has "
                f"{'that number' if len(stale) == 1 else 'those numbers'}"
            )
    return removed


def _numbers_layout(
    exercises: Sequence[Exercise],
    groups: Sequence[Sequence[str]],
    by_id: Mapping[Any, tuple[int, dict[str, Any]]],
    ours: Mapping[str, int | float],
) -> list[list[str]]:
    """The numbers cell's lines: the module's groups, then the cell's own lines, then the kit's new groups."""
    layout = [list(group) for group in groups]
    if NUMBERS_CELL in by_id:  # the cell's own lines, for the names the module's groups leave out
        placed = {name for group in layout for name in group} | set(ours)
        for line in cell_text(by_id[NUMBERS_CELL][1]).splitlines():
            names = [name for name in LAYOUT_KEY.findall(line) if name not in placed]
            if names:
                layout.append(names)
                placed.update(names)
    placed = {name for group in layout for name in group}
    layout += [list(group) for group in number_groups(exercises) if not placed & set(group)]
    return layout


def number_groups(exercises: Sequence[Exercise]) -> tuple[tuple[str, ...], ...]:
    """One line of the numbers cell per exercise: NUMBER_GROUPS for an exercises module written with the kit."""
    return tuple(tuple(exercise.number_names().values()) for exercise in exercises if exercise.numbers)


def chains(exercises: Sequence[Exercise]) -> dict[str, tuple[ChainStep, ...]]:
    """CHAINS for an exercises module written with the kit: the hand-written tables its exercises carry. An
    exercise without one has the table `GRAPHS = kit_graphs(EXERCISES)` reads from its build's graph
    (course/pipeline/graph_chain.py); a hand-written `chain` overrides the derived table."""
    return {exercise.id: tuple(exercise.chain) for exercise in exercises if exercise.chain}


def write_cells(
    notebook: dict[str, Any],
    exercises: Sequence[Exercise],
    where: Path,
    *,
    groups: Sequence[Sequence[str]] = (),
    notes: list[str] | None = None,
) -> dict[str, Any]:
    """A copy of `notebook` with every exercise's cells written (in place of its old ones, or after the previous
    exercise's, or after the notebook's last question); every other cell is kept as it is, and a cell whose text
    and nbgrader metadata are already right is kept as it was (its id, outputs and Jupyter's metadata). `groups`:
    the module's NUMBER_GROUPS, the numbers cell's layout; what the author should know is appended to `notes`."""
    keys = check_exercises(exercises, where)
    written = copy.deepcopy(notebook)
    cells: list[dict[str, Any]] = written["cells"]
    ours = {kit_cell_id(exercise.id, part) for exercise in exercises for part in PARTS}
    for index, cell in enumerate(cells):
        if KIT_ID.fullmatch(str(cell.get("id", ""))) and cell["id"] not in ours:
            raise AuthoringError(
                f"{where}: cell {index} of the notebook ({cell['id']}) was written by the kit for an "
                f"exercise that no definition of EXERCISES names now; run `autograd-course kit remove "
                f"{_stem_of(cell)}` to remove its cells and numbers, or put its definition back"
            )
    _numbers_cell(cells, exercises, where, groups, notes)
    previous_end: int | None = None
    for exercise in exercises:
        new = exercise_cells(exercise, keys[exercise.id], _shown(where))
        found = [index for index, cell in enumerate(cells) if is_kit_cell(cell, exercise.id)]
        old = {_key(cells[index]): cells[index] for index in found}
        for index in reversed(found):
            del cells[index]
        at = found[0] if found else previous_end if previous_end is not None else _after_last_question(cells)
        for offset, cell in enumerate(new):
            before = old.get(_key(cell))
            if before is not None and _same(before, cell):
                cell = before
            elif before is not None and before.get("id"):
                cell["id"] = before["id"]  # a cell the kit rewrites keeps its id
            cells.insert(at + offset, cell)
        previous_end = at + len(new)
    return written


def _key(cell: dict[str, Any]) -> str:
    return nbgrader_meta(cell).get("grade_id") or "question"


def _same(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return (
        old.get("cell_type") == new["cell_type"]
        and cell_text(old) == cell_text(new)
        and nbgrader_meta(old) == nbgrader_meta(new)
    )


def _shown(where: Path) -> str:
    """The exercises module as the hidden tests name it: source/<assignment>/exercises.py where it is one."""
    parts = where.parts
    return "/".join(parts[-3:]) if len(parts) >= 3 and parts[-3] == "source" else where.name


def _after_last_question(cells: list[dict[str, Any]]) -> int:
    """Where a new exercise goes: after the last graded test cell, else after the numbers or setup cell."""
    ids = [nbgrader_meta(cell).get("grade_id") or "" for cell in cells]
    tests = [index for index, grade_id in enumerate(ids) if grade_id.startswith("test_")]
    anchors = tests or [index for index, grade_id in enumerate(ids) if grade_id in ("setup", NUMBERS_CELL)]
    return anchors[-1] + 1 if anchors else len(cells)


# ----------------------------------------------------------------------------- the module and the notebook


def load_exercises(path: Path) -> list[Exercise]:
    """EXERCISES of the exercises module at `path` (the module is loaded as the grader loads it)."""
    return _exercises_of(_load_module(path), path)


def _load_module(path: Path) -> Any:
    from course.pipeline.content import load_exercises_module

    if not path.is_file():
        raise AuthoringError(
            f"{path}: no exercises module; write one with EXERCISES = [Exercise(...), ...] "
            "(docs/authoring.md, the authoring kit)"
        )
    return load_exercises_module(path)


def _exercises_of(module: Any, path: Path) -> list[Exercise]:
    exercises = getattr(module, "EXERCISES", None)
    if not isinstance(exercises, list | tuple) or not exercises:
        raise AuthoringError(
            f"{path}: defines no EXERCISES; add EXERCISES = [Exercise(...), ...] (docs/authoring.md, the authoring kit)"
        )
    return list(exercises)


def write_notebook(
    notebook_path: Path, exercises_path: Path, notes: list[str] | None = None, *, tolerance: float | None = None
) -> bool:
    """Write the cells of the exercises module's EXERCISES into the source notebook; True when it changed. What the
    author should know (numbers removed from P, exercises that get no chain table) is appended to `notes`. With the
    course's `tolerance`, a notebook that would show a number other than the one graded is not written."""
    try:
        notebook = json.loads(notebook_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise AuthoringError(f"{notebook_path}: cannot be read as a notebook ({error})") from None
    module = _load_module(exercises_path)
    exercises = _exercises_of(module, exercises_path)
    groups = getattr(module, "NUMBER_GROUPS", ())
    groups = groups if isinstance(groups, list | tuple) and all(isinstance(g, list | tuple) for g in groups) else ()
    written = write_cells(notebook, exercises, exercises_path, groups=groups, notes=notes)
    if notes is not None:
        notes.extend(_no_table_notes(module, exercises))
        notes.extend(_unused_ranges_notes(module, exercises))
    if written == notebook:
        return False
    _check_conventions(written, notebook_path, exercises_path, tolerance)
    atomic_write_text(notebook_path, dump(written), mode=kept_mode(notebook_path))
    return True


def _no_table_notes(module: Any, exercises: Sequence[Exercise]) -> list[str]:
    """The exercises whose chain table `GRAPHS` (kit_graphs) would read from their build but which get none, and
    why: said once, at kit write, rather than at every submission."""
    from course.pipeline.graph_chain import no_table_reason

    graphs, hand_written = getattr(module, "GRAPHS", None), getattr(module, "CHAINS", None)
    if not isinstance(graphs, Mapping):
        without = [e.id for e in exercises if not (isinstance(hand_written, Mapping) and hand_written.get(e.id))]
        if not without:
            return []
        return [
            f"exercise{'' if len(without) == 1 else 's'} {', '.join(map(repr, without))} "
            f"get{'s' if len(without) == 1 else ''} no chain table: the module has "
            "no GRAPHS; add `GRAPHS = kit_graphs(EXERCISES)` (from course.pipeline.graph_chain import kit_graphs) "
            "to read each table from its build's graph"
        ]
    notes = []
    for exercise in exercises:
        if exercise.id in graphs and not (isinstance(hand_written, Mapping) and hand_written.get(exercise.id)):
            reason = no_table_reason(exercise.build, exercise.numbers)
            if reason:
                notes.append(f"exercise {exercise.id!r} gets no chain table: {reason}")
    return notes


def _unused_ranges_notes(module: Any, exercises: Sequence[Exercise]) -> list[str]:
    """Exercises that declare ranges the module never derives a derive(rng) from (no VARIANTS, no derive)."""
    varying = [exercise.id for exercise in exercises if exercise.vary]
    if not varying or getattr(module, "VARIANTS", None) is not None or callable(getattr(module, "derive", None)):
        return []
    return [
        f"exercise {', '.join(map(repr, varying))} declares ranges (vary=), but the module has no VARIANTS = "
        "variants(EXERCISES) (course.authoring.kit's variants) nor derive(rng): with variants: true they would not be "
        "used; add that line"
    ]


def _check_conventions(
    notebook: dict[str, Any], notebook_path: Path, exercises_path: Path, tolerance: float | None = None
) -> None:
    """The written notebook read as `release` will read it (course/pipeline/assignment.py), before it replaces the old
    one: a clash with a hand-written exercise (an answer name both assign, say) is named and nothing is written; with
    `tolerance`, so is a number it would show other than the one graded (course/authoring/shown.py)."""
    from course.pipeline.assignment import load_assignment

    with tempfile.TemporaryDirectory() as scratch:
        trial = Path(scratch) / notebook_path.name
        trial.write_text(dump(notebook), encoding="utf-8")
        try:
            loaded = load_assignment(trial, notebook_path.parent.name, exercises_path)
        except SourceNotebookError as error:
            said = str(error).replace(str(trial), str(notebook_path))
            raise AuthoringError(
                f"{exercises_path}: the cells written from it would break the notebook's cell "
                f"conventions, so {notebook_path} was left as it was: {said}"
            ) from None
    if tolerance is not None:
        refuse_written(notebook, loaded, tolerance, notebook_path, exercises_path)


def dump(notebook: dict[str, Any]) -> str:
    """A notebook as the course keeps source notebooks: JSON, one-space indent, Unicode as it is."""
    return json.dumps(notebook, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
