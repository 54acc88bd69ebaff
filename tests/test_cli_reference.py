"""docs/cli.md is generated from the parser (course/cli_reference.py) and must not drift from it."""

from __future__ import annotations

from course.cli import COMMAND_HELP
from course.cli_reference import REGENERATE, main, render
from tests.support.helpers import ROOT

CLI_MD = ROOT / "docs" / "cli.md"


def test_docs_cli_md_is_what_the_parser_says():
    assert CLI_MD.read_text(encoding="utf-8") == render(), (
        f"docs/cli.md differs from course/cli.py's parser: regenerate it with `{REGENERATE}` and commit it")


def test_every_command_and_option_is_in_the_reference():
    text = render()
    for command, help_ in COMMAND_HELP.items():
        assert f"## `autograd-course {command}`" in text
        assert help_.replace("<", "&lt;").replace(">", "&gt;") in text, command
    for option in ("--course", "--roster", "--no-gradebook", "--forwarded-allow-ips", "--students", "--token"):
        assert f"`{option}" in text or f"| {option}" in text, option


def test_the_generator_writes_the_file(tmp_path):
    assert main([str(tmp_path / "cli.md")]) == 0
    assert (tmp_path / "cli.md").read_text(encoding="utf-8") == render()
