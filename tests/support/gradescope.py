"""What the Gradescope tests share: an /autograder root as Gradescope lays it out, and Markdown as a reader sees it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from tests.support.helpers import ROOT, write


def make_root(tmp_path: Path, files: dict[str, bytes | str | dict], metadata: dict | None = None) -> Path:
    root = tmp_path / "autograder"
    (root / "source").mkdir(parents=True)
    shutil.copytree(ROOT / "source", root / "source" / "source")
    (root / "submission").mkdir()
    for name, content in files.items():
        path = root / "submission" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, dict):
            write(content, path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    if metadata is not None:
        (root / "submission_metadata.json").write_text(json.dumps(metadata))
    return root


def unescape_markdown(text: str) -> str:
    """What a reader sees of Markdown text escaped by course.core.text.markdown_text."""
    return re.sub(r"\\(.)", r"\1", text).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
