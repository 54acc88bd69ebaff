"""`autograd-course kit remove EXERCISE`: an exercise the kit wrote taken out of its assignment.

It removes the exercise's cells from the source notebook (its question, answer, form check and graded test: the
cells the kit wrote for it), its numbers from the numbers cell's `P` (those no other cell reads), and its definition
from the exercises module where that edit is safe: the definition is an item of the literal list `EXERCISES = [...]`
(an `Exercise(id=...)` call, or a module-level name bound to one), the list is changed nowhere else, and the module,
loaded again, defines the same exercises but this one. Its build function, and the name it was bound to, go too
when nothing else in the module uses them. Where the edit is not safe, the module is left as it is and the report
says, in one sentence, what to delete by hand. Nothing is written until every part has been checked: the module
first, then the notebook, each atomically (course/core/files.py).
"""

from __future__ import annotations

import ast
import itertools
import json
import re
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from course.authoring import kit
from course.authoring.errors import AuthoringError
from course.core.config import CourseConfig
from course.core.files import atomic_write_text, kept_mode
from course.pipeline.assignment import NUMBERS_CELL, cell_text, nbgrader_meta


@dataclass(frozen=True)
class Removed:
    """What `remove_exercise` did: the notebook's cells and numbers it removed, and the definition's fate."""

    assignment: str
    notebook: Path
    exercises: Path
    cells: int
    numbers: tuple[str, ...]
    definition_removed: bool
    by_hand: str = ""  # what the author deletes from the exercises module, when the kit could not


def remove_exercise(config: CourseConfig, exercise_id: str, assignment_name: str | None = None) -> Removed:
    """Remove the kit exercise `exercise_id` from its assignment (the named one, else the one whose source notebook
    holds it); AuthoringError names the notebook and what to do when it is unknown or was written by hand."""
    if not kit.ID_PATTERN.fullmatch(exercise_id):
        raise AuthoringError(
            f"{exercise_id!r} is not an exercise id (lower-case letters, digits and _, the stem of its cells)"
        )
    name = assignment_name or _assignment_of(config, exercise_id)
    notebook_path = config.source_notebook(name)
    exercises_path = config.exercises_module(name)
    notebook = _read_notebook(notebook_path)
    cells = notebook["cells"]
    found = [index for index, cell in enumerate(cells) if kit.is_kit_cell(cell, exercise_id)]
    if not found:
        known = ", ".join(_kit_stems(notebook)) or "none"
        raise AuthoringError(
            f"{notebook_path}: no exercise {exercise_id!r} (the kit's exercises there: {known}); name one of them"
        )
    if not _written_by_kit(notebook, exercise_id):
        raise AuthoringError(
            f"{notebook_path}: exercise {exercise_id!r} was written by hand, not by the kit; delete its cells "
            f"(answer_{exercise_id}, form_{exercise_id}, test_{exercise_id} and its question) in Jupyter"
        )
    module_text = exercises_path.read_text(encoding="utf-8") if exercises_path.is_file() else ""
    defined = _defined_ids(exercises_path) if module_text else []
    pruned, by_hand = module_text, ""
    if exercise_id in defined:
        if defined == [exercise_id]:
            raise AuthoringError(
                f"{exercises_path}: exercise {exercise_id!r} is the only one of EXERCISES, and the kit needs one; "
                "define the next exercise first, then remove this one"
            )
        pruned = _checked_prune(module_text, exercise_id, defined, exercises_path) or module_text
        if pruned == module_text:
            by_hand = (
                f"delete the definition of exercise {exercise_id!r} from EXERCISES in {exercises_path} (and its "
                "build function, if nothing else uses it), or the next `kit write` writes its cells back"
            )
    removed_numbers = _without_numbers(cells, found, exercise_id, defined_numbers(exercises_path, exercise_id))
    for index in reversed(found):
        del cells[index]
    if pruned != module_text:
        mode = stat.S_IMODE(exercises_path.stat().st_mode)
        atomic_write_text(exercises_path, pruned, mode=mode)
    atomic_write_text(notebook_path, kit.dump(notebook), mode=kept_mode(notebook_path))
    return Removed(name, notebook_path, exercises_path, len(found), removed_numbers, pruned != module_text, by_hand)


def _assignment_of(config: CourseConfig, exercise_id: str) -> str:
    """The one assignment whose source notebook holds cells the kit wrote for `exercise_id`."""
    holding = []
    for assignment in config.assignments:
        path = config.source_notebook(assignment.name)
        if path.is_file() and _written_by_kit(_read_notebook(path), exercise_id):
            holding.append(assignment.name)
    if not holding:
        raise AuthoringError(
            f"no source notebook of the course ({', '.join(a.name for a in config.assignments)}) holds an exercise "
            f"{exercise_id!r} the kit wrote; check the id, or name the assignment with --assignment"
        )
    if len(holding) > 1:
        raise AuthoringError(
            f"exercise {exercise_id!r} is in several assignments ({', '.join(holding)}); name one with --assignment"
        )
    return holding[0]


def _read_notebook(path: Path) -> dict[str, Any]:
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise AuthoringError(f"{path}: cannot be read as a notebook ({error})") from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise AuthoringError(f"{path}: is not a notebook (no list of cells)")
    return notebook


def _kit_stems(notebook: dict[str, Any]) -> list[str]:
    """The exercises the kit wrote into the notebook, by the grade id of their test cells."""
    tests = [str(nbgrader_meta(cell).get("grade_id") or "") for cell in notebook["cells"]]
    stems = [grade_id.removeprefix("test_") for grade_id in tests if grade_id.startswith("test_")]
    return [stem for stem in stems if _written_by_kit(notebook, stem)]


def _written_by_kit(notebook: dict[str, Any], stem: str) -> bool:
    """A cell of the exercise carries the kit's cell id, or its test cell the kit's `Written by` line."""
    ids = {kit.kit_cell_id(stem, part) for part in kit.PARTS}
    marker = kit.WRITTEN_BY.split("{", 1)[0]
    for cell in notebook["cells"]:
        if not isinstance(cell, dict):
            continue
        if cell.get("id") in ids:
            return True
        if nbgrader_meta(cell).get("grade_id") == f"test_{stem}" and marker in cell_text(cell):
            return True
    return False


def defined_numbers(exercises_path: Path, exercise_id: str) -> set[str]:
    """The keys of P the exercise's definition names (`<id>_<name>`), when the module defines it."""
    if not exercises_path.is_file():
        return set()
    try:
        exercises = kit.load_exercises(exercises_path)
    except AuthoringError:
        return set()
    return {key for e in exercises if e.id == exercise_id for key in e.number_names().values()}


def _defined_ids(exercises_path: Path) -> list[str]:
    try:
        return [exercise.id for exercise in kit.load_exercises(exercises_path)]
    except AuthoringError:
        return []  # a module that does not load (or has no EXERCISES): nothing of it to edit


def _without_numbers(cells: list[dict[str, Any]], found: list[int], stem: str, defined: set[str]) -> tuple[str, ...]:
    """Remove from the numbers cell's P the keys the exercise's cells read (and its definition names) that no other
    cell reads; the cell keeps its layout. The keys removed, in P's order."""
    from course.pipeline.assignment import numbers_cell_values
    from course.pipeline.content import Content
    from course.pipeline.variants import numbers_source

    by_id = {nbgrader_meta(cell).get("grade_id"): (index, cell) for index, cell in enumerate(cells)}
    if NUMBERS_CELL not in by_id:
        return ()
    params = dict(numbers_cell_values(by_id, Path("the numbers cell")))
    own = set().union(*(kit.P_KEY.findall(cell_text(cells[index])) for index in found)) | defined
    others = "\n".join(
        cell_text(cell)
        for index, cell in enumerate(cells)
        if index not in found and nbgrader_meta(cell).get("grade_id") != NUMBERS_CELL
    )
    removed = tuple(
        key for key in params if key in own and not re.search(rf"(?<![\w]){re.escape(key)}(?![\w])", others)
    )
    if not removed:
        return ()
    for key in removed:
        del params[key]
    layout = [
        [key for key in kit.LAYOUT_KEY.findall(line) if key in params]
        for line in cell_text(by_id[NUMBERS_CELL][1]).splitlines()
    ]
    source = numbers_source(params, Content(number_groups=tuple(tuple(group) for group in layout if group)))
    by_id[NUMBERS_CELL][1]["source"] = source.splitlines(keepends=True)
    return removed


# ----------------------------------------------------------------------------- the definition in the module


def _checked_prune(text: str, stem: str, defined: list[str], where: Path) -> str | None:
    """The module's text without the exercise's definition, proven by loading it again (in a scratch folder): the
    same exercises in the same order but this one. None where the edit cannot be made safely."""
    pruned = prune_definition(text, stem)
    if pruned is None:
        return None
    with tempfile.TemporaryDirectory() as scratch:
        trial = Path(scratch) / where.name
        trial.write_text(pruned, encoding="utf-8")
        try:
            after = [exercise.id for exercise in kit.load_exercises(trial)]
        except AuthoringError:
            return None
    return pruned if after == [exercise for exercise in defined if exercise != stem] else None


def prune_definition(text: str, stem: str) -> str | None:
    """`text` without the item of `EXERCISES = [...]` whose id is `stem`, and without its build function and the
    module-level name it was bound to where nothing else uses them; None where that edit is not plainly safe."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    lists = [node for node in tree.body if _assigns(node, "EXERCISES")]
    if len(lists) != 1 or _changed_elsewhere(tree, lists[0]):
        return None
    listed = lists[0].value
    if not isinstance(listed, ast.List | ast.Tuple):
        return None
    bound = {
        node.targets[0].id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and len(node.targets) == 1
    }
    items = listed.elts
    matches = [index for index, item in enumerate(items) if _id_of(item, bound) == stem]
    if len(matches) != 1 or len(items) < 2:
        return None
    index = matches[0]
    item = items[index]
    data = text.encode("utf-8")  # ast's columns count UTF-8 bytes
    starts = [0]
    for line in data.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    spans = [_item_span(data, starts, items, index)]
    call = bound.get(item.id) if isinstance(item, ast.Name) else item
    unused = _used_only_by(tree, item, call)
    for node in tree.body:
        if node is not lists[0] and _defines(node) in unused:
            spans.append(_statement_span(data, starts, node))
    spans.sort(reverse=True)
    if any(later[0] < earlier[1] for later, earlier in itertools.pairwise(spans)):
        return None
    for begin, end in spans:
        data = data[:begin] + data[end:]
    pruned = data.decode("utf-8")
    try:
        ast.parse(pruned)
    except SyntaxError:
        return None
    return pruned


def _assigns(node: ast.stmt, name: str) -> TypeGuard[ast.Assign | ast.AnnAssign]:
    return isinstance(node, ast.Assign | ast.AnnAssign) and _defines(node) == name


def _defines(node: ast.stmt) -> str | None:
    """The one module-level name a statement binds: a function's, or an assignment's single target."""
    if isinstance(node, ast.FunctionDef):
        return node.name
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return targets[0].id if len(targets) == 1 and isinstance(targets[0], ast.Name) else None


def _changed_elsewhere(tree: ast.Module, assignment: ast.Assign | ast.AnnAssign) -> bool:
    """EXERCISES bound, extended or mutated anywhere but its one assignment (EXERCISES.append(...), +=, ...)."""
    target = assignment.targets[0] if isinstance(assignment, ast.Assign) else assignment.target
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "EXERCISES" and node is not target:
            if not isinstance(node.ctx, ast.Load):
                return True
        if isinstance(node, ast.Attribute | ast.Subscript) and getattr(node.value, "id", None) == "EXERCISES":
            return True
    return False


def _id_of(item: ast.expr, bound: dict[str, ast.expr]) -> str | None:
    """The literal id of an item of EXERCISES: Exercise(id="...") itself or a name bound to one."""
    call = bound.get(item.id) if isinstance(item, ast.Name) else item
    if not isinstance(call, ast.Call) or getattr(call.func, "id", getattr(call.func, "attr", None)) != "Exercise":
        return None
    for keyword in call.keywords:
        if keyword.arg == "id" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
            return keyword.value.value
    return None


def _used_only_by(tree: ast.Module, item: ast.expr, call: ast.expr | None) -> set[str]:
    """The name the item is (a bound Exercise) and its build's name, where no other place in the module uses them."""
    candidates = {item.id} if isinstance(item, ast.Name) else set()
    if isinstance(call, ast.Call):
        candidates |= {k.value.id for k in call.keywords if k.arg == "build" and isinstance(k.value, ast.Name)}
    inside = {id(node) for node in ast.walk(item)} | ({id(node) for node in ast.walk(call)} if call else set())
    used = {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and id(node) not in inside
    }
    return candidates - used


def _offset(starts: list[int], line: int, column: int) -> int:
    return starts[line - 1] + column


def _item_span(data: bytes, starts: list[int], items: list[ast.expr], index: int) -> tuple[int, int]:
    """The bytes to delete for one item of the list: its whole lines where it has lines of its own (with its comma
    and comment), else the item and the separator before the next one (or after the previous one, for the last)."""
    item = items[index]
    begin = _offset(starts, item.lineno, item.col_offset)
    end = _offset(starts, item.end_lineno or item.lineno, item.end_col_offset or 0)
    line_begin = starts[item.lineno - 1]
    line_end = starts[item.end_lineno or item.lineno]
    if not data[line_begin:begin].strip() and re.fullmatch(rb"\s*,?\s*(#[^\n]*)?\s*", data[end:line_end]):
        return line_begin, line_end
    if index + 1 < len(items):
        following = items[index + 1]
        return begin, _offset(starts, following.lineno, following.col_offset)
    previous = items[index - 1]
    return _offset(starts, previous.end_lineno or previous.lineno, previous.end_col_offset or 0), end


def _statement_span(data: bytes, starts: list[int], node: ast.stmt) -> tuple[int, int]:
    """A top-level statement's lines (its decorators too) and the blank lines after it."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    last = node.end_lineno or node.lineno
    while last < len(starts) - 1 and not data[starts[last] : starts[last + 1]].strip():
        last += 1
    return starts[first - 1], starts[last]
