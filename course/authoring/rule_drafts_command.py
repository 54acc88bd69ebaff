"""The `draft-rules` command's parser and handler (its core: course/authoring/rule_drafts.py), registered by the
command line in three lines. Importing this module imports neither torch nor nbgrader (tests/test_deferred_imports.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from course.core.errors import CourseError

HELP = (
    "Draft misconception rules from the slips the class's wrong values share (after `grade`): print them, or "
    "append them to the assignment's exercises module with --accept."
)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    command = commands.add_parser("draft-rules", help=HELP, description=HELP)
    command.add_argument("--assignment", help="which assignment (default: the course's first)")
    command.add_argument(
        "--results",
        type=Path,
        default=None,
        help="the folder `grade` wrote its feedback/ into (default: the course root, grade's own default)",
    )
    command.add_argument(
        "--least", type=int, default=None, help="students sharing a slip before it is drafted (default: 3)"
    )
    command.add_argument("--accept", action="store_true", help="append the drafts to the assignment's exercises module")


def run(args: argparse.Namespace) -> int:
    from course.core.config import load_config

    config = load_config(args.course)
    if args.least is not None and args.least < 1:
        raise CourseError(f"--least {args.least}: give how many students, at least 1")
    from course.authoring.rule_drafts import LEAST, accept, draft_rules

    least = LEAST if args.least is None else args.least
    assignment, drafts = draft_rules(config, args.assignment, args.results or config.root, least=least)
    if not drafts:
        print(f"{assignment.name}: no slip that {least} or more students share, and no author's rule names")
        return 0
    for draft in drafts:
        print(f"# {len(draft.students)} students, {draft.answer}: {draft.slip.sentence}")
        print(draft.source)
    if args.accept:
        module = accept(config, assignment, drafts)
        print(f"{assignment.name}: {len(drafts)} rule{'s' if len(drafts) != 1 else ''} appended to {module}")
    else:
        print(f"{assignment.name}: {len(drafts)} draft{'s' if len(drafts) != 1 else ''}; --accept appends them")
    return 0
