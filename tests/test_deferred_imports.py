"""course.deferred_imports: importing nbformat through our package compiles no IRI grammar, and a schema that does
check an "iri" format still gets the real check (the grammars compiled then)."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import ROOT

CHECK = """
import json, sys
import course, nbformat, jsonschema
notebook = nbformat.read(sys.argv[1], as_version=4)
nbformat.validate(notebook)
before = "rfc3987_syntax.syntax_helpers" in sys.modules
checker = jsonschema.Draft7Validator({"format": "iri"}, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
answers = [checker.is_valid(text) for text in ("https://example.org/grad/∂L", "no scheme here", "http://[::1")]
print(json.dumps({"compiled_before": before, "answers": answers,
                  "compiled_after": "rfc3987_syntax.syntax_helpers" in sys.modules}))
"""


def test_nbformat_validates_without_compiling_iri_grammars_and_iri_formats_are_still_checked():
    done = subprocess.run([sys.executable, "-c", CHECK, str(ROOT / "release" / "autograd" / "autograd.ipynb")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {"compiled_before": False, "answers": [True, False, False], "compiled_after": True}


NBGRADER_CHECK = """
import json, sys
import course
import nbgrader.api, nbgrader.converters, nbgrader.utils
from nbgrader.api import Gradebook
light = {"version": nbgrader.__version__, "server_extensions": "nbgrader.server_extensions" in sys.modules,
         "jupyter_server": "jupyter_server" in sys.modules}
points = nbgrader._jupyter_server_extension_points()  # what a Jupyter server asks of the package
print(json.dumps({"light": light, "points": points, "loaded_after": "nbgrader.server_extensions" in sys.modules,
                  "has_loader": callable(getattr(nbgrader, "_load_jupyter_server_extension", None)),
                  "unknown": hasattr(nbgrader, "no_such_name")}))
"""


def test_nbgrader_imports_without_its_server_extensions_until_a_server_asks_for_them():
    import nbgrader._version

    done = subprocess.run([sys.executable, "-c", NBGRADER_CHECK], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {"light": {"version": nbgrader._version.__version__, "server_extensions": False,
                              "jupyter_server": False},
                    "points": [{"module": "nbgrader"}], "loaded_after": True, "has_loader": True, "unknown": False}


WARM_CHECK = """
import gc, json, sys
from course.grading import warm_imports
gc.disable()  # a caller that had the collector off gets it back off
warm_imports("nbgrader.api")
first = {"frozen": gc.get_freeze_count(), "enabled": gc.isenabled(),
         "imported": all(name in sys.modules for name in ("torch", "nbgrader.api"))}
gc.enable()
gc.unfreeze()
warm_imports("nbgrader.api")  # a second batch in the same process freezes nothing more
print(json.dumps({**first, "again": gc.get_freeze_count(), "enabled_after": gc.isenabled()}))
"""


def test_warm_imports_freeze_their_objects_once_and_leave_the_collector_as_they_found_it():
    done = subprocess.run([sys.executable, "-c", WARM_CHECK], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["imported"], seen
    assert seen["frozen"] > 100_000, seen  # torch's import alone makes several hundred thousand objects
    assert seen["enabled"] is False, seen
    assert seen["enabled_after"] is True, seen
    assert seen["again"] == 0, seen
