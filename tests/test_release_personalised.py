"""personalised/<assignment>/ always matches the release it was made from: a plain `release` after a fix to
source/ makes the copies again (same ids, the new cells), removes them when variants are off, and a failure on
the way never pairs the new release with the old template or old copies."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from course.authoring.release import release
from course.cli import main
from course.core.config import load_config
from course.core.errors import ReleaseError
from course.term.nbgrader_term import released_to
from tests.support.helpers import copy_course

SECRET = "a course secret for the refresh tests"  # noqa: S105 - the tests' own
FIXED_POINTS = 4.0  # test_slopes' points after the instructor's fix (3 in the course as committed)


def cell(notebook: dict, grade_id: str) -> dict:
    return next(c for c in notebook["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)


def set_variants(root: Path, on: bool) -> None:
    path = root / "source" / "course.yaml"
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), "variants": on}))


def fix_source(root: Path) -> None:
    """The instructor's fix in source/: a locked cell's text and a grade cell's points."""
    path = root / "source" / "autograd" / "autograd.ipynb"
    notebook = json.loads(path.read_text())
    setup = cell(notebook, "setup")
    setup["source"] = "".join(setup["source"]) + "\n# fixed after the first release\n"
    cell(notebook, "test_slopes")["metadata"]["nbgrader"]["points"] = FIXED_POINTS
    path.write_text(json.dumps(notebook, indent=1))


def given(root: Path, student: str) -> dict:
    config = load_config(root)
    return json.loads(released_to(config, config.assignment("autograd"), student).read_text())


@pytest.fixture
def released(tmp_path, monkeypatch) -> Path:
    """A course released with --students alice and bob (variants on), as a term starts."""
    root = copy_course(tmp_path / "course")
    set_variants(root, True)
    (root / "roster.csv").write_text("student_id\nalice\nbob\n")
    monkeypatch.setenv("AUTOGRAD_COURSE_SECRET", SECRET)
    assert (
        main(
            [
                "--course",
                str(root),
                "release",
                "--assignment",
                "autograd",
                "--no-verify",
                "--students",
                str(root / "roster.csv"),
            ]
        )
        == 0
    )
    return root


def autograd_release(root: Path) -> int:
    return main(["--course", str(root), "release", "--assignment", "autograd", "--no-verify"])


@pytest.mark.slow
def test_a_plain_release_refreshes_the_personalised_copies(released, capsys):
    root = released
    folder = root / "personalised" / "autograd"
    before = {s: given(root, s) for s in ("alice", "bob")}
    assert "# fixed" not in "".join(cell(before["alice"], "setup")["source"])  # the checks below can fail
    (folder / "notes.txt").write_text("the instructor's own note")  # not a student's copy: not carried over
    (folder / ".hidden").mkdir()
    capsys.readouterr()
    fix_source(root)
    assert autograd_release(root) == 0
    out = capsys.readouterr().out
    assert f"personalised copies refreshed for 2 students in {folder}" in out
    assert sorted(p.name for p in folder.iterdir()) == ["alice", "bob"]
    for student in ("alice", "bob"):
        now = given(root, student)
        assert (
            released_to(load_config(root), load_config(root).assignment("autograd"), student)
            == folder / student / "autograd.ipynb"
        )
        assert "# fixed after the first release" in "".join(cell(now, "setup")["source"])  # the new cells
        assert cell(now, "test_slopes")["metadata"]["nbgrader"]["points"] == FIXED_POINTS
        assert cell(now, "numbers") == cell(before[student], "numbers")  # the student's own numbers and id
        assert cell(now, "numbers")["metadata"]["autograd_course"] == {"student_id": student}
    template = (root / "release" / ".autograd-template.ipynb").read_text()
    assert "# fixed after the first release" in template


@pytest.mark.slow
def test_a_release_with_variants_off_removes_the_personalised_copies(released, capsys):
    root = released
    folder = root / "personalised" / "autograd"
    assert folder.is_dir()
    set_variants(root, False)
    fix_source(root)
    capsys.readouterr()
    assert autograd_release(root) == 0
    out = capsys.readouterr().out
    assert f"removed {folder}, the personalised copies of an earlier release (variants are off" in out
    assert not folder.exists()
    alices = given(root, "alice")  # the release, as everyone's
    assert "# fixed after the first release" in "".join(cell(alices, "setup")["source"])
    assert "autograd_course" not in cell(alices, "numbers")["metadata"]


@pytest.mark.slow
@pytest.mark.parametrize("blocked", ["template", "personalised"])
def test_a_failed_install_leaves_the_old_release_and_says_so(released, blocked):
    """What is made from the release goes in before release/<assignment>/ does: when it cannot be written, the
    old release stays (never the new one beside the old template or copies), and the error is a sentence."""
    root = released
    release_notebook = root / "release" / "autograd" / "autograd.ipynb"
    old_release = release_notebook.read_text()
    if blocked == "template":
        template = root / "release" / ".autograd-template.ipynb"
        template.unlink()
        (template / "in-the-way").mkdir(parents=True)  # a folder where the template goes (root ignores modes)
    else:
        # A file where the new copies are staged beside personalised/autograd/ (the install's own name for it)
        # stops the copy, as a full disk would.
        (root / "personalised" / f".autograd.new-{os.getpid()}").write_text("in the way")
    fix_source(root)
    with pytest.raises(ReleaseError, match=r"could not be replaced \(.*\); .*release/autograd was left as it was"):
        release(load_config(root), "autograd", verify=False)
    assert release_notebook.read_text() == old_release
