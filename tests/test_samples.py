"""The bundled sample class is what tests/samples/make_samples.py generates from the current release."""

from __future__ import annotations

from tests.samples.make_samples import BACKPROP, SUBMITTED, backprop_samples, render, samples
from tests.support.helpers import ROOT


def test_samples_are_up_to_date():
    for student, content in samples().items():
        path = SUBMITTED / student / "autograd" / "autograd.ipynb"
        assert path.read_text(encoding="utf-8") == render(content), (
            f"{path.relative_to(ROOT)} is stale: run python tests/samples/make_samples.py"
        )


def test_backprop_samples_are_up_to_date():
    for name, content in backprop_samples().items():
        path = BACKPROP / f"{name}.ipynb"
        assert path.read_text(encoding="utf-8") == render(content), (
            f"{path.relative_to(ROOT)} is stale: run python tests/samples/make_samples.py"
        )
