"""The trust boundary's one door for code (course/sandbox/handed_in.py): what it hands into the sandbox as text
imports only the standard library, torch, IPython and the other handed-in modules, and is exactly the files."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from course.sandbox.handed_in import HELPER_MODULES, RUNNER_SOURCE, handed_in_files, notebook_module_cell

# Besides the standard library: torch, IPython and traitlets (IPython's own configuration library, which the
# runner configures the shell with); the course's modules only as handed in (HELPER_MODULES).
THIRD_PARTY = ("torch", "IPython", "traitlets")


def imports_beyond_the_boundary(text: str) -> list[str]:
    """Every module a source imports (at any depth, lazily too) that the sandbox cannot or must not have: not the
    standard library, not torch or IPython, not one of the handed-in helper modules."""
    found = []
    for node in ast.walk(ast.parse(text)):
        names = (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and node.level == 0
            else []
        )
        for name in names:
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top in THIRD_PARTY:
                continue
            if name in HELPER_MODULES or (name == "course" and isinstance(node, ast.ImportFrom)):
                continue
            found.append(name)
    return found


def test_the_checker_can_fail():
    assert imports_beyond_the_boundary(
        "import numpy\nfrom course.pipeline.judge import matches\nfrom course import forms\ndef f():\n    import yaml\n"
    ) == ["numpy", "course.pipeline.judge", "yaml"]
    assert imports_beyond_the_boundary("import os, json\nimport torch\nfrom course.forms import matches\n") == []


@pytest.mark.parametrize("name", sorted(handed_in_files()))
def test_a_handed_in_file_imports_nothing_the_sandbox_lacks(name):
    path = handed_in_files()[name]
    assert path.is_file()
    assert imports_beyond_the_boundary(path.read_text(encoding="utf-8")) == [], f"{path} reaches past the boundary"


def test_what_is_handed_in_is_exactly_those_files():
    files = handed_in_files()
    assert RUNNER_SOURCE.endswith(files["runner"].read_text(encoding="utf-8"))
    cell = notebook_module_cell()
    for name in HELPER_MODULES:
        assert repr(files[name].read_text(encoding="utf-8")) in cell
    assert set(files) == {"runner", *HELPER_MODULES}


def test_no_other_module_hands_text_into_the_sandbox():
    """RUNNER_SOURCE and the helper cell are made in handed_in.py only: no other module reads runner.py or the
    helper modules' files to send them."""
    package = Path(handed_in_files()["runner"]).parents[1]
    for path in package.rglob("*.py"):
        if path.name == "handed_in.py":
            continue
        text = path.read_text(encoding="utf-8")
        assert '"runner.py"' not in text, path
        assert "importlib.resources.files" not in text or path.name != "submission.py", path
