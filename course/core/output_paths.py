"""Where a command may write: never into what students receive, nor into what nbgrader keeps.

Every option that names where a command writes (`grade --out`, `merge --out`, `export --out`, `preview --out`,
`autograder build --out`, `serve tokens --out`, `serve --database` as a SQLite file) goes through
`writable_output` before anything is written. The path is compared as the system will open it, every symbolic
link followed and every `..` taken (`Path.resolve`), with the protected folders resolved the same way: a link
named `out` that points into release/ is release/. A preview written through one once put the answer key into
release/, and `nbgrader release_assignment` then handed it to every student.
"""

from __future__ import annotations

import ast
from pathlib import Path

from course.core.errors import CourseError

# The course root's folders (and the gradebook's file) no command's output may land in, with what each holds.
PROTECTED = (
    ("source", "the instructor's notebooks and answer key"),
    ("release", "what `nbgrader release_assignment` hands to every student"),
    ("personalised", "each student's released notebook"),
    ("submitted", "nbgrader's collected submissions"),
    ("autograded", "nbgrader's autograded notebooks"),
    ("feedback", "the feedback `nbgrader release_feedback` hands to students"),
    ("gradebook-history", "the gradebook's recorded history"),
    ("gradebook.db", "nbgrader's gradebook"),
)
DEFAULT_EXCHANGE = "/srv/nbgrader/exchange"  # nbgrader's own default for Exchange.root
NBGRADER_CONFIG = "nbgrader_config.py"


class OutputPathError(CourseError):
    """An output option names a path that resolves into a folder students receive or nbgrader keeps."""


def exchange_root(root: Path) -> Path:
    """nbgrader's exchange as the course root's nbgrader_config.py sets it (`c.Exchange.root = "..."`, read as
    text, never run), else nbgrader's default."""
    try:
        tree = ast.parse((root / NBGRADER_CONFIG).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return Path(DEFAULT_EXCHANGE)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and ast.unparse(node.targets[0]) == "c.Exchange.root"
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and node.value.value
        ):
            return Path(node.value.value)
    return Path(DEFAULT_EXCHANGE)


def protected_places(root: Path) -> list[tuple[Path, str, str]]:
    """(resolved path, its name as said, what it holds) of every place no output may land in."""
    places = [((root / name).resolve(), f"{name}/" if "." not in name else name, why) for name, why in PROTECTED]
    exchange = exchange_root(root)
    places.append((exchange.resolve(), f"nbgrader's exchange ({exchange})", "what students fetch"))
    return places


def resolved(path: Path) -> Path:
    """`path` as the system opens it: every link followed, and each `..` taken where it stands, after the links
    before it (`link/..` is the folder above the link's target, not the folder holding the link)."""
    return path.absolute().resolve()


def writable_output(option: str, path: Path, root: Path) -> Path:
    """`path`, resolved, when a command given it as `option` may write there; else OutputPathError, one sentence
    naming the option, the path and the protected place it resolves into."""
    target = resolved(path)
    for place, name, why in protected_places(root):
        if target == place or target.is_relative_to(place):
            via = "" if target == path.absolute() else f" (it resolves to {target})"
            raise OutputPathError(
                f"{option} {path}: lies in {name}{via}, {why}; name a path outside source/, release/, "
                "personalised/, submitted/, autograded/, feedback/, gradebook-history/, the gradebook and "
                "nbgrader's exchange"
            )
    return target
