"""The instructor's authoring commands: `release` (source/ -> release/, proven sound), `new assignment` (a scaffold),
`kit write` (an assignment's cells written from its exercise definitions), `kit remove` (an exercise taken out) and
`preview` (what a student sees, offline, before anything is released). Importing this module imports neither
nbgrader nor torch (tests/test_deferred_imports.py): each core is imported when its command runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from course.commands import Command
from course.core.config import load_config
from course.core.errors import CourseError
from course.core.extras import require
from course.core.text import plural

RELEASE_HELP = "Regenerate release/ from source/ with nbgrader and prove the release sound."
NEW_ASSIGNMENT_HELP = (
    "Start an assignment: source/NAME/ with a notebook, an example exercise defined for the "
    "authoring kit, and its entry in course.yaml; it releases and grades as it stands."
)
PREVIEW_HELP = (
    "Write, offline and before anything is released, what a student sees: the released notebook, and the "
    "feedback pages of the answer key, the untouched release and a wrong answer you name, in both feedback modes."
)
DRAFT_RULES_HELP = (
    "Draft misconception rules from the slips the class's wrong values share (after `grade`): print them, or "
    "append them to the assignment's exercises module with --accept."
)
KIT_WRITE_HELP = (
    "Write the source notebook's cells (question, answer, form check, graded test) from the exercise "
    "definitions of the assignment's exercises module (docs/authoring.md, the authoring kit)."
)
KIT_REMOVE_HELP = (
    "Remove an exercise the kit wrote: its cells and its numbers from the source notebook, and its definition "
    "from the exercises module where that edit is safe (else it says what to delete by hand)."
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
        for warning in report.warnings:
            print(f"warning: {warning}")
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
    remove = kit_actions.add_parser("remove", help=KIT_REMOVE_HELP, description=KIT_REMOVE_HELP)
    remove.add_argument("exercise", metavar="EXERCISE", help="the exercise's id (the stem of its cells: test_<id>)")
    remove.add_argument(
        "--assignment", help="which assignment (default: the one whose source notebook holds the exercise)"
    )


def _kit(args: argparse.Namespace) -> int:
    if args.action == "remove":
        return _kit_remove(args)
    from course.authoring.scaffold import write_assignment

    notes: list[str] = []
    errors: list[str] = []
    written = write_assignment(load_config(args.course), args.assignment, notes, errors)
    for name, changed in written:
        print(f"{name}: {'cells written' if changed else 'already up to date'}")
    for line in notes:
        print(line)
    for line in errors:
        print(f"error: {line}", file=sys.stderr)
    if not written:
        print(
            "no assignment's exercises module defines EXERCISES: nothing to write (docs/authoring.md, the "
            "authoring kit)"
        )
    return 1 if errors else 0


def _kit_remove(args: argparse.Namespace) -> int:
    from course.authoring.kit_remove import remove_exercise

    made = remove_exercise(load_config(args.course), args.exercise, args.assignment)
    numbers = f" and {', '.join(made.numbers)} from its numbers cell" if made.numbers else ""
    print(f"{made.assignment}: removed exercise {args.exercise!r}: {plural(made.cells, 'cell')}{numbers}")
    if made.definition_removed:
        print(f"{made.assignment}: removed its definition from {made.exercises}")
    elif made.by_hand:
        print(f"{made.assignment}: now {made.by_hand}")
    return 0


def _preview_arguments(preview: argparse.ArgumentParser) -> None:
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


def _preview(args: argparse.Namespace) -> int:
    require("grader", "autograd-course preview")  # before the core's imports: nbgrader's, nbconvert's, torch's
    from course.authoring.preview import preview

    made = preview(load_config(args.course), args.assignment, wrong=args.wrong, out=args.out)
    for line in made.lines():
        print(line)
    return 0 if made.sound else 1


def _draft_rules_arguments(command: argparse.ArgumentParser) -> None:
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


def _draft_rules(args: argparse.Namespace) -> int:
    if args.least is not None and args.least < 1:
        raise CourseError(f"--least {args.least}: give how many students, at least 1")
    require("grader", "autograd-course draft-rules")  # before the core's imports: torch's
    from course.authoring.rule_drafts import LEAST, accept, draft_rules

    config = load_config(args.course)
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
        print(f"{assignment.name}: {plural(len(drafts), 'rule')} appended to {module}")
    else:
        print(f"{assignment.name}: {plural(len(drafts), 'draft')}; --accept appends them")
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
    {"kit write": KIT_WRITE_HELP, "kit remove": KIT_REMOVE_HELP},
    describe=False,
)
PREVIEW = Command("preview", PREVIEW_HELP, _preview_arguments, _preview, {"preview": PREVIEW_HELP})
DRAFT_RULES = Command(
    "draft-rules", DRAFT_RULES_HELP, _draft_rules_arguments, _draft_rules, {"draft-rules": DRAFT_RULES_HELP}
)
