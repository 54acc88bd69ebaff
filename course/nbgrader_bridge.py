"""The few calls into nbgrader's own machinery: its converters and its gradebook.

Kept in one module so the rest of the package speaks plain data and never nbgrader's classes.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

from traitlets.config import Config

from course.errors import CourseError

# The release's solution regions become nothing: the answer cell keeps its `name = ...` template lines.
CODE_STUB = {"python": ""}


def nbgrader_config(root: Path, db_url: str, *, cell_timeout: int = 120) -> Config:
    config = Config()
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.db_url = db_url
    config.ClearSolutions.code_stub = CODE_STUB
    config.ExecutePreprocessor.timeout = cell_timeout
    config.Execute.timeout = cell_timeout
    # The kernels nbgrader starts talk to it over unix sockets in Jupyter's private runtime folder rather
    # than unencrypted TCP on localhost (which ipykernel rightly warns about). An absolute path: nbgrader
    # starts each kernel in the notebook's folder, and a relative one would point somewhere else there.
    config.KernelManager.transport = "ipc"
    config.KernelManager.ip = str(_runtime_dir() / "autograd-course-kernel")
    return config


def _runtime_dir() -> Path:
    from jupyter_core.paths import jupyter_runtime_dir

    path = Path(jupyter_runtime_dir())
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def _tools_on_path() -> None:
    """nbgrader runs `alembic` by name to create its gradebook: make this environment's scripts findable."""
    scripts = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if scripts not in path.split(os.pathsep):
        os.environ["PATH"] = scripts + os.pathsep + path


def _run(app_class: type, config: Config, assignment: str, student: str = "*") -> None:
    from nbgrader.coursedir import CourseDirectory

    _tools_on_path()
    from nbgrader.utils import capture_log

    coursedir = CourseDirectory(config=config)
    coursedir.assignment_id = assignment
    coursedir.student_id = student
    app = app_class(coursedir=coursedir, config=config)
    app.force = True
    app.create_assignment = True
    if hasattr(app, "create_student"):
        app.create_student = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = capture_log(app)
    if not result["success"]:
        if "Cannot add or remove cells" in result.get("log", ""):
            raise CourseError(
                f"nbgrader will not change the cells of {assignment!r}: the gradebook "
                f"({config.CourseDirectory.db_url}) already holds graded submissions of the old version. "
                "Keep the cells as they are, or move the gradebook aside (after exporting its grades), then release."
            )
        log = result.get("log", "").strip().splitlines()
        detail = "\n".join(log[-15:]) or result.get("error", "")
        raise CourseError(f"nbgrader {app_class.__name__} failed for {assignment!r} ({student}):\n{detail}")


def generate_assignment(root: Path, db_url: str, assignment: str) -> None:
    """nbgrader generate_assignment: source/<assignment>/ -> release/<assignment>/, and the gradebook rows."""
    from nbgrader.converters import GenerateAssignment

    _run(GenerateAssignment, nbgrader_config(root, db_url), assignment)


def autograde(root: Path, db_url: str, assignment: str, student: str) -> None:
    """nbgrader autograde, as nbgrader itself runs it (a real kernel, the student's namespace)."""
    from nbgrader.converters import Autograde

    _run(Autograde, nbgrader_config(root, db_url), assignment, student)


@contextmanager
def open_gradebook(db_url: str) -> Iterator:
    from nbgrader.api import Gradebook

    _tools_on_path()
    logging.getLogger("alembic").setLevel(logging.WARNING)
    with Gradebook(db_url) as gradebook:
        yield gradebook


def assignment_due(db_url: str, gradebook_path: Path, assignment: str) -> datetime | None:
    """The due date nbgrader's gradebook holds for the assignment (`nbgrader db assignment add --duedate`)."""
    if not gradebook_path.exists():
        return None
    from nbgrader.api import MissingEntry

    with open_gradebook(db_url) as gradebook:
        try:
            return gradebook.find_assignment(assignment).duedate
        except MissingEntry:
            return None


def grade_cell_scores(db_url: str, assignment: str, student: str) -> dict[str, float]:
    """{grade cell id: auto score} of one submission, read back from nbgrader's gradebook."""
    with open_gradebook(db_url) as gradebook:
        submission = gradebook.find_submission(assignment, student)
        return {
            grade.name: float(grade.auto_score or 0)
            for notebook in submission.notebooks
            for grade in notebook.grades
        }


def ensure_assignment_in_gradebook(root: Path, db_url: str, assignment: str, source_notebook: Path) -> None:
    """Record the assignment, its notebook and cells in the gradebook, as generate_assignment does."""
    from nbgrader.api import MissingEntry

    with open_gradebook(db_url) as gradebook:
        try:
            gradebook.find_notebook(source_notebook.stem, assignment)
            return
        except MissingEntry:
            pass
    record_assignment(root, db_url, assignment)


def record_assignment(root: Path, db_url: str, assignment: str) -> None:
    """Record (or update) the assignment's notebook and cells in the gradebook at db_url. nbgrader's own way
    of doing that is generate_assignment: it runs into a scratch course, so release/ is never touched."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        scratch_root = Path(scratch)
        shutil.copytree(root / "source" / assignment, scratch_root / "source" / assignment)
        generate_assignment(scratch_root, db_url, assignment)


class GradebookWriter:
    """One open gradebook for a whole batch: each student's scores are committed as they arrive."""

    def __init__(self, root: Path, db_url: str, assignment: str, source_notebook: Path,
                 due: datetime | None = None) -> None:
        ensure_assignment_in_gradebook(root, db_url, assignment, source_notebook)
        from nbgrader.api import Gradebook

        _tools_on_path()
        self.assignment, self.notebook = assignment, source_notebook.stem
        self.gradebook = Gradebook(db_url)
        self.pending: list[tuple] = []  # what record() was given since the last commit
        if due is not None:  # the course YAML's due date, so nbgrader's own late accounting agrees with ours
            self.gradebook.update_or_create_assignment(assignment, duedate=due)
        if db_url.startswith("sqlite"):
            from sqlalchemy import text

            # Write-ahead logging: a batch commits hundreds of times; WAL makes each commit one append
            # instead of a rewrite with two fsyncs, and readers (formgrader, nbgrader export) never block.
            self.gradebook.db.execute(text("PRAGMA journal_mode=WAL"))
            self.gradebook.db.execute(text("PRAGMA synchronous=NORMAL"))

    def record(self, student: str, scores: dict[str, float], *, commit: bool = True,
               timestamp: datetime | None = None, late_penalty: float = 0.0, extension_hours: float = 0.0) -> None:
        """Write one student's autograded scores (grade cell id -> points), the submission's time, the
        late penalty (nbgrader's late_submission_penalty, which `nbgrader export` subtracts) and extension."""
        entry = (student, scores, timestamp, late_penalty, extension_hours)
        try:
            self._record_quietly(*entry)
        except Exception:
            # A rollback takes back every row since the last commit: record the other students again, so a
            # failure costs this student's rows only.
            self.gradebook.db.rollback()
            for earlier in self.pending:
                self._record_quietly(*earlier)
            raise
        self.pending.append(entry)
        if commit:
            self.commit()

    def _record_quietly(self, student: str, scores: dict[str, float], timestamp: datetime | None,
                        late_penalty: float, extension_hours: float) -> None:
        with warnings.catch_warnings():
            # nbgrader's add_submission trips SQLAlchemy autoflush warnings that are harmless here
            warnings.simplefilter("ignore")
            self._record(student, scores, timestamp)
            notebook = self.gradebook.find_submission_notebook(self.notebook, self.assignment, student)
            notebook.late_submission_penalty = late_penalty or None
            notebook.assignment.extension = timedelta(hours=extension_hours) if extension_hours else None

    def commit(self) -> None:
        self.gradebook.db.commit()
        self.pending.clear()

    def add_students(self, ids: list[str]) -> None:
        """Make sure each student exists in the gradebook (a roster student who submitted nothing)."""
        for student in ids:
            self.gradebook.update_or_create_student(student)

    def _record(self, student: str, scores: dict[str, float], timestamp: datetime | None) -> None:
        from nbgrader.api import MissingEntry

        gradebook = self.gradebook
        with gradebook.db.no_autoflush:
            try:
                submitted = gradebook.find_submission_notebook(self.notebook, self.assignment, student)
            except MissingEntry:
                gradebook.update_or_create_student(student)
                gradebook.add_submission(self.assignment, student)
                submitted = gradebook.find_submission_notebook(self.notebook, self.assignment, student)
            # formgrader calls a submission autograded only when this equals submitted/'s timestamp.txt
            submitted.assignment.timestamp = timestamp
            # One query for all of the notebook's grades, instead of one lookup per grade cell.
            for grade in submitted.grades:
                if grade.name in scores:
                    grade.auto_score = scores[grade.name]
                    # nbgrader's own rule (SaveAutoGrades): a cell needs a human only when one already
                    # graded it by hand; a cell we do not score (a manually graded one) keeps its flag.
                    grade.needs_manual_grade = grade.manual_score is not None
        gradebook.db.flush()

    def close(self) -> None:
        self.gradebook.close()

    def __enter__(self) -> GradebookWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
