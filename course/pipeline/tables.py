"""A function answer that is a table of torch's values, not a derivative: for the instructor's integrity report.

A table cannot win (course/pipeline/probes.py): the points drawn for each student are reals no table holds, so a
table earns only where it happens to be right, like any wrong function. It is still worth an instructor's look,
and two looks find it:
- `looked_up`, static: the function's own code looks its argument up (`TABLE[x]`, `TABLE.get(x)`, `x in TABLE`),
  compares it with a number (`if x == 2.5`), or holds a literal table of numbers (a dict of four or more number
  keys). The text is parsed, never run (`handwork.parse_cells`, once).
- `answered_only_plausible`, from the judge's checks: a function right at every plausible point it was called at
  (zero, the exercise's own point, the halves) and wrong at every point drawn for the student is right only where
  a table would be, whatever its code looks like (a function right only on a grid, a table built at run time).
Like every integrity finding these lines go to the class summary only, never to the student's feedback.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from course.pipeline.handwork import ParsedCells
from course.pipeline.judge import QuestionResult

MIN_TABLE_KEYS = 4  # number keys of a dict literal that make it a table, not a constant or two


def _functions(parsed: ParsedCells, names: tuple[str, ...]) -> Iterator[tuple[str, ast.FunctionDef]]:
    """Each definition of a function answer at the top level of a student cell, with the cell's words."""
    for cell, tree in parsed.trees:
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in names:
                yield cell.label.replace("your answer cell for", "the answer cell of"), node


def _is_number(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def _is_zero(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, ast.Constant) and node.value == 0


def _lookups(function: ast.FunctionDef) -> list[str]:
    """What in the function's body reads like a table: one word each, the first few."""
    seen: list[str] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Constant | ast.Slice):
            seen.append("indexes a table with a computed key")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            seen.append("looks its argument up with .get")
        elif isinstance(node, ast.Compare):
            if any(isinstance(op, ast.In | ast.NotIn) for op in node.ops):
                seen.append("tests whether its argument is in a collection")
            elif any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops) and any(
                _is_number(side) and not _is_zero(side) for side in [node.left, *node.comparators]
            ):  # `x == 0` is a special case a derivative may have; `x == 2.5` is a table's row
                seen.append("compares its argument with a number")
        elif isinstance(node, ast.Dict) and sum(_is_number(key) for key in node.keys if key) >= MIN_TABLE_KEYS:
            seen.append("holds a table of numbers")
    return list(dict.fromkeys(seen))[:3]


def looked_up(parsed: ParsedCells, function_names: tuple[str, ...]) -> list[str]:
    """One line per function answer whose code reads like a lookup table."""
    return [
        f"{where}: {node.name} {', '.join(what)}: a table of torch's values rather than a derivative? (it is "
        "scored as written: a table earns only where it is right)"
        for where, node in _functions(parsed, function_names)
        if (what := _lookups(node))
    ]


def answered_only_plausible(questions: tuple[QuestionResult, ...]) -> list[str]:
    """One line per function answer right at every plausible point and wrong at every point drawn for the
    student: at least three of the one and two of the other, so that chance is not the reason."""
    found = []
    for question in questions:
        for value in question.values:
            plausible = [p for p in value.probes if not p.private]
            drawn = [p for p in value.probes if p.private]
            if len(plausible) >= 3 and len(drawn) >= 2 and all(p.correct for p in plausible):
                if not any(p.correct for p in drawn):
                    found.append(
                        f"{value.name} agrees with torch at each of the {len(plausible)} plausible points it was "
                        f"called at (zero, the exercise's own point, halves) and at none of the {len(drawn)} drawn "
                        "for this student: a table of torch's values, or a function right only on a grid (its "
                        "points were not earned)"
                    )
    return found
