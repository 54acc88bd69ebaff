"""Gradescope's command: `autograder build` (the upload zip) and `autograder run` (its entry point, one submission)."""

from __future__ import annotations

import argparse
import gc
import os
from pathlib import Path

from course.commands import Command
from course.core.config import load_config
from course.core.extras import require
from course.core.output_paths import writable_output

BUILD_HELP = "Build the Gradescope autograder zip (setup.sh, run_autograder, the package, the course)."
RUN_HELP = "Grade the one notebook in ROOT/submission and write ROOT/results/results.json (Gradescope)."


def _autograder_arguments(autograder: argparse.ArgumentParser) -> None:
    actions = autograder.add_subparsers(dest="action", required=True, metavar="ACTION")
    build = actions.add_parser("build", help=BUILD_HELP, description=BUILD_HELP)
    build.add_argument("--out", type=Path, default=Path("dist"), help="where the zips go (default: dist/)")
    build.add_argument("--assignment", help="which assignment (default: one zip for each assignment)")
    run = actions.add_parser("run", help=RUN_HELP, description=RUN_HELP)
    run.add_argument(
        "--root", type=Path, default=None, help="the Gradescope root (default: $AUTOGRADER_ROOT, else /autograder)"
    )


def _autograder(args: argparse.Namespace) -> int:
    require("grader", "autograd-course autograder")
    if args.action == "build":
        from course.platforms.bundle import build_bundle

        config = load_config(args.course)
        names = [args.assignment] if args.assignment else [a.name for a in config.assignments]
        out = writable_output("--out", args.out, config.root)  # the zip holds the answer key
        for name in names:
            path = build_bundle(config, out, name)
            print(
                f"built {path} ({path.stat().st_size / 2**20:.1f} MB): upload it as the Gradescope autograder of {name}"
            )
        return 0
    from course.platforms.gradescope import run_autograder

    root = args.root or Path(os.environ.get("AUTOGRADER_ROOT", "/autograder"))
    # One submission, then the process ends: the cyclic collector would only rescan torch's objects while they
    # are imported (about a tenth of the import) and again as the interpreter exits (a fifth of a second).
    gc.disable()
    results = run_autograder(root)
    gc.freeze()
    print(f"score {results['score']:g}; results in {root / 'results' / 'results.json'}")
    return 0


AUTOGRADER = Command(
    "autograder",
    "Gradescope: build the upload zip, or run as its entry point.",
    _autograder_arguments,
    _autograder,
    {"autograder build": BUILD_HELP, "autograder run": RUN_HELP},
    describe=False,
)
