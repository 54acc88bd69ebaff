"""The Python the sandbox runs: the folders outside its prefixes that hold the packages it imports, and the
first lines of every program handed in (`path_prelude`). Shared by the view (bubblewrap.py binds the folders)
and the door for code (handed_in.py puts the prelude before the runner), which both import it."""

from __future__ import annotations

import importlib.util
import os
import sys
from functools import cache
from pathlib import Path

SANDBOX_PACKAGES = ("IPython", "torch")  # what the sandboxed Python imports: the runner, and every notebook


def prefixes() -> set[str]:
    """The interpreter's prefixes: its installation and, for a virtual environment, the venv."""
    return {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}


@cache
def package_paths() -> tuple[str, ...]:
    """Folders outside the interpreter's prefixes that hold SANDBOX_PACKAGES: a user site (`pip install
    --user`), or a folder a .pth file puts on the path. The view binds them read-only, and the sandboxed
    Python, which runs isolated (`-I`: no user site, no PYTHONPATH), is told of them by `path_prelude`."""
    folders = set()
    outers = (*prefixes(), "/usr")
    for name in SANDBOX_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            folder = os.path.realpath(Path(location).parent)
            if not any(folder == outer or folder.startswith(outer.rstrip("/") + "/") for outer in outers):
                folders.add(folder)
    return tuple(sorted(folders))


def path_prelude() -> str:
    """Python source that puts `package_paths()` on sys.path: the first lines of what the sandbox runs."""
    if not package_paths():
        return ""
    return f"import sys as _sys; _sys.path.extend(p for p in {list(package_paths())!r} if p not in _sys.path)\n"
