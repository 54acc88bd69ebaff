"""What the authoring kit's tests share: a one-exercise definition (SLOPE) and a place to write it."""

from __future__ import annotations

from pathlib import Path

HEADER = "import torch\n\nfrom course.authoring.kit import Ask, Exercise\n\n\n"

SLOPE = (
    HEADER
    + """\
def line(w, x, b):
    w = torch.tensor(float(w), dtype=torch.float64, requires_grad=True)
    y = w * x + b
    y.backward()
    return {"line_y": y, "line_dy_dw": w.grad}


EXERCISES = [Exercise(
    id="line", title="12. A line", question="y = w·x + b with w = {{w}}, x = {{x}}, b = {{b}}.",
    build=line, numbers={"w": 3, "x": 2, "b": -1},
    answers=[Ask("line_y", hint="w·x + b.", idea="The forward pass."),
             Ask("line_dy_dw", points=2, hint="∂y/∂w is x.", idea="The slope of a product in one factor.")],
)]
"""
)


def exercises_module(tmp_path: Path, text: str) -> Path:
    """`text` as the exercises module of an assignment under tmp_path (source/autograd/exercises.py)."""
    path = tmp_path / "source" / "autograd" / "exercises.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
