"""The self-test's proof, kept: a machinery that has shown the course's solution full marks and the release zero need
not show it again until something that decides those grades changes.

What the self-test proves depends on the bytes that decide the two grades and on what runs them: the course's content
(every file under source/: the assignment's notebook and exercises module, course.yaml, modules beside them; and the
release students were given), the course's settings (source/course.yaml as read: the sandbox level asked for, the
sandbox uid, the limits), the level the sandbox runs at, the interpreter (its path and version), every installed
distribution's version, and this package's own code (its version and a digest of its .py and .json files: an editable
install changes the code without changing the version), and the machine (its name and kernel). `proof_key` is a digest
of them all; a proof is reused only under the same key, so any change of them runs the self-test again, as does
`--self-test`.

The proof is kept in the course's scratch folder, service-work/.self-test/<assignment>.json (0600, its folder 0700,
written atomically). It is read back as input: a record that is not a regular file of this user's alone in a folder of
this user's alone, is not of the exact form written, is signed wrongly, is older than MAX_AGE or dated in the future,
or does not say full marks and zero, is ignored, and the self-test runs again. The signature is an HMAC-SHA256 with
the course secret where the course has one (a record forged by someone without the secret is refused); without a
secret it is a plain digest, which catches a corrupt record but not a forged one: the folder's modes are then the
guard, as for the course's other files (the grades, the gradebook) in the same root.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
import os
import platform
import stat
import sys
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

from course.core.files import PRIVATE, PRIVATE_FOLDER, atomic_write_json, make_folders

log = logging.getLogger(__name__)

FOLDER = Path("service-work") / ".self-test"  # in the course root: the course's scratch (a dot: no assignment's name)
VERSION = 1
MAX_AGE = timedelta(hours=24)  # a proof older than this is proven again: the machine may have changed under it
MAX_BYTES = 16 * 1024  # a record is a few hundred bytes
SKIPPED = {"__pycache__", ".ipynb_checkpoints"}
ANOTHER_KEY = "it proved another course, sandbox, interpreter or package"


@dataclass(frozen=True)
class Proof:
    """What a kept proof says: when it was made, at which level, and the two scores."""

    proved_at: datetime  # UTC
    level: str
    solution_score: float
    untouched_score: float
    max_score: float
    seconds: float


def _digest_files(files: list[Path], base: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(str(path.relative_to(base)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _tree_files(folder: Path, suffixes: tuple[str, ...] | None = None) -> list[Path]:
    found = []
    for path in folder.rglob("*"):
        if SKIPPED.intersection(path.relative_to(folder).parts) or not path.is_file():
            continue
        if suffixes is None or path.suffix in suffixes:
            found.append(path)
    return found


@functools.cache
def package_digest() -> str:
    """A digest of this package's code (course/'s .py and .json files), read once a process."""
    base = Path(__file__).resolve().parents[1]
    return _digest_files(_tree_files(base, (".py", ".json")), base)


@functools.cache
def installed_distributions() -> list[str]:
    """Every installed distribution's name and version (numpy, nbformat, ipykernel... each plays a part in a run),
    read once a process."""
    return sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions())


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def proof_key(root: Path, assignment_name: str, source_folder: Path, release: Path, settings: str, level: str) -> str:
    """The digest of everything the self-test's verdict depends on (the module's docstring): `source_folder` the
    assignment's source folder, `release` its release notebook (absent is a state too), `settings` the course's
    settings as read (their repr), `level` the sandbox's level."""
    try:
        release_digest = hashlib.sha256(release.read_bytes()).hexdigest()
    except FileNotFoundError:
        release_digest = "absent"
    material = {
        "assignment": assignment_name,
        "source": _digest_files(_tree_files(source_folder), source_folder),
        "course": _digest_files(_tree_files(root / "source"), root / "source"),  # course.yaml, modules beside
        "release": release_digest,
        "settings": settings,
        "level": level,
        "interpreter": [os.path.realpath(sys.executable), sys.version],
        "torch": _version("torch"),
        "distributions": installed_distributions(),
        "package": [_version("autograd-course"), package_digest()],
        "machine": [platform.node(), platform.release()],
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def record_path(root: Path, assignment_name: str) -> Path:
    return root / FOLDER / f"{assignment_name}.json"


def _signature(body: dict[str, Any], secret: bytes | None) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    if secret is None:
        return "sha256:" + hashlib.sha256(text).hexdigest()
    return "hmac-sha256:" + hmac.new(secret, text, hashlib.sha256).hexdigest()


FIELDS = {
    "version": int,
    "key": str,
    "proved_at": str,
    "level": str,
    "solution_score": float,
    "untouched_score": float,
    "max_score": float,
    "seconds": float,
}


def keep(path: Path, key: str, proof: Proof, secret: bytes | None) -> None:
    """Write the proof at `path` (0600 in a 0700 folder, atomically); a course folder that cannot be written keeps
    nothing (the next run proves again), said in the log."""
    body: dict[str, Any] = {
        "version": VERSION,
        "key": key,
        "proved_at": proof.proved_at.isoformat(),
        **{f.name: getattr(proof, f.name) for f in fields(proof) if f.name != "proved_at"},
    }
    body = {name: float(value) if FIELDS[name] is float else value for name, value in body.items()}
    try:
        make_folders(path.parent)
        atomic_write_json(path, {**body, "signature": _signature(body, secret)})
    except OSError as error:
        log.warning("the self-test's proof was not kept in %s (%s): the next run proves again", path, error)


def _read_private(path: Path) -> bytes | str:
    """The record's bytes, or why it is not trusted: a regular file (not a link), this user's alone (0600), in a
    folder (not a link) of this user's alone (0700)."""
    try:
        folder = os.lstat(path.parent)
        ours = folder.st_uid == os.geteuid() and folder.st_mode & 0o777 == PRIVATE_FOLDER
        if not stat.S_ISDIR(folder.st_mode) or not ours:
            return f"its folder {path.parent} is not a folder of this user's alone (0700)"
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return "there is none"
    except OSError as error:
        return f"it cannot be opened ({error.strerror})"
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode) or status.st_uid != os.geteuid() or status.st_mode & 0o777 != PRIVATE:
            return "it is not a regular file of this user's alone (0600)"
        data = os.read(descriptor, MAX_BYTES + 1)
    except OSError as error:
        return f"it cannot be read ({error.strerror})"
    finally:
        os.close(descriptor)
    return data if len(data) <= MAX_BYTES else f"it is over {MAX_BYTES} bytes"


def _parse(data: bytes, key: str, secret: bytes | None, level: str, now: datetime) -> Proof | str:
    try:
        record = json.loads(data)
    except (ValueError, RecursionError):
        return "it is not JSON"
    if type(record) is not dict or set(record) != {*FIELDS, "signature"}:
        return "its fields are not the ones written"
    body = {name: record[name] for name in FIELDS}
    if any(type(body[name]) is not kind for name, kind in FIELDS.items()) or type(record["signature"]) is not str:
        return "a field is not of its type"
    if not hmac.compare_digest(record["signature"], _signature(body, secret)):
        return "its signature does not match (edited, or made with another course secret)"
    if body["version"] != VERSION or not hmac.compare_digest(body["key"], key):
        return ANOTHER_KEY
    try:
        proved_at = datetime.fromisoformat(body["proved_at"])
    except ValueError:
        return "its date cannot be read"
    if proved_at.tzinfo is None or not now - MAX_AGE <= proved_at <= now:
        return f"it is older than {MAX_AGE.total_seconds() / 3600:g} hours, or dated in the future"
    full, zero = body["solution_score"] == body["max_score"] > 0, body["untouched_score"] == 0
    if body["level"] != level or not (full and zero):
        return "it does not say full marks and zero at this level"
    return Proof(proved_at, level, body["solution_score"], body["untouched_score"], body["max_score"], body["seconds"])


def reusable(path: Path, key: str, secret: bytes | None, level: str) -> Proof | None:
    """The proof kept at `path` when it can be trusted for `key` at `level`, else None (the reason in the log)."""
    data = _read_private(path)
    found = _parse(data, key, secret, level, datetime.now(UTC)) if isinstance(data, bytes) else data
    if isinstance(found, Proof):
        return found
    if found not in ("there is none", ANOTHER_KEY):  # (a change of what it proves is routine: no word of it)
        log.warning("the self-test's earlier proof in %s is not trusted, so it runs again: %s", path, found)
    return None
