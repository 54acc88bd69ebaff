"""The `preview` command's parser and handler, kept beside its core (course/authoring/preview.py) so that the
command line registers it in three lines. Importing this module imports neither nbgrader nor torch
(tests/test_deferred_imports.py): the core is imported when the command runs."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = (
    "Write, offline and before anything is released, what a student sees: the released notebook, and the "
    "feedback pages of the answer key, the untouched release and a wrong answer you name, in both feedback modes."
)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    preview = commands.add_parser("preview", help=HELP, description=HELP)
    preview.add_argument(
        "--assignment", help="which assignment (default: the course's only one; with several, name one)"
    )
    preview.add_argument(
        "--wrong",
        action="append",
        default=[],
        metavar="ANSWER=VALUE",
        help="a wrong value for one answer of the answer key, as Python writes it (gate_df_dx=4, "
        "neuron_df_dx=[0.4,-0.6]); repeat for several answers in the one wrong notebook (default: the first "
        "number answer not 0, its sign flipped)",
    )
    preview.add_argument(
        "--out",
        type=Path,
        default=None,
        help="the preview's folder, replaced whole at every run (default: preview/<assignment>/ in the course "
        "root; never inside source/, release/ or nbgrader's folders)",
    )


def run(args: argparse.Namespace) -> int:
    from course.core.config import load_config
    from course.core.extras import require

    require("grader", "autograd-course preview")  # before the core's imports: nbgrader's, nbconvert's, torch's
    from course.authoring.preview import preview

    made = preview(load_config(args.course), args.assignment, wrong=args.wrong, out=args.out)
    for line in made.lines():
        print(line)
    return 0 if made.sound else 1
