"""Python syntax trees for the grader's own analyses (hand work, hidden tests, the assignment's cells)."""

from __future__ import annotations

import ast
import threading

_PARSING = threading.Lock()


def parse_python(source: str) -> ast.Module:
    """ast.parse, one thread at a time: CPython 3.11 keeps the depth of the tree it is building in state shared
    by every thread, so two threads parsing at once can fail with a SystemError ("AST constructor recursion
    depth mismatch", python/cpython#106905); in a batch that made an honest notebook an autograder error."""
    with _PARSING:
        return ast.parse(source)
