"""The documentation a stranger reads: a short README that links one page per reader, and no link that leads
nowhere (a file that is gone, or a section heading that was renamed)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from course import __version__
from tests.support.helpers import ROOT

README_MAX_LINES = 250
# The pages the README sends each reader to (docs/cli.md is generated: tests/test_cli_reference.py).
READER_PAGES = (
    "students",
    "authoring",
    "settings",
    "grading",
    "gradescope-and-containers",
    "service",
    "cli",
    "architecture",
    "performance",
    "performance-history",
)
MARKDOWN = sorted([ROOT / "README.md", ROOT / "SECURITY.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The text outside fenced code blocks (a link-like string in a code example is not a link)."""
    return re.sub(r"(?ms)^```.*?^```", "", text)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (hyphens and underscores kept), spaces to
    hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {
        _anchor(line.lstrip("#"))
        for line in _prose(path.read_text(encoding="utf-8")).splitlines()
        if re.match(r"#{1,6} ", line)
    }


def test_the_readme_is_short():
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES}): move detail to docs/"


def test_the_readme_links_a_page_for_every_reader():
    links = set(LINK.findall((ROOT / "README.md").read_text(encoding="utf-8")))
    for page in READER_PAGES:
        assert f"docs/{page}.md" in links, f"README.md does not link docs/{page}.md"
        assert (ROOT / "docs" / f"{page}.md").is_file(), f"docs/{page}.md is missing"


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_link_leads_somewhere(path):
    for target in LINK.findall(_prose(path.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):  # https:, mailto: - not ours to check offline
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        where = f"{path.relative_to(ROOT)} links {target}"
        assert linked.exists(), f"{where}: {file} does not exist"
        if anchor:
            assert anchor in _anchors(linked), f"{where}: {linked.relative_to(ROOT)} has no heading #{anchor}"


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda path: str(path.relative_to(ROOT)))
def test_shell_commands_run_from_the_venv(path):
    """A bare `nbgrader ...` or `autograd-course ...` is "command not found" for whoever has not activated the venv."""
    for block in re.findall(r"(?ms)^```bash\n(.*?)^```", path.read_text(encoding="utf-8")):
        for line in block.splitlines():
            assert not re.match(r"\s*(nbgrader|autograd-course|jupyter|pip|python) ", line), (
                f"{path.relative_to(ROOT)}: `{line.strip()}`: write .venv/bin/{line.split()[0]}"
            )


def test_an_anchor_is_the_one_github_makes():
    assert _anchor("Our failure is never a student's grade") == "our-failure-is-never-a-students-grade"
    assert _anchor("Releasing: `autograd-course release`") == "releasing-autograd-course-release"
    assert _anchor("## `autograd-course autograder build`".lstrip("#")) == "autograd-course-autograder-build"


@pytest.mark.slow
def test_the_readmes_wheel_command_builds_the_wheel_students_install(tmp_path):
    """`pip install autograd-course` finds nothing on any index: the README's command builds what is handed out."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"^\.venv/bin/pip wheel (.*?) +#", readme, re.M)
    assert found, "the README no longer says how to build the wheel"
    args = found.group(1).split()
    args[args.index("dist")] = str(tmp_path)  # the README's dist/, here a folder of the test's own
    completed = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert [p.name for p in tmp_path.glob("*.whl")] == [f"autograd_course-{__version__}-py3-none-any.whl"]


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda page: page.name)
def test_every_code_fence_is_closed_and_holds_something(page):
    """docs/architecture.md's layout once opened with two fences: an empty block, then the layout as prose and
    every later fence inverted."""
    fences = [
        number for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1) if line.startswith("```")
    ]
    assert len(fences) % 2 == 0, f"{page.name}: a code fence is never closed (fences at lines {fences})"
    empty = [opening for opening, closing in zip(fences[::2], fences[1::2], strict=True) if closing == opening + 1]
    assert not empty, f"{page.name}: an empty code block at line(s) {empty}"
