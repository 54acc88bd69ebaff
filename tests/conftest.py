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
