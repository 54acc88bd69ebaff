"""course.core.deferred_imports: in a command's process (cli.main's first step, defer_start_up_imports) importing
nbformat
compiles no IRI grammar, and a schema that does check an "iri" format still gets the real check (the grammars
compiled then); importing the package alone changes nothing outside it."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.helpers import ROOT

CHECK = """
import json, sys
from course.core.deferred_imports import defer_start_up_imports
defer_start_up_imports()  # as a command's main() does first
import nbformat, jsonschema
notebook = nbformat.read(sys.argv[1], as_version=4)
nbformat.validate(notebook)
before = "rfc3987_syntax.syntax_helpers" in sys.modules
checker = jsonschema.Draft7Validator({"format": "iri"}, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
answers = [checker.is_valid(text) for text in ("https://example.org/grad/∂L", "no scheme here", "http://[::1")]
print(json.dumps({"compiled_before": before, "answers": answers,
                  "compiled_after": "rfc3987_syntax.syntax_helpers" in sys.modules}))
"""


def test_nbformat_validates_without_compiling_iri_grammars_and_iri_formats_are_still_checked():
    done = subprocess.run(
        [sys.executable, "-c", CHECK, str(ROOT / "release" / "autograd" / "autograd.ipynb")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {"compiled_before": False, "answers": [True, False, False], "compiled_after": True}


NBGRADER_CHECK = """
import json, sys
from course.core.deferred_imports import defer_start_up_imports
defer_start_up_imports()  # as a command's main() does first
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
    assert seen == {
        "light": {"version": nbgrader._version.__version__, "server_extensions": False, "jupyter_server": False},
        "points": [{"module": "nbgrader"}],
        "loaded_after": True,
        "has_loader": True,
        "unknown": False,
    }


WARM_CHECK = """
import gc, json, sys
from course.pipeline.grading import warm_imports
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
from course.core.deferred_imports import defer_start_up_imports
defer_start_up_imports()  # as the command line's main() does first
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
    done = subprocess.run(
        [sys.executable, "-c", GRADEBOOK_CHECK], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {
        "requests": False,
        "setuptools": False,
        "unpacked": ["alice_hw.ipynb"],
        "setuptools_after": True,
        "classes": ["nbgrader.auth.base", "nbgrader.auth.jupyterhub"],
    }, seen


TORCH_CHECK = """
import json, sys
import course.cli  # what a command imports before main() runs
from course.core.deferred_imports import defer_torch_meta_kernels
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
    assert seen == {
        "deferred": "_ImportedOnFirstUse",
        "grad": 46.0,
        "meta": [2, 5],
        "after": "module",
        "registered": True,
    }, seen


def test_importing_the_package_leaves_torch_whole_as_a_students_kernel_imports_it():
    check = (
        "import json, sys; import course.notebook, torch; "
        "print(type(sys.modules['torch._meta_registrations']).__name__)"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "module"


PACKAGE_CHECK = """
import json, sys
def snapshot():
    return dict(sys.modules), list(sys.meta_path)
def changes(before, finders):
    return {"replaced": sorted(name for name, module in before.items() if sys.modules.get(name) is not module),
            "finders_changed": sys.meta_path != finders}
before, finders = snapshot()
import course
added = sorted(name for name in sys.modules if name not in before)
package = {"foreign": [name for name in added if name.split(".")[0] not in ("course", *sys.stdlib_module_names)],
           **changes(before, finders)}
before, finders = snapshot()
import course.notebook  # as a student's Jupyter kernel does: it imports torch
meta = sys.modules.get("torch._meta_registrations")
notebook = {"stand_in_targets": sorted(name for name in ("nbgrader", "rfc3987_syntax", "setuptools.archive_util")
                                       if name in sys.modules),
            "torch_meta_kernels_real": meta is not None and "activate_meta" in vars(meta), **changes(before, finders)}
print(json.dumps({"package": package, "notebook": notebook}))
"""


def test_importing_the_package_or_its_notebook_module_leaves_sys_modules_as_it_was():
    """`import course` loads the package and the standard library only, and neither it nor `import course.notebook`
    (a student's kernel) puts a stand-in in sys.modules, replaces a module there or adds an import finder."""
    done = subprocess.run([sys.executable, "-c", PACKAGE_CHECK], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {
        "package": {"foreign": [], "replaced": [], "finders_changed": False},
        "notebook": {"stand_in_targets": [], "torch_meta_kernels_real": True, "replaced": [], "finders_changed": False},
    }, seen


COMMAND_CHECK = """
import json, sys
import course.cli  # what the `autograd-course` script and `python -m course` import before main() runs
heavy = sorted(name for name in ("nbformat", "jsonschema", "rfc3987_syntax", "nbgrader", "torch", "setuptools")
               if name in sys.modules)
try:
    course.cli.main(["--version"])  # prints the version and exits, after main's first step
except SystemExit:
    pass
print(json.dumps({"imported_before_main": heavy,
                  "stand_ins": {name: type(sys.modules.get(name)).__name__
                                for name in ("torch._meta_registrations", "setuptools.archive_util")},
                  "nbgrader_light": "nbgrader" in sys.modules and "nbgrader.server_extensions" not in sys.modules,
                  "iri_standin": getattr(sys.modules.get("rfc3987_syntax"), "__doc__", "")}))
"""


def test_a_commands_main_switches_the_stand_ins_on_before_anything_imports_what_they_stand_in_for():
    done = subprocess.run([sys.executable, "-c", COMMAND_CHECK], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen == {
        "imported_before_main": [],
        "stand_ins": {
            "torch._meta_registrations": "_ImportedOnFirstUse",
            "setuptools.archive_util": "_ImportedOnFirstUse",
        },
        "nbgrader_light": True,
        "iri_standin": "rfc3987_syntax, its grammars compiled on first use",
    }, seen
