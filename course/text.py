"""Text that a student controls, made safe: once where it enters, then once for each medium it lands in.

Where it enters (the sandbox's messages, a submitted file's name): `safe_text` makes it valid Unicode (a
lone surrogate cannot be written to a UTF-8 file, so it would stop whoever writes it), shows control and
terminal-escape characters as visible escapes instead of letting them act, and bounds its length.
Where it lands: `markdown_text` for Gradescope's Markdown, `csv_cell` for spreadsheets; HTML uses
`html.escape`, and the terminal gets text that already went through `safe_text`.
"""

from __future__ import annotations

import re
import unicodedata

MAX_ERROR_TEXT = 500
MAX_SHORT_TEXT = 200

# Characters that act instead of showing: controls (Cc), format characters that reorder or hide text (Cf:
# bidi overrides and marks, zero-width and tag characters), line and paragraph separators (Zl, Zp), private
# use (Co) and unassigned code points (Cn). Each is shown as an escape; newline and tab stay.
_HIDDEN_CATEGORIES = {"Cc", "Cf", "Zl", "Zp", "Co", "Cn"}
_SUSPECT = re.compile("[^\x20-\x7e\n\t]")  # every character but printable ASCII: its category decides


def _visible(match: re.Match[str]) -> str:
    character = match.group()
    if unicodedata.category(character) not in _HIDDEN_CATEGORIES:
        return character
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else (f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")


def safe_text(value: object, limit: int = MAX_SHORT_TEXT, *, one_line: bool = False) -> str:
    """Valid, visible, bounded text from anything a student controls (non-text becomes "")."""
    if type(value) is not str:
        return ""
    text = value[: limit * 2]  # bound the work before looking at every character
    # Lone surrogates (or other unencodable code points) become U+FFFD instead of an error at write time.
    text = text.encode("utf-8", "replace").decode("utf-8")
    text = _SUSPECT.sub(_visible, text)
    if one_line:
        text = text.replace("\n", " ").replace("\t", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


# Everything that can start or end Markdown syntax (emphasis, code, links, images, headings, lists, tables,
# block quotes) or raw HTML.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def markdown_text(value: object) -> str:
    """Literal text inside Gradescope's Markdown: no syntax or HTML of the student's survives, one line."""
    text = str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _MARKDOWN_SPECIAL.sub(r"\\\1", text)
    return text.replace("\r", " ").replace("\n", " ")


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(text: str) -> str:
    """A text cell a spreadsheet shows as text: one that would start a formula gets a leading apostrophe
    (OWASP's advice for CSV injection). Only for text columns; numbers are written as numbers."""
    return "'" + text if text.startswith(_FORMULA_START) else text
