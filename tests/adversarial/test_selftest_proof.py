"""A kept self-test proof is input (course/pipeline/selftest_proof.py): an edited, forged, re-dated, oversized or
malformed record, one of the wrong mode, in a folder of the wrong mode, or a symbolic link to a good record, is not
trusted, and the self-test runs again. Each case starts from a record the real writer kept, which is trusted as it
is (the control: a check that refused everything would pass the rest)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from course.cli import main
from course.pipeline.selftest_proof import FIELDS, Proof, _signature, keep, record_path, reusable
from tests.support.helpers import ROOT, copy_course

KEY, LEVEL, SECRET = "k" * 64, "bwrap", b"the course secret, 32 bytes long"


def _kept(tmp_path: Path, secret: bytes | None = SECRET, **changes: object) -> Path:
    path = tmp_path / "service-work" / ".self-test" / "autograd.json"
    proof = {
        "proved_at": datetime.now(UTC) - timedelta(minutes=5),
        "level": LEVEL,
        "solution_score": 57.0,
        "untouched_score": 0.0,
        "max_score": 57.0,
        "seconds": 4.2,
        **changes,
    }
    keep(path, KEY, Proof(**proof), secret)  # type: ignore[arg-type]
    return path


def _resigned(path: Path, secret: bytes | None, **changes: object) -> None:
    """The record edited and signed again as the writer signs (with `secret`, or a plain digest without one)."""
    record = json.loads(path.read_text())
    body = {name: record[name] for name in FIELDS} | changes
    path.write_text(json.dumps({**body, "signature": _signature(body, secret)}))


def test_the_record_the_writer_keeps_is_trusted(tmp_path):
    path = _kept(tmp_path)
    proof = reusable(path, KEY, SECRET, LEVEL)
    assert proof is not None
    assert (proof.solution_score, proof.untouched_score, proof.level) == (57, 0, LEVEL)
    assert reusable(_kept(tmp_path / "plain", None), KEY, None, LEVEL) is not None  # a course without a secret


def _edit(path: Path, **changes: object) -> None:
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


TAMPERED: dict[str, Callable[[Path], None]] = {
    "a score edited": lambda p: _edit(p, untouched_score=1.0),
    "the date edited": lambda p: _edit(p, proved_at=datetime.now(UTC).isoformat()),
    "the key edited": lambda p: _edit(p, key="0" * 64),
    "forged without the secret": lambda p: _resigned(p, None, seconds=1.0),
    "forged with another secret": lambda p: _resigned(p, b"another secret", seconds=1.0),
    "another key, signed": lambda p: _resigned(p, SECRET, key="0" * 64),
    "another level, signed": lambda p: _resigned(p, SECRET, level="rlimits"),
    "not full marks, signed": lambda p: _resigned(p, SECRET, solution_score=56.0),
    "not zero, signed": lambda p: _resigned(p, SECRET, untouched_score=1.0),
    "nothing to prove, signed": lambda p: _resigned(p, SECRET, solution_score=0.0, max_score=0.0),
    "dated in the future, signed": lambda p: _resigned(
        p, SECRET, proved_at=(datetime.now(UTC) + timedelta(hours=1)).isoformat()
    ),
    "older than a day, signed": lambda p: _resigned(
        p, SECRET, proved_at=(datetime.now(UTC) - timedelta(hours=25)).isoformat()
    ),
    "a date without its zone, signed": lambda p: _resigned(p, SECRET, proved_at=datetime.now().isoformat()),
    "a boolean for a score, signed": lambda p: _resigned(p, SECRET, untouched_score=False),
    "a field added": lambda p: _edit(p, trusted=True),
    "not JSON": lambda p: p.write_bytes(b"\xff{not json"),
    "nested too deep": lambda p: p.write_text("[" * 100_000),
    "too large": lambda p: p.write_text(json.dumps(json.loads(p.read_text()) | {"pad": "x" * 20_000})),
    "empty": lambda p: p.write_bytes(b""),
    "mode 0644": lambda p: p.chmod(0o644),
    "its folder 0755": lambda p: p.parent.chmod(0o755),
    "a symbolic link to a good record": lambda p: (
        shutil.copy2(p, p.with_name("good.json")),
        p.unlink(),
        p.symlink_to(p.with_name("good.json")),
    ),
    "its folder a symbolic link": lambda p: (
        shutil.move(p.parent, p.parent.with_name("elsewhere")),
        p.parent.symlink_to(p.parent.with_name("elsewhere")),
    ),
    "a folder in its place": lambda p: (p.unlink(), p.mkdir(mode=0o700)),
    "a FIFO in its place": lambda p: (p.unlink(), os.mkfifo(p, 0o600)),
}


@pytest.mark.parametrize("tamper", list(TAMPERED), ids=list(TAMPERED))
def test_a_tampered_record_is_not_trusted(tmp_path, tamper):
    path = _kept(tmp_path)
    assert reusable(path, KEY, SECRET, LEVEL) is not None  # trusted before the tampering
    TAMPERED[tamper](path)  # (an edit in place keeps the file's mode: only "mode 0644" changes it)
    assert reusable(path, KEY, SECRET, LEVEL) is None


@pytest.mark.slow
def test_grade_proves_again_past_an_edited_record(tmp_path, capsys):
    root = copy_course(tmp_path / "course")
    shutil.copytree(ROOT / "tests" / "samples" / "submitted" / "alice", root / "submitted" / "alice")
    argv = ["--course", str(root), "grade", "--out", str(tmp_path / "out"), "--quiet"]

    def said() -> str:
        assert main(argv) == 0
        return next(line for line in capsys.readouterr().out.splitlines() if line.startswith("self-test:"))

    assert "before anyone was graded" in said()
    assert said().startswith("self-test: reused the proof of ")  # the control: the kept record is trusted
    record = record_path(root, "autograd")
    _edit(record, seconds=0.1)  # an edit that would change no verdict: still not the record written
    assert "before anyone was graded" in said()
    assert json.loads(record.read_text())["seconds"] != 0.1  # the record kept again, by the writer
