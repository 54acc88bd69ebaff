"""Start-up cost deferred until used: jsonschema imports `rfc3987_syntax` for its "iri" formats, and that package
compiles some forty Earley grammars as it is imported (seconds of CPU on a busy machine, in every process that
imports nbformat: each command of ours). No schema that nbformat, nbgrader or the service validates uses those
formats, so here the package stands in until one is checked: then the grammars are compiled, once, as before.
(jsonschema issue #1428; `rfc3987`, which jsonschema would prefer, is GPL-licensed.)"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import types

IRI_GRAMMARS = "rfc3987_syntax"


def _package_not_imported_yet(name: str) -> importlib.machinery.ModuleSpec | None:
    """How `name` would be imported, or None when it is imported already or not installed."""
    if name in sys.modules:
        return None
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def defer_iri_grammars() -> None:
    """Put a stand-in for `rfc3987_syntax` in sys.modules, unless it is imported already or absent: the same
    package (its path and spec, so its own submodules import as ever) whose attributes compile on first use."""
    spec = _package_not_imported_yet(IRI_GRAMMARS)
    if spec is None or not spec.submodule_search_locations:
        return
    standin = types.ModuleType(IRI_GRAMMARS, "rfc3987_syntax, its grammars compiled on first use")
    standin.__spec__ = spec
    standin.__path__ = list(spec.submodule_search_locations)
    standin.__file__ = spec.origin

    def compiled(name: str):  # PEP 562: what the package exports, from the module that defines it
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(importlib.import_module(f"{IRI_GRAMMARS}.syntax_helpers"), name)

    def is_valid_syntax(term: str, value: str) -> bool:
        return compiled("is_valid_syntax")(term, value)

    standin.__getattr__ = compiled  # type: ignore[method-assign]
    standin.is_valid_syntax = is_valid_syntax  # type: ignore[attr-defined]
    sys.modules[IRI_GRAMMARS] = standin


NBGRADER = "nbgrader"


def defer_nbgrader_package_init() -> None:
    """Put nbgrader in sys.modules without its package __init__, unless it is imported already or absent. That
    __init__ imports nbgrader's four Jupyter server extensions (jupyter_server, tornado and their handlers: about a
    second of CPU and 23 MiB in every process of ours) only so that a Jupyter server can load them; a grader uses
    nbgrader's gradebook, utilities and converters, whose modules import as ever below the stand-in (its path and
    spec are nbgrader's). The first name asked of the package that the stand-in lacks (a server's
    `_jupyter_server_extension_points`, say) runs nbgrader's own __init__ in place, once, as before."""
    spec = _package_not_imported_yet(NBGRADER)
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return
    loader = spec.loader
    package = importlib.util.module_from_spec(spec)
    initialised = False

    def rest_of_init(name: str):  # PEP 562: a submodule (`from . import utils`), else what __init__ defines
        nonlocal initialised
        if initialised or name.startswith("__"):
            raise AttributeError(f"module {NBGRADER!r} has no attribute {name!r}")
        if importlib.util.find_spec(f"{NBGRADER}.{name}") is not None:
            return importlib.import_module(f"{NBGRADER}.{name}")
        initialised = True
        loader.exec_module(package)
        return getattr(package, name)

    package.__getattr__ = rest_of_init  # type: ignore[method-assign]
    sys.modules[NBGRADER] = package
    try:
        package.__version__ = importlib.import_module(f"{NBGRADER}._version").__version__  # type: ignore[attr-defined]
    except Exception:  # not the nbgrader we know: leave its import to itself
        del sys.modules[NBGRADER]
