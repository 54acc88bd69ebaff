"""What a student's install leaves out: the package's dependencies are the student's (the notebook, `check`,
nbgrader's exchange), the grader's and the service's stacks are extras (pyproject.toml). A command of the
grader or the service says, in one sentence, what to install when its extra's packages are missing."""

from __future__ import annotations

import importlib.metadata
import re

from course.errors import MissingExtraError

DISTRIBUTION = "autograd-course"
EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([\w-]+)["']""")


def extra_requirements(extra: str) -> list[str]:
    """The distribution names the installed package's metadata lists under `extra` (none when the package is not
    installed, e.g. run from a checkout without pip: then nothing can be said about extras)."""
    try:
        requires = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    names = []
    for requirement in requires:
        requirement_part, _, marker = requirement.partition(";")
        found = EXTRA_MARKER.search(marker)
        if found and found.group(1) == extra:
            names.append(re.split(r"[\s\[<>=!~;(]", requirement_part.strip(), maxsplit=1)[0])
    return names


def missing(extra: str) -> list[str]:
    """The packages of `extra` that are not installed."""
    absent = []
    for name in extra_requirements(extra):
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            absent.append(name)
    return absent


def require(extra: str, command: str) -> None:
    """Raise MissingExtraError, one sentence naming what to install, when `extra`'s packages are not all there."""
    absent = missing(extra)
    if absent:
        raise MissingExtraError(
            f"{command} is the instructor's and needs the {extra} extra ({', '.join(absent)} not installed; a "
            f"student's install leaves it out): install the package with it, e.g. "
            f"pip install 'autograd_course-<version>-py3-none-any.whl[{extra}]', or pip install -e '.[{extra}]' "
            "in the course's repository")
