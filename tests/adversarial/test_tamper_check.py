"""Family 1: tampering with the check. Each attack scores exactly what the honest literals earn."""

from __future__ import annotations

import pytest

from tests.support.adversarial import needs_bwrap, per_question, with_cell
from tests.support.helpers import ROOT

pytestmark = pytest.mark.slow

ATTACKS = {
    "builtin abs": "import builtins\nbuiltins.abs = lambda value: 0",
    "builtin float": "import builtins\nbuiltins.float = lambda *args: 0.0",
    "builtin round": "import builtins\nbuiltins.round = lambda *args: 0",
    "builtin isinstance": "import builtins\nbuiltins.isinstance = lambda obj, cls: True",
    "builtin print": "import builtins\nbuiltins.print = lambda *args, **kwargs: None",
    "builtin __import__": (
        "import builtins, types\n_real = builtins.__import__\n"
        "def _fake(name, *args, **kwargs):\n    if name == 'torch':\n        m = types.ModuleType('torch')\n"
        "        m.allclose = lambda *a, **k: True\n        return m\n    return _real(name, *args, **kwargs)\n"
        "builtins.__import__ = _fake"
    ),
    "Tensor.item": "torch.Tensor.item = lambda self: 0.0",
    "Tensor.backward": "torch.Tensor.backward = lambda self, *args, **kwargs: None",
    "Tensor.__sub__": "torch.Tensor.__sub__ = lambda a, b: torch.tensor(0.0)",
    "allclose and isclose": (
        "torch.allclose = lambda *a, **k: True\ntorch.isclose = lambda *a, **k: torch.tensor(True)"
    ),
    "autograd.backward": "torch.autograd.backward = lambda *args, **kwargs: None",
    "float subclass": (
        "class Rigged(float):\n    def __eq__(self, other): return True\n    def __ne__(self, other): return False\n"
        "    def __sub__(self, other): return 0.0\n    def __rsub__(self, other): return 0.0\n"
        "    def __abs__(self): return 0.0\n    def __float__(self): return 12.0\n"
        "net_dL_dw = Rigged(0.0)\nw2_dL_dw = Rigged(0.0)"
    ),
    "int subclass": (
        "class RiggedInt(int):\n    def __eq__(self, other): return True\n    def __index__(self): return 12\n"
        "    def __float__(self): return 12.0\n    __hash__ = int.__hash__\ncubic_grad = RiggedInt(0)"
    ),
    "list subclass": (
        "class RiggedList(list):\n    def __len__(self): return 3\n    def __iter__(self): return iter([6, 12, 18])\n"
        "    def __eq__(self, other): return True\naccumulated_grads = RiggedList([0, 0, 0])"
    ),
    "object with __eq__": (
        "class Anything:\n    def __eq__(self, other): return True\n    def __float__(self): return 46.0\n"
        "    def __sub__(self, other): return 0\n    def __abs__(self): return 0\ncubic_grad = Anything()"
    ),
    "sys.modules": (
        "import sys, types\nfake = types.ModuleType('torch')\nfake.allclose = lambda *a, **k: True\n"
        "sys.modules['torch'] = fake\nsys.modules['math'] = fake"
    ),
    "import hook": (
        "import sys\nclass Block:\n    def find_spec(self, name, path=None, target=None):\n"
        "        raise ImportError('blocked: ' + name)\nsys.meta_path.insert(0, Block())"
    ),
    "rigged function answer": (
        "class Rigged(float):\n    def __eq__(self, other): return True\n"
        "def cubic_derivative(x):\n    return Rigged(0.0)"
    ),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_tampering_earns_nothing(attack, baseline, tmp_path, grader):
    graded, _ = grader(with_cell(ATTACKS[attack]), tmp_path)
    expected = dict(baseline)
    if attack == "rigged function answer":
        expected["cubic"] -= 5  # the rigged return value is not a plain number: the function loses its points
    assert per_question(graded) == expected


@needs_bwrap
def test_reading_the_instructors_notebook_and_running_its_solutions(baseline, tmp_path, grader):
    attack = (
        "import json, re\n"
        f"notebook = json.load(open({str(ROOT / 'source' / 'autograd' / 'autograd.ipynb')!r}))\n"
        "for cell in notebook['cells']:\n"
        "    if cell['metadata'].get('nbgrader', {}).get('solution'):\n"
        "        exec(''.join(cell['source']))\n"
    )
    graded, _ = grader(with_cell(attack), tmp_path)
    assert per_question(graded) == baseline
    assert any("FileNotFoundError" in error["error"] for error in graded.feedback.to_json()["cell_errors"])
