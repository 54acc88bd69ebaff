"""A student's nbgrader folders (submitted/, autograded/, feedback/ of one assignment) as a recording into the
term keeps them, fingerprints them and puts them back (term_record.py): whatever is in a folder's place - a
folder, a file, a link, nothing - comes back exactly so."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from course.core.files import PRIVATE_FOLDER, make_folders, private_tree
from course.term import nbgrader_layout

FOLDERS = ("submitted", "autograded", "feedback")  # nbgrader's per-student folders a recording replaces


def fingerprints(root: Path, assignment_name: str, student: str) -> dict[str, str | None]:
    """{folder: fingerprint} of the student's submitted/, autograded/, feedback/."""
    return {name: fingerprint(root / name / student / assignment_name) for name in FOLDERS}


def kept_fingerprints(kept: Path) -> dict[str, str | None]:
    """The same, of the copies `keep` made in `kept`."""
    return {name: fingerprint(kept / name) for name in FOLDERS}


def fingerprint(top: Path) -> str | None:
    """A digest of every file's path and bytes in a folder (None: nothing there; a file or a link in the
    folder's place has a digest of its own kind). A named pipe is never read (it could block)."""
    if top.is_symlink():
        return "link:" + hashlib.sha256(str(top.readlink()).encode("utf-8", "surrogateescape")).hexdigest()
    if not top.is_dir():
        return (
            None
            if not top.exists()
            else "file:" + (hashlib.sha256(top.read_bytes()).hexdigest() if top.is_file() else "special")
        )
    digest = hashlib.sha256()
    for path in sorted(top.rglob("*")):
        if path.is_symlink() or path.is_file():
            digest.update(str(path.relative_to(top)).encode("utf-8", "surrogateescape") + b"\0")
            digest.update(
                hashlib.sha256(str(path.readlink()).encode() if path.is_symlink() else path.read_bytes()).digest()
            )
    return digest.hexdigest()


def keep(root: Path, assignment_name: str, student: str, kept: Path) -> None:
    """The student's three folders as they are, whatever is in their place, copied into `kept` (made here): the
    grader's user's alone (0700, 0600), but for the feedback page, kept 0644 so that one put back by an undo is
    still one `nbgrader release_feedback` can hand to the student."""
    make_folders(kept.parent)
    kept.mkdir()
    os.chmod(kept, PRIVATE_FOLDER)  # mkdir's mode passes through the umask, chmod's does not
    for name in FOLDERS:
        _copy(root / name / student / assignment_name, kept / name)
    private_tree(kept, public=lambda path: path.parent == kept / "feedback" and path.suffix == ".html")


def put_back(root: Path, assignment_name: str, student: str, kept: Path) -> None:
    """The student's three folders as `keep` found them (absent ones removed again)."""
    for name in FOLDERS:
        target = root / name / student / assignment_name
        if target.is_symlink() or (target.exists() and not target.is_dir()):
            target.unlink()
        elif target.exists():
            shutil.rmtree(target)
        saved = kept / name
        if saved.is_symlink() or saved.exists():
            _copy(saved, target)
        elif target.parent.is_dir() and not any(target.parent.iterdir()):
            target.parent.rmdir()  # the student's folder the recording made, empty again


def _copy(source: Path, target: Path) -> None:
    """A folder (its links as links), a file or a link, as it is; nothing when there is nothing. Anything else
    (a named pipe) is refused by shutil, which reads no such thing."""
    if source.is_symlink():
        make_folders(target.parent)
        target.symlink_to(source.readlink())
    elif source.is_dir():
        make_folders(target.parent)
        shutil.copytree(source, target, symlinks=True)
    elif source.exists():
        make_folders(target.parent)
        shutil.copy2(source, target)


def noted(path: Path) -> dict[str, Any] | None:
    """Fingerprints a recording noted in a file (None: it never got there, or the file is not theirs)."""
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return found if isinstance(found, dict) else None


def stamp_in(submitted: Path) -> str | None:
    """The timestamp.txt of a submitted/ folder (or its kept copy), as written; None when there is none."""
    stamp = submitted / nbgrader_layout.TIMESTAMP
    try:
        return stamp.read_text(encoding="utf-8").strip() if stamp.is_file() and not stamp.is_symlink() else None
    except (OSError, UnicodeDecodeError):
        return None
