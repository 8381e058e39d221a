"""Small SVG charts drawn on the server: no script, no chart library, nothing fetched.

Each chart is an `<svg role="img">` with a title (read by screen readers) and a `<title>` per
mark (a tooltip on hover); the page puts the same figures in a table beside it, so the chart is
never the only way to read them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from html import escape

from markupsafe import Markup

# Colours with at least 3:1 contrast against white (WCAG 1.4.11 for graphics).
PALETTE = ("#1f5fa8", "#b5402a", "#2e7d32", "#7b3fa0", "#8a6100", "#00687a", "#9c2f6b")
WIDTH = 720


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    value: Decimal
    colour: str = PALETTE[0]


def _svg(title: str, height: int, body: list[str]) -> Markup:
    return Markup(
        f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} '
        f'{height}" width="{WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{escape(title)}</title>{''.join(body)}</svg>"
    )


def bars(title: str, items: Sequence[Bar], unit: str = "€") -> Markup:
    """Horizontal bars, one a row, negative values to the left of the zero line."""
    row_h, label_w, pad = 22, 230, 8
    height = max(1, len(items)) * row_h + 2 * pad
    low = min([Decimal(0), *(b.value for b in items)])
    high = max([Decimal(0), *(b.value for b in items)])
    span = (high - low) or Decimal(1)
    plot_w = WIDTH - label_w - 110
    zero_x = label_w + float((-low) / span) * plot_w
    body = [f'<line x1="{zero_x:.1f}" y1="0" x2="{zero_x:.1f}" y2="{height}" stroke="#555"/>']
    for n, b in enumerate(items):
        y = pad + n * row_h
        w = float(abs(b.value) / span) * plot_w
        x = zero_x if b.value >= 0 else zero_x - w
        text = f"{unit}{b.value:,.2f}"
        body.append(
            f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end" font-size="12">'
            f"{escape(b.label[:34])}</text>"
            f'<rect x="{x:.1f}" y="{y + 3}" width="{max(w, 1):.1f}" height="{row_h - 6}" '
            f'fill="{b.colour}"><title>{escape(b.label)}: {text}</title></rect>'
            f'<text x="{max(zero_x, x + w) + 4:.1f}" y="{y + 15}" font-size="12">{text}</text>'
        )
    return _svg(title, height, body)


def columns(title: str, groups: Sequence[tuple[str, Sequence[Bar]]], unit: str = "€") -> Markup:
    """Grouped vertical columns: one group per label (a day), one column per series."""
    height, base, top, left = 260, 220, 16, 70
    values = [b.value for _, series in groups for b in series]
    high = max([Decimal(0), *values]) or Decimal(1)
    low = min([Decimal(0), *values])
    span = high - low
    plot_h = base - top

    def y_of(v: Decimal) -> float:
        return top + float((high - v) / span) * plot_h

    zero_y = y_of(Decimal(0))
    group_w = (WIDTH - left - 10) / max(1, len(groups))
    body = [
        f'<line x1="{left}" y1="{zero_y:.1f}" x2="{WIDTH - 10}" y2="{zero_y:.1f}" stroke="#555"/>',
        f'<text x="{left - 6}" y="{top + 4}" text-anchor="end" font-size="11">'
        f"{unit}{high:,.0f}</text>",
        f'<text x="{left - 6}" y="{zero_y + 4:.1f}" text-anchor="end" font-size="11">'
        f"{unit}0</text>",
    ]
    for g, (label, series) in enumerate(groups):
        x0 = left + g * group_w + 6
        col_w = (group_w - 12) / max(1, len(series))
        for s, b in enumerate(series):
            y = y_of(max(b.value, Decimal(0)))
            h = abs(y_of(b.value) - zero_y)
            body.append(
                f'<rect x="{x0 + s * col_w:.1f}" y="{y:.1f}" width="{max(col_w - 2, 1):.1f}" '
                f'height="{max(h, 1):.1f}" fill="{b.colour}"><title>{escape(label)} '
                f"{escape(b.label)}: {unit}{b.value:,.2f}</title></rect>"
            )
        body.append(
            f'<text x="{x0 + (group_w - 12) / 2:.1f}" y="{base + 16}" text-anchor="middle" '
            f'font-size="11">{escape(label)}</text>'
        )
    return _svg(title, height, body)


@dataclass(frozen=True, slots=True)
class Mark:
    at: datetime
    lane: str
    label: str


def timeline(title: str, lanes: Sequence[str], marks: Sequence[Mark]) -> Markup:
    """One lane per stage, a tick per event over event time (UTC minutes on the axis)."""
    lane_h, left, top = 30, 110, 10
    height = top + len(lanes) * lane_h + 30
    if not marks:
        return _svg(title, height, [])
    start, end = min(m.at for m in marks), max(m.at for m in marks)
    span_s = max((end - start).total_seconds(), 1.0)
    plot_w = WIDTH - left - 20

    def x_of(at: datetime) -> float:
        return left + (at - start).total_seconds() / span_s * plot_w

    body: list[str] = []
    for n, lane in enumerate(lanes):
        y = top + n * lane_h + lane_h / 2
        colour = PALETTE[n % len(PALETTE)]
        body.append(
            f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end" font-size="12">'
            f"{escape(lane)}</text>"
            f'<line x1="{left}" y1="{y:.1f}" x2="{WIDTH - 20}" y2="{y:.1f}" stroke="#ccc"/>'
        )
        for m in marks:
            if m.lane == lane:
                body.append(
                    f'<rect x="{x_of(m.at) - 1.5:.1f}" y="{y - 9:.1f}" width="3" height="18" '
                    f'fill="{colour}"><title>{escape(m.label)}</title></rect>'
                )
    axis_y = top + len(lanes) * lane_h + 16
    for at, anchor in ((start, "start"), (start + (end - start) / 2, "middle"), (end, "end")):
        body.append(
            f'<text x="{x_of(at):.1f}" y="{axis_y}" text-anchor="{anchor}" font-size="11">'
            f"{at:%H:%M:%S}</text>"
        )
    return _svg(title, height, body)
