"""What a term with nbgrader adds around grading one batch: whether the batch goes into the course's
gradebook, the files nbgrader's tools read (autograded/, the exchange's feedback files), submission
times and the late policy, the roster's missing work, and the instructor's integrity report.

Kept beside batch.py (which runs the batch) so that each stays one idea; plain functions over the
batch's results.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from course.core import late
from course.core.config import AssignmentPaths, AssignmentSettings, CourseConfig
from course.core.files import SyncedWrites, atomic_write_json, os_reason, private_folders, private_tree
from course.core.status import Status
from course.pipeline.run_context import RunContext
from course.pipeline.submission import student_id_problem
from course.term import nbgrader_layout
from course.term.gradebook import GradeRow, read_grades_csv, write_grades_csv
from course.term.gradebook_writer import GradebookWriter
from course.term.roster import Student, nbgrader_student

if TYPE_CHECKING:
    from course.pipeline.grading import Graded

LOG = logging.getLogger(__name__)


def records_in_gradebook(config: CourseConfig, out_dir: Path, wanted: bool | None) -> bool:
    """Whether a batch goes into the course's nbgrader gradebook: when asked, else only for the course root."""
    if wanted is not None:
        return wanted
    return out_dir.resolve() == config.root.resolve()


def gradebook_note(config: CourseConfig, record: bool) -> str:
    if record:
        return f"scores recorded in {config.root / 'gradebook.db'} (nbgrader export, formgrader)"
    return "not recorded (one-off grading outside the course root; --gradebook records it)"


class NoGradebook:
    """Stands in for GradebookWriter when a batch is kept out of the course's gradebook."""

    def commit(self) -> dict[str, str]:
        return {}

    def add_students(self, ids: list[str], details: dict[str, dict[str, str]] | None = None) -> None:
        pass

    def close(self) -> None:
        pass


def feedback_page(settings: AssignmentSettings) -> str:
    """The feedback page's name: the notebook's, as nbgrader's release_feedback expects (autograd.html)."""
    return f"{Path(settings.notebook).stem}.html"


def submission_time(path: Path | None, student_id: str) -> datetime | None:
    """When nbgrader's collect says the work came in; a timestamp.txt nbgrader cannot read is reported and
    treated as unknown (the work counts as on time), never guessed."""
    if path is None:
        return None
    try:
        return nbgrader_layout.read_timestamp(path)
    except ValueError as problem:
        print(
            f"warning: {problem}; {student_id}'s work was treated as on time. Fix the file and grade again.",
            file=sys.stderr,
        )
        return None


def with_late_policy(context: RunContext, graded: Graded, path: Path | None) -> Graded:
    """The submission time (nbgrader's timestamp.txt beside `path`) and the late policy applied against the run's
    due date: score, feedback and the penalty (a missing timestamp or due date means on time)."""
    return late_policy_at(context, graded, submission_time(path, graded.student_id))


def late_policy_at(context: RunContext, graded: Graded, submitted: datetime | None) -> Graded:
    """`with_late_policy` for a submission time already known (naive UTC; None: on time), as the submission
    service knows when it received each attempt."""
    lateness = late.assess(
        graded.feedback.score,
        graded.feedback.max_score,
        submitted,
        context.due,
        context.settings.extensions.get(graded.student_id, 0.0),
        context.config.late_policy,
    )
    feedback = graded.feedback.with_late_policy(lateness.penalty, lateness.explanation)
    return replace(graded, feedback=feedback, late_penalty=lateness.penalty, submitted=submitted)


def record_for_nbgrader(
    context: RunContext,
    gradebook: GradebookWriter,
    graded: Graded,
    submitted_path: Path,
    writes: SyncedWrites | None = None,
) -> None:
    """autograded/<student>/ for formgrader, then the gradebook's scores and timestamp (queued until its next
    commit; course-root runs only). The gradebook comes last: a file that cannot be written makes the student
    an autograder error (recording.record_graded) before anything of theirs is queued for the gradebook, so the
    gradebook never holds a grade the CSV and the LMS export do not."""
    config, settings = context.config, context.settings
    private_submission(config, graded.student_id, settings.name)
    nbgrader_layout.write_autograded(
        config.root,
        settings.name,
        settings.notebook,
        graded.student_id,
        submitted_path,
        released_to(config, settings, graded.student_id),
        graded.feedback,
        writes=writes,
        max_bytes=config.limits.notebook_mb * 2**20,
    )
    gradebook.record(
        graded.student_id,
        {q.grade_id: q.earned for q in graded.questions},
        timestamp=graded.submitted,
        late_penalty=graded.late_penalty,
        extension_hours=settings.extensions.get(graded.student_id, 0.0),
    )


def private_submission(config: CourseConfig, student_id: str, assignment_name: str) -> None:
    """submitted/<student>/<assignment>/ the grader's user's alone (0700 folders, 0600 files): `nbgrader collect`
    copies them with the modes the student's files had (0644, 0755), readable to every user of the machine.
    nbgrader's own tools run as the grader's user and read them still. A folder this user may not change (another
    user's) is said in the log and left: modes are no reason to leave a student ungraded."""
    try:
        private_folders(config.root, "submitted", student_id)
        private_tree(config.root / "submitted" / student_id / assignment_name)
    except OSError as error:
        LOG.warning(
            "%s: could not be made the grader's user's alone (%s); run `chmod -R go= %s`",
            config.root / "submitted" / student_id,
            os_reason(error),
            config.root / "submitted",
        )


def released_to(config: CourseConfig, settings: AssignmentSettings, student_id: str) -> Path:
    """The notebook the student was given: their personalised copy (variants), else the release."""
    paths = AssignmentPaths(config.root, settings)
    personal = paths.personalised_notebook(student_id)
    return personal if personal.is_file() else paths.release_notebook


def mark_missing(
    csv_path: Path,
    question_ids: tuple[str, ...],
    max_score: float,
    roster: list[Student],
    graded_ids: list[str],
    gradebook: GradebookWriter | NoGradebook,
) -> tuple[list[str], list[str]]:
    """A `missing` row for every roster student with no row yet; roster students are added to the gradebook
    (so formgrader and nbgrader export list them too, with nothing submitted). Returns (the roster students
    with nothing submitted, the graded students not on the roster)."""
    existing = read_grades_csv(csv_path)
    ids = [student.student_id for student in roster]
    rows = [GradeRow(sid, {}, 0.0, max_score, Status.MISSING) for sid in ids if sid not in existing]
    if rows:
        write_grades_csv(csv_path, question_ids, rows)
    gradebook.add_students(ids, {student.student_id: nbgrader_student(student) for student in roster})
    gradebook.commit()
    missing = [sid for sid in ids if existing.get(sid, {}).get("status", Status.MISSING) == Status.MISSING]
    on_roster = set(ids)
    return missing, sorted(sid for sid in graded_ids if sid not in on_roster)


def integrity_path(out_dir: Path, assignment_name: str) -> Path:
    return out_dir / f"integrity-{assignment_name}.json"


def read_integrity(out_dir: Path, assignment_name: str) -> dict[str, list[str]]:
    path = integrity_path(out_dir, assignment_name)
    try:
        found = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except (OSError, ValueError, RecursionError):
        return {}
    # Read back as input: what integrity.review writes, student id -> findings (sentences); anything else is none.
    if not isinstance(found, dict):
        return {}
    return {
        str(student): [finding for finding in findings if isinstance(finding, str)]
        for student, findings in found.items()
        if isinstance(findings, list)
    }


def write_integrity(out_dir: Path, assignment_name: str, graded: list[Graded]) -> None:
    """integrity-<assignment>.json: {student: [what was seen]}, merged by student like the grades CSV (a
    re-graded student's old findings are replaced). Instructor only: it is not in any student's folder."""
    path = integrity_path(out_dir, assignment_name)
    seen = read_integrity(out_dir, assignment_name)
    for one in graded:
        if student_id_problem(one.student_id):
            continue
        if one.integrity:
            seen[one.student_id] = list(one.integrity)
        else:
            seen.pop(one.student_id, None)
    if seen or path.exists():
        atomic_write_json(path, dict(sorted(seen.items())))
