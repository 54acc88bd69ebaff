"""The command line: parse, call one core function, print. CourseError becomes one line, exit 1.

The commands live in course/commands/, one module per reader; this module lists them (COMMANDS, in the order
`--help` shows them), builds the parser and runs the one asked for."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from course import __version__
from course.commands import Command, authoring, gradescope, service, student, term
from course.core.deferred_imports import defer_start_up_imports
from course.core.errors import CourseError
from course.core.files import os_reason
from course.core.logs import DEFAULT_LEVEL, LEVELS
from course.core.logs import configure as configure_logging

# Every command, in the order `autograd-course --help` lists them; a new command is one line here.
COMMANDS: tuple[Command, ...] = (
    authoring.RELEASE,
    student.CHECK,
    term.GRADE,
    term.MERGE,
    term.EXPORT,
    gradescope.AUTOGRADER,
    service.SERVE,
    student.SUBMIT,
    authoring.NEW,
    authoring.KIT,
    authoring.PREVIEW,
    authoring.DRAFT_RULES,
)
HANDLERS = {command.name: command.run for command in COMMANDS}
COMMAND_HELP = {name: text for command in COMMANDS for name, text in command.helps.items()}

DESCRIPTION = """\
Grade the autograd course's notebooks safely, on top of nbgrader. Student code runs in a sandbox; only
plain numbers come back, and the grader recomputes every reference gradient with torch itself.
Run it in the course root (the folder holding source/ and nbgrader_config.py) or pass --course."""

EPILOG = """\
a term, step by step:
  autograd-course release                        source/ -> release/, proven sound with nbgrader autograde
  nbgrader release_assignment autograd           students fetch and submit through nbgrader's exchange
  nbgrader collect autograd                      -> submitted/<student>/autograd/ with timestamp.txt
  autograd-course grade --roster roster.csv      grades-autograd.csv, feedback/, the gradebook, autograded/
  nbgrader release_feedback autograd             students: nbgrader fetch_feedback autograd
  autograd-course export --format canvas --roster roster.csv    -> canvas-autograd.csv for the LMS

students check their notebook before submitting with: autograd-course check NOTEBOOK
(or nbgrader validate / JupyterLab's Validate button). Settings: source/course.yaml. Details: README.md and docs/.
Run autograd-course COMMAND --help for a command's options."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autograd-course",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"autograd-course {__version__}")
    parser.add_argument(
        "--course",
        type=Path,
        default=Path("."),
        help="the course root, the folder holding source/ (default: the current folder)",
    )
    parser.add_argument(
        "--log-level",
        choices=LEVELS,
        default=DEFAULT_LEVEL,
        help="the least level of the long-running parts' log lines on stderr (the sandbox's pools "
        f"and retries, the service's worker, a class's grading); default: {DEFAULT_LEVEL}",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        described = command.summary if command.describe else None
        command.add_arguments(commands.add_parser(command.name, help=command.summary, description=described))
    return parser


def main(argv: list[str] | None = None) -> int:
    # A command's own process, before anything imports nbformat, nbgrader or torch (deferred_imports.py; importing
    # this module imports none of them, tests/test_deferred_imports.py): no IRI grammar is compiled until a schema
    # checks one, nbgrader's package __init__ (its server extensions) runs only if a server asks, its torch needs no
    # Python meta kernels until something traces or compiles (its students' code runs in the sandbox's interpreter,
    # which imports nothing of ours), and nbgrader's utilities need setuptools only to unpack an archive. Here and
    # not in `import course`, which a student's kernel does too.
    defer_start_up_imports()
    args = _parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        return HANDLERS[args.command](args)
    except CourseError as error:
        print(f"autograd-course {args.command}: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # a disk that filled up, a folder taken away mid-run: one sentence, not a traceback
        logging.getLogger(__name__).debug("stopped by an OS error", exc_info=True)
        where = f" ({error.filename})" if error.filename else ""
        whole = (
            "; no result file was left half-written (each is written whole or not at all)"
            if args.command in ("grade", "merge", "export")
            else ""
        )
        print(f"autograd-course {args.command}: stopped: {os_reason(error)}{where}{whole}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        unfinished = (
            ""
            if args.command != "grade"
            else (
                "; the class is not finished: the grades file may miss students or still hold an earlier run's grades "
                "for some, so run the same command again before using it"
            )
        )
        print(f"autograd-course {args.command}: interrupted{unfinished}", file=sys.stderr)
        return 130
