"""The package's dependencies are a student's; the grader's and the service's are extras (course/extras.py reads
them from the installed package's metadata). The test extra installs every one of them."""

from __future__ import annotations

from course.extras import extra_requirements, missing, require


def test_the_extras_are_what_pyproject_declares_and_the_test_extra_holds_them_all():
    assert extra_requirements("grader") == ["nbclient", "sqlalchemy"]
    assert extra_requirements("service") == ["nbclient", "sqlalchemy", "starlette", "uvicorn", "python-multipart"]
    everything = {*extra_requirements("grader"), *extra_requirements("service"), *extra_requirements("postgres")}
    assert everything <= set(extra_requirements("test"))
    assert extra_requirements("no such extra") == []


def test_in_the_test_environment_nothing_is_missing():
    assert missing("service") == missing("grader") == []
    require("service", "autograd-course serve")  # no error
