"""Everything that crosses into the sandbox as text, assembled here and nowhere else: the trust boundary's one
door for code.

Three of the package's files are handed in, never imported there from disk (the sandbox sees no course files,
and an editable install's package is not even on its disk): runner.py (the program beside the student's code)
and the helper modules the notebook imports, forms.py and notebook.py. Each may import only the standard library,
torch, IPython and the other helper modules (tests/test_trust_boundary.py reads their imports). A student's code
goes in as data, `Cell`s of a request (protocol.py), never as part of these.
"""

from __future__ import annotations

import functools
import importlib.resources
from dataclasses import dataclass
from pathlib import Path

from course.sandbox.interpreter import path_prelude

NOTEBOOK_MODULE = "course.notebook"

# The course's modules a notebook can import in the sandbox, in the order they are made: course.notebook
# imports course.forms.
HELPER_MODULES = ("course.forms", NOTEBOOK_MODULE)

RUNNER_FILE = Path(__file__).parent / "runner.py"

# The sandboxed Python runs isolated (-I); the prelude gives it the package folders outside its prefix.
RUNNER_SOURCE = path_prelude() + RUNNER_FILE.read_text(encoding="utf-8")


def handed_in_files() -> dict[str, Path]:
    """Module name -> file, for every file of this package whose text is run inside the sandbox."""
    package = Path(str(importlib.resources.files("course")))
    return {
        "runner": RUNNER_FILE,
        **{name: package / (name.removeprefix("course.") + ".py") for name in HELPER_MODULES},
    }


@dataclass(frozen=True)
class Cell:
    """One cell of student code, in the order it runs. `label` names it in feedback."""

    index: int
    label: str
    source: str


@functools.cache
def notebook_module_cell() -> str:
    """A cell that defines the modules `course.forms` and `course.notebook` (the setup cell imports check_form
    and Marks from the latter) from this package's own files, handed in as text. It leaves no name in the
    notebook's namespace."""
    files = handed_in_files()
    modules = tuple((name, files[name].read_text(encoding="utf-8")) for name in HELPER_MODULES)
    return (
        "def _course_notebook_module(modules):\n"
        "    import sys, types\n"
        "    package = types.ModuleType('course')\n"
        "    package.__path__ = []\n"
        "    sys.modules['course'] = package\n"
        "    for name, text in modules:\n"
        "        module = types.ModuleType(name)\n"
        "        module.__file__ = name.replace('.', '/') + '.py'\n"
        "        sys.modules[name] = module\n"
        "        setattr(package, name.removeprefix('course.'), module)\n"
        "        exec(compile(text, module.__file__, 'exec'), module.__dict__)\n"
        f"_course_notebook_module({modules!r})\n"
        "del _course_notebook_module\n"
    )
