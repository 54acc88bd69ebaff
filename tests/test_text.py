"""The one place where student-controlled text is made safe, and each medium's escaping rule."""

from __future__ import annotations

import pytest

from course.core.answers import decode_answer
from course.core.text import csv_cell, markdown_text, safe_text, whole_number
from course.sandbox.protocol import EventReader


def test_safe_text_is_valid_visible_and_bounded():
    text = safe_text("a\ud800b\x1b[2J\x07\u202ec\nd", 100)
    text.encode("utf-8")  # a lone surrogate no longer stops whoever writes it
    assert text == "a?b\\x1b[2J\\x07\\u202ec\nd"
    assert safe_text("x" * 500, 10) == "x" * 9 + "…"
    assert safe_text("one\ntwo\tthree", one_line=True) == "one two three"
    assert safe_text(12) == ""


def test_markdown_text_leaves_no_syntax_or_html():
    rendered = markdown_text("# 57/57 ![x](y) <img src=x> `code` **bold** | cell\nnext")
    assert rendered == ("\\# 57/57 \\!\\[x\\]\\(y\\) &lt;img src=x&gt; \\`code\\` \\*\\*bold\\*\\* \\| cell next")


@pytest.mark.parametrize("cell", ["=1+1", "+A2+B3", "-2+3", "@SUM(A1)", "\tx", "\rx"])
def test_csv_cells_that_would_start_a_formula_are_text(cell):
    assert csv_cell(cell) == "'" + cell


def test_csv_cells_that_are_plain_stay_as_they_are():
    assert csv_cell("josé") == "josé"


def test_decoded_answers_carry_only_safe_text():
    answer = decode_answer({"kind": "wrong_form", "type": "\ud800\x1b]0;x\x07" + "y" * 500}, None)
    assert answer.status == "wrong_form"
    assert "\x1b" not in answer.detail
    assert len(answer.detail) <= 100
    answer.detail.encode("utf-8")


@pytest.mark.parametrize(
    ("frame", "broken"),
    [
        (b'{"event": "ready"}\n', ""),
        (b"not json\n", "not a message"),
        (b"[1, 2]\n", "not a message"),
        (b"[" * 50_000 + b"\n", "not a message"),  # deeper than the JSON parser's recursion
        (b"x" * 2_000, "longer than"),  # no newline yet, and already over a line's length
        (b"{}\n" * 200_000, "more than"),  # over the budget of all messages together
    ],
)
def test_the_event_reader_stops_trusting_a_hostile_stream(frame, broken):
    reader = EventReader(max_line=1_000, max_total=500_000)
    events = reader.feed(frame)
    if not broken:
        assert events == [{"event": "ready"}]
        assert reader.broken == ""
        return
    assert broken in reader.broken
    assert reader.feed(b'{"event": "ready"}\n') == []  # once broken, never trusted again


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("0001", 1),
        ("42", 42),
        ("9" * 12, 10**12 - 1),
        ("²", None),
        ("1²", None),
        ("١", None),
        ("٣", None),
        ("", None),
        ("-1", None),
        ("+1", None),
        (" 1", None),
        ("1_0", None),
        ("9" * 13, None),
    ],
)
def test_whole_number_takes_ascii_digits_only(text, number):
    """`str.isdigit` says yes to "²" (which `int` refuses) and "١" (which `int` reads as 1)."""
    assert whole_number(text) == number
