"""The package's dependencies are a student's; the grader's and the service's are extras (course/core/extras.py reads
them from the installed package's metadata). The test extra installs every one of them."""

from __future__ import annotations

import importlib.metadata

import pytest

from course.core.errors import MissingExtraError
from course.core.extras import extra_requirements, missing, require


def test_the_extras_are_what_pyproject_declares_and_the_test_extra_holds_them_all():
    assert extra_requirements("grader") == ["nbclient", "sqlalchemy", "alembic"]
    assert extra_requirements("service") == [
        "nbclient",
        "sqlalchemy",
        "alembic",
        "starlette",
        "uvicorn",
        "python-multipart",
    ]
    everything = {*extra_requirements("grader"), *extra_requirements("service"), *extra_requirements("postgres")}
    assert everything <= set(extra_requirements("test"))
    assert extra_requirements("no such extra") == []


def test_in_the_test_environment_nothing_is_missing():
    assert missing("service") == missing("grader") == []
    require("service", "autograd-course serve")  # no error


def test_an_extra_in_other_versions_than_its_pins_is_named_as_such(monkeypatch):
    """A student's install has nbgrader's own nbclient and SQLAlchemy, in whatever versions pip chose: a grader's
    command there says what it needs rather than run on unpinned versions."""
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.0.1" if name == "nbclient" else real(name))
    assert missing("grader") == ["nbclient 0.0.1 (pinned 0.11.0)"]
    with pytest.raises(
        MissingExtraError,
        match=r"needs the grader extra \(nbclient 0\.0\.1 \(pinned 0\.11\.0\) "
        r"installed; a student's install leaves it out\)",
    ):
        require("grader", "autograd-course grade")
