"""`autograd-course autograder build`: the zip to upload to Gradescope.

Layout of the zip (Gradescope unpacks it to /autograder/source):
  setup.sh, run_autograder        executable, at the root (SCRIPTS)
  check-torch-index               executable: setup.sh's probe of the torch index
  wheels/autograd_course-*.whl    this package, built from the checkout
  source/course.yaml              the course's settings, with this zip's one assignment
  source/<assignment>/            its source notebook (hidden tests) and exercises module
One zip per assignment: a Gradescope assignment runs one autograder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import yaml

from course.core.config import CONFIG_RELATIVE_PATH, CourseConfig
from course.core.errors import CourseError
from course.core.files import PRIVATE, make_folders

ZIP_NAME = "autograd-course-{assignment}-gradescope.zip"
FIXED_TIME = (2020, 1, 1, 0, 0, 0)  # reproducible zips
SCRIPTS = ("setup.sh", "run_autograder", "check-torch-index")  # from autograder/, executable, at the zip's root


def _add(archive: zipfile.ZipFile, name: str, data: bytes, *, mode: int = 0o644) -> None:
    info = zipfile.ZipInfo(name, FIXED_TIME)
    info.external_attr = mode << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


# What the wheel is built from: the package and the files its pyproject.toml names.
WHEEL_SOURCES = ("pyproject.toml", "README.md", "LICENSE", "course")


def build_wheel(project: Path, into: Path) -> Path:
    """The package's wheel in `into`, built from a copy of its sources: pip builds in the tree it is given, and
    two builds of one checkout at once (the bundle's and a student's wheel, say) would share its build/ folder
    and break each other; nor is the checkout left with a build/ or an egg-info."""
    if not (project / "pyproject.toml").exists():
        raise CourseError(f"{project}: no pyproject.toml; build the autograder from the repository checkout")
    with tempfile.TemporaryDirectory(prefix="autograd-wheel-") as scratch:
        source = Path(scratch) / "source"
        source.mkdir()
        for name in WHEEL_SOURCES:
            path = project / name
            if path.is_dir():
                shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            elif path.exists():
                shutil.copy2(path, source / name)
        completed = subprocess.run(  # noqa: S603 - fixed arguments
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "-w",
                str(into),
                str(source),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    wheels = sorted(into.glob("autograd_course-*.whl"))
    if completed.returncode != 0 or not wheels:
        raise CourseError(f"building the package wheel failed:\n{completed.stderr.strip()[-2000:]}")
    return wheels[-1]


def _one_assignment_config(project: Path, name: str) -> bytes:
    """The course YAML with only assignment `name` left in its list (run_autograder grades the first)."""
    data = yaml.safe_load((project / CONFIG_RELATIVE_PATH).read_text(encoding="utf-8"))
    data["assignments"] = [item for item in data["assignments"] if item.get("name") == name]
    header = f"# The course's settings for the Gradescope autograder of {name!r} (made by autograder build).\n"
    return (header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)).encode("utf-8")


def build_bundle(config: CourseConfig, out_dir: Path, assignment_name: str | None = None) -> Path:
    """Write <out_dir>/autograd-course-<assignment>-gradescope.zip for one assignment (default: the first)
    and return its path."""
    settings = config.assignment(assignment_name)
    project = config.root
    scripts = project / "autograder"
    for script in SCRIPTS:
        if not (scripts / script).exists():
            raise CourseError(f"{scripts / script}: missing; it belongs in the repository's autograder/ folder")
    make_folders(out_dir)
    target = out_dir / ZIP_NAME.format(assignment=settings.name)
    with tempfile.TemporaryDirectory() as scratch:
        wheel = build_wheel(project, Path(scratch))
        temporary = out_dir / f".{target.name}.tmp"
        # the answer key and the course secret are in it: the grader's user's alone (0600) from its first byte
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE)
        os.fchmod(descriptor, PRIVATE)
        with os.fdopen(descriptor, "wb") as stream, zipfile.ZipFile(stream, "w") as archive:
            for script in SCRIPTS:
                _add(archive, script, (scripts / script).read_bytes(), mode=0o755)
            _add(archive, f"wheels/{wheel.name}", wheel.read_bytes())
            _add(archive, str(CONFIG_RELATIVE_PATH), _one_assignment_config(project, settings.name))
            notebook = config.source_notebook(settings.name)
            _add(archive, f"source/{settings.name}/{notebook.name}", notebook.read_bytes())
            exercises = config.exercises_module(settings.name)
            if exercises.is_file():
                _add(archive, f"source/{settings.name}/{exercises.name}", exercises.read_bytes())
            if config.variant_secret_file:
                # Gradescope's graders need the course secret to recompute each student's numbers and the points
                # its function answers are called at (course/pipeline/probes.py: the same as `grade`'s); the zip
                # goes only to the instructors' Gradescope course. The entry is mode 600 and setup.sh makes
                # the whole unpacked folder root-only; run_autograder refuses a secret others could read.
                secret = (project / config.variant_secret_file).resolve()
                if not secret.is_relative_to(project) or not secret.is_file():
                    raise CourseError(f"variant_secret_file {config.variant_secret_file!r}: no such file in the course")
                _add(archive, str(secret.relative_to(project)), secret.read_bytes(), mode=0o600)
        temporary.replace(target)
    return target
