"""docs/cli.md is generated from the parser (docs/generators/cli_reference.py, a script of the repository) and
must not drift
from it."""

from __future__ import annotations

import runpy
import subprocess
import sys

from course.cli import COMMAND_HELP
from tests.support.helpers import ROOT

# the script's names, as it defines them
GENERATOR = runpy.run_path(str(ROOT / "docs" / "generators" / "cli_reference.py"))
REGENERATE, main, render = GENERATOR["REGENERATE"], GENERATOR["main"], GENERATOR["render"]

CLI_MD = ROOT / "docs" / "cli.md"


def test_docs_cli_md_is_what_the_parser_says():
    assert CLI_MD.read_text(encoding="utf-8") == render(), (
        f"docs/cli.md differs from course/cli.py's parser: regenerate it with `{REGENERATE}` and commit it"
    )


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


def test_both_generators_run_as_scripts_of_the_repository_as_contributing_names_them():
    """`.venv/bin/python docs/generators/<generator>.py` (no argument: the page to standard output) from the
    repository's root:
        scripts beside the package, not modules of it (issue 41)."""
    assert not (ROOT / "course" / "cli_reference.py").exists()
    assert not (ROOT / "course" / "settings_reference.py").exists()
    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    for script, page in (("cli_reference.py", "cli.md"), ("settings_reference.py", "settings.md")):
        assert f"`.venv/bin/python docs/generators/{script} docs/{page}`" in contributing, script
        done = subprocess.run(
            [sys.executable, f"docs/generators/{script}"], capture_output=True, text=True, timeout=120, cwd=ROOT
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == (ROOT / "docs" / page).read_text(encoding="utf-8"), script
