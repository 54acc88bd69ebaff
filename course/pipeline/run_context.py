"""One run's context: what a front end reads once and hands down (otter's runner holding its config, nbgrader's
`CourseDirectory`).

Every front end that grades an assignment (`grade`'s class walk, `merge`, `serve`'s worker, `autograder run`)
builds one `RunContext` with `open_run` before it grades anyone: the course's settings, the assignment's own
settings (looked up once, by name), the `Assignment` read from its source notebook and exercises module, its
due date, and the course secret checked. Functions downstream take the context, or the piece of it they need,
instead of looking the assignment up again by name or reading its notebook again. A parameter called
`assignment` holds an `Assignment`; one that holds a name is `assignment_name`.

The class layer hands its records beside the context (`term/recording.py`'s `Records`: the gradebook, the due date
it found, the roster), since a batch opens them in the background once its self-test has passed and nothing may
wait for them before; the due date found there goes back into the context (`with_due`). The student's self-check
(`pipeline/selfcheck.py`) reads its assignment from the student's own notebook, so it keeps the settings it looks
up once rather than a context.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from course.core.config import AssignmentPaths, AssignmentSettings, CourseConfig
from course.pipeline.assignment import Assignment, load_settings_assignment
from course.pipeline.probes import has_secret
from course.pipeline.variants import course_secret


@dataclass(frozen=True)
class RunContext:
    """One assignment's run: the course's settings, the assignment's settings and model, its due date (the YAML's,
    else what the front end found, e.g. in nbgrader's gradebook; None: no due date) and, for a run that grades in a
    course with one, the course secret read once (never shown in the context's repr)."""

    config: CourseConfig
    settings: AssignmentSettings
    assignment: Assignment
    due: datetime | None = None
    secret: bytes | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def root(self) -> Path:
        return self.config.root

    @property
    def paths(self) -> AssignmentPaths:
        """Where the assignment's files are: its source, its release, each student's personalised copy."""
        return AssignmentPaths(self.config.root, self.settings)

    def with_due(self, due: datetime | None) -> RunContext:
        """The same run with the due date a front end found beside the YAML (the gradebook's)."""
        return replace(self, due=due)


def open_run(config: CourseConfig, assignment_name: str | None = None, *, grades: bool = True) -> RunContext:
    """The context of a run of assignment `assignment_name` (the course's first when None): its settings looked up
    once, then as `run_of`."""
    return run_of(config, config.assignment(assignment_name), grades=grades)


def run_of(config: CourseConfig, settings: AssignmentSettings, *, grades: bool = True) -> RunContext:
    """The context of a run of the assignment whose settings are given: its notebook and exercises module read
    once, and, for a run that grades, the course secret read once when the course has one (a missing or readable
    secret stops the run before anything is graded)."""
    assignment = load_settings_assignment(config, settings)
    # The variants' numbers and the function answers' points (course/pipeline/probes.py) need it:
    secret = course_secret(config) if grades and has_secret(config) else None
    return RunContext(config, settings, assignment, settings.due, secret)
