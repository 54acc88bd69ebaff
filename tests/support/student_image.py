"""Building the students' JupyterHub image (autograder/jupyterhub-singleuser.Dockerfile) for tests/test_image.py, in
the background from the start of the run: after the grader's image, on its base, with its torch index, in its podman
storage (tests/support/image_build.py), so that all it adds is its own `podman build`.

Built as docs/gradescope-and-containers.md says: the wheel in dist/ of a context laid out like the repository root
(the repository's .dockerignore included), build arguments naming a course other than the sample's defaults.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from course.platforms.bundle import build_wheel
from tests.support import image_build
from tests.support.helpers import ROOT
from tests.support.image_build import Podman

STUDENT_IMAGE = "localhost/autograd-course-student:test"
DOCKERFILE = ROOT / "autograder" / "jupyterhub-singleuser.Dockerfile"
BUILD_ARGS = {"COURSE_ID": "autograd-spring", "EXCHANGE_ROOT": "/srv/exchange-spring"}


def build_context(folder: Path) -> Path:
    """The repository root as the recipe's build sees it (.dockerignore, dist/ with the wheel, check-torch-index),
    in `folder`: the checkout's own dist/ is left alone."""
    (folder / "autograder").mkdir(parents=True)
    shutil.copy(ROOT / ".dockerignore", folder / ".dockerignore")
    shutil.copy(ROOT / "autograder" / "check-torch-index", folder / "autograder" / "check-torch-index")
    build_wheel(ROOT, folder / "dist")
    return folder


def build(engine: Podman) -> Podman:
    context = build_context(engine.folder / "student-context")
    args = [item for name, value in BUILD_ARGS.items() for item in ("--build-arg", f"{name}={value}")]
    image_build.build_from_base(engine, DOCKERFILE, STUDENT_IMAGE, context, *args)
    return engine


def start_in_background() -> None:
    """Queue the build after the grader's (once per run)."""
    image_build.queue("student", build)


def built_image() -> Podman:
    """The image's engine, waiting for the build (queued now if it was not yet)."""
    return image_build.queue("student", build).result()


remove = image_build.remove
