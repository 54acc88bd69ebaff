"""Regenerate tests/samples/submitted/: the bundled sample class the README's first command grades.

Run: python tests/samples/make_samples.py   (tests/test_samples.py fails when the files are out of date)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.helpers import BACKPROP_RELEASE, CORRECT_CODE, RELEASE_NOTEBOOK, add_cell, fill, load

SUBMITTED = Path(__file__).resolve().parent / "submitted"
BACKPROP = Path(__file__).resolve().parent / "backprop"  # not in the sample class: the README grades that one

# backprop answered by hand, as a student types it: arithmetic for the values that are not round.
SIGMOID = "1 / (1 + math.exp(-1))"
BACKPROP_RIGHT = {
    "gate_q": "-2 + 5",
    "gate_f": "3 * -4",
    "gate_df_dq": "-4",
    "gate_df_dz": "3",
    "gate_df_dx": "-4 * 1",
    "gate_df_dy": "-4 * 1",
    "neuron_dot": "2 * -1 + -3 * -2 + -3",
    "neuron_f": SIGMOID,
    "neuron_df_ddot": f"{SIGMOID} * (1 - {SIGMOID})",
    "neuron_df_dx": "[2 * neuron_df_ddot, -3 * neuron_df_ddot]",
    "neuron_df_dw": "[-1 * neuron_df_ddot, -2 * neuron_df_ddot, neuron_df_ddot]",
    "mg_c": "-1",
    "mg_d": "6",
    "mg_g": "49 / 2 + 10 / 49",
    # dg/de = (1/2 - 10/f²)·2e with e = -7; c = 3a + 4b + 3, d = 12(ab + b³) + relu(a + b)·4 + relu(b - a)
    "mg_dg_da": "(1 / 2 - 10 / 49 ** 2) * 2 * -7 * (3 - 23)",
    "mg_dg_db": "(1 / 2 - 10 / 49 ** 2) * 2 * -7 * (4 - 97)",
}
# The classic slips, each costing its answer's points: the adder's local slope without the gradient arriving
# from above (2), the multiplier's own input for its local slope (1), the bias's input taken as 0 (3), and one
# of b's paths to d forgotten (its fork through a·b, 3): 27 - 9.
BACKPROP_WRONG = {
    **BACKPROP_RIGHT,
    "gate_df_dx": "1",
    "gate_df_dz": "-4",
    "neuron_df_dw": "[-1 * neuron_df_ddot, -2 * neuron_df_ddot, 0]",
    "mg_dg_db": "(1 / 2 - 10 / 49 ** 2) * 2 * -7 * (4 - 145)",
}
BACKPROP_SCORES = {"right": 27, "wrong": 18}

MISCONCEPTIONS = {
    "accumulated_grads": "[6, 6, 6]",
    "net_dL_dw": "6",
    "w2_dL_da": "1.0",
    "w2_dL_dw": "2.0",
    "cubic_grad": "48",
    "retain_y_grad": "None",
    "closed_dL_dw": "2",
    "slope_at_minus_2": "4",
}

TORCH_IN_ANSWER = """
# (a student who let torch do the work instead of deriving by hand)
_x = torch.tensor(2.0)
_w = torch.tensor(3.0, requires_grad=True)
_b = torch.tensor(-1.0, requires_grad=True)
_loss = (torch.relu(_w * _x + _b) - 2.0) ** 2
_loss.backward()
net_dL_dw = _w.grad.item()
net_dL_db = _b.grad.item()
"""

TAMPERING = """
# Tries to rig the check from inside the notebook: patch torch and builtins, fake a tensor-like answer.
import builtins
torch.allclose = lambda *a, **k: True
torch.Tensor.item = lambda self: 0.0
builtins.abs = lambda value: 0
builtins.isinstance = lambda obj, cls: True

class AlwaysEqual(float):
    def __eq__(self, other):
        return True
    def __sub__(self, other):
        return 0.0

net_dL_dw = AlwaysEqual(0.0)
"""


def samples() -> dict[str, str | dict]:
    release = load(RELEASE_NOTEBOOK)
    honest_wrong = {**CORRECT_CODE, **MISCONCEPTIONS}
    wrong_everywhere = {name: "0" for name in CORRECT_CODE if not CORRECT_CODE[name].startswith("def ")}
    return {
        "alice": fill(release, CORRECT_CODE),
        "bob": fill(release, honest_wrong),
        "carol": release,
        "dave": add_cell(fill(release, CORRECT_CODE), TORCH_IN_ANSWER, at=_after_answer(release, "answer_tiny_net")),
        "erin": add_cell(fill(release, wrong_everywhere), TAMPERING),
        "frank": "this is not a notebook: the student uploaded their notes instead\n",
    }


def backprop_samples() -> dict[str, dict]:
    release = load(BACKPROP_RELEASE)
    return {"right": fill(release, BACKPROP_RIGHT), "wrong": fill(release, BACKPROP_WRONG)}


def _after_answer(notebook: dict, grade_id: str) -> int:
    for index, cell in enumerate(notebook["cells"]):
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            return index + 1
    raise KeyError(grade_id)


def render(content: str | dict) -> str:
    import json

    return content if isinstance(content, str) else json.dumps(content, indent=1, ensure_ascii=False) + "\n"


def main() -> None:
    for student, content in samples().items():
        path = SUBMITTED / student / "autograd" / "autograd.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(content), encoding="utf-8")
        print(path)
    for name, notebook in backprop_samples().items():
        path = BACKPROP / f"{name}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(notebook), encoding="utf-8")
        print(path)


if __name__ == "__main__":
    main()
