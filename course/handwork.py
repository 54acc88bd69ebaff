"""Hand work stays hand work: spot answers that the student's code computed with torch.

A static look at the submitted text in the grader (the code is parsed, never run). An answer name counts
as computed when a cell assigns it and that cell uses torch (`torch`, `.backward`, `.grad`, `.item`).
"""

from __future__ import annotations

import ast

from course.sandbox import Cell

TORCH_ATTRIBUTES = {"backward", "grad", "item", "retain_grad", "detach"}
MAX_PARSE_CHARS = 200_000


def _python_text(source: str) -> str:
    """Cell text with IPython syntax (magics, `!cmd`) turned into plain Python."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        return TransformerManager().transform_cell(source)
    except Exception:
        return source


def _uses_torch(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "torch":
            return True
        if isinstance(node, ast.Attribute) and node.attr in TORCH_ATTRIBUTES:
            return True
        if isinstance(node, ast.Import | ast.ImportFrom) and any(
            (alias.name or "").startswith("torch") for alias in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch"):
            return True
    return False


def _assigned(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.FunctionDef):
            names.add(node.name)
        for target in targets:
            for inner in ast.walk(target):
                if isinstance(inner, ast.Name):
                    names.add(inner.id)
    return names


def computed_answers(cells: tuple[Cell, ...], answer_names: tuple[str, ...]) -> set[str]:
    """The answer names that some student cell assigns while using torch."""
    wanted = set(answer_names)
    flagged: set[str] = set()
    for cell in cells:
        if cell.index < 0 or len(cell.source) > MAX_PARSE_CHARS:
            continue  # the course's own setup cell, or text too long to be worth parsing
        try:
            tree = ast.parse(_python_text(cell.source))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        if _uses_torch(tree):
            flagged |= _assigned(tree) & wanted
    return flagged
