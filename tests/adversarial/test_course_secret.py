"""The variants secret: with it, any student's numbers can be derived, so no sandbox uid may ever read it.

The grader refuses a secret file that other users could read (at every level: locally, on Gradescope, in the
container), `autograder build` packs it mode 600, and setup.sh makes everything Gradescope unpacks root's.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from dataclasses import replace

import pytest

from course.core.config import load_config
from course.core.errors import ConfigError
from course.pipeline.variants import load_secret
from course.platforms.bundle import build_bundle
from course.platforms.gradescope import run_autograder
from tests.support.helpers import ROOT


def _secret(folder, mode: int):
    path = folder / "course.key"
    path.write_text("a course secret for the tests\n")
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_secret_others_can_read_is_refused(tmp_path, mode, monkeypatch):
    monkeypatch.delenv("AUTOGRAD_COURSE_SECRET", raising=False)
    path = _secret(tmp_path, mode)
    with pytest.raises(ConfigError, match=f"can be read by other users \\(mode 0{mode:o}\\); run `chmod 600"):
        load_secret("AUTOGRAD_COURSE_SECRET", path.name, tmp_path)
    path.chmod(0o600)
    assert load_secret("AUTOGRAD_COURSE_SECRET", path.name, tmp_path) == b"a course secret for the tests"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another owner needs root")
def test_a_secret_owned_by_someone_else_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("AUTOGRAD_COURSE_SECRET", raising=False)
    path = _secret(tmp_path, 0o600)
    os.chown(path, 61000, 61000)  # a sandbox uid: it could read its own file
    with pytest.raises(ConfigError, match="belongs to uid 61000, not to the grader"):
        load_secret("AUTOGRAD_COURSE_SECRET", path.name, tmp_path)


@pytest.mark.parametrize("variants", [True, False], ids=["variants", "without-variants"])
def test_the_gradescope_zip_packs_the_secret_for_root_only(tmp_path, course_root, variants):
    """Without variants too: the secret also keys the function answers' points (course/pipeline/probes.py), so a course
    that names one grades at those points on Gradescope only if the zip holds it."""
    secret = _secret(course_root, 0o600)
    (course_root / "pyproject.toml").symlink_to(ROOT / "pyproject.toml")
    for folder in ("course", "autograder"):
        (course_root / folder).symlink_to(ROOT / folder)
    (course_root / "README.md").symlink_to(ROOT / "README.md")
    config = replace(load_config(course_root), variants=variants, variant_secret_file=secret.name)
    with zipfile.ZipFile(build_bundle(config, tmp_path / "dist")) as archive:
        modes = {info.filename: info.external_attr >> 16 for info in archive.infolist()}
    assert modes["course.key"] == 0o600


@pytest.mark.slow
def test_run_autograder_refuses_to_grade_variants_with_a_readable_secret(tmp_path, monkeypatch):
    monkeypatch.delenv("AUTOGRAD_COURSE_SECRET", raising=False)
    root = tmp_path / "autograder"
    shutil.copytree(ROOT / "source", root / "source" / "source")
    yaml_path = root / "source" / "source" / "course.yaml"
    yaml_path.write_text(
        yaml_path.read_text().replace("variants: false", "variants: true\nvariant_secret_file: source/course.key")
    )
    secret = _secret(root / "source" / "source", 0o644)
    (root / "submission").mkdir()
    shutil.copy(
        ROOT / "tests" / "samples" / "submitted" / "alice" / "autograd" / "autograd.ipynb",
        root / "submission" / "autograd.ipynb",
    )
    results = run_autograder(root)
    assert results["score"] == 0
    assert "misconfigured" in results["output"]
    secret.chmod(0o600)
    assert run_autograder(root)["tests"][0]["name"] != "autograder error"
