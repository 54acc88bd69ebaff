"""The shape of `course/`'s imports, read from the source with `ast`: no import cycle (counting the imports inside
functions, so that a lazy import cannot hide one), and no module importing another's private name (`_name`): what
two modules share lives in a module both import, under a public name (as recording.py holds what batch.py,
shards.py and term_record.py write, and sandbox/interpreter.py what bubblewrap.py and handed_in.py both need).

Imports for start-up speed may stay inside functions; they are edges of the graph like any other.

The package's layers are its folders (docs/architecture.md draws them), lowest first: core, sandbox, pipeline,
term, authoring, platforms. A module imports from its own layer and the layers below it, never above; outside the
layers stand only the faces: what a student's notebook imports (`course.notebook` and the `course.forms` it
imports, handed into the sandbox under those names) at the bottom, and the command line (`course.cli` and its
commands, `course.commands.*`) on top."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "course"


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
                above = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*above, base] if base else above)
            if base not in modules:
                continue
            taken = tuple(alias.name for alias in node.names if f"{base}.{alias.name}" not in modules)
            if taken:
                found.append(Import(name, base, node.lineno, taken))
            found += [
                Import(name, f"{base}.{alias.name}", node.lineno, ())
                for alias in node.names
                if f"{base}.{alias.name}" in modules
            ]
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
    return {
        (one.importer, one.imported, name)
        for one in imports
        for name in one.names
        if name.startswith("_") and not name.startswith("__")
    }


def private_attributes(package: Path) -> set[tuple[str, str, str]]:
    """(importer, module, name) for every `module._name` (not a dunder) a module reads through a module object it
    imported (`from course.authoring import kit` ... `kit._cell`): the same as importing the private name."""
    modules = modules_of(package)
    found = set()
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        bound: dict[str, str] = {}  # a local name -> the module it stands for
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):  # `import course.x.y as m`
                bound.update(
                    {alias.asname: alias.name for alias in node.names if alias.asname and alias.name in modules}
                )
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                bound.update(
                    {
                        alias.asname or alias.name: f"{node.module}.{alias.name}"
                        for alias in node.names
                        if f"{node.module}.{alias.name}" in modules
                    }
                )
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                found.add((name, bound[node.value.id], node.attr))
    return found


def _shown(component: list[str], imports: tuple[Import, ...]) -> str:
    edges = [
        f"{one.importer} (line {one.line}) -> {one.imported}"
        for one in imports
        if one.importer in component and one.imported in component
    ]
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
    (package / "sub" / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.c import Thing\n"
    )
    (package / "e.py").write_text(
        "from pkg import a\nfrom pkg.sub import c\n\ndef f():\n    return a._secret, c.__name__\n"
    )
    modules = modules_of(package)
    imports = [one for name, path in modules.items() for one in imports_of(name, path, modules)]
    assert cycles(imports) == [["pkg.a", "pkg.b"], ["pkg.sub.c", "pkg.sub.d"]]
    assert private_imports(imports) == {("pkg.b", "pkg.a", "_hidden")}
    assert private_attributes(package) == {("pkg.e", "pkg.a", "_secret")}
    assert ("pkg.e", "pkg.sub.c") in {(one.importer, one.imported) for one in imports}


def test_course_has_no_import_cycle():
    imports = course_imports()
    # read at all:
    assert any(one.importer == "course.term.batch" and one.imported == "course.pipeline.grading" for one in imports)
    found = cycles(imports)
    assert found == [], (
        "import cycles in course/ (move what both sides share into a module both import): "
        + " | ".join(_shown(component, imports) for component in found)
    )


def test_no_module_imports_another_modules_private_name():
    assert private_imports(course_imports()) == set(), (
        "a module imports another's private name (make it public, or move it where both belong)"
    )
    assert private_attributes(PACKAGE) == set(), (
        "a module reads another's private name through the module object (make it public, or move it where both belong)"
    )


# Lowest first: a module of one layer imports from its own layer and those before it.
LAYERS = ("core", "sandbox", "pipeline", "term", "authoring", "platforms")
STUDENT_FACE = frozenset({"course.forms", "course.notebook"})  # imports nothing but itself
TOP = frozenset({"course", "course.__main__", "course.cli"})
COMMANDS = "course.commands"  # the command line's commands (a package): on top, with course.cli


def rank(module: str) -> int:
    """0 for the student's face, 1.. for the layers in order, one above the last layer for the command line."""
    if module in STUDENT_FACE:
        return 0
    if module in TOP or module == COMMANDS or module.startswith(f"{COMMANDS}."):
        return len(LAYERS) + 1
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in LAYERS:
        return LAYERS.index(parts[1]) + 1
    raise LookupError(module)


def upward(imports: tuple[Import, ...] | list[Import]) -> list[str]:
    return sorted(
        f"{one.importer}:{one.line} imports {one.imported}"
        for one in imports
        if rank(one.imported) > rank(one.importer)
    )


def test_every_module_lives_in_a_layer_or_is_a_face():
    homeless = []
    for module in modules_of(PACKAGE):
        try:
            rank(module)
        except LookupError:
            homeless.append(module)
    assert homeless == [], (
        f"put each in one of course/{{{','.join(LAYERS)}}}/ (docs/architecture.md says which holds what)"
    )


def test_each_layer_is_a_package_that_says_what_it_holds():
    for layer in LAYERS:
        init = PACKAGE / layer / "__init__.py"
        assert init.is_file(), f"course/{layer}/ is not a package"
        assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))), f"course/{layer}/__init__.py is mute"


def test_imports_run_down_the_layers_only():
    assert upward(course_imports()) == [], "imports running up the layers (" + " < ".join(LAYERS) + ")"


def test_the_student_face_imports_nothing_but_itself():
    assert [one for one in course_imports() if one.importer in STUDENT_FACE and one.imported not in STUDENT_FACE] == []


def test_the_layer_check_sees_an_upward_import_inside_a_function(tmp_path):
    package = tmp_path / "course"
    for folder in ("core", "pipeline"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text('"""A layer."""\n')
    (package / "__init__.py").write_text("")
    (package / "core" / "text.py").write_text("def f():\n    from course.pipeline.grading import g\n")
    (package / "pipeline" / "grading.py").write_text("from course.core.text import f\ndef g():\n    pass\n")
    modules = modules_of(package)
    found = [one for name, path in modules.items() for one in imports_of(name, path, modules)]
    assert upward(found) == ["course.core.text:2 imports course.pipeline.grading"]


def test_the_commands_stand_on_top_and_nothing_below_imports_them():
    assert rank("course.commands.term") == rank("course.cli") > rank("course.platforms.gradescope")
    below = [
        f"{one.importer}:{one.line}"
        for one in course_imports()
        if one.imported.startswith(COMMANDS) and not (one.importer.startswith(COMMANDS) or one.importer in TOP)
    ]
    assert below == []
    assert any(one.importer == "course.cli" and one.imported.startswith(f"{COMMANDS}.") for one in course_imports())


def test_every_package_of_course_is_in_the_wheel():
    """pyproject.toml lists the packages by name: a subpackage left out installs without it (an installed
    `autograd-course` then fails to import its commands, as the Gradescope bundle's fresh venv showed)."""
    import tomllib

    listed = set(
        tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]
    )
    found = {".".join(init.parent.relative_to(PACKAGE.parent).parts) for init in PACKAGE.rglob("__init__.py")}
    assert "course.commands" in found  # read at all
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
