"""Read and validate a submitted notebook; decide which of its cells are the student's code.

Rules (the grader never runs a submitted cell as grader code):
- the source's `setup` cell always runs first, taken from source/, after a cell that makes the student's
  helper module `course.notebook` (and `course.forms`, which it imports) importable in the sandbox (which
  sees no course files);
- a submitted cell whose grade_id names a locked or test cell of the source, and whose text is still the
  released text, is the grader's cell: it is not run (hidden tests run in the judge, from source/);
- every other code cell, edited metadata or not, is the student's code and runs in the sandbox (nbgrader
  metadata is read through `cell_metadata.nbgrader_cell`: a grade_id that is not an nbgrader id is none,
  and the feedback says so);
- an answer cell that was deleted leaves its answers unanswered.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import re
import stat
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from course.core.cell_metadata import nbgrader_cell
from course.core.errors import NotThisAssignment, SubmissionError, UnreadableSubmission
from course.core.text import safe_text
from course.pipeline.assignment import NUMBERS_CELL, Assignment
from course.pipeline.variants import numbers_source
from course.sandbox.handed_in import Cell as Cell  # the unit of student code, re-exported for the grader
from course.sandbox.handed_in import notebook_module_cell

if TYPE_CHECKING:
    from course.core.config import CourseConfig

ANSWER_PREFIX = "answer_"  # an answer cell's grade_id: answer_<question> (assignment.py)


@dataclass(frozen=True)
class Submission:
    student_id: str
    path: Path
    cells: tuple[Cell, ...]
    answer_sources: dict[str, str]
    deleted_answer_cells: tuple[str, ...]
    personalised_for: str | None = None
    edited_locked_cells: tuple[str, ...] = ()  # locked or test cells whose text differs from the release
    damaged_metadata: tuple[str, ...] = ()  # "cell 7's nbgrader grade_id is a list": no id, so the student's code
    # A numbers cell that no personalised release marked, showing the release's default numbers: the notebook
    # everyone was given, which with variants is nobody's own.
    default_numbers: bool = False
    # A numbers cell with no student's id on it (default_numbers or not): whose numbers it shows, only a comparison
    # with the release can say.
    unmarked_numbers: bool = False


def _source_text(cell: dict[str, Any], index: int, path: Path) -> str:
    source = cell.get("source", "")
    if type(source) is list and all(type(line) is str for line in source):
        return "".join(source)
    if type(source) is str:
        return source
    raise SubmissionError(f"{_name(path)}: cell {index} has a source that is neither text nor a list of lines")


def _name(path: Path) -> str:
    """How a submitted file is named in a message: its name only (the grader's folders are none of the
    student's business), made safe (a file name need not even be UTF-8)."""
    return safe_text(path.name, 120, one_line=True)


def read_regular_file(path: Path, max_bytes: int) -> bytes:
    """The file's bytes, at most max_bytes + 1 (more is too large, for the caller to say); a symlink (which could
    point at the answer key) or a special file is refused."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UnreadableSubmission(f"{_name(path)}: is a symbolic link, which is not followed") from None
        raise UnreadableSubmission(f"{_name(path)}: cannot be read ({error.strerror})") from None
    with os.fdopen(descriptor, "rb") as stream:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise UnreadableSubmission(f"{_name(path)}: is not a regular file")
        try:
            return stream.read(max_bytes + 1)
        except OSError as error:
            raise UnreadableSubmission(f"{_name(path)}: cannot be read ({error.strerror})") from None


def read_notebook_json(path: Path, max_bytes: int, content: bytes | None = None) -> dict[str, Any]:
    """The submitted file as nbformat-4 JSON, or a SubmissionError a student can act on. With `content`, those
    bytes are the notebook (already in memory) and `path` only names it."""
    if path.suffix != ".ipynb":
        raise SubmissionError(
            f"{_name(path)}: expected a Jupyter notebook (.ipynb), not a {path.suffix or 'plain'} file"
        )
    data = read_regular_file(path, max_bytes) if content is None else content
    size = len(data)
    if size == 0:
        raise SubmissionError(f"{_name(path)}: the file is empty; submit the notebook after saving it in JupyterLab")
    if size > max_bytes:
        raise SubmissionError(
            f"{_name(path)}: the file is over the limit of {max_bytes / 2**20:.0f} MB; "
            "clear the outputs (Edit > Clear Outputs of All Cells), save, and submit again"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SubmissionError(
            f"{_name(path)}: not a notebook (the file is not UTF-8 text; was a different file submitted?)"
        ) from None
    try:
        notebook = json.loads(text)
    except RecursionError:
        raise SubmissionError(f"{_name(path)}: not a notebook (JSON nested too deeply)") from None
    except ValueError as error:
        where = f"line {error.lineno}" if isinstance(error, json.JSONDecodeError) else "somewhere"
        raise SubmissionError(
            f"{_name(path)}: not a notebook (not valid JSON, broken at {where}): the file was probably cut short "
            "or edited outside Jupyter. Open your notebook in Jupyter, save it (File > Save Notebook), and submit "
            "that .ipynb file again"
        ) from None
    if type(notebook) is not dict or ("cells" not in notebook and "worksheets" not in notebook):
        raise SubmissionError(f"{_name(path)}: not a notebook (JSON, but without the cells of a Jupyter notebook)")
    version = notebook.get("nbformat")
    if version != 4:
        raise SubmissionError(
            f"{_name(path)}: notebook format {version!r} is not supported; open it in JupyterLab and save it "
            "(that writes format 4)"
        )
    if type(notebook["cells"]) is not list:
        raise SubmissionError(f"{_name(path)}: not a notebook ('cells' is not a list)")
    return notebook


# A student id becomes a folder name, a CSV cell and a gradebook key: letters (any script), digits and
# . _ @ + -, starting with a letter or digit (so never `..`, a hidden file or a spreadsheet formula).
STUDENT_ID = re.compile(r"[^\W_][\w.@+-]{0,99}")


def student_id_problem(student_id: str) -> str:
    """Why `student_id` cannot be used as it is ("" when it can). It is never rewritten into another id:
    two different names must never become one student."""
    shown = repr(safe_text(student_id, 120, one_line=True))
    if not unicodedata.is_normalized("NFC", student_id):
        return (
            f"{shown} is not a usable student id: its letters are not in Unicode's composed form (NFC); "
            "rename the file or folder"
        )
    if not STUDENT_ID.fullmatch(student_id):
        return (
            f"{shown} is not a usable student id: it must start with a letter or digit and hold only "
            "letters, digits and . _ @ + - (at most 100)"
        )
    return ""


def personalised_for(cell: dict[str, Any]) -> str | None:
    """The student id a personalised release wrote into its numbers cell, if any (a plain claim)."""
    metadata = cell.get("metadata")
    mark = metadata.get("autograd_course") if isinstance(metadata, dict) else None
    student = mark.get("student_id") if isinstance(mark, dict) else None
    return safe_text(student, 100, one_line=True) if type(student) is str else None


def read_submission(
    path: Path,
    student_id: str,
    assignment: Assignment,
    *,
    params: dict[str, Any],
    max_bytes: int,
    max_cells: int,
    content: bytes | None = None,
    release_numbers: str | None = None,
) -> Submission:
    """Read one notebook (the file at `path`, or `content` named by it) and split it into the student's code and
    the grader's cells.

    The grader's cells come first: the course's setup, then the student's numbers made from `params`
    (recomputed by the grader, never read from the notebook). `release_numbers`: the numbers cell of the release
    everyone was given, which `default_numbers` compares with (default: the assignment's own numbers cell; pass it
    when the assignment was read from the notebook itself, whose numbers cell is no measure of the default)."""
    notebook = read_notebook_json(path, max_bytes, content)
    raw_cells = notebook["cells"]
    if len(raw_cells) > max_cells:
        raise SubmissionError(
            f"{_name(path)}: the notebook has {len(raw_cells)} cells, more than the limit of {max_cells}; "
            "start again from the released notebook and copy your answers in"
        )
    own_numbers = numbers_source(params, assignment.content)
    cells = _grader_cells(assignment, own_numbers if params else None)
    if release_numbers is None:
        release_numbers = assignment.released_sources.get(NUMBERS_CELL, "\0")
    reading = _Reading(path, assignment, own_numbers, release_numbers, cells)
    for index, raw in enumerate(raw_cells):
        if type(raw) is not dict:
            raise SubmissionError(f"{_name(path)}: cell {index} is not a notebook cell")
        if raw.get("cell_type") == "code":
            reading.take(index, raw)
    if not reading.answer_sources:
        raise NotThisAssignment(
            f"{_name(path)}: none of the answer cells of assignment {assignment.name!r} is in this notebook; "
            f"submit the notebook you were given for it ({assignment.notebook_path.name}, as your instructor "
            f"released it for {assignment.name!r}) with your answers",
            frozenset(reading.held_answers),
        )
    deleted = tuple(sorted(reading.answer_ids - set(reading.answer_sources)))
    claimed = reading.claimed_student
    return Submission(
        student_id,
        path,
        tuple(reading.cells),
        reading.answer_sources,
        deleted,
        claimed,
        tuple(reading.edited),
        tuple(reading.damaged),
        reading.default_numbers and claimed is None,
        reading.unmarked_numbers and claimed is None,
    )


def _grader_cells(assignment: Assignment, own_numbers: str | None) -> list[Cell]:
    """The grader's cells, which run first: the course's helpers and setup, then the student's numbers (if any)."""
    cells = [
        Cell(-3, "helpers (from the course)", notebook_module_cell()),
        Cell(-2, "setup (from the course)", assignment.setup_source),
    ]
    if own_numbers is not None:
        cells.append(Cell(-1, "your numbers (from the course)", own_numbers))
    return cells


@dataclass
class _Reading:
    """A notebook's code cells read one by one: the student's code, and what the grader learns of the notebook."""

    path: Path
    assignment: Assignment
    own_numbers: str  # the student's numbers cell as the grader makes it
    release_numbers: str  # the numbers cell of the release everyone was given
    cells: list[Cell]  # the grader's cells, then the student's code
    answer_sources: dict[str, str] = field(default_factory=dict)
    held_answers: set[str] = field(default_factory=set)  # every answer cell id in the notebook, any assignment's
    claimed_student: str | None = None
    default_numbers: bool = False
    unmarked_numbers: bool = False
    edited: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)  # code cells whose grade_id is no nbgrader id: the student's code

    @functools.cached_property
    def answer_ids(self) -> set[str]:
        return {q.answer_cell_id for q in self.assignment.questions}

    def take(self, index: int, raw: dict[str, Any]) -> None:
        """One code cell: the student's code, unless it is the grader's own cell untouched."""
        source = _source_text(raw, index, self.path)
        meta = nbgrader_cell(raw)
        grade_id = meta.grade_id
        if grade_id and grade_id.startswith(ANSWER_PREFIX):
            self.held_answers.add(grade_id)
        if meta.damaged_id:
            self.damaged.append(f"cell {index + 1}'s nbgrader grade_id is {meta.damaged_id}")
        if grade_id == NUMBERS_CELL:
            self.claimed_student = self.claimed_student or personalised_for(raw)
            self.unmarked_numbers = self.unmarked_numbers or personalised_for(raw) is None
            self.default_numbers = self.default_numbers or (
                personalised_for(raw) is None and source.rstrip() == self.release_numbers.rstrip()
            )
            if source.rstrip() == self.own_numbers.rstrip():
                return
        locked = self.assignment.locked_sources
        # Trailing whitespace aside (nbgrader and our own region stripping may end a cell with or without a
        # newline, and it changes no code):
        if grade_id in locked and source.rstrip() == self.assignment.released_sources.get(grade_id, "\0").rstrip():
            return  # the grader's own cell, untouched: its source/ version is what counts
        personalised_numbers = grade_id == NUMBERS_CELL and personalised_for(raw) is not None
        if grade_id in locked and grade_id not in self.edited and not personalised_numbers:
            self.edited.append(grade_id)
        if grade_id in self.answer_ids and grade_id not in self.answer_sources:
            self.answer_sources[grade_id] = source
            label = f"your answer cell for {self.assignment.question_by_answer_cell(grade_id).title}"
        else:
            label = f"cell {index + 1}"
        self.cells.append(Cell(index, label, source))


def other_assignment(config: CourseConfig, assignment_name: str, answer_ids: frozenset[str]) -> str:
    """The course's other assignment whose notebook holds these answer cells (`NotThisAssignment.answer_ids`: the
    notebook holds none of `assignment`'s), the one it shares most with; "" when none is. Read from the other
    assignments' source notebooks (the instructor's, trusted); one that cannot be read is passed over."""
    best, shared = "", 0
    for settings in config.assignments:
        if settings.name == assignment_name or not answer_ids:
            continue
        path = config.source_notebook(settings.name)
        try:
            theirs = _grade_ids(path, path.stat().st_mtime_ns)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if len(answer_ids & theirs) > shared:
            best, shared = settings.name, len(answer_ids & theirs)
    return best


@functools.lru_cache(maxsize=32)
def _grade_ids(path: Path, mtime_ns: int) -> frozenset[str]:
    """The grade ids of a source notebook's cells, read once per version of the file (a server refusing many
    uploads of other notebooks reads each assignment's notebook once, not once an upload)."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    ids = (nbgrader_cell(cell).grade_id for cell in cells if isinstance(cell, dict))
    return frozenset(grade_id for grade_id in ids if grade_id)


def other_assignment_text(other: str, assignment: Assignment) -> str:
    """What a notebook of assignment `other` is told where `assignment` is graded: whose notebook it is, plainly."""
    return (
        f"this is the notebook of assignment {other!r}, not of {assignment.name!r} (its answer cells are those "
        f"of {other!r}). Submit your notebook of {assignment.name!r} ({assignment.notebook_path.name}) here, "
        f"and the one of {other!r} where {other!r} is submitted"
    )
