"""The class's commands: `grade` (a class, or its K-th shard), `merge` (the shards' results into the course) and
`export` (the grades as an LMS imports them)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from course.commands import Command
from course.core.config import CourseConfig, load_config
from course.core.errors import CourseError
from course.core.extras import require
from course.core.output_paths import writable_output
from course.core.status import Status
from course.term.gradebook import COURSE_TOTALS
from course.term.lms import FORMATS

if TYPE_CHECKING:
    from course.pipeline.grading import Graded
    from course.term.recording import BatchSummary

GRADE_HELP = "Grade submissions: feedback per student, grades-<assignment>.csv and nbgrader's gradebook."
MERGE_HELP = "Bring the output folders of `grade --shard K/N` into the course, as one unsharded grade would."
EXPORT_HELP = "Write the grades as the CSV an LMS gradebook imports (Canvas, Moodle), matched through the roster."


def _grade_arguments(grade: argparse.ArgumentParser) -> None:
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
        "--self-test",
        action="store_true",
        help="grade the course's solution and the untouched release first even where an earlier run's "
        "proof holds (same course, sandbox and interpreter: reused by default)",
    )
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


def _merge_arguments(merge: argparse.ArgumentParser) -> None:
    merge.add_argument("outs", nargs="+", type=Path, metavar="OUT", help="the --out folders of every shard")
    merge.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where the merged results go (default: the course root, with nbgrader's gradebook)",
    )
    merge.add_argument("--gradebook", action=argparse.BooleanOptionalAction, default=None, help="as for grade")
    merge.add_argument("--roster", type=Path, metavar="ROSTER", help="as for grade")


def _export_arguments(export: argparse.ArgumentParser) -> None:
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


def _grade(args: argparse.Namespace) -> int:
    require("grader", "autograd-course grade")
    from course.term.roster import read_roster
    from course.term.warm_start import early_workers

    config = load_config(args.course)
    out_dir = writable_output("--out", args.out or config.root, config.root)

    progress = ProgressBar(sys.stderr) if sys.stderr.isatty() and not args.quiet else None

    def report(graded: Graded, done: int, total: int) -> None:
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
    # The class's workers start first, then the grading machinery is imported beside their torch import.
    with early_workers(config, list(args.paths), args.assignment, args.jobs, sharded=shard is not None) as workers:
        from course.term.batch import grade_course

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
            self_test=args.self_test,
            workers=workers,
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
    out_dir = writable_output("--out", args.out or config.root, config.root)
    roster = read_roster(args.roster) if args.roster else None
    summaries = merge_shards(
        config, [path.resolve() for path in args.outs], out_dir, record_gradebook=args.gradebook, roster=roster
    )
    _print_summaries(config, summaries, out_dir)
    return 0


def _print_summaries(config: CourseConfig, summaries: list[BatchSummary], out_dir: Path) -> None:
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
        config,
        args.format,
        read_roster(args.roster),
        writable_output("--out", args.out or config.root, config.root),
        args.assignment,
        args.column,
    )
    print(f"wrote {path}: import it in {args.format}'s gradebook")
    return 0


class ProgressBar:
    """One redrawn line on a terminal: a bar, the count, and how many failed or timed out so far."""

    WIDTH = 30

    def __init__(self, stream: TextIO) -> None:
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


GRADE = Command("grade", GRADE_HELP, _grade_arguments, _grade, {"grade": GRADE_HELP})
MERGE = Command("merge", MERGE_HELP, _merge_arguments, _merge, {"merge": MERGE_HELP})
EXPORT = Command("export", EXPORT_HELP, _export_arguments, _export, {"export": EXPORT_HELP})
