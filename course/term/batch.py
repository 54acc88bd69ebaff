"""Grading a class: every submission of a batch through `grading.grade_submission` in parallel sandboxes, the
results recorded as they arrive (recording.py: feedback, the grades CSV, nbgrader's gradebook, the class summary).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from course import sandbox
from course.core.config import CourseConfig
from course.core.errors import CourseError
from course.core.files import unwritable_folder
from course.pipeline.discovery import SubmissionRef, check_paths_exist, discover
from course.pipeline.grading import Graded, cold_runner, grade_submission, warm_imports
from course.pipeline.run_context import RunContext, open_run
from course.pipeline.selftest import proven_setup
from course.term.gradebook import write_course_totals
from course.term.item_analysis import item_settings
from course.term.nbgrader_term import NoGradebook, records_in_gradebook, with_late_policy
from course.term.recording import BatchSummary, Records, open_records, record_results, start_summary, write_reports
from course.term.roster import Student
from course.term.shards import Shard, class_digest, shard_of, shard_sources, write_shard
from course.term.warm_start import EarlyWorkers, assignments_in, class_pool


def grade_batch(
    config: CourseConfig,
    paths: list[Path],
    out_dir: Path,
    *,
    assignment_name: str | None = None,
    jobs: int | None = None,
    report: Callable[[Graded, int, int], None] | None = None,
    record_gradebook: bool | None = None,
    roster: list[Student] | None = None,
    shard: Shard | None = None,
    self_test: bool = False,
    workers: sandbox.WarmPool | None = None,
) -> BatchSummary:
    """Grade every submission under PATHs; write feedback, grades-<assignment>.csv and nbgrader's gradebook.

    jobs: warm sandboxed workers grading in parallel (default: one per core); 0 starts a fresh
    sandboxed interpreter for every submission instead.
    record_gradebook: record the scores in the course's nbgrader gradebook (default: only when out_dir is
    the course root, so one-off grading into another folder leaves the course's records alone).
    roster: who should have submitted (default, for a course-root run: the students of the gradebook);
    each one without a submission gets a row with status `missing`.
    shard: grade only that slice of the submissions, and leave the results for `merge` (shards.py).
    self_test: run the self-test even where the proof of an earlier run holds (selftest_proof.py).
    workers: the class's warm pool, started already by the caller (warm_start.py) and closed by it.
    """
    check_paths_exist(paths)
    record = records_in_gradebook(config, out_dir, record_gradebook)
    # The run's context, once: its settings, its notebook read, the course secret checked (a missing or readable
    # one stops the batch before anything is graded). Everything below takes it rather than looking again.
    context = open_run(config, assignment_name)
    found = _find_submissions(context, paths, out_dir, shard)
    jobs = sandbox.default_jobs() if jobs is None else jobs
    summary = start_summary(context, out_dir, record)
    summary.refused = [ref for ref in found.refs if ref.problem]
    refs = [ref for ref in found.refs if not ref.problem]
    paths_by_id = {ref.student_id: ref.path for ref in refs}
    _grade_and_record(
        context,
        refs,
        paths_by_id,
        summary,
        jobs=jobs,
        record=record,
        roster=roster,
        report=report,
        self_test=self_test,
        workers=workers,
    )
    write_reports(context, summary, item_settings(config, context.assignment))
    if shard is not None:
        write_shard(
            out_dir,
            context.name,
            shard,
            summary.graded,
            summary.refused,
            paths_by_id,
            found.whole_class,
            config.root,
            found.sources,
        )
    return summary


@dataclass(frozen=True)
class _Found:
    """A batch's submissions: the folders read, what was found there (this shard's slice, with a shard), and the
    digest of the whole class the slice was cut from."""

    sources: list[Path]
    refs: list[SubmissionRef]
    whole_class: str


def _find_submissions(context: RunContext, paths: list[Path], out_dir: Path, shard: Shard | None) -> _Found:
    """The submissions under PATHs (default: submitted/), or a CourseError when there are none or the results
    could not be written: both said before anything is graded."""
    config, settings = context.config, context.settings
    sources = paths or [config.root / "submitted"]
    if shard is not None:  # inside the course, where merge finds them again
        sources = shard_sources(config.root, sources)
    refs = discover(sources, settings.name, settings.notebook)
    if not refs:
        raise CourseError(
            f"no submissions found in {', '.join(map(str, paths or [config.root / 'submitted']))}: expected "
            f"submitted/<student>/{settings.name}/{settings.notebook}, a folder of <student>.ipynb, or notebooks"
        )
    problem = unwritable_folder(out_dir)
    if problem:
        raise CourseError(
            f"cannot write the results into {out_dir} ({problem}), so nothing was graded: choose "
            "another --out, or run as a user who may write there"
        )
    whole_class = class_digest(refs, config.root)
    if shard is not None:
        refs = shard_of(refs, shard)
    return _Found(sources, refs, whole_class)


def _grade_and_record(
    context: RunContext,
    refs: list[SubmissionRef],
    paths_by_id: dict[str, Path],
    summary: BatchSummary,
    *,
    jobs: int,
    record: bool,
    roster: list[Student] | None,
    report: Callable[[Graded, int, int], None] | None,
    self_test: bool,
    workers: sandbox.WarmPool | None,
) -> None:
    """Prove the setup (or reuse its proof), then grade `refs` in parallel and record each result as it arrives
    (recording.py)."""
    config, assignment = context.config, context.assignment
    with ExitStack() as stack:
        # Start-up overlaps: the workers import torch while this process imports its own (for the judge), then
        # nbgrader's, in one thread, and reads the roster and the due date and opens the gradebook in another;
        # results wait for these only where they need them. The probe and the workers' start come first: done while
        # the imports hold this process's interpreter lock, their few milliseconds of work took 0.3 s more.
        pool = _start_pool(stack, context, jobs, refs, workers)
        background = stack.enter_context(ThreadPoolExecutor(2))
        background.submit(warm_imports, "nbgrader.api")  # torch for the judge, then nbgrader for the records
        # no sandbox, no grading: refused before the gradebook is opened (or the assignment recorded in it)
        level, note = (
            (pool.level, pool.note)
            if pool is not None
            else sandbox.choose_isolation(config.sandbox, config.sandbox_uid, config.limits.tmp_mb)
        )
        summary.isolation = note or sandbox.ISOLATION_SUMMARY[level]
        # The gradebook is opened (and written) only once the self-test below has passed.
        proven: Future[bool] = Future()
        opening = background.submit(_records_once_proven, context, record, roster, proven)
        stack.callback(lambda: opening.result().gradebook.close())
        run, proving, threads = _runners(config, pool, jobs)
        try:
            if refs:  # nobody is graded before the course's own notebooks grade as they must (selftest.py)
                summary.selftest = proven_setup(context, proving, level=level, force=self_test)
        except BaseException:
            proven.set_result(False)
            raise
        proven.set_result(True)
        executor = stack.enter_context(ThreadPoolExecutor(threads))
        futures = [
            executor.submit(grade_submission, ref, assignment, config, run=run, secret=context.secret) for ref in refs
        ]

        def results() -> Iterator[Graded]:
            dated: RunContext | None = None  # with the due date the records found, once they are open
            for future in as_completed(futures):
                graded = future.result()  # grade_submission never raises
                dated = dated or context.with_due(opening.result().due)
                yield with_late_policy(dated, graded, paths_by_id.get(graded.student_id))

        record_results(
            context,
            summary,
            results(),
            opening.result,
            paths_by_id,
            report=(lambda graded, done: report(graded, done, len(refs))) if report else None,
        )


def _start_pool(
    stack: ExitStack, context: RunContext, jobs: int, refs: list[SubmissionRef], workers: sandbox.WarmPool | None
) -> sandbox.WarmPool | None:
    """The warm workers (closed with `stack`), none for cold runs (jobs 0) or an empty batch; `workers`, started
    already by the caller (warm_start.py, closed by it), where it gave them."""
    if jobs <= 0 or not refs:
        return None
    if workers is not None:
        return workers
    return stack.enter_context(class_pool(context.config, context.settings, min(jobs, len(refs))))


def _runners(
    config: CourseConfig, pool: sandbox.WarmPool | None, jobs: int
) -> tuple[sandbox.Runner, sandbox.Runner, int]:
    """How the students' runs go (the pool, else a cold sandbox each), how the self-test's go, and in how many
    threads."""
    if pool is None:
        run: sandbox.Runner = cold_runner(config)
        return run, run, max(1, jobs)
    # more runs waiting than workers: long runs get stand-ins; a pool that cannot start a run is refused
    return pool.run, partial(pool.run, cold_fallback=False), pool.threads


def _records_once_proven(
    context: RunContext, record: bool, roster: list[Student] | None, proven: Future[bool]
) -> Records:
    """open_records, in the background, once the self-test has passed (`proven`); after a failed one the
    gradebook is not opened at all (nor the assignment recorded in it). nbgrader is imported meanwhile
    (warm_imports)."""
    if not proven.result():
        return Records(NoGradebook(), None, None)
    return open_records(context, record, roster)


def grade_course(
    config: CourseConfig,
    paths: list[Path],
    out_dir: Path,
    *,
    assignment_name: str | None = None,
    workers: EarlyWorkers | None = None,
    **options: Any,
) -> list[BatchSummary]:
    """Grade every assignment the run covers (see `assignments_in`), each apart (its own CSV, feedback folder,
    class summary and gradebook records), then course-totals.csv: every student's score per assignment. `workers`:
    the warm pool one of them is graded on, started already (warm_start.py)."""
    check_paths_exist(paths)
    summaries = [
        grade_batch(
            config,
            paths,
            out_dir,
            assignment_name=settings.name,
            workers=workers.pool if workers and workers.assignment_name == settings.name else None,
            **options,
        )
        for settings in assignments_in(config, paths, assignment_name)
    ]
    write_course_totals(out_dir, tuple(a.name for a in config.assignments))
    return summaries
