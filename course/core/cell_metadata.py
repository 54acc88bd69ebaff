"""The nbgrader metadata of a notebook cell, read as the student input it is.

Every field is checked once, here, against nbgrader's own cell schema (nbgrader/nbgraderformat/v3.json:
`grade_id` text of letters, digits, `_` and `-`; `grade`, `solution`, `locked`, `task` booleans; `points` a
number >= 0; `checksum` 32 characters; `cell_type` one of nbformat's three), and a field that is not of its
type is treated as absent. A cell whose `metadata` or `nbgrader` is not a mapping has no nbgrader metadata.
The rest of the course asks the typed `NbgraderCell`, never the notebook's dictionaries: a `grade_id` that is
a list, a number, a mapping, null, a boolean or a megabyte of text can then neither crash the grader (an
unhashable id, a string method on a number) nor pass for one of the course's cells.

What a damaged id costs the student is said to them (submission.py): the cell is graded as their own code,
not as the course's cell it was. The instructor's own notebooks (source/) are read with
`assignment.nbgrader_meta`, where a wrong field is refused with a SourceNotebookError instead.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

GRADE_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")  # nbgrader's pattern; 128: the gradebook's column (String(128))
CELL_TYPES = ("code", "markdown", "raw")
FLAGS = ("grade", "solution", "locked", "task")


@dataclass(frozen=True)
class NbgraderCell:
    """One cell's nbgrader metadata, every field of its type (absent: None or False)."""

    grade_id: str | None = None
    grade: bool = False
    solution: bool = False
    locked: bool = False
    task: bool = False
    points: float | None = None
    checksum: str | None = None
    cell_type: str | None = None
    schema_version: int | None = None
    damaged_id: str = ""  # what the notebook held in place of a grade_id, in words ("a list"); "" when fine

    @property
    def locked_or_graded(self) -> bool:
        """A cell nbgrader's tools put back from the release (its text is the course's)."""
        return self.locked or self.grade

    def as_json(self) -> dict[str, Any]:
        """The metadata as nbgrader writes it, from the checked fields only (for autograded/)."""
        data: dict[str, Any] = {"grade": self.grade, "locked": self.locked, "solution": self.solution}
        if self.task:
            data["task"] = True
        for name in ("grade_id", "points", "checksum", "cell_type", "schema_version"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        return data


NONE = NbgraderCell()


def nbgrader_cell(cell: object) -> NbgraderCell:
    """The checked nbgrader metadata of `cell` (any JSON value): NONE when it has none we can use."""
    metadata = cell.get("metadata") if type(cell) is dict else None
    meta = metadata.get("nbgrader") if type(metadata) is dict else None
    if type(meta) is not dict:
        return NONE
    grade_id = meta.get("grade_id")
    valid_id = grade_id if type(grade_id) is str and GRADE_ID.fullmatch(grade_id) else None
    checksum = meta.get("checksum")
    cell_type = meta.get("cell_type")
    version = meta.get("schema_version")
    return NbgraderCell(
        grade_id=valid_id,
        **{flag: meta.get(flag) is True for flag in FLAGS},
        points=_points(meta.get("points")),
        checksum=checksum if type(checksum) is str and len(checksum) == 32 and checksum.isalnum() else None,
        cell_type=cell_type if cell_type in CELL_TYPES else None,
        schema_version=version if type(version) is int and 0 < version < 100 else None,
        # ("" is how a notebook tool may leave a cell nbgrader does not grade: absent, nothing to tell the student)
        damaged_id=_kind(grade_id) if "grade_id" in meta and valid_id is None and grade_id != "" else "",
    )


MAX_POINTS = 1e6  # far above any cell's points; a bigger number (10**400 is valid JSON) is no cell's


def _points(value: object) -> float | None:
    if type(value) is int:  # compared as an int (float() of 10**400 raises); kept as nbgrader wrote it
        return value if 0 <= value <= MAX_POINTS else None
    if type(value) is float:
        return value if math.isfinite(value) and 0 <= value <= MAX_POINTS else None
    return None


def _kind(value: object) -> str:
    """A JSON value in a few words, never its content (a student's text is not echoed back)."""
    if value is None:
        return "null"
    if type(value) is str:
        return "text that is not an nbgrader id"
    return {bool: "true or false", int: "a number", float: "a number", list: "a list", dict: "a mapping"}.get(
        type(value), "not text"
    )
