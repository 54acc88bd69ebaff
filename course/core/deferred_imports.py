"""Start-up cost deferred until used: jsonschema imports `rfc3987_syntax` for its "iri" formats, and that package
compiles some forty Earley grammars as it is imported (seconds of CPU on a busy machine, in every process that
imports nbformat: each command of ours). No schema that nbformat, nbgrader or the service validates uses those
formats, so here the package stands in until one is checked: then the grammars are compiled, once, as before.
(jsonschema issue #1428; `rfc3987`, which jsonschema would prefer, is GPL-licensed.)

Each function here puts stand-ins in sys.modules, so none runs on import: a command's own process switches them all
on, first thing (defer_start_up_imports, called by cli.main: every command, the service and the Gradescope
`autograder run` start there). Importing `course` or `course.notebook` (a student's Jupyter kernel does) leaves
sys.modules as it was; the sandbox's interpreter imports nothing of ours."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import types
from collections.abc import Callable, Sequence
from typing import Any

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

    def compiled(name: str) -> Any:  # PEP 562: what the package exports, from the module that defines it
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(importlib.import_module(f"{IRI_GRAMMARS}.syntax_helpers"), name)

    def is_valid_syntax(term: str, value: str) -> bool:
        valid: bool = compiled("is_valid_syntax")(term, value)
        return valid

    standin.__getattr__ = compiled  # type: ignore[method-assign]
    standin.is_valid_syntax = is_valid_syntax  # type: ignore[attr-defined]
    sys.modules[IRI_GRAMMARS] = standin


NBGRADER = "nbgrader"


def _defer_package_init(name: str, *, from_submodules: dict[str, str] | None = None) -> bool:
    """Put package `name` in sys.modules without running its __init__, unless it is imported already or absent:
    its modules import as ever below the stand-in (its path and spec are the package's), the names in
    `from_submodules` come from the submodule named there, and the first other name asked of the package that is
    not a submodule runs the package's own __init__ in place, once, as before. Returns whether it stands in."""
    spec = _package_not_imported_yet(name)
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return False
    loader = spec.loader
    package = importlib.util.module_from_spec(spec)
    initialised = False

    def rest_of_init(attribute: str) -> Any:  # PEP 562: a submodule (`from . import utils`), else what __init__ defines
        nonlocal initialised
        if initialised or attribute.startswith("__"):
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}")
        if from_submodules and attribute in from_submodules:
            return getattr(importlib.import_module(f"{name}.{from_submodules[attribute]}"), attribute)
        if importlib.util.find_spec(f"{name}.{attribute}") is not None:
            return importlib.import_module(f"{name}.{attribute}")
        initialised = True
        loader.exec_module(package)
        return getattr(package, attribute)

    package.__getattr__ = rest_of_init  # type: ignore[method-assign]
    sys.modules[name] = package
    return True


def defer_nbgrader_package_init() -> None:
    """nbgrader without its package __init__ (_defer_package_init), unless it is imported already or absent. That
    __init__ imports nbgrader's four Jupyter server extensions (jupyter_server, tornado and their handlers: about a
    second of CPU and 23 MiB in every process of ours) only so that a Jupyter server can load them; a grader uses
    nbgrader's gradebook, utilities and converters. A server asking `_jupyter_server_extension_points` runs it.

    So too its `auth` package, whose __init__ imports the JupyterHub plugin and with it `requests` (11 MiB) for every
    importer of the gradebook, which needs only the Authenticator class of `auth.base`."""
    if not _defer_package_init(NBGRADER):
        return
    package = sys.modules[NBGRADER]
    try:
        package.__version__ = importlib.import_module(f"{NBGRADER}._version").__version__  # type: ignore[attr-defined]
    except Exception:  # not the nbgrader we know: leave its import to itself
        del sys.modules[NBGRADER]
        return
    _defer_package_init(
        f"{NBGRADER}.auth", from_submodules=dict.fromkeys(("Authenticator", "BaseAuthPlugin", "NoAuthPlugin"), "base")
    )


class _ImportedOnFirstUse(types.ModuleType):
    """A module's stand-in in sys.modules: any name asked of it imports the real module in its place, once."""

    def real(self) -> types.ModuleType:
        # Only taking the stand-in out is under our lock; two threads importing the real module are serialised by
        # the import system's own lock for it (ours held across the import could deadlock against a thread holding
        # a module lock that import needs).
        with _stand_in_lock:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
        return importlib.import_module(self.__name__)

    def __getattr__(self, attribute: str) -> Any:  # PEP 562
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return getattr(self.real(), attribute)


_stand_in_lock = threading.Lock()

ARCHIVES = "setuptools.archive_util"
ARCHIVE_FUNCTIONS = ("unpack_archive", "unpack_tarfile", "unpack_zipfile")


def defer_setuptools_for_archives() -> None:
    """nbgrader's utilities import three unpacking functions of `setuptools.archive_util` (used by `zip_collect`
    alone), and so all of setuptools and distutils, 13 MiB, in every importer of the gradebook. In a command's process
    (cli.main) that module stands in, unless setuptools is imported already or absent: its functions, and any other
    name asked of it, import the real module on first use (which then takes its place in sys.modules)."""
    if ARCHIVES in sys.modules or _package_not_imported_yet("setuptools") is None:
        return
    standin = _ImportedOnFirstUse(ARCHIVES, "setuptools.archive_util, imported on first use")

    def on_first_use(function: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(standin.real(), function)(*args, **kwargs)

        call.__name__ = call.__qualname__ = function
        return call

    for function in ARCHIVE_FUNCTIONS:
        setattr(standin, function, on_first_use(function))
    sys.modules[ARCHIVES] = standin


TORCH_META = "torch._meta_registrations"
# The modules that trace, compile or export, and so use torch's Python meta kernels: importing one first loads them.
META_USERS = frozenset(
    {
        "torch._dynamo",
        "torch._inductor",
        "torch.export._trace",
        "torch._functorch.aot_autograd",
        "torch._decomp.decompositions",
        "torch._refs",
        "torch._prims",
    }
)


def _meta_kernels_deferred() -> _ImportedOnFirstUse | None:
    """The stand-in of torch._meta_registrations while it is still in sys.modules (see defer_torch_meta_kernels)."""
    standin = sys.modules.get(TORCH_META)
    return standin if isinstance(standin, _ImportedOnFirstUse) else None


class _MetaKernelsFirst(importlib.abc.MetaPathFinder):
    """Finds a module of META_USERS as the rest of sys.meta_path does, with a loader that loads torch's meta kernels
    before the module runs (in exec_module, not here: a finder runs under the interpreter's global import lock, and
    an import made under it could deadlock against another thread's)."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name not in META_USERS or _meta_kernels_deferred() is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _LoadingMetaKernelsFirst(spec.loader)
                return spec
        return None


class _LoadingMetaKernelsFirst(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        standin = _meta_kernels_deferred()
        if standin is not None:
            standin.real()
        else:  # in already, or being imported by another thread: waits for it
            importlib.import_module(TORCH_META)
        self._loader.exec_module(module)

    def __getattr__(self, attribute: str) -> Any:  # get_source, get_code, is_package, ...: the real loader's
        return getattr(self._loader, attribute)


def defer_torch_meta_kernels() -> None:
    """torch's __init__ ends by importing `torch._meta_registrations`, which registers some thousand Python "meta"
    kernels (shapes without data, for the meta device and for tracing), and with them torch's decompositions, refs
    and prims: 0.8 s of CPU and 17 MiB of every process of ours that imports torch (measured here). Our processes
    are the trusted ones (grader, service): they compute the judge's references with eager CPU tensors, which never
    dispatch to a meta kernel. So the command line (cli.main, before anything imports torch) puts a stand-in in that
    module's place, unless torch is imported already or absent; the real one is imported when a module that traces,
    compiles or exports is (META_USERS), or when a name is asked of it. Not on importing the package: a student's
    Jupyter kernel imports `course.notebook`, and its torch stays whole (so does the sandbox's, which imports nothing
    of ours). A hidden test that built meta-device tensors by hand would find torch's C++ meta kernels only, and the
    self-test, which grades the solution before anyone, would refuse the course rather than grade with it."""
    if "torch" in sys.modules or TORCH_META in sys.modules or _package_not_imported_yet("torch") is None:
        return
    sys.modules[TORCH_META] = _ImportedOnFirstUse(TORCH_META, "torch's Python meta kernels, imported on first use")
    sys.meta_path.insert(0, _MetaKernelsFirst())


def defer_start_up_imports() -> None:
    """Every stand-in above, in a command's own process (cli.main), before anything of ours imports nbformat (and
    with it jsonschema), nbgrader or torch: a stand-in is put in place only for a package not imported yet."""
    defer_iri_grammars()
    defer_nbgrader_package_init()
    defer_torch_meta_kernels()
    defer_setuptools_for_archives()
