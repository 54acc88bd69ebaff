"""The instructor's authoring commands: `release` (source/ -> release/, proven sound), `new assignment` (a scaffold)
and `kit write` (an assignment's cells written from its exercise definitions)."""

from __future__ import annotations

import argparse
from pathlib import Path

from course.commands import Command
from course.core.config import load_config
from course.core.extras import require
from course.core.text import plural

RELEASE_HELP = "Regenerate release/ from source/ with nbgrader and prove the release sound."
NEW_ASSIGNMENT_HELP = (
    "Start an assignment: source/NAME/ with a notebook, an example exercise defined for the "
    "authoring kit, and its entry in course.yaml; it releases and grades as it stands."
)
KIT_WRITE_HELP = (
    "Write the source notebook's cells (question, answer, form check, graded test) from the exercise "
    "definitions of the assignment's exercises module (docs/authoring.md, the authoring kit)."
)


def _release_arguments(release: argparse.ArgumentParser) -> None:
    release.add_argument("--assignment", help="which assignment (default: every assignment of the course YAML)")
    release.add_argument(
        "--no-verify",
        action="store_true",
        help="skip the nbgrader autograde proof (solutions earn full marks, the release zero)",
    )
    release.add_argument(
        "--students",
        type=Path,
        metavar="ROSTER",
        help="also write personalised/<assignment>/<id>/ with each student's own numbers, outside "
        "release/, which nbgrader hands to everyone (variants: true; a CSV with a student_id "
        "column)",
    )


def _release(args: argparse.Namespace) -> int:
    require("grader", "autograd-course release")
    from course.authoring.release import read_roster, release
    from course.pipeline.assignment import load_course_assignment

    config = load_config(args.course)
    students = read_roster(args.students) if args.students else None
    names = [args.assignment] if args.assignment else [a.name for a in config.assignments]
    for name in names:  # every assignment checked before any is written: a refusal never leaves a release half done
        load_course_assignment(config, name)
    for name in names:
        report = release(config, name, verify=not args.no_verify, students=students)
        print(
            f"released {report.release_notebook} ({plural(report.questions, 'question')}, {report.max_score:g} points)"
        )
        if report.removed_stale is not None:
            print(
                f"removed {report.removed_stale}, the personalised copies an earlier version left inside the "
                "release (nbgrader's release_assignment would send every one of them to every student). If you "
                "already ran nbgrader release_assignment, the exchange still holds them: run `nbgrader "
                f"release_assignment {name} --force` now to replace its outbound copy"
            )
        if report.personalised_folder is not None:
            said = "made again from this release for the ids already there; " if report.refreshed else ""
            print(
                f"personalised copies {'refreshed ' if report.refreshed else ''}for "
                f"{plural(report.personalised, 'student')} in {report.personalised_folder} ({said}not in nbgrader's "
                "release: hand each student their own folder, docs/authoring.md)"
            )
        if report.removed_personalised is not None:
            why = (
                "no student's folder was in it"
                if config.variants
                else "variants are off: every student gets the release"
            )
            print(f"removed {report.removed_personalised}, the personalised copies of an earlier release ({why})")
        if report.solution_score is not None:
            print(
                f"verified with nbgrader autograde: source solutions {report.solution_score:g}/"
                f"{report.max_score:g}, untouched release {report.untouched_score:g}/{report.max_score:g}"
            )
        if report.without_idea:
            print(
                f"note: verdicts-only feedback explains {', '.join(report.without_idea)} by ✓ or ✗ alone: their "
                "hidden tests give no idea= (docs/authoring.md, hidden tests)"
            )
    return 0


def _new_arguments(new: argparse.ArgumentParser) -> None:
    new_actions = new.add_subparsers(dest="action", required=True, metavar="ACTION")
    assignment = new_actions.add_parser("assignment", help=NEW_ASSIGNMENT_HELP, description=NEW_ASSIGNMENT_HELP)
    assignment.add_argument("name", metavar="NAME", help="the assignment's name: its folder under source/")


def _new(args: argparse.Namespace) -> int:
    from course.authoring.scaffold import new_assignment

    made = new_assignment(args.course, args.name)
    print(
        f"new assignment {args.name}: {made.notebook}, {made.exercises}, listed in {made.config}; next: "
        f"autograd-course release --assignment {args.name}"
    )
    return 0


def _kit_arguments(kit: argparse.ArgumentParser) -> None:
    kit_actions = kit.add_subparsers(dest="action", required=True, metavar="ACTION")
    write = kit_actions.add_parser("write", help=KIT_WRITE_HELP, description=KIT_WRITE_HELP)
    write.add_argument(
        "--assignment", help="which assignment (default: every one whose exercises module defines EXERCISES)"
    )


def _kit(args: argparse.Namespace) -> int:
    from course.authoring.scaffold import write_assignment

    notes: list[str] = []
    written = write_assignment(load_config(args.course), args.assignment, notes)
    for name, changed in written:
        print(f"{name}: {'cells written' if changed else 'already up to date'}")
    for line in notes:
        print(line)
    if not written:
        print(
            "no assignment's exercises module defines EXERCISES: nothing to write (docs/authoring.md, the "
            "authoring kit)"
        )
    return 0


RELEASE = Command("release", RELEASE_HELP, _release_arguments, _release, {"release": RELEASE_HELP})
NEW = Command(
    "new",
    "Start something new from a scaffold: an assignment.",
    _new_arguments,
    _new,
    {"new assignment": NEW_ASSIGNMENT_HELP},
    describe=False,
)
KIT = Command(
    "kit",
    "The authoring kit: exercises defined once, their cells written from them.",
    _kit_arguments,
    _kit,
    {"kit write": KIT_WRITE_HELP},
    describe=False,
)
