"""The few calls into nbgrader's own machinery: its converters and its gradebook.

Kept in one module so the rest of the package speaks plain data and never nbgrader's classes.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import shutil
import sys
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from traitlets.config import Config

from course.core.errors import CourseError
from course.core.files import private_sqlite

if TYPE_CHECKING:
    from nbgrader.api import Gradebook

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
    # A prefix of this call's own: jupyter_client numbers the sockets from 1 upwards, taking the first name
    # not on disk, so two graders sharing a prefix race for the same sockets and one talks to the other's
    # kernel ("Invalid Signature").
    config.KernelManager.transport = "ipc"
    config.KernelManager.ip = kernel_socket_prefix()
    return config


# A unix socket's path holds at most 107 bytes on Linux (sun_path); jupyter_client appends "-<port>" to the prefix.
MAX_SOCKET_PREFIX = 96


def kernel_socket_prefix() -> str:
    """The kernels' socket prefix: in Jupyter's runtime folder, or, where that path is too long for a unix socket
    (a deep HOME or JUPYTER_RUNTIME_DIR: "File name too long" when the kernel starts), in a private folder of this
    process's own under the temporary folder."""
    prefix = str(_runtime_dir() / f"autograd-course-kernel-{os.getpid()}-{uuid.uuid4().hex[:12]}")
    if len(os.fsencode(prefix)) <= MAX_SOCKET_PREFIX:
        return prefix
    short = str(_short_runtime_dir() / f"k-{uuid.uuid4().hex[:12]}")
    if len(os.fsencode(short)) > MAX_SOCKET_PREFIX:
        raise CourseError(
            f"the folders for the kernels' sockets are too deep for a unix socket ({prefix!r}, "
            f"{short!r}): set JUPYTER_RUNTIME_DIR (or TMPDIR) to a shorter path"
        )
    return short


def _runtime_dir() -> Path:
    from jupyter_core.paths import jupyter_runtime_dir

    path = Path(jupyter_runtime_dir())
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


@functools.cache
def _short_runtime_dir() -> Path:
    """A private (0700) folder of this process's, removed at exit."""
    folder = Path(tempfile.mkdtemp(prefix="agc-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def prepare_nbgrader() -> None:
    """Before nbgrader opens or creates a gradebook in this process. A new gradebook is stamped with the head of
    nbgrader's database migrations, which nbgrader asks of a subprocess (`alembic heads`, found on PATH): a whole
    interpreter that imports all of nbgrader, seconds on a busy machine. Here alembic reads the same migration
    scripts in this process and gives the same head (tests/test_nbgrader_bridge.py compares the two); PATH still
    finds this environment's scripts for anything else nbgrader runs by name."""
    import nbgrader.api

    scripts = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if scripts not in path.split(os.pathsep):
        os.environ["PATH"] = scripts + os.pathsep + path
    nbgrader.api.get_alembic_version = nbgrader_migration_head
    logging.getLogger("alembic").setLevel(logging.WARNING)


@functools.cache
def nbgrader_migration_head() -> str:
    """The head revision of nbgrader's gradebook migrations, as `alembic heads` prints it first."""
    from alembic.config import Config as AlembicConfig
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    alembic = AlembicConfig()
    alembic.set_main_option("script_location", ALEMBIC_DIR)
    return ScriptDirectory.from_config(alembic).get_current_head() or ""


def _run(app_class: type, config: Config, assignment_name: str, student: str = "*") -> None:
    from nbgrader.coursedir import CourseDirectory

    prepare_nbgrader()
    private_gradebook(config.CourseDirectory.db_url)
    from nbgrader.utils import capture_log

    coursedir = CourseDirectory(config=config)
    coursedir.assignment_id = assignment_name
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
                f"nbgrader will not change the cells of {assignment_name!r}: the gradebook "
                f"({config.CourseDirectory.db_url}) already holds graded submissions of the old version. "
                "Keep the cells as they are, or move the gradebook aside (after exporting its grades), then release."
            )
        log = result.get("log", "").strip().splitlines()
        detail = "\n".join(log[-15:]) or result.get("error", "")
        raise CourseError(f"nbgrader {app_class.__name__} failed for {assignment_name!r} ({student}):\n{detail}")


def generate_assignment(root: Path, db_url: str, assignment_name: str) -> None:
    """nbgrader generate_assignment: source/<assignment>/ -> release/<assignment>/, and the gradebook rows."""
    from nbgrader.converters import GenerateAssignment

    _run(GenerateAssignment, nbgrader_config(root, db_url), assignment_name)


def autograde(root: Path, db_url: str, assignment_name: str, student: str) -> None:
    """nbgrader autograde, as nbgrader itself runs it (a real kernel, the student's namespace)."""
    from nbgrader.converters import Autograde

    _run(Autograde, nbgrader_config(root, db_url), assignment_name, student)


def private_gradebook(db_url: str) -> None:
    """nbgrader's SQLite gradebook (every grade of the class) is the grader's user's alone (0600) before nbgrader
    creates or opens it, whatever the umask (course.core.files.private_sqlite)."""
    from sqlalchemy.engine import make_url

    url = make_url(db_url)
    if url.get_backend_name() == "sqlite":
        private_sqlite(url.database)


@contextmanager
def open_gradebook(db_url: str) -> Iterator[Gradebook]:
    from nbgrader.api import Gradebook

    prepare_nbgrader()
    private_gradebook(db_url)
    with Gradebook(db_url) as gradebook:
        yield gradebook


def assignment_due(db_url: str, gradebook_path: Path, assignment_name: str) -> datetime | None:
    """The due date nbgrader's gradebook holds for the assignment (`nbgrader db assignment add --duedate`)."""
    if not gradebook_path.exists():
        return None
    from nbgrader.api import MissingEntry

    with open_gradebook(db_url) as gradebook:
        try:
            due: datetime | None = gradebook.find_assignment(assignment_name).duedate
            return due
        except MissingEntry:
            return None


def grade_cell_scores(db_url: str, assignment_name: str, student: str) -> dict[str, float]:
    """{grade cell id: auto score} of one submission, read back from nbgrader's gradebook."""
    with open_gradebook(db_url) as gradebook:
        submission = gradebook.find_submission(assignment_name, student)
        return {
            grade.name: float(grade.auto_score or 0) for notebook in submission.notebooks for grade in notebook.grades
        }


def ensure_assignment_in_gradebook(root: Path, db_url: str, assignment_name: str, source_notebook: Path) -> None:
    """Record the assignment, its notebook and cells in the gradebook, as generate_assignment does."""
    from nbgrader.api import MissingEntry

    with open_gradebook(db_url) as gradebook:
        try:
            gradebook.find_notebook(source_notebook.stem, assignment_name)
            return
        except MissingEntry:
            pass
    record_assignment(root, db_url, assignment_name)


def record_assignment(root: Path, db_url: str, assignment_name: str) -> None:
    """Record (or update) the assignment's notebook and cells in the gradebook at db_url. nbgrader's own way
    of doing that is generate_assignment: it runs into a scratch course, so release/ is never touched."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        scratch_root = Path(scratch)
        shutil.copytree(root / "source" / assignment_name, scratch_root / "source" / assignment_name)
        generate_assignment(scratch_root, db_url, assignment_name)


@dataclass(frozen=True)
class Held:
    """What nbgrader's gradebook holds for one student's submission of an assignment."""

    score: float  # as `nbgrader export` gives it: every cell's score less the late penalty
    timestamp: datetime | None
    late_penalty: float
    extension_hours: float
    scores: dict[str, float | None]  # the notebook's grade and task cells: name -> auto score


def held_submissions(db_url: str, gradebook_path: Path, assignment_name: str, notebook: str) -> dict[str, Held]:
    """{student: what the gradebook holds} for every submission of the assignment (empty: none, or no
    gradebook yet)."""
    if db_url.startswith("sqlite") and not gradebook_path.exists():
        return {}
    from nbgrader.api import MissingEntry

    held = {}
    with open_gradebook(db_url) as gradebook:
        try:
            found = gradebook.find_assignment(assignment_name)
        except MissingEntry:
            return {}
        for submission in found.submissions:
            ours = next((nb for nb in submission.notebooks if nb.name == notebook), None)
            penalty = float(ours.late_submission_penalty or 0) if ours is not None else 0.0
            scores = {grade.name: grade.auto_score for grade in ours.grades} if ours is not None else {}
            extension = submission.extension.total_seconds() / 3600 if submission.extension else 0.0
            held[submission.student_id] = Held(
                round(float(submission.score) - penalty, 6), submission.timestamp, penalty, extension, scores
            )
    return held


def forget_submission(db_url: str, assignment_name: str, student: str) -> None:
    """Remove a student's submission of the assignment from the gradebook (nbgrader's remove_submission)."""
    from nbgrader.api import MissingEntry

    with open_gradebook(db_url) as gradebook:
        try:
            gradebook.remove_submission(assignment_name, student)
        except MissingEntry:
            pass


def record_students(db_url: str, students: dict[str, dict[str, str]]) -> None:
    """Each student into nbgrader's student table, with the roster's names, email and LMS id where it has them
    (nbgrader's update_or_create_student: what formgrader and `nbgrader export` show)."""
    with open_gradebook(db_url) as gradebook:
        for student, fields in students.items():
            gradebook.update_or_create_student(student, **fields)
