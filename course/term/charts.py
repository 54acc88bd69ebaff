"""Charts as plain inline SVG (issue 43): pure functions over plain data that return HTML text, for the class
summary and the service's dashboard. No script, no network, no font or library to fetch: a page that holds one
works offline and on a phone.

Every chart is a <figure>: an <svg role=img> with its own <title> and <desc>, a caption that says what it shows
in a sentence, and the numbers as a table (the text alternative a screen reader or a copy-paste reads). Colour
never carries a meaning alone: the two series of a paired chart differ by a pattern and are labelled in text on
every bar. Every label is escaped once, here, and bounded: a long one is cut with "…" and its full text is the
<title> its mark shows on hover. A chart draws at most MAX_BARS bars or MAX_POINTS points; the rest are counted
in its caption and listed in its table (up to MAX_ROWS rows).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from course.core.text import safe_text

MAX_BARS = 25  # bars drawn in one chart; more are counted in the caption and listed in the table
MAX_POINTS = 40  # points drawn in one scatter
MAX_ROWS = 200  # rows of a chart's table (its text alternative); beyond them a sentence says how many more
LABEL_CHARS = 48  # a label drawn in a chart (its full text, up to FULL_CHARS, is the mark's <title>)
FULL_CHARS = 400
WIDTH = 360  # the viewBox's width: the charts scale to the page, up to CHART_CSS's max-width

CHART_CSS = """
figure.chart { margin: 1rem 0; max-width: 34rem; }
figure.chart svg { display: block; width: 100%; height: auto; }
figure.chart svg text { font: 13px system-ui, sans-serif; fill: #202124; }
figure.chart svg text.muted { fill: #5f6368; }
figure.chart rect.track { fill: #f1f3f4; }
figure.chart rect.bar { fill: #1a73e8; }
figure.chart rect.before { stroke: #1a73e8; stroke-width: 1; }
figure.chart line.axis { stroke: #5f6368; stroke-width: 1; }
figure.chart line.grid { stroke: #dadce0; stroke-width: 1; }
figure.chart line.weak { stroke: #b3261e; stroke-width: 1; stroke-dasharray: 4 3; }
figure.chart circle.point { fill: #1a73e8; stroke: #fff; stroke-width: 1; }
figure.chart path.point { fill: #b3261e; }
figure.chart figcaption { color: #5f6368; font-size: .95rem; }
figure.chart details { font-size: .95rem; }
figure.chart table td, figure.chart table th { white-space: normal; overflow-wrap: anywhere; }
"""


@dataclass(frozen=True)
class Bar:
    """One bar: `share` is its length as a part of the whole (0 to 1); `text` the number written beside it."""

    label: str
    share: float
    text: str
    more: tuple[str, ...] = ()  # further cells of its row in the table (not drawn)
    note: str = ""  # a second line under the label (and a column of the table, after the label's)


@dataclass(frozen=True)
class Pair:
    """Two bars of one label, before and after (shares 0 to 1, with the numbers written beside them)."""

    label: str
    before: float
    after: float
    before_text: str
    after_text: str


@dataclass(frozen=True)
class Point:
    """One point of a scatter: `x` a share (0 to 1), `y` from -1 to 1 (drawn at the edge when outside)."""

    label: str
    x: float
    y: float
    reading: str = ""  # what the point means, in words, for the table ("separates well")


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def shown(label: str, limit: int = LABEL_CHARS) -> str:
    """A label as drawn: valid, visible, one line, at most `limit` characters (escape it where it lands)."""
    return safe_text(label if isinstance(label, str) else str(label), limit, one_line=True)


def _clamp(value: float, low: float, high: float) -> float:
    return low if value != value else min(high, max(low, value))  # NaN (value != value) at the low end


def _svg(chart_id: str, height: float, title: str, desc: str, body: str, data: str = "") -> str:
    return (
        f'<svg viewBox="0 0 {WIDTH} {height:.0f}" width={WIDTH} height={height:.0f} role=img '
        f'aria-labelledby="{_e(chart_id)}-title" aria-describedby="{_e(chart_id)}-desc"{data}>'
        f'<title id="{_e(chart_id)}-title">{_e(shown(title, FULL_CHARS))}</title>'
        f'<desc id="{_e(chart_id)}-desc">{_e(shown(desc, FULL_CHARS))}</desc>{body}</svg>'
    )


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """The chart's numbers as a table, in a <details> (open it to read or copy them)."""
    cells = "".join(
        "<tr>" + "".join(f"<td>{_e(shown(cell, FULL_CHARS))}</td>" for cell in row) + "</tr>" for row in rows[:MAX_ROWS]
    )
    more = f"<p>{len(rows) - MAX_ROWS} more rows are not listed.</p>" if len(rows) > MAX_ROWS else ""
    return (
        "<details><summary>The numbers as a table</summary><div class=table-wrap><table><thead><tr>"
        + "".join(f"<th>{_e(name)}</th>" for name in head)
        + f"</tr></thead><tbody>{cells}</tbody></table></div>{more}</details>"
    )


def _figure(chart_id: str, kind: str, svg: str, caption: str, table: str) -> str:
    return (
        f'<figure class="chart {kind}" id="{_e(chart_id)}">{svg}<figcaption>{_e(caption)}</figcaption>{table}</figure>'
    )


def _left_out(count: int, what: str) -> str:
    return f" {count} more {what} are not drawn: the table lists them." if count else ""


def bar_chart(
    chart_id: str,
    title: str,
    bars: Sequence[Bar],
    *,
    caption: str,
    head: Sequence[str] = (),
    most: int = MAX_BARS,
) -> str:
    """Horizontal bars, in the order given (the caller sorts): each label on its own line above its bar (a bar's
    note on a second, muted line), the bar on a light track that stands for the whole, its number beside it. At
    most `most` (never more than MAX_BARS) are drawn; the table lists them all, a note in a column of its own."""
    drawn = list(bars[: max(0, min(most, MAX_BARS))])
    notes = any(bar.note for bar in drawn)
    row, track, top, lead = (51 if notes else 36), 270, 4, (15 if notes else 0)
    height = top * 2 + row * max(1, len(drawn))
    marks = []
    for index, bar in enumerate(drawn):
        y = top + index * row
        length = track * _clamp(bar.share, 0.0, 1.0)
        note = f"<text class=muted x=0 y={y + 27}>{_e(shown(bar.note))}</text>" if bar.note else ""
        whole = f"{shown(bar.label, FULL_CHARS)}{': ' + shown(bar.note, FULL_CHARS) if bar.note else ''}"
        marks.append(
            f"<g class=bar-row><title>{_e(whole)}: {_e(shown(bar.text))}</title>"
            f"<text x=0 y={y + 12}>{_e(shown(bar.label))}</text>{note}"
            f"<rect class=track x=0 y={y + lead + 16} width={track} height=14 rx=2></rect>"
            f"<rect class=bar x=0 y={y + lead + 16} width={max(length, 1.5):.1f} height=14 rx=2></rect>"
            f"<text x={track + 6} y={y + lead + 28}>{_e(shown(bar.text, 24))}</text></g>"
        )
    if not drawn:
        marks.append(f"<text class=muted x=0 y={top + 20}>Nothing to draw yet.</text>")
    desc = f"{len(bars)} bars: " + "; ".join(
        f"{shown(b.label)}{' (' + shown(b.note) + ')' if b.note else ''} {shown(b.text, 24)}" for b in drawn
    )
    svg = _svg(chart_id, height, title, desc, "".join(marks), f" data-bars={len(drawn)}")
    rows = [(bar.label, *((bar.note,) if notes else ()), bar.text, *bar.more) for bar in bars]
    return _figure(
        chart_id,
        "bars",
        svg,
        caption + _left_out(len(bars) - len(drawn), "bars"),
        _table(head or ("", "value"), rows),
    )


def _hatch(chart_id: str) -> str:
    """The before bars' stripes (a pattern per chart: its id is the chart's, unique on the page)."""
    return (
        f'<defs><pattern id="{_e(chart_id)}-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff"></rect>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#1a73e8" stroke-width="2.5"></line></pattern></defs>'
    )


def paired_chart(
    chart_id: str,
    title: str,
    pairs: Sequence[Pair],
    *,
    names: tuple[str, str],
    caption: str,
) -> str:
    """Two bars per label, `names` = (before, after): the before bar hatched, the after one solid, and each bar
    starts with its name in text, so the two are told apart without colour. At most MAX_BARS pairs drawn."""
    drawn = list(pairs[: MAX_BARS // 2 + 1])
    row, name_width, track, top = 56, 62, 210, 4
    height = top * 2 + row * max(1, len(drawn))
    marks = [_hatch(chart_id)]
    for index, pair in enumerate(drawn):
        y = top + index * row
        parts = [f"<g class=pair><title>{_e(shown(pair.label, FULL_CHARS))}</title>"]
        parts.append(f"<text x=0 y={y + 12}>{_e(shown(pair.label))}</text>")
        for offset, name, share, text, kind, fill in (
            (16, names[0], pair.before, pair.before_text, "before", f' fill="url(#{_e(chart_id)}-hatch)"'),
            (34, names[1], pair.after, pair.after_text, "bar", ""),
        ):
            length = track * _clamp(share, 0.0, 1.0)
            parts.append(
                f"<g class={kind}><title>{_e(shown(pair.label, FULL_CHARS))}, {_e(name)}: {_e(shown(text))}</title>"
                f"<text class=muted x=0 y={y + offset + 11}>{_e(shown(name, 9))}</text>"
                f"<rect class=track x={name_width} y={y + offset} width={track} height=14 rx=2></rect>"
                f"<rect class={kind}{fill} x={name_width} y={y + offset} width={max(length, 1.5):.1f} height=14 rx=2>"
                f"</rect><text x={name_width + track + 6} y={y + offset + 11}>{_e(shown(text, 12))}</text></g>"
            )
        parts.append("</g>")
        marks.append("".join(parts))
    if not drawn:
        marks.append(f"<text class=muted x=0 y={top + 20}>Nothing to draw yet.</text>")
    desc = f"{len(pairs)} pairs ({names[0]}, then {names[1]}): " + "; ".join(
        f"{shown(p.label)} {shown(p.before_text, 24)} then {shown(p.after_text, 24)}" for p in drawn
    )
    svg = _svg(chart_id, height, title, desc, "".join(marks), f" data-pairs={len(drawn)}")
    rows = [(pair.label, pair.before_text, pair.after_text) for pair in pairs]
    return _figure(
        chart_id,
        "pairs",
        svg,
        caption + _left_out(len(pairs) - len(drawn), "pairs"),
        _table(("", *names), rows),
    )


def _scatter_grid(
    px: Callable[[float], float],
    py: Callable[[float], float],
    box: tuple[int, int, int, int],
    weak_below: float,
    x_name: str,
    y_name: str,
) -> list[str]:
    """The scatter chart's grid, axes, weak line and axis names, inside `box` (left, right, top, bottom)."""
    left, right, top, bottom = box
    marks = []
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        marks.append(
            f"<line class=grid x1={px(tick):.1f} y1={top} x2={px(tick):.1f} y2={bottom}></line>"
            f"<text class=muted x={px(tick):.1f} y={bottom + 16} text-anchor=middle>{tick * 100:.0f}%</text>"
        )
    for tick in (-1.0, -0.5, 0.0, 0.5, 1.0):
        marks.append(
            f"<line class=grid x1={left} y1={py(tick):.1f} x2={right} y2={py(tick):.1f}></line>"
            f"<text class=muted x={left - 4} y={py(tick) + 4:.1f} text-anchor=end>{tick:g}</text>"
        )
    marks.append(
        f"<line class=axis x1={left} y1={bottom} x2={right} y2={bottom}></line>"
        f"<line class=axis x1={left} y1={top} x2={left} y2={bottom}></line>"
        f"<line class=weak x1={left} y1={py(weak_below):.1f} x2={right} y2={py(weak_below):.1f}></line>"
        f"<text class=muted x={right} y={py(weak_below) - 4:.1f} text-anchor=end>weak below {weak_below:g}</text>"
        f"<text class=muted x={(left + right) / 2:.0f} y={bottom + 34} text-anchor=middle>{_e(x_name)} →</text>"
        f"<text class=muted x={left + 4} y={top + 12}>↑ {_e(y_name)}</text>"
    )
    return marks


def _scatter_point(
    number: int,
    point: Point,
    px: Callable[[float], float],
    py: Callable[[float], float],
    right: int,
    weak_below: float,
    x_name: str,
    y_name: str,
) -> str:
    """One numbered point: a circle, or a triangle when weak, with its label and values as its title."""
    x, y = px(point.x), py(point.y)
    weak = point.y < weak_below
    shape = (
        f'<path class=point d="M{x:.1f} {y - 5:.1f} L{x + 5:.1f} {y + 4:.1f} L{x - 5:.1f} {y + 4:.1f} Z"></path>'
        if weak
        else f"<circle class=point cx={x:.1f} cy={y:.1f} r=4.5></circle>"
    )
    anchor = "end" if x > right - 30 else "start"
    dx = -7 if anchor == "end" else 7
    return (
        f"<g class=point data-weak={'yes' if weak else 'no'}>"
        f"<title>{number}. {_e(shown(point.label, FULL_CHARS))}: "
        f"{_e(x_name)} {point.x * 100:.0f}%, {_e(y_name)} {point.y:.2f}</title>{shape}"
        f"<text x={x + dx:.1f} y={y + 4:.1f} text-anchor={anchor}>{number}</text></g>"
    )


def scatter_chart(
    chart_id: str,
    title: str,
    points: Sequence[Point],
    *,
    x_name: str,
    y_name: str,
    caption: str,
    weak_below: float = 0.2,
) -> str:
    """Points on x 0..1 (a share) and y -1..1, each marked with its number (the table's first column names it):
    a circle, or a triangle for a point below `weak_below` (a dashed line marks it), so that a weak point is told
    by its shape as well as its place. At most MAX_POINTS drawn."""
    drawn = list(points[:MAX_POINTS])
    left, right, top, bottom = 34, WIDTH - 20, 12, 252
    height = bottom + 40

    def px(x: float) -> float:
        return left + (right - left) * _clamp(x, 0.0, 1.0)

    def py(y: float) -> float:
        return top + (bottom - top) * (1 - _clamp(y, -1.0, 1.0)) / 2

    marks = _scatter_grid(px, py, (left, right, top, bottom), weak_below, x_name, y_name)
    marks += [
        _scatter_point(number, point, px, py, right, weak_below, x_name, y_name)
        for number, point in enumerate(drawn, 1)
    ]
    desc = f"{len(points)} points, {x_name} across, {y_name} up: " + "; ".join(
        f"{n}. {shown(p.label)} at {p.x * 100:.0f}%, {p.y:.2f}" for n, p in enumerate(drawn, 1)
    )
    svg = _svg(chart_id, height, title, desc, "".join(marks), f" data-points={len(drawn)}")
    rows = [
        (str(n), point.label, f"{point.x * 100:.0f}%", f"{point.y:.2f}", point.reading)
        for n, point in enumerate(points, 1)
    ]
    return _figure(
        chart_id,
        "scatter",
        svg,
        caption + _left_out(len(points) - len(drawn), "points"),
        _table(("#", "", x_name, y_name, "reading"), rows),
    )
