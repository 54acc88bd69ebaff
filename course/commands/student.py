"""A student's commands: `check` (the self-check, run safely) and `submit` (to the course's feedback service)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from course.commands import Command
from course.core.config import find_config
from course.core.errors import CourseError

CHECK_HELP = "Self-check a notebook: run it safely and report, per question, whether each answer has the right form."
SUBMIT_HELP = "Submit a notebook to the course's feedback service and print the score and the feedback link."


def _check_arguments(check: argparse.ArgumentParser) -> None:
    check.add_argument("notebook", type=Path, help="the notebook to check")
    check.add_argument("--assignment", help="which assignment (default: the first in the course YAML)")


def _check(args: argparse.Namespace) -> int:
    from course.pipeline.selfcheck import check_notebook

    report = check_notebook(args.notebook, find_config(args.course), args.assignment)
    for line in report.lines():
        print(line)
    return 0 if report.ready else 1


def _submit_arguments(submit: argparse.ArgumentParser) -> None:
    submit.add_argument("notebook", type=Path, help="the notebook to submit")
    submit.add_argument("--server", required=True, metavar="URL", help="the service's address, e.g. https://host/")
    submit.add_argument(
        "--token",
        default=os.environ.get("AUTOGRAD_TOKEN"),
        metavar="T",
        help="your token, from your personal link (default: $AUTOGRAD_TOKEN)",
    )


def _submit(args: argparse.Namespace) -> int:
    from course.platforms.service.client import submit

    if not args.token:
        raise CourseError("--token is needed (the token of your personal link), or set AUTOGRAD_TOKEN")
    for line in submit(args.notebook, args.server, args.token).lines():
        print(line)
    return 0


CHECK = Command("check", CHECK_HELP, _check_arguments, _check, {"check": CHECK_HELP})
SUBMIT = Command("submit", SUBMIT_HELP, _submit_arguments, _submit, {"submit": SUBMIT_HELP})
