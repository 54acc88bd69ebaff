"""docs/cli.md, generated from the command line's own parser: every command, subcommand and option with its help.

Regenerate after changing course/cli.py:  .venv/bin/python docs/generators/cli_reference.py docs/cli.md
(tests/test_cli_reference.py fails while docs/cli.md differs from what this writes.) A script of the repository, not
a module of the package: the documentation's generators are no part of what a course installs or imports.

The page is built from the parser's actions, not from argparse's formatted --help, so it is the same on every
supported Python (argparse's layout and line wrapping differ between versions and terminal widths).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's package, whatever the venv installed

from course.cli import _parser

REGENERATE = ".venv/bin/python docs/generators/cli_reference.py docs/cli.md"
PROG = "autograd-course"


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser, str]]:
    """A parser's subcommands in the order they were added: (name, parser, the one-line help the parent lists)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return [(name, sub, helps.get(name, "")) for name, sub in action.choices.items()]
    return []


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The options and positionals a user types (no --help, no subcommand slot)."""
    return [
        a
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction) and a.help != argparse.SUPPRESS
    ]


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices is not None:
        return "{" + ",".join(str(choice) for choice in action.choices) + "}"
    return action.dest if not action.option_strings else action.dest.upper()


def _synopsis_part(action: argparse.Action) -> str:
    """One argument as a usage line writes it: `--out OUT`, `[PATH ...]`, `--gradebook | --no-gradebook`."""
    if not action.option_strings:
        name = _metavar(action)
        return {"*": f"[{name} ...]", "?": f"[{name}]", "+": f"{name} [{name} ...]"}.get(str(action.nargs), name)
    flags = " | ".join(action.option_strings)
    text = flags if action.nargs == 0 else f"{flags} {_metavar(action)}"
    return text if action.required else f"[{text}]"


def _name_cell(action: argparse.Action) -> str:
    """An argument as the first cell of a table row (a bar, even in code, would start a new column)."""
    return _synopsis_part(action).removeprefix("[").removesuffix("]").replace("|", "\\|")


def _cell(text: str) -> str:
    """Help text as a Markdown table cell: angle brackets would be read as HTML tags, a bar as a column."""
    return " ".join(text.split()).replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def _section(words: list[str], parser: argparse.ArgumentParser, summary: str) -> list[str]:
    subcommands = _subcommands(parser)
    synopsis = " ".join([PROG, "[--course COURSE]", *words, *(_synopsis_part(a) for a in _arguments(parser))])
    if subcommands:
        synopsis += " ACTION ..." if _required_subcommand(parser) else " [ACTION ...]"
    lines = [f"## `{PROG} {' '.join(words)}`", "", _cell(parser.description or summary), "", "```", synopsis, "```", ""]
    arguments = _arguments(parser)
    if arguments:
        lines += ["| argument | what it does |", "|---|---|"]
        lines += [f"| `{_name_cell(a)}` | {_cell(a.help or '')} |" for a in arguments]
        lines.append("")
    if subcommands:
        lines += ["| subcommand | what it does |", "|---|---|"]
        lines += [f"| [`{name}`](#{_anchor([*words, name])}) | {_cell(help_)} |" for name, _, help_ in subcommands]
        lines.append("")
    for name, sub, help_ in subcommands:
        lines += _section([*words, name], sub, help_)
    return lines


def _required_subcommand(parser: argparse.ArgumentParser) -> bool:
    return any(isinstance(a, argparse._SubParsersAction) and a.required for a in parser._actions)


def _anchor(words: list[str]) -> str:
    """GitHub's anchor for the heading `autograd-course <words>`."""
    return "-".join([PROG, *words])


def render() -> str:
    """The whole of docs/cli.md."""
    parser = _parser()
    lines = [
        f"# `{PROG}`: the command-line reference",
        "",
        f"<!-- Generated from course/cli.py by docs/generators/cli_reference.py; do not edit. "
        f"Regenerate: {REGENERATE} -->",
        "",
        "Run every command from the course's virtual environment (`.venv/bin/autograd-course ...`), in the",
        "course root or with `--course`. `autograd-course COMMAND --help` prints the same help.",
        "",
        "```",
        parser.description or "",
        "```",
        "",
        "| option | what it does |",
        "|---|---|",
    ]
    lines += [f"| `{_name_cell(a)}` | {_cell(a.help or '')} |" for a in _arguments(parser)]
    lines += ["", "| command | what it does |", "|---|---|"]
    lines += [f"| [`{name}`](#{_anchor([name])}) | {_cell(help_)} |" for name, _, help_ in _subcommands(parser)]
    lines += ["", "```", parser.epilog or "", "```", ""]
    for name, sub, help_ in _subcommands(parser):
        lines += _section([name], sub, help_)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    """The page into the file named by the first argument, or to standard output."""
    if argv:
        Path(argv[0]).write_text(render(), encoding="utf-8")
    else:
        sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
