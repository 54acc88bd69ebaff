"""The authoring kit's one error: its modules (kit.py, draws.py) all raise it."""

from __future__ import annotations

from course.core.errors import SourceNotebookError


class AuthoringError(SourceNotebookError):
    """An exercise definition the kit cannot write: the message names the file, the exercise and what to do."""
