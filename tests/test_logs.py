"""The long-running parts log through `logging` (course/core/logs.py): lines with their UTC time, level and logger on
stderr, at the level the command line's --log-level sets."""

from __future__ import annotations

import logging
import re

import pytest

from course.cli import _parser
from course.core.logs import DEFAULT_LEVEL, configure

LINE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (?P<level>[A-Z]+) (?P<logger>[\w.]+): (?P<message>.*)")


@pytest.fixture
def course_logger():
    logger = logging.getLogger("course")
    level = logger.level
    yield logger
    logger.setLevel(level)


def test_a_log_line_has_its_time_level_and_logger_and_the_level_is_the_least_shown(course_logger, capsys):
    configure("warning")
    configure("warning")  # set up once, however often the command line asks
    logging.getLogger("course.sandbox.pool").info("a standby worker is ready")
    logging.getLogger("course.sandbox.pool").warning("uid 61003 still owns processes after a run; it is retired")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    line = LINE.fullmatch(lines[0])
    assert line is not None, lines[0]
    assert line.group("level", "logger", "message") == (
        "WARNING",
        "course.sandbox.pool",
        "uid 61003 still owns processes after a run; it is retired",
    )
    configure("debug")
    logging.getLogger("course.platforms.service.worker").debug("looked at the queue")
    assert LINE.fullmatch(capsys.readouterr().err.strip()).group("level") == "DEBUG"


def test_the_command_line_sets_the_level(capsys):
    assert _parser().parse_args(["check", "x.ipynb"]).log_level == DEFAULT_LEVEL == "info"
    assert _parser().parse_args(["--log-level", "error", "check", "x.ipynb"]).log_level == "error"
    with pytest.raises(SystemExit):
        _parser().parse_args(["--log-level", "loud", "check", "x.ipynb"])
    assert "invalid choice: 'loud'" in capsys.readouterr().err
