"""What a student's install leaves out: the package's dependencies are the student's (the notebook, `check`,
nbgrader's exchange), the grader's and the service's stacks are extras (pyproject.toml). A command of the
grader or the service says, in one sentence, what to install when its extra's packages are missing."""

from __future__ import annotations

import importlib.metadata
import re

from course.core.errors import MissingExtraError

DISTRIBUTION = "autograd-course"
EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([\w-]+)["']""")


def _pinned(extra: str) -> list[tuple[str, str | None]]:
    """(distribution name, its == pin or None) of each requirement the installed package's metadata lists under
    `extra` (none when the package is not installed, e.g. run from a checkout without pip: then nothing can be
    said about extras)."""
    try:
        requires = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    found = []
    for requirement in requires:
        requirement_part, _, marker = requirement.partition(";")
        extra_of = EXTRA_MARKER.search(marker)
        if extra_of and extra_of.group(1) == extra:
            name = re.split(r"[\s\[<>=!~;(]", requirement_part.strip(), maxsplit=1)[0]
            pin = re.search(r"==\s*([\w.+-]+)", requirement_part)
            found.append((name, pin.group(1) if pin else None))
    return found


def extra_requirements(extra: str) -> list[str]:
    """The distribution names the installed package's metadata lists under `extra`."""
    return [name for name, _ in _pinned(extra)]


def missing(extra: str) -> list[str]:
    """What of `extra` is not as pinned: "name" for a package not installed, "name 1.0 (pinned 2.0)" for another
    version (a student's install has nbgrader's own unpinned nbclient and SQLAlchemy, say)."""
    wrong = []
    for name, pin in _pinned(extra):
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            wrong.append(name)
            continue
        if pin is not None and version != pin:
            wrong.append(f"{name} {version} (pinned {pin})")
    return wrong


def require(extra: str, command: str) -> None:
    """Raise MissingExtraError, one sentence naming what to install, when `extra`'s packages are not all there
    in their pinned versions."""
    wrong = missing(extra)
    if wrong:
        absent = [name for name in wrong if " " not in name]
        other = [name for name in wrong if " " in name]
        said = "; ".join(
            part
            for part in (
                f"{', '.join(absent)} not installed" if absent else "",
                f"{', '.join(other)} installed" if other else "",
            )
            if part
        )
        raise MissingExtraError(
            f"{command} is the instructor's and needs the {extra} extra ({said}; a student's install leaves it "
            "out): install the package with it, e.g. "
            f"pip install 'autograd_course-<version>-py3-none-any.whl[{extra}]', or pip install -e '.[{extra}]' "
            "in the course's repository"
        )
