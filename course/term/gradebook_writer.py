"""A batch's scores into nbgrader's gradebook, in bulk, through nbgrader's own tables.

nbgrader's API writes one ORM object at a time (`add_submission` mirrors the assignment's notebooks,
grade and solution cells as objects, then commits; each lookup is a query and each relationship a lazy
load): about thirteen queries per student. Here the students graded since the last flush are written
together, a handful of statements for all of them, with the rows `add_submission` would create and the
values nbgrader's autograde would set, in nbgrader's tables (`nbgrader.api.Grade.__table__` and so on), so
nbgrader's API, formgrader and `nbgrader export` read them back exactly as if nbgrader had written them
(tests/test_gradebook_writer.py reads both back with nbgrader's API and compares).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from course.term.nbgrader_bridge import ensure_assignment_in_gradebook, prepare_nbgrader

CHUNK = 400  # ids per IN (...) clause: far below SQLite's limit on bound parameters


@dataclass(frozen=True)
class Entry:
    """One student's autograded result, as the gradebook records it."""

    student: str
    scores: dict[str, float | None]  # grade cell id -> points (None: ungraded, as nbgrader leaves a cell)
    timestamp: datetime | None
    late_penalty: float
    extension_hours: float


@dataclass(frozen=True)
class _Notebook:
    """A notebook of the assignment as nbgrader recorded it: the cells a submission of it has rows for."""

    id: str
    name: str
    grade_cells: tuple[tuple[str, str], ...]  # (cell id, name)
    solution_cells: tuple[str, ...]
    task_cells: tuple[tuple[str, str], ...]


class GradebookWriter:
    """One open gradebook for a whole batch: `record` queues a student's scores, `commit` writes every queued
    student in one transaction (and says which, if any, could not be written)."""

    def __init__(
        self, root: Path, db_url: str, assignment_name: str, source_notebook: Path, due: datetime | None = None
    ) -> None:
        ensure_assignment_in_gradebook(root, db_url, assignment_name, source_notebook)
        from nbgrader.api import Gradebook

        prepare_nbgrader()
        self.assignment, self.notebook = assignment_name, source_notebook.stem
        self.gradebook = Gradebook(db_url)
        self.pending: dict[str, Entry] = {}  # student -> what record() was given since the last commit
        if due is not None:  # the course YAML's due date, so nbgrader's own late accounting agrees with ours
            self.gradebook.update_or_create_assignment(assignment_name, duedate=due)
        if db_url.startswith("sqlite"):
            from sqlalchemy import text

            # Write-ahead logging: each commit is one append instead of a rewrite with two fsyncs, and
            # readers (formgrader, nbgrader export) never block.
            self.gradebook.db.execute(text("PRAGMA journal_mode=WAL"))
            self.gradebook.db.execute(text("PRAGMA synchronous=NORMAL"))
        found = self.gradebook.find_assignment(assignment_name)
        self.assignment_id = found.id
        self.notebooks = tuple(
            _Notebook(
                nb.id,
                nb.name,
                tuple((c.id, c.name) for c in nb.grade_cells),
                tuple(c.id for c in nb.solution_cells),
                tuple((c.id, c.name) for c in nb.task_cells),
            )
            for nb in found.notebooks
        )
        self.gradebook.db.commit()

    def record(
        self,
        student: str,
        scores: dict[str, float | None],
        *,
        timestamp: datetime | None = None,
        late_penalty: float = 0.0,
        extension_hours: float = 0.0,
    ) -> None:
        """Queue one student's autograded scores (grade cell id -> points; None: ungraded, as undo puts a cell
        back), the submission's time, the late penalty (nbgrader's late_submission_penalty, which `nbgrader
        export` subtracts) and extension. A student recorded twice before a commit ends as if each record had
        been written in turn."""
        earlier = self.pending.pop(student, None)
        merged = {**earlier.scores, **scores} if earlier is not None else dict(scores)
        self.pending[student] = Entry(student, merged, timestamp, late_penalty, extension_hours)

    def commit(self) -> dict[str, str]:
        """Write every queued student in one transaction. Should that fail, each is written in a transaction
        of its own, so a failure costs only the students it concerns: returned as {student: why}."""
        entries, self.pending = list(self.pending.values()), {}
        if not entries:
            return {}
        try:
            self._write(entries)
            self.gradebook.db.commit()
            return {}
        except Exception:
            self.gradebook.db.rollback()
        failed = {}
        for entry in entries:
            try:
                self._write([entry])
                self.gradebook.db.commit()
            except Exception as problem:
                self.gradebook.db.rollback()
                failed[entry.student] = f"{type(problem).__name__}: {problem}"
        return failed

    def add_students(self, ids: list[str], details: dict[str, dict[str, str]] | None = None) -> None:
        """Make sure each student exists in the gradebook (a roster student who submitted nothing); details:
        {student: {first_name, last_name, email, lms_user_id}} from the roster, set on their rows (a column the
        roster leaves out keeps what the gradebook has)."""
        self._add_missing_students(ids)
        if details:
            from nbgrader.api import Student
            from sqlalchemy import update

            table = Student.__table__
            for student, fields in details.items():
                if fields:
                    self._execute(update(table).where(table.c.id == student).values(**fields))
        self.gradebook.db.commit()

    def close(self) -> None:
        self.gradebook.close()

    def __enter__(self) -> GradebookWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------- the rows

    def _execute(self, statement: Any, rows: list[dict[str, Any]] | None = None) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SQLAlchemy's notes on nbgrader's schema are not ours to act on
            return (
                self.gradebook.db.execute(statement, rows) if rows is not None else self.gradebook.db.execute(statement)
            )

    def _add_missing_students(self, ids: list[str]) -> None:
        """Student rows as `update_or_create_student(id)` creates them: the id and nothing else."""
        from nbgrader.api import Student
        from sqlalchemy import insert, select

        table = Student.__table__
        known: set[str] = set()
        for chunk in _chunks(sorted(set(ids))):
            known.update(self._execute(select(table.c.id).where(table.c.id.in_(chunk))).scalars())
        new = [{"id": sid} for sid in dict.fromkeys(ids) if sid not in known]
        if new:
            self._execute(insert(table), new)

    def _write(self, entries: list[Entry]) -> None:
        """New submissions inserted as nbgrader's add_submission and autograde would make them; those the gradebook
        already has updated in place."""
        from nbgrader.api import SubmittedAssignment
        from sqlalchemy import select

        assignments = SubmittedAssignment.__table__
        students = [entry.student for entry in entries]
        self._add_missing_students(students)
        existing: dict[str, str] = {}  # student -> submitted_assignment id
        for chunk in _chunks(students):
            query = select(assignments.c.student_id, assignments.c.id).where(
                assignments.c.assignment_id == self.assignment_id, assignments.c.student_id.in_(chunk)
            )
            existing.update({sid: sub_id for sid, sub_id in self._execute(query)})
        self._insert_new([entry for entry in entries if entry.student not in existing])
        again = [entry for entry in entries if entry.student in existing]
        if again:
            self._update_again(again, existing)

    def _insert_new(self, entries: list[Entry]) -> None:
        """New submissions: the rows nbgrader's add_submission creates, then the values autograde sets."""
        from nbgrader.api import Comment, Grade, SubmittedAssignment, SubmittedNotebook, new_uuid
        from sqlalchemy import insert

        new_assignments, new_notebooks, new_grades, new_comments = [], [], [], []
        for entry in entries:
            submission_id = new_uuid()
            new_assignments.append(
                {
                    "id": submission_id,
                    "assignment_id": self.assignment_id,
                    "student_id": entry.student,
                    "timestamp": entry.timestamp,
                    "extension": _extension(entry),
                }
            )
            for notebook in self.notebooks:
                notebook_id = new_uuid()
                own = notebook.name == self.notebook
                new_notebooks.append(
                    {
                        "id": notebook_id,
                        "assignment_id": submission_id,
                        "notebook_id": notebook.id,
                        "flagged": False,
                        "late_submission_penalty": (entry.late_penalty or None) if own else None,
                    }
                )
                for cell_id, name in (*notebook.grade_cells, *notebook.task_cells):
                    scored = own and entry.scores.get(name) is not None
                    new_grades.append(
                        {
                            "id": new_uuid(),
                            "notebook_id": notebook_id,
                            "cell_id": cell_id,
                            "auto_score": entry.scores[name] if scored else None,
                            "manual_score": None,
                            "extra_credit": None,
                            # nbgrader's rule (SaveAutoGrades): a scored cell needs a human only
                            # when one already graded it by hand (nobody has, in a new submission)
                            "needs_manual_grade": not scored,
                        }
                    )
                for cell_id in (*notebook.solution_cells, *(cell_id for cell_id, _ in notebook.task_cells)):
                    new_comments.append(
                        {
                            "id": new_uuid(),
                            "notebook_id": notebook_id,
                            "cell_id": cell_id,
                            "auto_comment": None,
                            "manual_comment": None,
                        }
                    )
        for table, rows in (
            (SubmittedAssignment.__table__, new_assignments),
            (SubmittedNotebook.__table__, new_notebooks),
            (Grade.__table__, new_grades),
            (Comment.__table__, new_comments),
        ):
            if rows:
                self._execute(insert(table), rows)

    def _update_again(self, again: list[Entry], existing: dict[str, str]) -> None:
        """Submissions the gradebook already has: the new time, extension, penalty and scores; a cell graded by
        hand keeps its manual score and stays the human's (needs_manual_grade follows nbgrader's rule)."""
        from nbgrader.api import Grade, SubmittedAssignment, SubmittedNotebook
        from sqlalchemy import bindparam, select, update

        assignments, notebooks, grades = SubmittedAssignment.__table__, SubmittedNotebook.__table__, Grade.__table__
        ours = next((nb for nb in self.notebooks if nb.name == self.notebook), None)
        self._execute(
            update(assignments)
            .where(assignments.c.id == bindparam("b_id"))
            .values(timestamp=bindparam("b_timestamp"), extension=bindparam("b_extension")),
            [{"b_id": existing[e.student], "b_timestamp": e.timestamp, "b_extension": _extension(e)} for e in again],
        )
        if ours is None:
            return
        submitted: dict[str, str] = {}  # submitted_assignment id -> submitted_notebook id of our notebook
        for chunk in _chunks([existing[e.student] for e in again]):
            query = select(notebooks.c.assignment_id, notebooks.c.id).where(
                notebooks.c.notebook_id == ours.id, notebooks.c.assignment_id.in_(chunk)
            )
            submitted.update({sub_id: nb_id for sub_id, nb_id in self._execute(query)})
        again = [e for e in again if existing[e.student] in submitted]
        if not again:
            return
        self._execute(
            update(notebooks)
            .where(notebooks.c.id == bindparam("b_id"))
            .values(late_submission_penalty=bindparam("b_penalty")),
            [{"b_id": submitted[existing[e.student]], "b_penalty": e.late_penalty or None} for e in again],
        )
        cells: dict[str, list[str]] = {}  # name -> ids (a grade cell and a task cell may share a name)
        for cell_id, name in (*ours.grade_cells, *ours.task_cells):
            cells.setdefault(name, []).append(cell_id)
        new_scores = [
            {"b_notebook": submitted[existing[e.student]], "b_cell": cell_id, "b_score": score}
            for e in again
            for name, score in e.scores.items()
            for cell_id in cells.get(name, ())
        ]
        where = (grades.c.notebook_id == bindparam("b_notebook"), grades.c.cell_id == bindparam("b_cell"))
        with_score = [row for row in new_scores if row["b_score"] is not None]
        if with_score:
            self._execute(
                update(grades)
                .where(*where)
                .values(auto_score=bindparam("b_score"), needs_manual_grade=grades.c.manual_score.is_not(None)),
                with_score,
            )
        ungraded = [row for row in new_scores if row["b_score"] is None]
        if ungraded:  # nbgrader's rule (SaveAutoGrades): a cell with no auto score needs a human
            self._execute(
                update(grades).where(*where).values(auto_score=None, needs_manual_grade=True),
                [{k: v for k, v in row.items() if k != "b_score"} for row in ungraded],
            )


def _extension(entry: Entry) -> timedelta | None:
    return timedelta(hours=entry.extension_hours) if entry.extension_hours else None


def _chunks(items: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]
