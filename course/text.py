"""Text that a student controls, made safe: once where it enters, then once for each medium it lands in.

Where it enters (the sandbox's messages, a submitted file's name): `safe_text` makes it valid Unicode (a
lone surrogate cannot be written to a UTF-8 file, so it would stop whoever writes it), shows control and
terminal-escape characters as visible escapes instead of letting them act, and bounds its length.
Where it lands: `markdown_text` for Gradescope's Markdown, `csv_cell` for spreadsheets; HTML uses
`html.escape`, and the terminal gets text that already went through `safe_text`.
"""

from __future__ import annotations

import re

MAX_ERROR_TEXT = 500
MAX_SHORT_TEXT = 200

# C0 and C1 controls, DEL, and the Unicode format characters that reorder or hide text (bidi overrides,
# isolates, zero-width marks): all shown as \\x.. / \\u.... Newline and tab stay.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe_text(value: object, limit: int = MAX_SHORT_TEXT, *, one_line: bool = False) -> str:
    """Valid, visible, bounded text from anything a student controls (non-text becomes "")."""
    if type(value) is not str:
        return ""
    text = value[: limit * 2]  # bound the work before looking at every character
    # Lone surrogates (or other unencodable code points) become U+FFFD instead of an error at write time.
    text = text.encode("utf-8", "replace").decode("utf-8")
    text = _CONTROL.sub(_visible, text)
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
