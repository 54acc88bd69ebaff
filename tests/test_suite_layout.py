"""The test suite is a package: what its modules share lives in tests/support/, no test module imports another
(nor a conftest.py: fixtures come to a test by name), and `tests/` is not on sys.path, so that a folder of the suite
(`service`, `browser`, ...) never stands for a package of its own name (`course.platforms.service` is the service)."""

from __future__ import annotations

import ast
import importlib.util
import sys

from tests.support.helpers import ROOT

TESTS = ROOT / "tests"
# Names that stand for a file or folder directly under tests/ when tests/ is on sys.path: imported only as
# `tests.<name>`.
TOP_LEVEL = {path.stem for path in TESTS.iterdir() if path.suffix == ".py" or (path / "__init__.py").is_file()}


def imported_names(path) -> list[tuple[int, str]]:
    """(line, module) for each import of the file, relative ones as written (`.conftest`), once each."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            found += [
                (node.lineno, f"{module}.{alias.name}" if node.module is None else module) for alias in node.names
            ]
    return sorted(set(found))


def test_no_test_module_imports_another_test_module_or_a_conftest():
    offences = []
    for path in sorted(TESTS.rglob("*.py")):
        for line, module in imported_names(path):
            last = module.rsplit(".", 1)[-1]
            if last.startswith("test_") or last == "conftest":
                offences.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert offences == [], "move what they share into tests/support/:\n" + "\n".join(offences)


def test_the_suites_own_modules_are_imported_from_the_tests_package():
    offences = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted(TESTS.rglob("*.py"))
        for line, module in imported_names(path)
        if module.split(".")[0] in TOP_LEVEL and not module.startswith(".")
    ]
    assert offences == [], "write `from tests.<...> import`:\n" + "\n".join(offences)


def test_service_names_the_course_service_only():
    assert str(TESTS) not in [str(entry) for entry in sys.path]
    assert importlib.util.find_spec("service") is None  # the folder tests/service is `tests.service`
    assert importlib.util.find_spec("helpers") is None  # the shared helpers are tests.support.helpers
    assert importlib.util.find_spec("tests.service").origin == str(TESTS / "service" / "__init__.py")
