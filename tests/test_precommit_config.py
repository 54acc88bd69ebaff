"""`.pre-commit-config.yaml` runs the lints CI runs, with the tools of the repository's .venv: local hooks only
(pre-commit downloads nothing), each entry a tool the venv really has."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import yaml

from tests.support.helpers import ROOT

CONFIG = ROOT / ".pre-commit-config.yaml"


def test_the_hooks_are_local_and_run_ruff_check_format_and_mypy_from_the_venv():
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    assert [repo["repo"] for repo in config["repos"]] == ["local"]  # no hook repository to clone
    hooks = {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}
    assert set(hooks) == {"ruff-check", "ruff-format", "mypy"}
    commands = {name: shlex.split(hook["entry"]) for name, hook in hooks.items()}
    assert commands["ruff-check"][:3] == [".venv/bin/ruff", "check", "--force-exclude"]
    assert commands["ruff-format"][:4] == [".venv/bin/ruff", "format", "--check", "--force-exclude"]
    assert commands["mypy"] == [".venv/bin/mypy"]
    assert hooks["mypy"]["pass_filenames"] is False  # mypy checks what pyproject.toml names, as CI does
    for name, hook in hooks.items():
        assert hook["language"] == "system", name
        tool = Path(sys.prefix) / "bin" / Path(commands[name][0]).name  # the venv the tests run in, as .venv
        assert tool.is_file(), (name, tool)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")  # the same three, as CI runs them
    assert '"$VENV/bin/ruff" check .' in ci
    assert '"$VENV/bin/ruff" format --check .' in ci
    assert '"$VENV/bin/mypy"' in ci
