"""What one assignment teaches beyond its notebook: its numbers, chain tables and misconceptions.

The engine knows no exercise. Everything specific to an assignment lives beside its source notebook, in
`source/<assignment>/exercises.py` (the instructor's own, trusted file, like the hidden tests): a plain
module whose names, all optional, are

- `NUMBER_GROUPS`: the layout of the locked `numbers` cell (`P = {...}`), one line per group of names;
- `derive(rng)`: one student's numbers when `variants: true` (`rng` is a `random.Random` seeded from an
  HMAC of the course secret and the student's id), and `constraint_violations(numbers)`: what makes a set
  of numbers unfit for the exercises (an empty list when they are fit); or `VARIANTS`, which has both (the kit's
  `variants(EXERCISES)` derives them from each exercise's declared ranges, course/authoring/draws.py), and which
  a module-level function of either name overrides;
- `CHAINS`: question id -> the `ChainStep`s of its backward walk, shown as a table in the feedback;
- `GRAPHS`: question id -> its torch build, `build(P) -> course.pipeline.graph_chain.Computation`: the chain table of a
  question with no `CHAINS` entry is read from the graph torch records (course/pipeline/graph_chain.py);
- `MISCONCEPTIONS`: `Rule`s that recognise a wrong answer betraying a specific misunderstanding;
- `FUNCTION_POINTS`: function answer -> the name, in the numbers cell, of the number its exercise asks about
  (`{"slope": "slope_x"}`): the grader always calls the function there too (course/pipeline/probes.py).

An assignment without the file (or with an empty one) releases, self-checks and grades; it only gets no
variants, no chain tables and no misconception notes. The predicates below help write rules: each looks
only at plain values (the student's validated answers and torch's references from the judge).
"""

from __future__ import annotations

import importlib.util
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course.core.answers import VALUE, PlainValue
from course.core.errors import SourceNotebookError
from course.forms import matches

EXERCISES_FILE = "exercises.py"


@dataclass(frozen=True)
class ChainStep:
    """One step of the backward walk: the gradient named `gradient` arrives via the node `node`, whose local
    derivative is `local`; `forward` names the answer holding the node's forward value (or None), `upstream`
    the gradient that arrives at the node from the step before (None for the first step)."""

    node: str
    local: str
    forward: str | None
    gradient: str
    upstream: str | None
    # A step read from torch's graph (course/pipeline/graph_chain.py) may show a gradient no answer holds: then
    # `gradient` is the value's name in the walk, `asked` is False, and the graph's own numbers fill torch's
    # columns (`torch_gradient`, and `torch_local`, the local derivative). Hand-written steps have neither.
    asked: bool = True
    torch_gradient: PlainValue = field(default=None, compare=False)
    torch_local: PlainValue = field(default=None, compare=False)


@dataclass(frozen=True)
class Rule:
    """A misconception: `applies(values)` says whether the answer `value` shows it; `values` maps each answer
    name to the judge's result for it (`student`, `expected`, `correct`, `status`). `message` may say how the
    answer stands against torch's: it is shown only in feedback that shows torch's values. `idea` is shown in
    verdicts-only feedback too, so it names the concept the slip violates, never the answer."""

    id: str
    value: str
    applies: Callable[[dict[str, Any]], bool]
    message: str
    idea: str


Numbers = dict[str, Any]


@dataclass(frozen=True)
class Content:
    """One assignment's content, as read from its exercises module (empty: none of it)."""

    number_groups: tuple[tuple[str, ...], ...] = ()
    derive: Callable[[random.Random], Numbers] | None = None
    constraint_violations: Callable[[Numbers], list[str]] = field(default=lambda numbers: [])
    chains: dict[str, tuple[ChainStep, ...]] = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()
    path: Path | None = None
    function_points: dict[str, str] = field(default_factory=dict)  # function answer -> its number's name in P
    graphs: dict[str, Callable[[Numbers], Any]] = field(default_factory=dict)  # question id -> its torch build

    def groups_for(self, numbers: Numbers) -> list[list[str]]:
        """The lines of the numbers cell for these numbers: the module's groups, then any name they leave out."""
        grouped = [[name for name in group if name in numbers] for group in self.number_groups]
        placed = {name for group in grouped for name in group}
        return [group for group in grouped if group] + [[name] for name in numbers if name not in placed]


NO_CONTENT = Content()


def load_exercises_module(path: Path) -> Any:
    name = f"_autograd_course_exercises_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SourceNotebookError(f"{path}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look their module up by name
    try:
        spec.loader.exec_module(module)
    except SourceNotebookError:
        del sys.modules[name]
        raise  # the kit's own refusal (course/authoring), which names the file and the exercise already
    except Exception as error:
        del sys.modules[name]
        raise SourceNotebookError(
            f"{path}: the exercises module fails to load: {type(error).__name__}: {error}"
        ) from None
    return module


def _checked(path: Path, module: Any) -> Content:
    where = str(path)
    groups = getattr(module, "NUMBER_GROUPS", ())
    if not all(isinstance(group, list | tuple) and all(isinstance(n, str) for n in group) for group in groups):
        raise SourceNotebookError(f"{where}: NUMBER_GROUPS must be a list of lists of names")
    chains = getattr(module, "CHAINS", {})
    if not isinstance(chains, dict) or not all(
        isinstance(steps, list | tuple) and all(isinstance(step, ChainStep) for step in steps)
        for steps in chains.values()
    ):
        raise SourceNotebookError(f"{where}: CHAINS must map question ids to lists of ChainStep")
    rules = getattr(module, "MISCONCEPTIONS", ())
    if not all(isinstance(rule, Rule) for rule in rules):
        raise SourceNotebookError(f"{where}: MISCONCEPTIONS must be a list of Rule")
    twice = sorted({rule.id for rule in rules if sum(other.id == rule.id for other in rules) > 1})
    if twice:  # the class summary counts notes by id: two rules of one id would be counted as one
        raise SourceNotebookError(
            f"{where}: MISCONCEPTIONS has two rules with the id {', '.join(map(repr, twice))}: give each its own"
        )
    function_points = getattr(module, "FUNCTION_POINTS", {})
    if not isinstance(function_points, dict) or not all(
        isinstance(name, str) and isinstance(number, str) for name, number in function_points.items()
    ):
        raise SourceNotebookError(
            f"{where}: FUNCTION_POINTS must map function answers to names of the numbers cell's P (both strings)"
        )
    graphs = getattr(module, "GRAPHS", {})
    if not isinstance(graphs, dict) or not all(
        isinstance(question, str) and callable(build) for question, build in graphs.items()
    ):
        raise SourceNotebookError(
            f"{where}: GRAPHS must map question ids to functions (the exercise's numbers "
            "-> a course.pipeline.graph_chain.Computation)"
        )
    # VARIANTS (`variants(EXERCISES)`, course/authoring/draws.py) derives both from the exercises' declared
    # ranges; a module-level function of either name wins over its.
    declared = getattr(module, "VARIANTS", None)
    derive = getattr(module, "derive", None) or getattr(declared, "derive", None)
    violations = getattr(module, "constraint_violations", None) or getattr(declared, "constraint_violations", None)
    for name, function in (("derive", derive), ("constraint_violations", violations)):
        if function is not None and not callable(function):
            raise SourceNotebookError(
                f"{where}: {name} must be a function"
                + (" (VARIANTS: write VARIANTS = variants(EXERCISES))" if declared is not None else "")
            )
    return Content(
        number_groups=tuple(tuple(group) for group in groups),
        derive=derive,
        constraint_violations=violations or (lambda numbers: []),
        chains={question: tuple(steps) for question, steps in chains.items()},
        rules=tuple(rules),
        path=path,
        function_points=dict(function_points),
        graphs=dict(graphs),
    )


def load_content(path: Path) -> Content:
    """The content of the exercises module at `path` (none when the file does not exist)."""
    if not path.is_file():
        return NO_CONTENT
    return _checked(path, load_exercises_module(path))


# ----------------------------------------------------------------------------- predicates for rules


def student(values: dict[str, Any], name: str) -> PlainValue:
    """The student's plain answer `name` (None when it has no plain value)."""
    result = values.get(name)
    return result.student if result is not None and result.status == VALUE else None


def expected(values: dict[str, Any], name: str) -> PlainValue:
    """torch's reference for the answer `name` (None when the question was not scored)."""
    result = values.get(name)
    return result.expected if result is not None else None


def wrong(values: dict[str, Any], name: str) -> bool:
    """The student gave a plain value for `name` and it does not match torch."""
    result = values.get(name)
    return result is not None and result.status == VALUE and not result.correct


def student_equals(values: dict[str, Any], name: str, target: PlainValue, tolerance: float = 1e-6) -> bool:
    """The student's wrong answer `name` equals `target` (the value a misunderstanding would give)."""
    return wrong(values, name) and target is not None and matches(student(values, name), target, tolerance)


def constant_list(values: dict[str, Any], name: str, like: str) -> bool:
    """The student's wrong list `name` repeats the first value of torch's list `like` at every position."""
    reference = expected(values, like)
    return type(reference) is list and bool(reference) and student_equals(values, name, [reference[0]] * len(reference))
