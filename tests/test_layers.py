"""The shape of `course/`'s imports, read from the source with `ast`: no import cycle (counting the imports inside
functions, so that a lazy import cannot hide one), and no module importing another's private name (`_name`): what
two modules share lives in a module both import, under a public name (as recording.py holds what batch.py,
shards.py and term_record.py write, and sandbox/interpreter.py what bubblewrap.py and handed_in.py both need).

Imports for start-up speed may stay inside functions; they are edges of the graph like any other."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "course"

# Private names imported across modules in files other parts of issue 41 are rewriting; each entry goes when its
# import does (test_no_module_imports_another_modules_private_name fails on an entry that no longer occurs).
OWNED_ELSEWHERE = {
}


@dataclass(frozen=True)
class Import:
    """One module's import of another (`line` in `importer`); `names`: what a `from` import takes from it."""

    importer: str
    imported: str
    line: int
    names: tuple[str, ...]


def modules_of(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (a subpackage is its __init__.py)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every import of the package's own modules anywhere in the file: at the top, inside functions, under
    TYPE_CHECKING. `from a import b` imports the module a.b when there is one, else a."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [Import(name, alias.name, node.lineno, ()) for alias in node.names if alias.name in modules]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                above = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*above, base] if base else above)
            if base not in modules:
                continue
            taken = tuple(alias.name for alias in node.names if f"{base}.{alias.name}" not in modules)
            if taken:
                found.append(Import(name, base, node.lineno, taken))
            found += [Import(name, f"{base}.{alias.name}", node.lineno, ()) for alias in node.names
                      if f"{base}.{alias.name}" in modules]
    return [one for one in found if one.imported != name]


@cache
def course_imports() -> tuple[Import, ...]:
    modules = modules_of(PACKAGE)
    return tuple(one for name, path in modules.items() for one in imports_of(name, path, modules))


def cycles(imports: tuple[Import, ...] | list[Import]) -> list[list[str]]:
    """The import graph's cycles: each strongly connected component of more than one module (Tarjan's)."""
    graph: dict[str, set[str]] = {}
    for one in imports:
        graph.setdefault(one.importer, set()).add(one.imported)
        graph.setdefault(one.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def private_imports(imports: tuple[Import, ...] | list[Import]) -> set[tuple[str, str, str]]:
    """(importer, imported, name) for every `_name` (not a dunder) one module takes from another."""
    return {(one.importer, one.imported, name) for one in imports for name in one.names
            if name.startswith("_") and not name.startswith("__")}


def _shown(component: list[str], imports: tuple[Import, ...]) -> str:
    edges = [f"{one.importer} (line {one.line}) -> {one.imported}" for one in imports
             if one.importer in component and one.imported in component]
    return "; ".join(sorted(set(edges)))


def test_the_checker_can_fail(tmp_path):
    """A cycle closed by an import inside a function, one through a relative import, and a private name taken
    across modules are all found; the standard library is no edge."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("import os\nfrom pkg.b import helper\n")
    (package / "b.py").write_text("import pkg\n\ndef helper():\n    from pkg.a import _hidden\n    return _hidden\n")
    (package / "sub" / "__init__.py").write_text("from pkg.sub import c\n")
    (package / "sub" / "c.py").write_text("from . import d\n")
    (package / "sub" / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                          "    from pkg.sub.c import Thing\n")
    (package / "e.py").write_text("from pkg import a\nfrom pkg.sub import c\n")
    modules = modules_of(package)
    imports = [one for name, path in modules.items() for one in imports_of(name, path, modules)]
    assert cycles(imports) == [["pkg.a", "pkg.b"], ["pkg.sub.c", "pkg.sub.d"]]
    assert private_imports(imports) == {("pkg.b", "pkg.a", "_hidden")}
    assert ("pkg.e", "pkg.sub.c") in {(one.importer, one.imported) for one in imports}


def test_course_has_no_import_cycle():
    imports = course_imports()
    assert any(one.importer == "course.batch" and one.imported == "course.grading" for one in imports)  # read at all
    found = cycles(imports)
    assert found == [], "import cycles in course/ (move what both sides share into a module both import): " + \
        " | ".join(_shown(component, imports) for component in found)


def test_no_module_imports_another_modules_private_name():
    found = private_imports(course_imports())
    assert found - OWNED_ELSEWHERE.keys() == set(), "a module imports another's private name (make it public, or " \
        "move it where both belong)"
    assert OWNED_ELSEWHERE.keys() - found == set(), "these private imports are gone: remove them from OWNED_ELSEWHERE"
