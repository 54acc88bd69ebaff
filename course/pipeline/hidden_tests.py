"""Which hidden-test cells compute their references without reading anything of the student's.

A hidden-test cell is run by the judge with every student answer bound by name, so in general its
references could depend on them (`marks.value("b", b, torch.tensor(a) * 2, ...)`), and it must run once
per student. Most cells only compute torch's references from the parameters `P` and pass each answer
straight to `Marks`, which ignores the object and reads the validated answer by name. Such a cell gives
the same references for every student with the same parameters, so the judge runs it once per parameter
set and replays what it handed to `Marks` for each student (course/pipeline/judge.py).

`reads_no_answer` says whether a cell is of that kind, by its syntax alone, and errs towards "no":
- an answer name appears only as the second positional argument of `<marks>.value(...)` or
  `<marks>.function(...)`, where `<marks>` is a name bound only by `<marks> = Marks()`; a marks name is
  used otherwise only in a bare `<marks>.total()` statement (its result, which depends on the student, unused);
- nothing that could reach the answers another way: no imports, `global`/`nonlocal`, reflection builtins
  (`globals`, `vars`, `eval`, `getattr`, ...), underscore attributes (`__globals__`) or frame attributes;
- nothing random (a fresh draw per student would otherwise become one draw per parameter set).
"""

from __future__ import annotations

import ast
import functools

from course.core.syntax import parse_python

REFLECTION = frozenset(
    {
        "globals",
        "locals",
        "vars",
        "eval",
        "exec",
        "compile",
        "__import__",
        "getattr",
        "setattr",
        "delattr",
        "hasattr",
        "dir",
        "breakpoint",
        "input",
        "open",
        "id",
        "memoryview",
        "Unanswered",
        "__builtins__",
    }
)
FRAME_ATTRIBUTES = frozenset(
    {
        "gi_frame",
        "gi_code",
        "cr_frame",
        "ag_frame",
        "f_globals",
        "f_locals",
        "f_back",
        "f_builtins",
        "tb_frame",
        "tb_next",
        "func_globals",
    }
)
RANDOM_WORDS = (
    "rand",
    "seed",
    "random",
    "normal",
    "uniform",
    "bernoulli",
    "multinomial",
    "poisson",
    "dropout",
    "generator",
    "exponential",
    "geometric",
    "cauchy",
    "shuffle",
    "choice",
    "sample",
)
MARKS_METHODS = frozenset({"value", "function"})


@functools.lru_cache(maxsize=256)
def reads_no_answer(source: str, answer_names: frozenset[str]) -> bool:
    """True when the hidden-test code `source` provably hands every answer to Marks untouched and computes
    the same references for every student with the same parameters (see the module's docstring)."""
    try:
        tree = parse_python(source)
    except SyntaxError:
        return False
    made = [node for node in ast.walk(tree) if _makes_marks(node)]
    marks = frozenset(node.targets[0].id for node in made)  # type: ignore[attr-defined]  # _makes_marks
    # the nodes allowed to name an answer, a marks object or Marks itself: the places described above
    allowed = {id(node.targets[0]) for node in made} | {id(node.value.func) for node in made}  # type: ignore[attr-defined]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _is_marks_method(node.func, marks, MARKS_METHODS):
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Name):
                allowed.add(id(node.args[1]))
            allowed.add(id(node.func.value))  # type: ignore[attr-defined]  # checked by _is_marks_method
        elif (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and not node.value.args
            and not node.value.keywords
            and _is_marks_method(node.value.func, marks, frozenset({"total"}))
        ):
            allowed.add(id(node.value.func.value))  # type: ignore[attr-defined]
    restricted = answer_names | marks | {"Marks"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom | ast.Global | ast.Nonlocal):
            return False
        if isinstance(node, ast.Attribute) and (
            node.attr.startswith("_") or node.attr in FRAME_ATTRIBUTES or _random(node.attr)
        ):
            return False
        if isinstance(node, ast.Name):
            if node.id in REFLECTION or _random(node.id):
                return False
            if node.id in restricted and id(node) not in allowed:
                return False
        if _binds(node) & (marks | {"Marks"}):  # a def, argument, `except ... as` or pattern of that name
            return False
    return True


def _makes_marks(node: ast.AST) -> bool:
    """`name = Marks()`."""
    return (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "Marks"
        and not node.value.args
        and not node.value.keywords
    )


def _binds(node: ast.AST) -> set[str]:
    """Names a node binds other than through an ast.Name."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.arg):
        return {node.arg}
    if isinstance(node, ast.ExceptHandler) and node.name:
        return {node.name}
    if isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
        return {node.name}
    if isinstance(node, ast.MatchMapping) and node.rest:
        return {node.rest}
    return set()


def _is_marks_method(func: ast.expr, marks: frozenset[str], methods: frozenset[str]) -> bool:
    return (
        isinstance(func, ast.Attribute)
        and func.attr in methods
        and isinstance(func.value, ast.Name)
        and func.value.id in marks
    )


def _random(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in RANDOM_WORDS)


def scored_without_idea(source: str) -> tuple[str, ...]:
    """The answers a hidden-test cell scores with `<marks>.value("name", ...)` or `.function(...)` without an
    `idea=`, what verdicts-only feedback says in place of the hint (which may tell the answer): such an answer
    is explained there by its verdict alone. By syntax, so a call made in a loop is said once."""
    try:
        tree = parse_python(source)
    except SyntaxError:
        return ()
    marks = frozenset(node.targets[0].id for node in ast.walk(tree) if _makes_marks(node))  # type: ignore[attr-defined]
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and _is_marks_method(node.func, marks, MARKS_METHODS)
            and not any(keyword.arg == "idea" for keyword in node.keywords)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and type(node.args[0].value) is str
        ):
            found.append(node.args[0].value)
    return tuple(dict.fromkeys(found))
