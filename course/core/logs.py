"""The log of the long-running parts (the sandbox's pools and retries, the service's worker, a class's grading):
loggers named after their module (`course.sandbox.pool`, `course.platforms.service.worker`, ...), one handler on
`course`
that writes a line per record, with its UTC time and level, to stderr, at the level the command line's
`--log-level` sets. A command's own output (grade's summary, check's report) is printed, not logged."""

from __future__ import annotations

import logging
import sys
import time
from typing import TextIO

LEVELS = ("debug", "info", "warning", "error")
DEFAULT_LEVEL = "info"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DATE_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class _CurrentStderr(logging.StreamHandler[TextIO]):
    """Writes to sys.stderr as it is when a record comes (a test's captured stderr), not as it was when set up."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


def configure(level: str = DEFAULT_LEVEL) -> None:
    """Send the `course` loggers' records at `level` and above to stderr (once, however often it is called)."""
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    logger = logging.getLogger("course")
    logger.setLevel(level.upper())
    if not any(isinstance(handler, _CurrentStderr) for handler in logger.handlers):
        handler = _CurrentStderr()
        formatter = logging.Formatter(FORMAT, DATE_FORMAT)
        formatter.converter = time.gmtime
        handler.setFormatter(formatter)
        logger.addHandler(handler)
