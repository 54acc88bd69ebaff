"""A student's install, as docs/students.md has it: the wheel alone, with its own dependencies, into a fresh venv
(pip resolves them as a student's pip would; torch and Jupyter are unpacked afresh: a minute or two). The grader's
and the service's packages stay out; nbgrader's instructor tools are turned off by the page's own commands; the
page's two nbgrader settings fetch and submit through an exchange that nbgrader released into; `check` runs on
the fetched notebook; an instructor's command says what to install."""

from __future__ import annotations

import pytest

from tests.support import student_install
from tests.support.helpers import ROOT
from tests.support.student_install_steps import (
    Student,
    an_instructor_command_says_what_to_install,
    blocks,
    check_the_fetched_notebook,
    fetch_from_a_released_exchange,
    instructor_tools_turned_off,
    only_the_students_packages,
    submit_through_the_exchange,
    the_page_installed,
    the_service_client_needs_no_service,
)


def test_the_jupyterhub_image_sets_up_what_the_page_says():
    """The students' JupyterHub image (autograder/jupyterhub-singleuser.Dockerfile) runs the page's commands and
    writes its two nbgrader settings."""
    text = (ROOT / "autograder" / "jupyterhub-singleuser.Dockerfile").read_text(encoding="utf-8")
    joined = " ".join(text.replace("\\\n", " ").split())
    for line in blocks("bash"):
        if "extension disable" in line:
            assert " ".join(line.removeprefix(".venv/bin/").split()) in joined, line
    for line in blocks("python"):
        assert line.split("=")[0].strip() + ' = "%s"' in text, line
    assert "autograd_course-*.whl" in text
    assert "[grader]" not in text
    assert "[service]" not in text


@pytest.fixture
def student() -> Student:
    """The venv the page's install command made, in the background from the start of the run."""
    return the_page_installed(student_install.installed())


@pytest.mark.slow
def test_a_student_install_fetches_checks_and_submits_without_the_grader_s_tools(student, tmp_path):
    """Its steps: tests/support/student_install_steps.py."""
    exchange = tmp_path / "exchange"
    only_the_students_packages(student)
    instructor_tools_turned_off(student)
    fetch_from_a_released_exchange(student, exchange, tmp_path)
    check_the_fetched_notebook(student)
    submit_through_the_exchange(student, exchange)
    the_service_client_needs_no_service(student)
    an_instructor_command_says_what_to_install(student)
