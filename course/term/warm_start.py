"""A class's warm workers, started as early as `grade` can start them.

The workers' start (a torch import each, in its sandbox) is most of a small class's wall time, and the first student
waits for it. `grade` starts them here, from the course's settings and a count of the submissions alone, before it
imports the grading machinery (the judge, the records, nbgrader's bridge: about half a second of imports), so their
start runs beside those imports, beside the reading of the submissions and beside the self-test (or the check of its
kept proof: course/pipeline/selftest_proof.py). The batch then grades on these workers (`grade_batch(workers=...)`)
instead of starting its own: the same pool it would have started (`class_pool`), of the same size.

Only where that is cheap to know: one assignment (`assignments_in`: which assignments a run covers, read from the
settings and the submissions' layout alone, so it lives here rather than beside the batch), not a shard (whose slice is
known only once the class is cut), a warm pool (jobs > 0) and at least one submission. Otherwise nothing is started
here and the batch starts its workers as before; whatever the batch refuses (no submissions, an --out it cannot
write), it refuses before anyone is graded, and these workers are stopped with the command.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from course import sandbox
from course.core.config import AssignmentPaths, AssignmentSettings, CourseConfig
from course.core.errors import CourseError
from course.pipeline.discovery import discover
from course.pipeline.release_cells import released_code_cells


@dataclass(frozen=True)
class EarlyWorkers:
    """The warm pool started for assignment `assignment_name`'s class."""

    assignment_name: str
    pool: sandbox.WarmPool


def class_pool(config: CourseConfig, settings: AssignmentSettings, size: int) -> sandbox.WarmPool:
    """The warm workers that grade a class of assignment `settings`: `size` of them, at the course's level and
    limits, each with the release's public code cells compiled before it forks."""
    return sandbox.WarmPool(
        size,
        config.limits,
        isolation=config.sandbox,
        base_uid=config.sandbox_uid,
        compiled=released_code_cells(AssignmentPaths(config.root, settings).release_notebook),
    )


def assignments_in(config: CourseConfig, paths: list[Path], assignment_name: str | None) -> list[AssignmentSettings]:
    """Which assignments a grading run covers: the one named; else the course's only one; else every one with
    a submission in nbgrader's layout under PATHs (loose notebooks say no assignment: then it must be named)."""
    if assignment_name is not None:
        return [config.assignment(assignment_name)]
    if len(config.assignments) == 1:
        return [config.assignments[0]]
    folders = paths or [config.root / "submitted"]
    names = ", ".join(a.name for a in config.assignments)
    for path in folders:
        says = path.resolve().parent.name if path.is_file() else path.name  # .../<assignment>/<notebook>
        loose = [path] if path.is_file() else [c for c in path.iterdir() if c.suffix == ".ipynb"]
        if loose and says not in {a.name for a in config.assignments}:
            raise CourseError(
                f"{loose[0]}: the course has several assignments ({names}) and a loose notebook does "
                "not say which one it answers; grade it with --assignment NAME"
            )

    def holds(path: Path, settings: AssignmentSettings) -> bool:  # a notebook in its layout, or a folder of them
        if path.is_file():
            return path.resolve().parent.name == settings.name
        return any(discover([path], settings.name, settings.notebook))

    found = [a for a in config.assignments if any(holds(path, a) for path in folders)]
    if not found:
        raise CourseError(
            f"no submissions of any assignment ({names}) found in {', '.join(map(str, folders))}: "
            "expected submitted/<student>/<assignment>/<notebook>, or name one with --assignment"
        )
    return found


@contextmanager
def early_workers(
    config: CourseConfig, paths: list[Path], assignment_name: str | None, jobs: int | None, *, sharded: bool
) -> Iterator[EarlyWorkers | None]:
    """The class's workers, started now and stopped when the block ends (None: none started here; see the module)."""
    jobs = sandbox.default_jobs() if jobs is None else jobs
    try:
        covered = assignments_in(config, paths, assignment_name)
        settings = covered[0] if len(covered) == 1 else None
        found = (
            [] if settings is None else discover(paths or [config.root / "submitted"], settings.name, settings.notebook)
        )
    except (CourseError, OSError):  # the batch says what is wrong, in its own words, before anyone is graded
        settings, found = None, []
    count = sum(1 for ref in found if not ref.problem)
    if settings is None or sharded or jobs <= 0 or count == 0:
        yield None
        return
    with class_pool(config, settings, min(jobs, count)) as pool:
        yield EarlyWorkers(settings.name, pool)
