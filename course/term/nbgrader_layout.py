"""The files nbgrader's own tools read beside the gradebook, written so that they agree with our grades.

- `submitted/<student>/<assignment>/timestamp.txt` (written by `nbgrader collect`): when the work came in;
- `autograded/<student>/<assignment>/<notebook>.ipynb` (+ timestamp.txt): formgrader lists a submission as
  autograded, and opens it for manual grading, only when this exists and its timestamp is the gradebook's;
- `feedback/<student>/<assignment>/<notebook>.html` (+ timestamp.txt, submission_secret.txt): what
  `nbgrader release_feedback` hands to the exchange and students receive with `nbgrader fetch_feedback`.

The autograded notebook is the student's notebook with every locked and grade cell restored from the
*release* (never from source/: the hidden tests stay out of it, so nothing nbgrader derives from it,
`nbgrader generate_feedback` included, can show them) and our result printed under each grade cell.
It is only data for formgrader: nothing here runs the student's code.
"""

from __future__ import annotations

import functools
import json
import re
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from course.core.cell_metadata import NbgraderCell, nbgrader_cell
from course.core.errors import SubmissionError
from course.core.files import SyncedWrites, atomic_write_text, compact_json, private_copy, private_folders
from course.pipeline.feedback_model import Feedback, QuestionFeedback
from course.pipeline.submission import read_notebook_json
from course.term.student_markup import inert_cells

TIMESTAMP = "timestamp.txt"
SECRET = "submission_secret.txt"  # noqa: S105 - the name of nbgrader's file, not a secret


def submission_folder(notebook_path: Path) -> Path:
    """The folder nbgrader's collect layout keeps beside the notebook (timestamp.txt, the secret)."""
    return notebook_path.parent


def read_timestamp(notebook_path: Path) -> datetime | None:
    """The submission time nbgrader recorded (timestamp.txt beside the notebook), as naive UTC; None when
    there is none. An unreadable timestamp is reported to the caller as a ValueError with the file named."""
    from nbgrader.utils import parse_utc

    path = submission_folder(notebook_path) / TIMESTAMP
    try:
        if not path.is_file() or path.is_symlink():
            return None
        text = path.read_text(encoding="utf-8", errors="replace").strip()[:100]
    except OSError as error:  # a folder or file the grader may not read: the instructor's to fix, not a crash
        raise ValueError(f"{path}: cannot be read ({error.strerror or error})") from None
    try:
        due: datetime | None = parse_utc(text)
        return due
    except (ValueError, OverflowError):
        raise ValueError(f"{path}: {text!r} is not a timestamp nbgrader can read") from None


def _text(source: Any) -> str:
    if type(source) is list:
        return "".join(line for line in source if type(line) is str)
    return source if type(source) is str else ""


def _read_notebook(path: Path, max_bytes: int) -> dict[str, Any] | None:
    """The submission as the grader read it (`read_notebook_json`: a regular file within the size limit, UTF-8,
    JSON of bounded depth, nbformat 4), or None when it is none: then the release stands in for it."""
    try:
        notebook = read_notebook_json(path, max_bytes)
    except SubmissionError:  # (UnreadableSubmission is one)
        return None
    if not all(type(cell) is dict for cell in notebook["cells"]):
        return None
    return notebook


def _result_output(question: QuestionFeedback) -> dict[str, Any]:
    lines = [f"autograd-course: {question.earned:g} / {question.points:g} points"]
    for value in question.values:
        mark = "ok " if value.correct else "-- "
        lines.append(f"{mark} {value.name}: {value.earned:g} / {value.points:g}")
    return {"output_type": "stream", "name": "stdout", "text": "\n".join(lines) + "\n"}


def autograded_notebook(
    release: dict[str, Any], submitted: dict[str, Any] | None, questions: Sequence[QuestionFeedback], note: str = ""
) -> dict[str, Any]:
    """The student's cells, the release's locked and grade cells, our result (`questions`, the feedback's) under
    each grade cell.

    The submission is the student's input: its nbgrader metadata is read through `nbgrader_cell` (a grade_id
    that is no nbgrader id is no id), its other metadata is kept only when it is plain JSON (`_plain_metadata`),
    its text made valid UTF-8 and its cell ids nbformat's, so that whatever the notebook holds the file can be
    written and nbgrader's tools can read it. What it returns shares parts (metadata, sources) with `release`
    and `submitted`, copying only what it changes: it is written out, never changed, and so is neither of them
    (the release is parsed once per batch)."""
    by_id: dict[str, tuple[NbgraderCell, dict[str, Any]]] = {}
    for cell in release["cells"]:
        meta = nbgrader_cell(cell)
        if meta.grade_id is not None:
            by_id.setdefault(meta.grade_id, (meta, cell))
    restored = {grade_id for grade_id, (meta, _) in by_id.items() if meta.locked_or_graded}
    results = {f"test_{q.id}": q for q in questions}
    base = submitted if submitted is not None else release
    cells: list[dict[str, Any]] = []
    seen: set[str] = set()
    for cell in base["cells"]:
        grade_id = nbgrader_cell(cell).grade_id
        ours = by_id.get(grade_id) if grade_id is not None else None
        if grade_id is None or ours is None:  # the student's own: nbgrader metadata on it would be a forged grade cell
            cells.append(_clean(cell, None))
            continue
        if grade_id in seen:
            continue  # a duplicated cell id would make nbgrader's tools refuse the notebook
        seen.add(grade_id)
        meta, released = ours
        # (_clean keeps a cell's type, source, id and metadata: only the metadata is copied, never its outputs)
        cells.append(
            _clean(released, meta)
            if grade_id in restored
            else _clean({**cell, "cell_type": released.get("cell_type")}, meta)
        )
    for grade_id, (meta, released) in by_id.items():  # a grade or locked cell the student deleted comes back,
        if grade_id in restored and grade_id not in seen:  # as nbgrader's tools expect
            cells.append(_clean(released, meta))
    # formgrader and generate_feedback render markdown unsanitised: the student's markup becomes inert, judged by
    # the type each cell is written with (a student's code cell matched to an unlocked markdown cell of the
    # release is written as markdown)
    cells = inert_cells(cells, release)
    for cell in cells:
        if cell["cell_type"] == "code":
            grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
            cell["outputs"] = [_result_output(results[grade_id])] if grade_id in results else []
    if note:
        cells.insert(0, {"cell_type": "markdown", "metadata": {}, "source": note})
    _unique_ids(cells)
    return {
        "cells": cells,
        "metadata": release.get("metadata", {}),
        "nbformat": 4,
        "nbformat_minor": release.get("nbformat_minor", 5),
    }


MAX_METADATA_CHARS = 100_000  # a cell's own metadata kept in autograded/; beyond, it is left out


def _plain_metadata(cell: dict[str, Any]) -> dict[str, Any]:
    """The cell's metadata other than nbgrader's, when it is plain JSON that can be written as UTF-8 (no NaN,
    no lone surrogate, not too deep or too big); else none: formgrader needs none of it."""
    metadata = cell.get("metadata")
    if type(metadata) is not dict:
        return {}
    kept = {key: value for key, value in metadata.items() if key != "nbgrader"}
    try:
        text = json.dumps(kept, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")
    except (ValueError, TypeError, RecursionError):  # (UnicodeEncodeError is a ValueError)
        return {}
    return kept if len(text) <= MAX_METADATA_CHARS else {}


def _utf8(text: str) -> str:
    """Text that can be written as UTF-8: a lone surrogate (valid in JSON's escapes, not in UTF-8) becomes '?'."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


CELL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # nbformat 4.5's cell id


def _unique_ids(cells: list[dict[str, Any]]) -> None:
    """Every cell an nbformat id of its own (nbformat 4.5 requires one, unique): a missing, malformed or
    repeated id is replaced by a fresh one."""
    used = {cell["id"] for cell in cells if "id" in cell}
    seen: set[str] = set()
    number = 0
    for cell in cells:
        if cell.get("id") in seen or "id" not in cell:
            number += 1
            while f"autograded-{number}" in used:
                number += 1
            cell["id"] = f"autograded-{number}"
            used.add(cell["id"])
        seen.add(cell["id"])


def _clean(cell: dict[str, Any], meta: NbgraderCell | None) -> dict[str, Any]:
    """A cell in plain nbformat 4 shape: text source, no outputs of the student's run, no attachments, and
    the nbgrader metadata `meta` (the release's, as checked) or none."""
    kind = cell.get("cell_type") if cell.get("cell_type") in ("code", "markdown", "raw") else "raw"
    metadata = _plain_metadata(cell)
    if meta is not None:
        metadata = {**metadata, "nbgrader": meta.as_json()}
    clean: dict[str, Any] = {"cell_type": kind, "metadata": metadata, "source": _utf8(_text(cell.get("source", "")))}
    if type(cell.get("id")) is str and CELL_ID.fullmatch(cell["id"]):
        clean["id"] = cell["id"]
    if kind == "code":
        clean["execution_count"] = None
        clean["outputs"] = []
    return clean


def write_autograded(
    root: Path,
    assignment_name: str,
    notebook_name: str,
    student: str,
    submitted_path: Path,
    release_path: Path,
    feedback: Feedback,
    *,
    writes: SyncedWrites | None = None,
    max_bytes: int,
) -> Path:
    """autograded/<student>/<assignment>/<notebook>, with the submission's timestamp.txt when it has one.
    max_bytes: the largest submission read (the course's limits.notebook_mb, as when it was graded)."""
    folder = private_folders(root, "autograded", student, assignment_name)
    release = _released(release_path)
    submitted = _read_notebook(submitted_path, max_bytes)
    note = (
        ""
        if submitted is not None
        else (
            "**autograd-course could not read this submission**; the released notebook is shown in its place. "
            "See the student's feedback for the reason."
        )
    )
    notebook = autograded_notebook(release, submitted, feedback.questions, note)
    (writes.write_text if writes is not None else atomic_write_text)(folder / notebook_name, compact_json(notebook))
    _copy_beside(submission_folder(submitted_path), folder, (TIMESTAMP,))
    return folder / notebook_name


def write_feedback_files(submitted_path: Path | None, folder: Path) -> None:
    """nbgrader's timestamp.txt and submission_secret.txt in a feedback folder. `nbgrader release_feedback` opens
    both beside every page it releases and stops the whole class at the first folder without them, so every
    feedback folder gets both:

    - the submission's own (as `nbgrader collect` wrote them): with them release_feedback files the page under
      the hash only that student's `nbgrader fetch_feedback` computes;
    - for a submission without them (a notebook the instructor put into submitted/ by hand): the notebook file's
      modification time (UTC, nbgrader's format), a label only (release_feedback prints it; the late policy reads
      submitted/, where there is none, so the work counts as on time), and a fresh random secret like the one
      `nbgrader submit` makes, kept on regrading: the page is released under a hash nobody else can compute;
      that student, who submitted nothing through the exchange, gets the page from the instructor instead;
    - without a submission (submitted_path None: feedback rewritten after the fact), the folder's own, or new ones.
    """
    source = submission_folder(submitted_path) if submitted_path is not None else None
    timestamp = _valid_timestamp(source / TIMESTAMP) if source is not None else None
    if timestamp is None:
        timestamp = _valid_timestamp(folder / TIMESTAMP) if source is None else None
    if timestamp is None:
        timestamp = _stamp(_written_at(submitted_path))
    secret = (_valid_secret(source / SECRET) if source is not None else None) or _valid_secret(folder / SECRET)
    for name, text in ((TIMESTAMP, timestamp), (SECRET, secret or secrets.token_hex(64))):
        if _valid_text(folder / name) != text:
            atomic_write_text(folder / name, text)


MAX_BOOKKEEPING_BYTES = 1024  # nbgrader's timestamp.txt and secret are a line; a bigger file is not theirs


def _valid_text(path: Path) -> str | None:
    """A small bookkeeping file's text: a regular file (never through a link), UTF-8, within the bound."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_BOOKKEEPING_BYTES:
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _valid_timestamp(path: Path) -> str | None:
    """timestamp.txt as written, when nbgrader can read it (its generate_feedback stops on one it cannot)."""
    from nbgrader.utils import parse_utc

    text = _valid_text(path)
    try:
        return text if text is not None and text.strip() and parse_utc(text.strip()) is not None else None
    except (ValueError, OverflowError):
        return None


def _valid_secret(path: Path) -> str | None:
    """submission_secret.txt as written, when release_feedback can hash with it (it must not be empty)."""
    text = _valid_text(path)
    return text if text else None


def _written_at(notebook: Path | None) -> datetime:
    """When the notebook file was last written (naive UTC); now when there is no file to ask."""
    try:
        if notebook is not None:
            return datetime.fromtimestamp(notebook.lstat().st_mtime, UTC).replace(tzinfo=None)
    except (OSError, OverflowError, ValueError):
        pass
    return datetime.now(UTC).replace(tzinfo=None)


def _stamp(moment: datetime) -> str:
    """nbgrader's timestamp.txt format (naive UTC), as `nbgrader collect` writes it."""
    return f"{moment:%Y-%m-%d %H:%M:%S.%f} UTC"


def _released(path: Path) -> dict[str, Any]:
    """The released notebook, parsed once per batch rather than once per student (never changed by the
    callers: autograded_notebook shares its parts and changes none)."""
    stat = path.stat()
    return _parse_notebook(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _parse_notebook(path: Path, mtime_ns: int, size: int) -> dict[str, Any]:
    del mtime_ns, size  # part of the cache key only: an edited release is read again
    notebook: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return notebook


def _copy_beside(source: Path, target: Path, names: tuple[str, ...]) -> None:
    """Copy nbgrader's small bookkeeping files (when present, regular files only); drop stale copies."""
    for name in names:
        origin = source / name
        if origin.is_file() and not origin.is_symlink():
            private_copy(origin, target / name)
        else:
            (target / name).unlink(missing_ok=True)
