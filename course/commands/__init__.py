"""The command line's commands, one module per reader (`authoring`: the instructor's release, new and kit;
`student`: check and submit; `term`: grade, merge and export; `gradescope`: autograder; `service`: serve). Each
command is a `Command`: its parser's arguments and the handler that parses nothing more, calls one function of a
layer below and prints. `course/cli.py` lists them, in the order `--help` shows them, and runs one.

The top floor with `course.cli`: a module here may import any layer, and nothing below imports it."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Command:
    """One top-level command: `name` as typed, `summary` the line `autograd-course --help` lists it with (and the
    head of its own --help, unless it is a group of actions, `describe=False`), `add_arguments` its parser's
    arguments (and actions), `run` its handler (the parsed arguments -> the exit status). `helps`: each help text
    the command and its actions show, by `name` or `name action` (tests/test_cli.py checks each is shown)."""

    name: str
    summary: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    helps: Mapping[str, str] = field(default_factory=dict)
    describe: bool = True
