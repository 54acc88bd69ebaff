"""An output path that resolves into what students receive or nbgrader keeps (issue 50, item 4).

At e2fd90b `preview --out` compared `Path.absolute()` with release/: a symbolic link elsewhere that points into
release/<assignment>/ (or a `..` after one) was "outside", the preview wrote the answer key's notebook into
release/, and `nbgrader release_assignment` then handed it to every student. Every option that names where a
command writes now goes through one check (course/core/output_paths.py) that follows links and takes `..` as the
system does, and refuses in one sentence naming the option, the path and the protected place; nothing is written.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from course.cli import main
from tests.support.helpers import ROOT, copy_course

ASSIGNMENT = "autograd"


@pytest.fixture
def course(tmp_path):
    """A course copy whose nbgrader_config.py puts the exchange at tmp_path/exchange, a roster, and the ways in:
    links from outside the course into release/, source/ and the exchange."""
    root = copy_course(tmp_path / "course")
    exchange = tmp_path / "exchange"
    (exchange / "autograd-course" / "outbound").mkdir(parents=True)
    text = (ROOT / "nbgrader_config.py").read_text(encoding="utf-8")
    text, count = re.subn(r'c\.Exchange\.root = "[^"]*"', f"c.Exchange.root = {str(exchange)!r}", text)
    assert count == 1
    (root / "nbgrader_config.py").write_text(text, encoding="utf-8")
    (root / "roster.csv").write_text("student_id,name,lms_id\nalice,Alice A,1\n", encoding="utf-8")
    (tmp_path / "to-release").symlink_to(root / "release" / ASSIGNMENT)
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "link").symlink_to(root / "source" / ASSIGNMENT)  # deep/link/.. is source/, not deep/
    (tmp_path / "to-exchange").symlink_to(exchange / "autograd-course" / "outbound")
    return root


def _everything(*tops: Path) -> dict[str, bytes | None]:
    return {
        str(path): (path.read_bytes() if path.is_file() and not path.is_symlink() else None)
        for top in tops
        for path in sorted(top.rglob("*"))
    }


# (where the path lies, as a path under tmp_path; the protected place the refusal names)
TARGETS = {
    "a link into release/": ("to-release/out", "release/"),
    "a link, then ..": ("deep/link/../out", "source/"),
    "a link into the exchange": ("to-exchange/out", "nbgrader's exchange"),
    "dots from the course root": ("course/preview/../submitted/out", "submitted/"),
}


def _commands(root: Path, out: Path, tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    """Each command that takes an output path, with `out` in that path: (argv, the option and path named)."""
    roster = str(root / "roster.csv")
    return {
        "preview": (["preview", "--assignment", ASSIGNMENT, "--out", str(out)], f"--out {out}"),
        "grade": (["grade", "--quiet", "--out", str(out)], f"--out {out}"),
        "merge": (["merge", str(tmp_path / "shard-1"), "--out", str(out)], f"--out {out}"),
        "export": (["export", "--format", "canvas", "--roster", roster, "--out", str(out)], f"--out {out}"),
        "autograder build": (["autograder", "build", "--out", str(out)], f"--out {out}"),
        "serve tokens --out": (
            ["serve", "tokens", roster, "--out", str(out / "tokens.csv")],
            f"--out {out / 'tokens.csv'}",
        ),
        "serve --database": (
            [
                "serve",
                "--database",
                f"sqlite:///{out / 'service.db'}",
                "tokens",
                roster,
                "--out",
                str(tmp_path / "tokens.csv"),
            ],
            f"--database {out / 'service.db'}",
        ),
    }


COMMANDS = ("preview", "grade", "merge", "export", "autograder build", "serve tokens --out", "serve --database")


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_no_output_path_resolves_into_what_students_receive_or_nbgrader_keeps(course, tmp_path, command, target):
    root = course
    where, place = TARGETS[target]
    out = tmp_path / where
    argv, named = _commands(root, out, tmp_path)[command]
    before = _everything(root, tmp_path / "exchange")
    said = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(said):
        code = main(["--course", str(root), *argv])
    err = said.getvalue()
    assert code == 1, err
    assert err.count("\n") == 1, err  # one sentence, no traceback
    assert named in err, err  # the option and the path as given
    assert f"lies in {place}" in err, err  # the protected place it resolves into
    assert _everything(root, tmp_path / "exchange") == before  # nothing written, nothing removed


def test_the_course_root_and_a_link_to_a_folder_of_its_own_stay_writable(course, tmp_path):
    from course.core.output_paths import writable_output

    assert writable_output("--out", course, course) == course.resolve()  # grade's default
    (tmp_path / "results").mkdir()
    (tmp_path / "to-results").symlink_to(tmp_path / "results")
    assert writable_output("--out", tmp_path / "to-results" / "x", course) == (tmp_path / "results" / "x").resolve()
    assert writable_output("--out", course / "preview" / ASSIGNMENT, course) == course / "preview" / ASSIGNMENT
