"""Start-up cost deferred until used: jsonschema imports `rfc3987_syntax` for its "iri" formats, and that package
compiles some forty Earley grammars as it is imported (seconds of CPU on a busy machine, in every process that
imports nbformat: each command of ours). No schema that nbformat, nbgrader or the service validates uses those
formats, so here the package stands in until one is checked: then the grammars are compiled, once, as before.
(jsonschema issue #1428; `rfc3987`, which jsonschema would prefer, is GPL-licensed.)"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

IRI_GRAMMARS = "rfc3987_syntax"


def defer_iri_grammars() -> None:
    """Put a stand-in for `rfc3987_syntax` in sys.modules, unless it is imported already or absent: the same
    package (its path and spec, so its own submodules import as ever) whose attributes compile on first use."""
    if IRI_GRAMMARS in sys.modules:
        return
    try:
        spec = importlib.util.find_spec(IRI_GRAMMARS)
    except (ImportError, ValueError):
        return
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
