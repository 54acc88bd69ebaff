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
from datetime import datetime
from pathlib import Path
from typing import Any

from course.assignment import nbgrader_meta
from course.files import SyncedWrites, atomic_write_text, compact_json, private_copy, private_folders
from course.student_markup import inert_submission

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
        return parse_utc(text)
    except (ValueError, OverflowError):
        raise ValueError(f"{path}: {text!r} is not a timestamp nbgrader can read") from None


def _text(source: Any) -> str:
    return "".join(source) if isinstance(source, list) else source if isinstance(source, str) else ""


def _read_notebook(path: Path) -> dict | None:
    try:
        notebook = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        return None
    if not all(isinstance(cell, dict) for cell in notebook["cells"]):
        return None
    return notebook


def _result_output(question: dict[str, Any]) -> dict[str, Any]:
    lines = [f"autograd-course: {question['earned']:g} / {question['points']:g} points"]
    for value in question.get("values", []):
        mark = "ok " if value.get("correct") else "-- "
        lines.append(f"{mark} {value['name']}: {value.get('earned', 0):g} / {value.get('points', 0):g}")
    return {"output_type": "stream", "name": "stdout", "text": "\n".join(lines) + "\n"}


def autograded_notebook(release: dict, submitted: dict | None, feedback: dict[str, Any], note: str = "") -> dict:
    """The student's cells, the release's locked and grade cells, our result under each grade cell.

    What it returns shares parts (metadata, sources) with `release` and `submitted`, copying only what it changes:
    it is written out, never changed, and so is neither of them (the release is parsed once per batch)."""
    by_id = {nbgrader_meta(c).get("grade_id"): c for c in release["cells"] if nbgrader_meta(c).get("grade_id")}
    restored = {gid for gid, c in by_id.items() if nbgrader_meta(c).get("locked") or nbgrader_meta(c).get("grade")}
    results = {f"test_{q['id']}": q for q in feedback.get("questions", [])}
    base = submitted if submitted is not None else release
    cells, seen = [], set()
    for cell in base["cells"]:
        grade_id = nbgrader_meta(cell).get("grade_id")
        if grade_id in seen:
            continue  # a duplicated cell id would make nbgrader's tools refuse the notebook
        if grade_id in restored:
            cell = by_id[grade_id]
        # (_clean keeps a cell's type, source, id and metadata: only the metadata is copied, never its outputs)
        elif grade_id in by_id:
            cell = {**cell, "cell_type": by_id[grade_id]["cell_type"],
                    "metadata": {**_metadata(cell), "nbgrader": by_id[grade_id]["metadata"]["nbgrader"]}}
        else:  # the student's own cell: nbgrader metadata on it would only be a forged grade cell
            cell = {**cell, "metadata": {key: value for key, value in _metadata(cell).items() if key != "nbgrader"}}
        if grade_id:
            seen.add(grade_id)
        cells.append(_clean(cell))
    for grade_id in by_id:  # a grade or locked cell the student deleted comes back, as nbgrader's tools expect
        if grade_id in restored and grade_id not in seen:
            cells.append(_clean(by_id[grade_id]))
    for cell in cells:
        grade_id = nbgrader_meta(cell).get("grade_id")
        if cell["cell_type"] == "code":
            cell["outputs"] = [_result_output(results[grade_id])] if grade_id in results else []
    if note:
        cells.insert(0, {"cell_type": "markdown", "metadata": {}, "source": note})
    return {"cells": cells, "metadata": release.get("metadata", {}), "nbformat": 4,
            "nbformat_minor": release.get("nbformat_minor", 5)}


def _metadata(cell: dict) -> dict:
    metadata = cell.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def _clean(cell: dict) -> dict:
    """A cell in plain nbformat 4 shape: text source, no outputs of the student's run, no attachments."""
    kind = cell.get("cell_type") if cell.get("cell_type") in ("code", "markdown", "raw") else "raw"
    metadata = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
    clean: dict[str, Any] = {"cell_type": kind, "metadata": metadata, "source": _text(cell.get("source", ""))}
    if "id" in cell and isinstance(cell["id"], str):
        clean["id"] = cell["id"]
    if kind == "code":
        clean["execution_count"] = None
        clean["outputs"] = []
    return clean


def write_autograded(root: Path, assignment: str, notebook_name: str, student: str, submitted_path: Path,
                     release_path: Path, feedback: dict[str, Any], *, writes: SyncedWrites | None = None) -> Path:
    """autograded/<student>/<assignment>/<notebook>, with the submission's timestamp.txt when it has one."""
    folder = private_folders(root, "autograded", student, assignment)
    release = _released(release_path)
    submitted = _read_notebook(submitted_path) if submitted_path.is_file() and not submitted_path.is_symlink() else None
    note = "" if submitted is not None else (
        "**autograd-course could not read this submission**; the released notebook is shown in its place. "
        "See the student's feedback for the reason.")
    # formgrader and generate_feedback render markdown unsanitised: the student's own markup becomes inert first
    notebook = autograded_notebook(release, inert_submission(submitted, release), feedback, note)
    (writes.write_text if writes is not None else atomic_write_text)(folder / notebook_name, compact_json(notebook))
    _copy_beside(submission_folder(submitted_path), folder, (TIMESTAMP,))
    return folder / notebook_name


def copy_submission_files(submitted_path: Path, folder: Path) -> None:
    """nbgrader's timestamp.txt and submission_secret.txt from the submission into a feedback folder: with
    them `nbgrader release_feedback` finds the page and files it under the hash only that student's
    `nbgrader fetch_feedback` computes."""
    _copy_beside(submission_folder(submitted_path), folder, (TIMESTAMP, SECRET))


def _released(path: Path) -> dict:
    """The released notebook, parsed once per batch rather than once per student (never changed by the
    callers: autograded_notebook shares its parts and changes none)."""
    stat = path.stat()
    return _parse_notebook(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _parse_notebook(path: Path, mtime_ns: int, size: int) -> dict:
    del mtime_ns, size  # part of the cache key only: an edited release is read again
    return json.loads(path.read_text(encoding="utf-8"))


def _copy_beside(source: Path, target: Path, names: tuple[str, ...]) -> None:
    """Copy nbgrader's small bookkeeping files (when present, regular files only); drop stale copies."""
    for name in names:
        origin = source / name
        if origin.is_file() and not origin.is_symlink():
            private_copy(origin, target / name)
        else:
            (target / name).unlink(missing_ok=True)
