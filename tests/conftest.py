from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from course.assignment import load_assignment
from course.config import load_config
from helpers import ROOT, copy_course


@pytest.fixture(scope="session")
def assignment():
    config = load_config(ROOT)
    return load_assignment(config.source_notebook(), "autograd")


@pytest.fixture
def course_root(tmp_path: Path) -> Path:
    """A private copy of the course (source/ and release/) to release and grade in."""
    root = tmp_path / "course"
    copy_course(root)
    return root


@pytest.fixture
def course_config(course_root: Path):
    return load_config(course_root)


def pytest_addoption(parser):
    parser.addoption("--update-goldens", action="store_true", default=False,
                     help="rewrite the committed golden files in tests/goldens/ from this run's output")


@pytest.fixture
def update_goldens(request) -> bool:
    return request.config.getoption("--update-goldens")


def pytest_collection_finish(session):
    """The container image takes minutes to build, mostly downloading: when the image tests are to run, the
    build starts now, in the background, and their fixture waits for it (tests/image_build.py). So does the
    Gradescope bundle's install into a fresh venv (tests/bundle_install.py), most of a minute of pip."""
    if session.config.option.collectonly:
        return
    if any(item.path.name == "test_image.py" for item in session.items):
        import image_build

        image_build.start_in_background()
    if any(item.name == "test_bundle_installs_in_a_fresh_venv_and_grades" for item in session.items):
        import bundle_install

        bundle_install.start_in_background()


def pytest_sessionfinish(session):
    # a build or install no test waited for (the run stopped early) is ended and removed too
    for name in ("image_build", "bundle_install"):
        if name in sys.modules:
            sys.modules[name].remove()
