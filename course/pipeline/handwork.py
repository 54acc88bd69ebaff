"""Hand work stays hand work: spot answers whose value the student's code computed with torch.

A static look at the submitted text in the grader (the code is parsed, never run), judged per value: an
answer counts as computed when the statement that last gives it its value uses torch (`torch`, `.backward`,
`.grad`, `.item`, ...) or a name that was itself computed with torch. `import torch` alone flags nothing.

The text is the student's, so the work is bounded: IPython syntax is neutralised line by line (linear; no
IPython transformer runs in the grader), a cell over MAX_PARSE_CHARS is skipped, and the analysis of one
submission stops after MAX_ANALYSED_CHARS or ANALYSIS_SECONDS, saying so. Syntax trees are walked with a
stack of our own, never by recursion (a chain of a few hundred `elif`s is a tree that deep); a cell the
parser itself cannot take (nested deeper than it goes) is left out of the static checks, saying so too. The
sandbox runs every cell as Python does either way: only these checks go without it, never the grade.
"""

from __future__ import annotations

import ast
import functools
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

from course.core.syntax import parse_python
from course.core.text import safe_text
from course.pipeline.submission import Cell

TORCH_ATTRIBUTES = {"backward", "grad", "item", "retain_grad", "detach", "tolist", "numpy"}
MAX_PARSE_CHARS = 200_000
MAX_ANALYSED_CHARS = 2_000_000
ANALYSIS_SECONDS = 2.0

_TIMING_MAGIC = re.compile(r"^(\s*)%(?:time|timeit|prun)\b(?:\s+-\S+)*\s*(.*)$")
_MAGIC_ASSIGNMENT = re.compile(r"^(\s*)([A-Za-z_][\w\s,]*?)\s*=\s*[!%]")
_IPYTHON_LINE = re.compile(r"^(\s*)(?:[!%?]|.*\?\s*$)")


@dataclass(frozen=True)
class HandWork:
    """The answer names computed with torch, and whether every cell could be looked at."""

    computed: frozenset[str]
    complete: bool = True


def python_text(source: str) -> str:
    """Cell text with IPython syntax (magics, `!cmd`, `name?`) made plain Python, one line at a time.
    Timing magics keep the statement they time; anything else becomes `pass` (or `name = None`)."""
    lines = []
    for line in source.split("\n"):
        timed = _TIMING_MAGIC.match(line)
        assigned = _MAGIC_ASSIGNMENT.match(line)
        ipython = _IPYTHON_LINE.match(line)
        if line.lstrip().startswith("%%"):
            lines.append("pass")
        elif timed:
            lines.append(f"{timed.group(1)}{timed.group(2) or 'pass'}")
        elif assigned:
            lines.append(f"{assigned.group(1)}{assigned.group(2).strip()} = None")
        elif ipython:
            lines.append(f"{ipython.group(1)}pass")
        else:
            lines.append(line)
    return "\n".join(lines)


class _Flow:
    """Which names hold values computed with torch, statement by statement, in the order cells run."""

    def __init__(self) -> None:
        self.torch_names = {"torch"}

    def uses_torch(self, node: ast.AST | None) -> bool:
        if node is None:
            return False
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name) and inner.id in self.torch_names:
                return True
            if isinstance(inner, ast.Attribute) and inner.attr in TORCH_ATTRIBUTES:
                return True
        return False

    def mark(self, targets: Iterable[ast.AST], computed: bool) -> None:
        for target in targets:
            for inner in ast.walk(target):
                if isinstance(inner, ast.Name):
                    if computed:
                        self.torch_names.add(inner.id)
                    else:
                        self.torch_names.discard(inner.id)

    def run(self, statements: list[ast.stmt], deadline: float = float("inf")) -> bool:
        """Follow the statements in the order they run, nested blocks included; False when the deadline came
        first. Iterative, never recursive: a student's few hundred `elif`s (each nested in the last one's
        `orelse`) are as deep a tree as the parser allows, and the grader's stack must not follow them."""
        pending = list(reversed(statements))  # next statement last
        followed = 0
        while pending:
            followed += 1
            if followed % 256 == 0 and time.monotonic() > deadline:
                return False
            pending.extend(reversed(self.statement(pending.pop())))
        return True

    def statement(self, node: ast.stmt) -> list[ast.stmt]:
        """Take in one statement; returns the statements nested in it, to follow next (in order)."""
        if isinstance(node, ast.Import | ast.ImportFrom):
            from_torch = isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch"
            for alias in node.names:
                if from_torch or alias.name.split(".")[0] == "torch":
                    self.torch_names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.Assign):
            self.mark(node.targets, self.uses_torch(node.value))
        elif isinstance(node, ast.AnnAssign):
            self.mark([node.target], self.uses_torch(node.value))
        elif isinstance(node, ast.AugAssign):
            self.mark([node.target], self.uses_torch(node.value) or self.uses_torch(node.target))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            # A parameter shadows a global of the same name: `def f(x): return 3 * x ** 2` is hand work even
            # after `x = torch.tensor(4.0)` elsewhere.
            arguments = node.args
            parameters = {
                a.arg
                for a in [
                    *arguments.posonlyargs,
                    *arguments.args,
                    *arguments.kwonlyargs,
                    *filter(None, [arguments.vararg, arguments.kwarg]),
                ]
            }
            inner = _Flow()
            inner.torch_names = self.torch_names - parameters
            self.mark([ast.Name(node.name)], any(inner.uses_torch(part) for part in node.body))
        elif isinstance(node, ast.For | ast.AsyncFor):
            self.mark([node.target], self.uses_torch(node.iter))
            return node.body + node.orelse
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                if item.optional_vars is not None:
                    self.mark([item.optional_vars], self.uses_torch(item.context_expr))
            return node.body
        elif isinstance(node, ast.If | ast.While):
            return node.body + node.orelse
        elif isinstance(node, ast.Try):
            return node.body + [s for handler in node.handlers for s in handler.body] + node.orelse + node.finalbody
        return []


@dataclass(frozen=True)
class ParsedCells:
    """The student's cells as syntax trees, in the order they run, for the grader's static looks (hand work,
    the integrity report); `complete` is False when the budget stopped the parsing before the end."""

    trees: tuple[tuple[Cell, ast.Module], ...]
    complete: bool = True
    syntax_errors: tuple[str, ...] = ()  # "<cell label>, line N: <what Python says>", in the cells' order


def parse_cells(cells: tuple[Cell, ...]) -> ParsedCells:
    """Parse each student cell once, within the budget (see the module's docstring)."""
    trees, syntax_errors = [], []
    started, analysed, complete = time.monotonic(), 0, True
    for cell in cells:
        if cell.index < 0:
            continue  # the course's own setup and numbers cells
        analysed += len(cell.source)
        if analysed > MAX_ANALYSED_CHARS or time.monotonic() - started > ANALYSIS_SECONDS:
            complete = False
            break
        if len(cell.source) > MAX_PARSE_CHARS:
            complete = False
            continue
        try:
            source = python_text(cell.source)
            trees.append((cell, _parsed(source) if len(source) <= CACHED_PARSE_CHARS else parse_python(source)))
        except SyntaxError as error:
            if not cell.source.lstrip().startswith("%%"):  # a cell magic's body need not be Python
                syntax_errors.append(f"{cell.label}, line {error.lineno}: {safe_text(error.msg, 200, one_line=True)}")
        except ValueError:
            continue  # text Python cannot compile at all (a NUL, a lone surrogate): the cell runs nothing either
        except (RecursionError, MemoryError):
            # Nested deeper than the parser goes (RecursionError, or MemoryError from its own stack). The sandbox
            # judges the cell as Python does; only the static checks go without it, and the feedback says so.
            complete = False
            continue
    return ParsedCells(tuple(trees), complete, tuple(syntax_errors))


CACHED_PARSE_CHARS = 2000  # small cells (nearly all answer cells) are parsed once per distinct text


@functools.lru_cache(maxsize=1024)
def _parsed(source: str) -> ast.Module:
    """A small cell's syntax tree, parsed once per batch for every student whose cell has this very text
    (the trees are only read, never changed; a SyntaxError is not cached)."""
    return parse_python(source)


def computed_answers(parsed: ParsedCells, answer_names: tuple[str, ...]) -> HandWork:
    """The answer names whose last value some student cell computed with torch (within ANALYSIS_SECONDS;
    incomplete when the budget or the parsing stopped short)."""
    flow = _Flow()
    deadline = time.monotonic() + ANALYSIS_SECONDS
    complete = parsed.complete
    for _, tree in parsed.trees:
        if not flow.run(tree.body, deadline):
            complete = False
            break
    return HandWork(frozenset(flow.torch_names & set(answer_names)), complete)
