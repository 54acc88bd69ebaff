"""The command line: parse, call one core function, print. CourseError becomes one line, exit 1."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from course import __version__
from course.core.config import CourseConfig, find_config, load_config
from course.core.deferred_imports import defer_start_up_imports
from course.core.errors import CourseError
from course.core.extras import require
from course.core.files import os_reason
from course.core.logs import DEFAULT_LEVEL, LEVELS
from course.core.logs import configure as configure_logging
from course.core.status import Status
from course.core.text import plural
from course.platforms.service.edge import Edge
from course.term.gradebook import COURSE_TOTALS
from course.term.lms import FORMATS

if TYPE_CHECKING:
    from course.platforms.service.tokens import TokensRun

COMMAND_HELP = {
    "release": "Regenerate release/ from source/ with nbgrader and prove the release sound.",
    "check": "Self-check a notebook: run it safely and report, per question, whether each answer has the right form.",
    "grade": "Grade submissions: feedback per student, grades-<assignment>.csv and nbgrader's gradebook.",
    "merge": "Bring the output folders of `grade --shard K/N` into the course, as one unsharded grade would.",
    "export": "Write the grades as the CSV an LMS gradebook imports (Canvas, Moodle), matched through the roster.",
    "autograder build": "Build the Gradescope autograder zip (setup.sh, run_autograder, the package, the course).",
    "autograder run": "Grade the one notebook in ROOT/submission and write ROOT/results/results.json (Gradescope).",
    "serve": "Run the instant-feedback service: students upload a notebook and read its feedback once graded.",
    "serve tokens": "Issue secret tokens, one per student: the roster's students who have none yet (every other "
    "link keeps working), or rotate or revoke one student's, or replace the instructor's.",
    "submit": "Submit a notebook to the course's feedback service and print the score and the feedback link.",
    "new assignment": "Start an assignment: source/NAME/ with a notebook, an example exercise defined for the "
    "authoring kit, and its entry in course.yaml; it releases and grades as it stands.",
    "kit write": "Write the source notebook's cells (question, answer, form check, graded test) from the exercise "
    "definitions of the assignment's exercises module (docs/authoring.md, the authoring kit).",
}


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

    release = commands.add_parser("release", help=COMMAND_HELP["release"], description=COMMAND_HELP["release"])
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

    check = commands.add_parser("check", help=COMMAND_HELP["check"], description=COMMAND_HELP["check"])
    check.add_argument("notebook", type=Path, help="the notebook to check")
    check.add_argument("--assignment", help="which assignment (default: the first in the course YAML)")

    grade = commands.add_parser("grade", help=COMMAND_HELP["grade"], description=COMMAND_HELP["grade"])
    grade.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="submitted/ in nbgrader's layout (the default), a folder of <student>.ipynb, or notebooks",
    )
    grade.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where grades-<assignment>.csv and feedback/ go (default: the course root)",
    )
    grade.add_argument(
        "--assignment",
        help="which assignment (default: the course's only one, else every one "
        "with submissions in nbgrader's submitted/ layout)",
    )
    grade.add_argument(
        "--gradebook",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="record the scores in the course's nbgrader gradebook (default: only when --out is "
        "the course root; --no-gradebook keeps a trial run out of it)",
    )
    grade.add_argument(
        "--roster",
        type=Path,
        metavar="ROSTER",
        help="a CSV with a student_id column: who should have submitted; each one without a "
        "submission gets a row with status missing (default, for a course-root run: the "
        "gradebook's students)",
    )
    grade.add_argument("--quiet", action="store_true", help="print only the summary")
    grade.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="warm sandboxed workers grading in parallel (default: one per core; "
        "0: a fresh interpreter per submission)",
    )

    grade.add_argument(
        "--shard",
        metavar="K/N",
        help="grade only the K-th of N deterministic slices of the class (cut by student, from "
        "submissions inside the course folder) into --out (a folder of its own), for `merge`: a "
        "class graded across machines, each with its warm pool",
    )

    merge = commands.add_parser("merge", help=COMMAND_HELP["merge"], description=COMMAND_HELP["merge"])
    merge.add_argument("outs", nargs="+", type=Path, metavar="OUT", help="the --out folders of every shard")
    merge.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where the merged results go (default: the course root, with nbgrader's gradebook)",
    )
    merge.add_argument("--gradebook", action=argparse.BooleanOptionalAction, default=None, help="as for grade")
    merge.add_argument("--roster", type=Path, metavar="ROSTER", help="as for grade")

    export = commands.add_parser("export", help=COMMAND_HELP["export"], description=COMMAND_HELP["export"])
    export.add_argument(
        "--format",
        required=True,
        choices=sorted(FORMATS),
        help="the LMS: " + "; ".join(f"{name} needs {fmt.needs}" for name, fmt in sorted(FORMATS.items())),
    )
    export.add_argument(
        "--roster",
        type=Path,
        required=True,
        metavar="ROSTER",
        help="CSV: student_id plus the LMS's ids (name, lms_id, sis_user_id, sis_login_id, section, email)",
    )
    export.add_argument(
        "--out",
        type=Path,
        default=None,
        help="the folder holding grades-<assignment>.csv, where <format>-<assignment>.csv goes "
        "(default: the course root)",
    )
    export.add_argument("--assignment", help="which assignment (default: the first in the course YAML)")
    export.add_argument(
        "--column",
        help="the LMS's column title (default: the assignment's name; for Canvas, "
        "'Name (id)' as in Canvas's own export updates that assignment)",
    )

    autograder = commands.add_parser("autograder", help="Gradescope: build the upload zip, or run as its entry point.")
    actions = autograder.add_subparsers(dest="action", required=True, metavar="ACTION")
    build = actions.add_parser(
        "build", help=COMMAND_HELP["autograder build"], description=COMMAND_HELP["autograder build"]
    )
    build.add_argument("--out", type=Path, default=Path("dist"), help="where the zips go (default: dist/)")
    build.add_argument("--assignment", help="which assignment (default: one zip for each assignment)")
    run = actions.add_parser("run", help=COMMAND_HELP["autograder run"], description=COMMAND_HELP["autograder run"])
    run.add_argument(
        "--root", type=Path, default=None, help="the Gradescope root (default: $AUTOGRADER_ROOT, else /autograder)"
    )
    _service_parsers(commands)
    _kit_parsers(commands)
    return parser


def _kit_parsers(commands) -> None:
    new = commands.add_parser("new", help="Start something new from a scaffold: an assignment.")
    new_actions = new.add_subparsers(dest="action", required=True, metavar="ACTION")
    assignment = new_actions.add_parser(
        "assignment", help=COMMAND_HELP["new assignment"], description=COMMAND_HELP["new assignment"]
    )
    assignment.add_argument("name", metavar="NAME", help="the assignment's name: its folder under source/")
    kit = commands.add_parser("kit", help="The authoring kit: exercises defined once, their cells written from them.")
    kit_actions = kit.add_subparsers(dest="action", required=True, metavar="ACTION")
    write = kit_actions.add_parser("write", help=COMMAND_HELP["kit write"], description=COMMAND_HELP["kit write"])
    write.add_argument(
        "--assignment", help="which assignment (default: every one whose exercises module defines EXERCISES)"
    )


def _new(args: argparse.Namespace) -> int:
    from course.authoring.scaffold import new_assignment

    made = new_assignment(args.course, args.name)
    print(
        f"new assignment {args.name}: {made.notebook}, {made.exercises}, listed in {made.config}; next: "
        f"autograd-course release --assignment {args.name}"
    )
    return 0


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


def _service_parsers(commands) -> None:
    serve = commands.add_parser("serve", help=COMMAND_HELP["serve"], description=COMMAND_HELP["serve"])
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="the port (default: 8000)")
    # No default here: argparse lets an action's own default overwrite what was given before the action
    # (`serve --database URL tokens ...` once wrote the tokens into SQLite); `_database` applies the default once.
    serve.add_argument(
        "--database",
        metavar="URL",
        help="SQLAlchemy URL of the service's database, e.g. postgresql+psycopg://user@host/db "
        "(default: $AUTOGRAD_SERVICE_DATABASE, else sqlite service.db in the course root); "
        "the same for its actions (serve --database URL tokens ...)",
    )
    serve.add_argument("--assignment", help="which assignment (default: the first in the course YAML)")
    serve.add_argument(
        "--jobs", type=int, default=None, metavar="N", help="warm sandboxed workers (default: one per core)"
    )
    serve.add_argument(
        "--wait",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long an upload waits for its grade before answering 202 (default: 30)",
    )
    serve.add_argument(
        "--connections",
        type=int,
        metavar="N",
        help=f"connections open at once; the next is answered 503 (default: {Edge.connections})",
    )
    serve.add_argument(
        "--connections-per-client",
        type=int,
        metavar="N",
        help=f"waiting connections (kept alive, or a request not yet in full) from one address, "
        f"without --forwarded-allow-ips; beyond, its longest-waiting one is closed "
        f"(default: {Edge.per_client})",
    )
    serve.add_argument(
        "--header-seconds",
        type=float,
        metavar="SECONDS",
        help=f"from a request's first byte to the end of its headers, else 408 (default: {Edge.header_seconds:g})",
    )
    serve.add_argument(
        "--body-seconds",
        type=float,
        metavar="SECONDS",
        help=f"for an upload's body to arrive after its headers, else 408 (default: {Edge.body_seconds:g})",
    )
    serve.add_argument(
        "--forwarded-allow-ips",
        metavar="IPS",
        help="behind a reverse proxy: the proxy's address(es), whose X-Forwarded-* headers are trusted",
    )
    actions = serve.add_subparsers(dest="action", metavar="ACTION")
    tokens = actions.add_parser("tokens", help=COMMAND_HELP["serve tokens"], description=COMMAND_HELP["serve tokens"])
    tokens.add_argument(
        "roster",
        type=Path,
        nargs="?",
        metavar="ROSTER",
        help="CSV with a student_id column (and LMS ids): a token for each student who has none "
        "yet; every other student's link is left as it is",
    )
    tokens.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help="the tokens file, student_id,token,new rows (mode 600): the tokens issued now (new: "
        "yes) and the earlier rows of FILE that still work (the database keeps only hashes); "
        "the instructor token goes to FILE's name with -instructor.txt",
    )
    change = tokens.add_mutually_exclusive_group()
    change.add_argument(
        "--rotate",
        action="append",
        metavar="STUDENT_ID",
        help="a new token for this student (repeatable; with --out): their old link stops "
        "working; a revoked student gets a working link again",
    )
    change.add_argument(
        "--revoke",
        action="append",
        metavar="STUDENT_ID",
        help="this student's link stops working (repeatable; answers 410, revoked); their "
        "attempts stay in the record; with --out, FILE is rewritten without it",
    )
    change.add_argument(
        "--rotate-instructor",
        action="store_true",
        help="one new instructor token (with --out); every earlier instructor token stops working",
    )
    tokens.add_argument(
        "--database",
        dest="action_database",
        metavar="URL",
        help="as for serve (given before or after `tokens`: one database; two that differ are refused)",
    )

    submit = commands.add_parser("submit", help=COMMAND_HELP["submit"], description=COMMAND_HELP["submit"])
    submit.add_argument("notebook", type=Path, help="the notebook to submit")
    submit.add_argument("--server", required=True, metavar="URL", help="the service's address, e.g. https://host/")
    submit.add_argument(
        "--token",
        default=os.environ.get("AUTOGRAD_TOKEN"),
        metavar="T",
        help="your token, from your personal link (default: $AUTOGRAD_TOKEN)",
    )


def _edge(args: argparse.Namespace) -> Edge:
    given = {
        "connections": args.connections,
        "per_client": args.connections_per_client,
        "header_seconds": args.header_seconds,
        "body_seconds": args.body_seconds,
    }
    for name, value in given.items():
        if value is not None and value <= 0:
            option = "connections-per-client" if name == "per_client" else name.replace("_", "-")
            raise CourseError(f"--{option} must be more than 0, got {value:g}")
    return Edge(**{name: value for name, value in given.items() if value is not None})


def _database(args: argparse.Namespace) -> str | None:
    """The one database of `serve` and its action: --database given before the action or after it (both: the
    same URL, else a refusal), else $AUTOGRAD_SERVICE_DATABASE, else None (SQLite in the course root)."""
    from course.platforms.service.store import shown_url

    before, after = args.database, getattr(args, "action_database", None)
    if before is not None and after is not None and before != after:
        raise CourseError(
            f"serve --database {shown_url(before, Path())} and {args.action} --database "
            f"{shown_url(after, Path())} name two databases: give --database once (the tokens go "
            "where `serve` reads them)"
        )
    return before or after or os.environ.get("AUTOGRAD_SERVICE_DATABASE") or None


def _serve(args: argparse.Namespace) -> int:
    require("service", "autograd-course serve")
    from course.platforms.service.run import serve

    config = load_config(args.course)
    database = _database(args)
    if args.action == "tokens":
        for line in _tokens(args, config, database).lines():
            print(line)
        return 0
    if args.jobs is not None and args.jobs < 1:
        raise CourseError("--jobs must be 1 or more")
    serve(
        config,
        host=args.host,
        port=args.port,
        database=database,
        jobs=args.jobs,
        assignment_name=args.assignment,
        wait_seconds=args.wait,
        forwarded_allow_ips=args.forwarded_allow_ips,
        edge=_edge(args),
    )
    return 0


def _tokens(args: argparse.Namespace, config: CourseConfig, database: str | None) -> TokensRun:
    """`serve tokens`: one of adding the roster's new students, --rotate, --revoke, --rotate-instructor."""
    from course.platforms.service import tokens

    if args.revoke:
        if args.roster is not None:
            raise CourseError("serve tokens --revoke takes no ROSTER: name the students to revoke")
        return tokens.revoke_tokens(config, args.revoke, args.out, database=database)
    if args.roster is None and not (args.rotate or args.rotate_instructor):
        raise CourseError("serve tokens needs a ROSTER (or --rotate, --revoke or --rotate-instructor)")
    if args.roster is not None and (args.rotate or args.rotate_instructor):
        raise CourseError("serve tokens: give a ROSTER or --rotate/--rotate-instructor, not both")
    if args.out is None:
        raise CourseError("serve tokens needs --out FILE: where the new tokens are written (mode 600)")
    if args.rotate:
        return tokens.rotate_tokens(config, args.rotate, args.out, database=database)
    if args.rotate_instructor:
        return tokens.rotate_instructor(config, args.out, database=database)
    from course.term.roster import read_roster

    return tokens.issue_tokens(config, read_roster(args.roster), args.out, database=database)


def _submit(args: argparse.Namespace) -> int:
    from course.platforms.service.client import submit

    if not args.token:
        raise CourseError("--token is needed (the token of your personal link), or set AUTOGRAD_TOKEN")
    for line in submit(args.notebook, args.server, args.token).lines():
        print(line)
    return 0


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


def _check(args: argparse.Namespace) -> int:
    from course.pipeline.selfcheck import check_notebook

    report = check_notebook(args.notebook, find_config(args.course), args.assignment)
    for line in report.lines():
        print(line)
    return 0 if report.ready else 1


def _grade(args: argparse.Namespace) -> int:
    require("grader", "autograd-course grade")
    from course.term.batch import grade_course
    from course.term.roster import read_roster

    config = load_config(args.course)
    out_dir = (args.out or config.root).resolve()

    progress = ProgressBar(sys.stderr) if sys.stderr.isatty() and not args.quiet else None

    def report(graded, done: int, total: int) -> None:
        if progress:
            progress.update(done, total, graded.status)
        elif not args.quiet:
            print(
                f"{graded.student_id}: {graded.feedback.score:g}/{graded.feedback.max_score:g} "
                f"{graded.status} ({graded.seconds:.1f} s)",
                file=sys.stderr,
            )

    if args.jobs is not None and args.jobs < 0:
        raise CourseError("--jobs must be 0 or more")
    roster = read_roster(args.roster) if args.roster else None
    shard = None
    if args.shard is not None:
        from course.term.shards import parse_shard

        shard = parse_shard(args.shard)
        if out_dir == config.root.resolve() or args.gradebook or roster is not None:
            raise CourseError(
                "--shard grades into a folder of its own, for `autograd-course merge`: give --out, and "
                "--gradebook or --roster to merge instead"
            )
    summaries = grade_course(
        config,
        list(args.paths),
        out_dir,
        assignment_name=args.assignment,
        jobs=args.jobs,
        report=report,
        record_gradebook=args.gradebook,
        roster=roster,
        shard=shard,
    )
    if progress:
        progress.finish()
    _print_summaries(config, summaries, out_dir)
    return 0


def _merge(args: argparse.Namespace) -> int:
    require("grader", "autograd-course merge")
    from course.term.roster import read_roster
    from course.term.shards import merge_shards

    config = load_config(args.course)
    out_dir = (args.out or config.root).resolve()
    roster = read_roster(args.roster) if args.roster else None
    summaries = merge_shards(
        config, [path.resolve() for path in args.outs], out_dir, record_gradebook=args.gradebook, roster=roster
    )
    _print_summaries(config, summaries, out_dir)
    return 0


def _print_summaries(config, summaries, out_dir: Path) -> None:
    for summary in summaries:
        if len(summaries) > 1:
            print(f"{summary.assignment}:")
        for line in summary.lines():
            print(f"  {line}" if len(summaries) > 1 else line)
    if len(config.assignments) > 1:
        print(f"course totals: {out_dir / COURSE_TOTALS}")


def _export(args: argparse.Namespace) -> int:
    require("grader", "autograd-course export")
    from course.term.lms import export_course
    from course.term.roster import read_roster

    config = load_config(args.course)
    path = export_course(
        config, args.format, read_roster(args.roster), (args.out or config.root).resolve(), args.assignment, args.column
    )
    print(f"wrote {path}: import it in {args.format}'s gradebook")
    return 0


def _autograder(args: argparse.Namespace) -> int:
    require("grader", "autograd-course autograder")
    if args.action == "build":
        from course.platforms.bundle import build_bundle

        config = load_config(args.course)
        names = [args.assignment] if args.assignment else [a.name for a in config.assignments]
        for name in names:
            path = build_bundle(config, args.out, name)
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


class ProgressBar:
    """One redrawn line on a terminal: a bar, the count, and how many failed or timed out so far."""

    WIDTH = 30

    def __init__(self, stream) -> None:
        self.stream, self.counts = stream, dict[str, int]()

    def update(self, done: int, total: int, status: str) -> None:
        self.counts[status] = self.counts.get(status, 0) + 1
        filled = self.WIDTH * done // max(total, 1)
        problems = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in sorted(self.counts.items()) if s != Status.GRADED)
        self.stream.write(
            f"\r[{'#' * filled}{'.' * (self.WIDTH - filled)}] {done}/{total}"
            f"{' (' + problems + ')' if problems else ''}\x1b[K"
        )
        self.stream.flush()

    def finish(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


HANDLERS = {
    "release": _release,
    "check": _check,
    "grade": _grade,
    "merge": _merge,
    "export": _export,
    "autograder": _autograder,
    "serve": _serve,
    "submit": _submit,
    "new": _new,
    "kit": _kit,
}


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
