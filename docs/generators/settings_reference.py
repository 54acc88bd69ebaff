"""docs/settings.md, generated from the settings' schema (course/core/config.py's dataclasses, course/core/schema.py):
every
key of every section of source/course.yaml with its type, default and help.

Regenerate after changing a setting:  .venv/bin/python docs/generators/settings_reference.py docs/settings.md
(tests/test_settings_reference.py fails while docs/settings.md differs from what this writes.) A script of the
repository, not a module of the package, as docs/generators/cli_reference.py.
"""

from __future__ import annotations

import sys
from dataclasses import Field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's package, whatever the venv installed

from course.core.config import CourseConfig
from course.core.schema import declared, shown_default

REGENERATE = ".venv/bin/python docs/generators/settings_reference.py docs/settings.md"

INTRO = """\
Every setting of the course, with its default. All are optional but `course_id` and `assignments`. A missing or
mistyped key, or a value of the wrong kind, stops every command (`grade`, `check` in the course root, `serve`,
...) with the file, the key and what was expected, before any work starts.

```yaml
course_id: autograd-course
assignments:
  - name: autograd
    notebook: autograd.ipynb
    due: 2026-11-20 23:59:00 UTC
limits:
  cell_seconds: 10
late_policy: {mode: penalty, percent: 10, per: day}
service:
  attempts: 5
```

Per-student numbers (`variants`) are explained in [authoring.md](authoring.md#per-student-variants), the
late policy in [grading.md](grading.md), the service's policies in [service.md](service.md#policies)."""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def _rows(prefix: str, schema: type) -> tuple[list[str], list[tuple[str, Field[Any]]]]:
    """A section's table rows, and the sections inside it (rendered after it)."""
    rows, inner = [], []
    for setting in declared(schema):
        key = f"`{prefix}{setting.name}`"
        if "section" in setting.metadata:
            many = setting.metadata["many"]
            kind = "a list of mappings, at least one" if many else "a mapping"
            target = f"{prefix}{setting.name}" + ("[]" if many else "")
            rows.append(
                f"| {key} | {kind}: [below](#{_anchor(target)}) | "
                f"{'required' if many else 'see below'} | {_cell(setting.metadata['help'])} |"
            )
            inner.append((target, setting))
        else:
            kind = setting.metadata["kind"].words
            default = shown_default(setting)
            rows.append(
                f"| {key} | {_cell(kind)} | {f'`{_cell(default)}`' if default else 'required'} | "
                f"{_cell(setting.metadata['help'])} |"
            )
    return rows, inner


def _anchor(name: str) -> str:
    """GitHub's anchor for the heading `name` (in backticks): lower case, punctuation but - and _ dropped."""
    return "".join(c for c in name.lower() if c.isalnum() or c in "-_")


def _section(title: str, prefix: str, schema: type, help_: str) -> list[str]:
    rows, inner = _rows(prefix, schema)
    lines = [
        f"## `{title}`",
        "",
        _cell(help_),
        "",
        "| key | value | default | meaning |",
        "|---|---|---|---|",
        *rows,
        "",
    ]
    for target, setting in inner:
        lines += _section(target, f"{target}.", setting.metadata["section"], setting.metadata["help"])
    return lines


def render() -> str:
    """The whole of docs/settings.md."""
    lines = [
        "# Course settings: `source/course.yaml`",
        "",
        f"<!-- Generated from course/core/config.py by docs/generators/settings_reference.py; do not edit. "
        f"Regenerate: {REGENERATE} -->",
        "",
        INTRO,
        "",
    ]
    rows, inner = _rows("", CourseConfig)
    lines += ["## The top level", "", "| key | value | default | meaning |", "|---|---|---|---|", *rows, ""]
    for target, setting in inner:
        lines += _section(target, f"{target}.", setting.metadata["section"], setting.metadata["help"])
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
