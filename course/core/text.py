"""Text that a student controls, made safe: once where it enters, then once for each medium it lands in.

Where it enters (the sandbox's messages, a submitted file's name): `safe_text` makes it valid Unicode (a
lone surrogate cannot be written to a UTF-8 file, so it would stop whoever writes it), shows control and
terminal-escape characters as visible escapes instead of letting them act, and bounds its length.
Where it lands: `markdown_text` for Gradescope's Markdown, `csv_text` (every CSV we write, each cell through
`csv_cell`) for spreadsheets; HTML uses `html.escape`, and the terminal gets text that already went through
`safe_text`.
"""

from __future__ import annotations

import csv
import io
import re
import unicodedata
from collections.abc import Iterable, Sequence

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


# What makes a spreadsheet read a cell as a formula (OWASP, "CSV Injection"): = + - @ and a leading tab or
# carriage return. And where a spreadsheet may start a cell: besides our own commas, a reader that splits on
# semicolons (the list separator of many European locales) or tabs, or on lines, sees a cell start after each.
_FORMULA_START = frozenset("=+-@\t\r")
_SEPARATORS = frozenset(",;\t\r\n")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def csv_cell(text: str) -> str:
    """A cell every spreadsheet shows as text, however it splits it: wherever a piece of it could start a cell
    (its start, and after each , ; tab or line break) and begins, after spaces and double quotes, with a formula
    character, an apostrophe goes before that character (OWASP's advice: a spreadsheet shows a cell that starts
    with an apostrophe as text). A piece that is a plain number (`-3`, `57`, `1e-3`) is left as it is, so numbers
    stay numbers. Idempotent: a grades CSV read back and written again is unchanged."""
    if _NUMBER.fullmatch(text):
        return text
    out: list[str] = []
    at_start = True  # a spreadsheet may begin a cell here
    for index, character in enumerate(text):
        if at_start and character not in _SEPARATORS and (character == '"' or character.isspace()):
            out.append(character)  # a reader may drop a cell's spaces and quotes: the piece starts after them
            continue
        if at_start and character in _FORMULA_START and not _number_at(text, index):
            out.append("'")
        at_start = character in _SEPARATORS
        out.append(character)
    return "".join(out)


def _number_at(text: str, index: int) -> bool:
    """Whether the piece starting at text[index] (up to the next separator) is a plain number."""
    end = index
    while end < len(text) and text[end] not in _SEPARATORS:
        end += 1
    return bool(_NUMBER.fullmatch(text, index, end))


def csv_text(rows: Iterable[Sequence[str]]) -> str:
    """Every CSV we write (grades, course totals, LMS imports, tokens): each field quoted (so our own separator
    and quotes inside a field never split it) and each cell through `csv_cell`."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerows([csv_cell(cell) for cell in row] for row in rows)
    return buffer.getvalue()


def whole_number(text: str, most_digits: int = 12) -> int | None:
    """The whole number `text` writes in ASCII digits only (at most `most_digits` of them), else None: for what we
    read back that should be one of our numbers (a form's field, a folder's name). `str.isdigit` is no check that
    `int` takes it: "²" is a digit to it and `int` refuses it (a 500 where it was trusted), and "٣" `int` reads
    as 3; a number of thousands of digits would cost `int` and whatever follows."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= most_digits else None


def plural(count: int, word: str, many: str = "") -> str:
    """A count with its noun as a person would write it: "1 question", "2 questions", "0 students" (`many`:
    the plural when it is not `word` + "s")."""
    return f"{count} {word if count == 1 else many or word + 's'}"
