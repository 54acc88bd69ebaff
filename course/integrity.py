"""What the instructor should look at: code that patched torch or builtins, rigged number types, edited
locked cells, a notebook personalised for someone else. None of it changes a score (the judge is immune by
design) and none of it reaches the student's feedback: it goes to the class summary only, with what was seen.

A static look at the submitted text in the grader: the code is parsed, never run.
"""

from __future__ import annotations

import ast

from course.handwork import _python_text
from course.sandbox import Cell
from course.submission import Submission

PATCHED_ROOTS = {"torch": "torch", "builtins": "builtins", "__builtins__": "builtins"}
NUMBER_TYPES = {"float", "int", "complex", "bool", "list", "tuple", "str", "Tensor"}
MAX_PARSE_CHARS = 200_000
MAX_FINDINGS = 20


def _root_name(node: ast.AST) -> tuple[str | None, str]:
    """For `torch.Tensor.item` the root `torch` and the dotted text."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return node.id, ".".join(reversed(parts))
    return None, ""


def _patches(tree: ast.AST) -> list[str]:
    seen = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr")
              and node.args):
            root, dotted = _root_name(node.args[0])
            if root in PATCHED_ROOTS:
                seen.append(f"{node.func.id}({dotted}, ...)")
        for target in targets:
            if isinstance(target, ast.Attribute):
                root, dotted = _root_name(target)
                if root in PATCHED_ROOTS:
                    seen.append(f"{dotted} = ...")
            elif isinstance(target, ast.Subscript):  # __builtins__["abs"] = ...
                root, dotted = _root_name(target.value)
                if root in PATCHED_ROOTS:
                    seen.append(f"{dotted}[...] = ...")
    return seen


def _rigged_types(tree: ast.AST) -> list[str]:
    seen = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            bases = [_root_name(base)[1].rsplit(".", 1)[-1] for base in node.bases]
            numeric = [base for base in bases if base in NUMBER_TYPES]
            if numeric:
                dunders = sorted(item.name for item in node.body if isinstance(item, ast.FunctionDef)
                                 and item.name.startswith("__") and item.name != "__init__")
                overriding = f" overriding {', '.join(dunders)}" if dunders else ""
                seen.append(f"class {node.name}({', '.join(numeric)}){overriding}")
    return seen


def _parse(cell: Cell) -> ast.AST | None:
    if cell.index < 0 or len(cell.source) > MAX_PARSE_CHARS:
        return None  # the course's own cells, or text too long to be worth parsing
    try:
        return ast.parse(_python_text(cell.source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def review(submission: Submission, graded_as: str) -> tuple[str, ...]:
    """One line per thing seen, each naming the cell: for the instructor, never for the student."""
    findings = []
    for cell in submission.cells:
        tree = _parse(cell)
        if tree is None:
            continue
        where = cell.label.replace("your answer cell for", "the answer cell of")
        findings += [f"{where}: patches {what}" for what in _patches(tree)]
        findings += [f"{where}: defines a rigged number type, {what}" for what in _rigged_types(tree)]
    findings += [f"edited the locked cell {grade_id} (it was run as the student's code; the grader used its own)"
                 for grade_id in submission.edited_locked_cells]
    if submission.personalised_for not in (None, graded_as):
        findings.append(f"submitted a notebook personalised for {submission.personalised_for!r} "
                        f"(graded with {graded_as!r}'s numbers)")
    return tuple(findings[:MAX_FINDINGS])
