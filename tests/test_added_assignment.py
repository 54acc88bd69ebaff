"""An assignment added as docs/authoring.md says (`new assignment`, then the kit) keeps the course-wide checks
green: `kit write` and `release` over every assignment of source/course.yaml, and the repo's own checks of each
assignment, which take the course's assignments from course.yaml (tests/support/helpers.py course_assignments),
never a hard-coded three. The tests that depend on how many assignments there are run on such a course too
(the `any_course` fixture, tests/conftest.py)."""

from __future__ import annotations

from course.cli import main
from course.core.config import load_config
from course.pipeline.assignment import load_course_assignment
from tests.support.helpers import course_assignments, release_drift


def test_a_new_assignment_keeps_the_course_wide_checks_green(course_root, capsys):
    root = str(course_root)
    bundled = course_assignments(course_root)
    assert main(["--course", root, "new", "assignment", "added"]) == 0
    assert course_assignments(course_root) == [*bundled, "added"]
    capsys.readouterr()
    # what a new instructor runs next: the kit over every kit assignment, then the release of every assignment
    assert main(["--course", root, "kit", "write"]) == 0
    written = capsys.readouterr().out
    assert "added: already up to date" in written, written
    # before it is released, the repo's check of committed releases names it
    assert release_drift(course_root, "added") is not None
    assert main(["--course", root, "release", "--no-verify"]) == 0
    released = [line for line in capsys.readouterr().out.splitlines() if line.startswith("released ")]
    assert len(released) == len(bundled) + 1
    config = load_config(course_root)
    for name in course_assignments(course_root):
        assert release_drift(course_root, name) is None, name
        assert load_course_assignment(config, name).questions, name
