"""`autograd-course new assignment NAME` and `kit write`: a new assignment that releases and grades as it stands,
and the cells of an assignment's exercise definitions written into its notebook (course/authoring/kit.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from course.authoring import kit
from course.core.config import CourseConfig, load_config
from course.core.errors import ConfigError

NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")

# The course's setup cell (docs/authoring.md, cell conventions): the grader hands course/notebook.py to the sandbox.
SETUP = """\
import math
import random
import warnings

import torch

# check_form: the form checks after each answer cell. check_with_torch: does a hand value agree with
# torch's (it never shows torch's value)? Marks: how nbgrader scores the hidden tests.
from course.notebook import Marks, check_form, check_with_torch"""

INTRO = """\
# {name}: by hand first, then with PyTorch

Work every answer out on paper, then type the number you got into its answer cell: replace each `...` with a
plain number (or a list of numbers where the question asks for one). Arithmetic such as `2 * 3 - 1` is fine.
The cell after each answer cell checks only the form of your answers; the grader rebuilds every exercise with
PyTorch and compares. Keep the variable names as they are: the grader looks for them by name. The numbers of
the exercises are in the cell `P` below."""

CLOSING = """\
## Before you submit

Run every cell from the top (*Kernel → Restart Kernel and Run All Cells*) and check that each form check
prints `ok`. Your hand values are what is graded."""

EXERCISES = '''\
"""The exercises of the assignment `{name}`, each defined once for the authoring kit (docs/authoring.md).

`autograd-course kit write --assignment {name}` writes the notebook's cells from EXERCISES: the question, the
answer cell with its template lines and answer key, the locked form check and the graded test, whose hidden
region is each exercise's `build` function. Edit the definitions here, then write again; cells of the notebook
that no definition names (exercises written by hand) are kept as they are.

With `variants: true` in source/course.yaml each student draws their own numbers from each exercise's `vary`
ranges, keeping its `require`ments; VARIANTS derives derive(rng) from them (docs/authoring.md, declared ranges).
"""

from __future__ import annotations

import torch

from course.authoring.kit import Ask, Exercise, chains, number_groups, variants
from course.authoring.ranges import NoZero, OneOf
from course.pipeline.graph_chain import kit_graphs


def square(x):
    x = torch.tensor(float(x), dtype=torch.float64, requires_grad=True)
    y = x ** 2
    y.backward()
    return {{"square_y": y, "square_dy_dx": x.grad}}


EXERCISES = [
    Exercise(
        id="square",
        title="1. The slope of a square",
        question="For y = x² at x = {{{{x}}}}, give y and the slope dy/dx.",
        build=square,
        numbers={{"x": 3}},
        vary={{"x": OneOf(-3, -2, 2, 3, 4)}},
        require=[NoZero()],
        answers=[
            Ask("square_y", hint="x times x.", idea="The forward pass: evaluate y at the point."),
            Ask("square_dy_dx", points=2, hint="The power rule: the slope of x² is 2x.",
                idea="The power rule, then evaluate at the point."),
        ],
    ),
]
NUMBER_GROUPS = number_groups(EXERCISES)
CHAINS = chains(EXERCISES)  # hand-written tables (Exercise(chain=...)), which override the derived ones
GRAPHS = kit_graphs(EXERCISES)  # every other table read from its build's graph
VARIANTS = variants(EXERCISES)
'''


@dataclass(frozen=True)
class NewAssignment:
    notebook: Path
    exercises: Path
    config: Path


def new_assignment(root: Path, name: str) -> NewAssignment:
    """source/<name>/ with a notebook (intro, setup, one example exercise written by the kit, closing words) and its
    exercises module, and the assignment's entry at the end of source/course.yaml's `assignments:`."""
    config = load_config(root)
    config_path = config.root / "source" / "course.yaml"
    if not NAME.fullmatch(name):
        raise ConfigError(
            f"{name!r}: an assignment's name is lower-case letters, digits and _, starting with a "
            "letter (it names a folder and nbgrader's assignment); choose another"
        )
    if any(known.name == name for known in config.assignments):
        raise ConfigError(f"{config_path}: the course already has an assignment {name!r}; choose another name")
    folder = config.root / "source" / name
    if folder.exists():
        raise ConfigError(f"{folder}: already exists; choose another name, or add it to {config_path} by hand")
    notebook = {
        "cells": [
            kit.notebook_cell("markdown", INTRO.format(name=name), "intro", kit.nbgrader_metadata("intro")),
            kit.notebook_cell("code", SETUP, "setup", kit.nbgrader_metadata("setup")),
            kit.notebook_cell("markdown", CLOSING, "before-submit", kit.nbgrader_metadata("before_submit")),
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    config_text = _config_with(config_path, name)  # before anything is written: refused, nothing is
    folder.mkdir(parents=True)
    exercises = folder / "exercises.py"
    exercises.write_text(EXERCISES.format(name=name), encoding="utf-8")
    notebook_path = folder / f"{name}.ipynb"
    notebook_path.write_text(
        kit.dump(kit.write_cells(notebook, kit.load_exercises(exercises), exercises)), encoding="utf-8"
    )
    config_path.write_text(config_text, encoding="utf-8")
    load_config(root).assignment(name)  # the entry reads back
    return NewAssignment(notebook_path, exercises, config_path)


def _config_with(config_path: Path, name: str) -> str:
    """course.yaml's text with the entry appended after the last item of `assignments:`, its comments kept (a YAML
    round trip would drop them); refused, with what to do, where the result would not read back as one more item."""
    import yaml

    text = config_path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    by_hand = (
        f"add `- name: {name}` with `notebook: {name}.ipynb` under `assignments:` in {config_path} by hand, "
        "then run `autograd-course kit write`"
    )
    start = next((index for index, line in enumerate(lines) if line.rstrip() == "assignments:"), None)
    if start is None:
        raise ConfigError(f"{config_path}: no block list `assignments:` to add {name!r} to; {by_hand}")
    end = start + 1
    while end < len(lines) and (lines[end].startswith((" ", "-")) or not lines[end].strip()):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    items = [re.match(r"(\s*)- ", line) for line in lines[start + 1 : end]]
    indent = next((item.group(1) for item in reversed(items) if item), "  ")
    if not lines[end - 1].endswith("\n"):
        lines[end - 1] += "\n"
    lines[end:end] = [f"{indent}- name: {name}\n", f"{indent}  notebook: {name}.ipynb\n"]
    changed = "".join(lines)
    try:
        before, after = yaml.safe_load(text)["assignments"], yaml.safe_load(changed)["assignments"]
    except (yaml.YAMLError, TypeError, KeyError):
        before, after = None, None
    if before is None or after != [*before, {"name": name, "notebook": f"{name}.ipynb"}]:
        raise ConfigError(f"{config_path}: cannot add {name!r} to its `assignments:` as it is written; {by_hand}")
    return changed


def write_assignment(
    config: CourseConfig, name: str | None = None, notes: list[str] | None = None, errors: list[str] | None = None
) -> list[tuple[str, bool]]:
    """Write the cells of the definitions of every assignment with an EXERCISES list (or the one named): (assignment,
    whether its notebook changed). What the author should know is appended to `notes` (the review's warnings among
    them, course/authoring/review.py), what is broken (a hidden test that raises) to `errors`, each line naming its
    assignment."""
    from course.authoring.review import float64_exercises, review
    from course.pipeline.assignment import load_assignment

    settings = [config.assignment(name)] if name else list(config.assignments)
    written = []
    for assignment in settings:
        exercises = config.exercises_module(assignment.name)
        if name is None and "EXERCISES" not in (exercises.read_text(encoding="utf-8") if exercises.is_file() else ""):
            continue  # a hand-written assignment: nothing of the kit's to write
        said: list[str] = []
        notebook = config.source_notebook(assignment.name)
        written.append((assignment.name, kit.write_notebook(notebook, exercises, said, tolerance=config.tolerance)))
        # The notebook as written, its hidden tests run at its own numbers with its answer key (in this process,
        # as the judge runs them): what raises, and answers a slip would pass, are said now, not at release.
        loaded = load_assignment(notebook, assignment.name, exercises)
        reviewed = review(loaded, config.tolerance, float64=float64_exercises(loaded))
        said += [f"warning: {line}" for line in reviewed.warnings]
        if notes is not None:
            notes.extend(f"{assignment.name}: {line}" for line in said)
        if errors is not None:
            errors.extend(f"{assignment.name}: {line}" for line in reviewed.errors)
    return written
