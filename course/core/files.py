"""Atomic file writes: a reader sees the old complete file or the new complete file, never half of one.

What an fsync buys: `write` and `rename` return once the kernel has the data in memory; a crash of the
grader's process loses nothing from then on, but a power cut or a kernel crash may, and on ext4 and XFS a
file renamed into place before its data reached the disk can come back empty. Syncing the data before the
rename closes that: under its final name a file is always complete, old or new. `atomic_write_text` pays one
fsync per file (~3 ms on this project's machines); a batch writes its results through `SyncedWrites`, which
renames many files after one shared sync of their filesystem (`syncfs`), so the same guarantee costs one
sync per flush instead of one per file.

Who may read what is written here (SECURITY.md, "Files that hold grades or secrets are private"): every file is
written `PRIVATE` (0600) and every folder it creates `PRIVATE_FOLDER` (0700), whatever the umask, unless the
caller says `mode=PUBLIC` (0644): only what students must read, the released notebook and the feedback page
`nbgrader release_feedback` copies (with its mode) into the exchange, where the student's own user reads it.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import json
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PRIVATE = 0o600  # grades, feedback, integrity, summaries, tokens, autograded/: the grader's user alone
PUBLIC = 0o644  # what students must read (release/, the page release_feedback copies into the exchange)
PRIVATE_FOLDER = 0o700


def atomic_write_text(path: Path, text: str, *, mode: int = PRIVATE) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def atomic_write_bytes(path: Path, data: bytes, *, mode: int = PRIVATE) -> None:
    temporary = _write_temporary(path, data, mode)
    try:
        _fsync_path(temporary)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def os_reason(error: OSError) -> str:
    """What the system said, in a few lower-case words for the middle of a sentence ("permission denied")."""
    return (error.strerror or str(error)).lower()


def unwritable_folder(folder: Path) -> str:
    """Why results cannot be written into `folder`, in a few words ("" when they can), leaving nothing behind:
    a file is created and removed in it or, while it does not exist yet, in the nearest folder above it that
    does (where it would be made). A command asks before it grades anyone, so that a folder it may not write is
    said in one sentence rather than found student by student."""
    existing = folder
    try:
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            return "it is a file, not a folder" if existing == folder else f"{existing} is a file, not a folder"
        descriptor, name = tempfile.mkstemp(prefix=".write-check-", dir=existing)
        os.close(descriptor)
        os.unlink(name)
    except OSError as error:
        return os_reason(error)
    return ""


LOCK_POLL_SECONDS = 0.1  # how often a bounded wait for a lock tries again


class Busy(Exception):
    """`locked` waited its bounded time and the lock is still held: the caller says by whom, in a sentence."""


@contextmanager
def locked(path: Path, *, wait: float | None = None, waiting: Callable[[], None] | None = None) -> Iterator[None]:
    """An exclusive flock on `path` (made 0600 if missing) held for the block: one holder at a time across threads
    (each call opens its own file description) and processes, and machines sharing the folder on a filesystem with
    working locks (NFSv4). `wait` None: as long as it takes; else at most `wait` seconds, then Busy. `waiting` is
    called once, should the lock be held when asked (to tell a person why nothing happens yet). The kernel drops
    the lock with the process, so a killed holder never leaves it held."""
    with open(os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE), "r+b") as handle:
        if wait is None and waiting is None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        else:
            deadline = None if wait is None else time.monotonic() + wait
            told = False
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise Busy(str(path)) from None
                    if waiting is not None and not told:
                        waiting()
                        told = True
                    time.sleep(LOCK_POLL_SECONDS)
        yield  # closing the file releases the lock


def kept_mode(path: Path) -> int:
    """The permission bits `path` has, to write it again as it was (an author's own file: the kit's source notebook),
    or PRIVATE for a new file; never wider than the file already was."""
    try:
        return stat.S_IMODE(path.lstat().st_mode) & 0o666 or PRIVATE
    except OSError:
        return PRIVATE


def atomic_write_json(path: Path, data: Any, *, mode: int = PRIVATE) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n", mode=mode)


def make_folders(folder: Path, *, mode: int | None = PRIVATE_FOLDER) -> None:
    """`folder` and the missing folders above it, each made `mode` whatever the umask (None: the umask's
    default, for what students must read). Folders that exist already are left as they are (the course root,
    /tmp): `private_folders` tightens the ones that are ours."""
    missing = []
    while not folder.is_dir():
        missing.append(folder)
        if folder == folder.parent:
            break
        folder = folder.parent
    for one in reversed(missing):
        try:
            one.mkdir() if mode is None else one.mkdir(mode=mode)
        except FileExistsError:  # made meanwhile by another writer (a parallel flush); a file there fails below
            if not one.is_dir():
                raise
            continue
        if mode is not None:
            os.chmod(one, mode)  # mkdir's mode passes through the umask, chmod's does not


def private_folders(base: Path, *parts: str) -> Path:
    """base/part/part/...: each part made, or made again, the grader's user's alone (0700); `base` (the course
    root or --out, the instructor's) is left as it is. For the trees we own (autograded/, feedback/) that an
    earlier version, or a umask of 022, left readable to all."""
    folder = base
    for part in parts:
        folder = folder / part
        make_folders(folder)
        if not folder.is_symlink() and folder.stat().st_mode & 0o777 != PRIVATE_FOLDER:
            os.chmod(folder, PRIVATE_FOLDER)
    return folder


def private_tree(top: Path, *, public: Callable[[Path], bool] | None = None) -> None:
    """`top` and everything in it the grader's user's alone, whatever modes they were made with (nbgrader's
    collect keeps the student's, shutil's copies keep what they copy): folders 0700, files 0600 (an executable
    one 0700), except a file `public` names, which stays 0644 if it was readable to all (the feedback page that
    `nbgrader release_feedback` copies with its mode). A link is neither followed nor changed; another user's
    file is theirs to keep as they chose."""
    if top.is_symlink() or not top.exists():
        return
    _private_one(top, public)
    if top.is_dir():
        for folder, names, files in os.walk(top):  # (os.walk does not follow links to folders)
            for name in (*names, *files):
                path = Path(folder) / name
                if not path.is_symlink():
                    _private_one(path, public)


def _private_one(path: Path, public: Callable[[Path], bool] | None) -> None:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # a link put there meanwhile, or a file we may not open: not ours to change
        return
    try:
        status = os.fstat(descriptor)
        if status.st_uid != os.geteuid():
            return
        now = stat.S_IMODE(status.st_mode)
        if stat.S_ISDIR(status.st_mode):
            wanted = PRIVATE_FOLDER
        elif public is not None and now & stat.S_IROTH and public(path):
            wanted = PUBLIC
        else:
            wanted = PRIVATE | (now & stat.S_IXUSR)
        if now != wanted:
            os.fchmod(descriptor, wanted)
    finally:
        os.close(descriptor)


def private_sqlite(database: str | None) -> None:
    """A SQLite database file (its path, as SQLAlchemy's URL names it) exists and is the grader's user's alone
    (0600) before the library opens it: SQLite makes its -wal and -journal files with the mode the database file
    has then, so a chmod after the first connection would leave a -wal file readable to all. A file that exists
    keeps its content; another user's file, or a folder that does not exist, is left for the library to report."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    for path, create in ((database, True), *((database + suffix, False) for suffix in ("-wal", "-shm", "-journal"))):
        try:  # (the -wal, -shm and -journal files of an earlier run, made before this rule, are tightened too)
            descriptor = os.open(
                path, os.O_RDONLY | (os.O_CREAT if create else 0) | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE
            )
        except OSError:
            continue
        try:
            if os.fstat(descriptor).st_uid == os.geteuid():  # another user's file is theirs to keep as they chose
                os.fchmod(descriptor, PRIVATE)
        finally:
            os.close(descriptor)


def private_copy(origin: Path, target: Path) -> None:
    """Copy a small bookkeeping file (nbgrader's timestamp.txt, submission_secret.txt), 0600 from the start."""
    atomic_write_bytes(target, origin.read_bytes())


def compact_json(data: Any) -> str:
    """JSON without indentation: the C encoder (indentation falls back to the pure-Python one), a third the size."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n"


class SyncedWrites:
    """Atomic writes that share their sync: each file goes to a hidden temporary beside its target; `commit`
    syncs the filesystems they are on once, renames each into place and syncs again (the renames), so when it
    returns every file is on disk, complete, under its final name. Until then the targets keep their old
    content; a crash leaves only hidden `.<name>.*.tmp` files, never a half-written result."""

    def __init__(self) -> None:
        self._pending: dict[Path, str] = {}  # target -> its temporary

    def write_text(self, path: Path, text: str, *, mode: int = PRIVATE) -> None:
        temporary = _write_temporary(path, text.encode("utf-8"), mode)
        earlier = self._pending.pop(path, None)
        if earlier is not None:
            Path(earlier).unlink(missing_ok=True)
        self._pending[path] = temporary

    def write_json(self, path: Path, data: Any) -> None:
        self.write_text(path, compact_json(data))

    def commit(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        try:
            _sync_filesystems(pending.values())
            for path, temporary in pending.items():
                os.replace(temporary, path)
        except BaseException:
            for temporary in pending.values():
                Path(temporary).unlink(missing_ok=True)
            raise
        _sync_filesystems(str(path.parent) for path in pending)

    def discard(self) -> None:
        pending, self._pending = self._pending, {}
        for temporary in pending.values():
            Path(temporary).unlink(missing_ok=True)


def _write_temporary(path: Path, data: bytes, mode: int) -> str:
    make_folders(path.parent, mode=PRIVATE_FOLDER if mode == PRIVATE else None)
    # mkstemp makes the file 0600 before anything is in it; chmod sets the mode asked for, past the umask
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temporary, mode)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return temporary


def _fsync_path(path: str) -> None:
    handle = os.open(path, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


@functools.cache
def _syncfs() -> Any:
    return getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)


def _sync_filesystems(paths: Any) -> None:
    """One syncfs per filesystem the paths are on (an fsync of each where the C library has no syncfs)."""
    seen: set[int] = set()
    syncfs = _syncfs()
    for path in paths:
        if syncfs is None:
            _fsync_path(path)
            continue
        device = os.stat(path).st_dev
        if device in seen:
            continue
        seen.add(device)
        handle = os.open(path, os.O_RDONLY)
        try:
            if syncfs(handle) != 0:
                error = ctypes.get_errno()
                raise OSError(error, f"syncing the filesystem of {path}: {os.strerror(error)}")
        finally:
            os.close(handle)
