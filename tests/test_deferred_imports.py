"""course.deferred_imports: importing nbformat through our package compiles no IRI grammar, and a schema that does
check an "iri" format still gets the real check (the grammars compiled then)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.helpers import ROOT

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


GRADEBOOK_CHECK = """
import json, os, sys, tempfile, zipfile
import course.cli
from course.deferred_imports import defer_setuptools_for_archives
defer_setuptools_for_archives()  # as the command line's main() does
import nbgrader.api, nbgrader.utils
light = {name: name in sys.modules for name in ("requests", "setuptools")}
from nbgrader.auth import Authenticator, JupyterHubAuthPlugin  # the real classes, the plugin by running auth's __init__
with tempfile.TemporaryDirectory() as folder:
    archive = os.path.join(folder, "hw.zip")
    with zipfile.ZipFile(archive, "w") as packed:
        packed.writestr("alice_hw.ipynb", "{}")
    out = os.path.join(folder, "out")
    os.makedirs(out)
    nbgrader.utils.unzip(archive, out, tree=True)  # zip_collect's unpacking: setuptools' functions on first use
    unpacked = sorted(os.listdir(out))
print(json.dumps({**light, "classes": [Authenticator.__module__, JupyterHubAuthPlugin.__module__],
                  "unpacked": unpacked, "setuptools_after": "setuptools" in sys.modules}))
"""


def test_the_gradebook_imports_without_requests_or_setuptools_and_nbgrader_still_has_both_where_used():
    done = subprocess.run([sys.executable, "-c", GRADEBOOK_CHECK], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {"requests": False, "setuptools": False, "unpacked": ["alice_hw.ipynb"], "setuptools_after": True,
                    "classes": ["nbgrader.auth.base", "nbgrader.auth.jupyterhub"]}, seen


TORCH_CHECK = """
import json, sys
import course.cli  # what a command imports before main() runs
from course.deferred_imports import defer_torch_meta_kernels
assert "torch" not in sys.modules
defer_torch_meta_kernels()  # main()'s first step
import torch
x = torch.tensor(4.0, requires_grad=True)
(x ** 3 - 2 * x).backward()
first = {"deferred": type(sys.modules["torch._meta_registrations"]).__name__, "grad": x.grad.item(),
         "meta": list((torch.empty(2, 3, device="meta") @ torch.empty(3, 5, device="meta")).shape)}
import torch._dynamo  # what torch.compile imports: torch's Python meta kernels come first
print(json.dumps({**first, "after": type(sys.modules["torch._meta_registrations"]).__name__,
                  "registered": hasattr(sys.modules["torch._meta_registrations"], "activate_meta")}))
"""


def test_a_commands_torch_imports_without_its_python_meta_kernels_until_something_traces_or_compiles():
    done = subprocess.run([sys.executable, "-c", TORCH_CHECK], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {"deferred": "_ImportedOnFirstUse", "grad": 46.0, "meta": [2, 5], "after": "module",
                    "registered": True}, seen


def test_importing_the_package_leaves_torch_whole_as_a_students_kernel_imports_it():
    check = ("import json, sys; import course.notebook, torch; "
             "print(type(sys.modules['torch._meta_registrations']).__name__)")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "module"
