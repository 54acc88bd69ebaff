"""autograd-course: derive gradients by hand, then let a trusted grader check them against torch.

Importing the package (or `course.notebook`, as a student's Jupyter kernel does) changes nothing outside it: the
start-up speed-ups that stand in for other packages' imports (deferred_imports.py) are switched on by a command's
own process, first thing in cli.main, and never here."""

from __future__ import annotations

__version__ = "0.1.0"
