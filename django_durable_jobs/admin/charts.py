"""The dashboard's charts as inline SVG: pure functions of numbers, with no database and no script.

Each function returns markup that is safe to put in a page: every label is escaped, and every
mark carries a ``<title>`` with its exact numbers, which the browser shows on hover. Colours are
CSS classes (``dj-s-complete``, ``dj-q0``…) styled by the dashboard's stylesheet with the
admin's CSS variables, so the charts follow the admin's light and dark themes. The SVG scales to
its container (``viewBox``); nothing is fetched from anywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

WIDTH = 640  # of the viewBox: a chart drawn 640 px wide shows its text at its CSS size
ROW = 20  # height of one row of a bar chart
LABEL_WIDTH = 170  # room for the labels of a bar chart's rows
LABEL_CHARS = 26  # an operation name longer than this is cut in the chart (whole in its title)
# The ticks of a time axis, in seconds: powers of ten below a minute, then round clock spans.
TIME_TICKS = (0.001, 0.01, 0.1, 1, 10, 60, 600, 3600, 21600, 86400)


@dataclass(frozen=True)
class Series:
    """One stacked layer of a column chart: its name, its CSS class and a value per column."""

    name: str
    css_class: str
    values: Sequence[float]


@dataclass(frozen=True)
class Bar:
    """One row of a horizontal bar chart: its label, its value, and what its title says."""

    label: str
    value: float
    text: str
    detail: str = ""


@dataclass(frozen=True)
class Spread:
    """One row of a percentile chart: a label and ascending ``(name, seconds)`` marks."""

    label: str
    marks: Sequence[tuple[str, float | None]]
    detail: str = ""


def nice_ceiling(value: float) -> float:
    """Return the smallest 1, 2 or 5 times a power of ten that is at least ``value`` (1 for 0)."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * power >= value * (1 - 1e-9):
            return step * power
    return 10 * power  # pragma: no cover (the loop always returns)


def number(value: float) -> str:
    """Return a count or a rate without noise: ``12``, ``2.5``, ``0.125``."""
    if value == int(value):
        return str(int(value))
    return f"{value:.3g}"


def duration(seconds: float | None) -> str:
    """Return a duration for an axis or a title: ``250 ms``, ``4.2 s``, ``3.5 min``, ``2.1 h``."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.3g} ms"
    if seconds < 60:
        return f"{seconds:.3g} s"
    if seconds < 3600:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def exact_seconds(value: float | None) -> str:
    """Return a duration exactly, to the millisecond, for a title: ``80.000 s``, ``0.020 s``."""
    return "-" if value is None else f"{value:.3f} s"


def percent(rate: float) -> str:
    """Return a rate between 0 and 1 as a percentage: ``7.5%``, ``100%``."""
    return f"{rate * 100:.3g}%"


def _short(label: str) -> str:
    return label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "\u2026"


def _svg(title: str, width: int, height: float, body: list, css_class: str) -> SafeString:
    return format_html(
        '<svg class="dj-chart {}" viewBox="0 0 {} {}" role="img" aria-label="{}">'
        "<title>{}</title>{}</svg>",
        css_class,
        width,
        f"{height:g}",
        title,
        title,
        mark_safe("".join(str(part) for part in body)),
    )


def _empty(text: str) -> SafeString:
    return format_html('<p class="dj-empty">{}</p>', text)


def _legend(items: Sequence[tuple[str, str]], x: float, y: float) -> list:
    """Return a row of coloured squares and names, starting at (x, y)."""
    parts = []
    for name, css_class in items:
        parts.append(
            format_html(
                '<rect class="{}" x="{}" y="{}" width="10" height="10" rx="2"/>'
                '<text class="dj-legend" x="{}" y="{}">{}</text>',
                css_class,
                f"{x:g}",
                f"{y:g}",
                f"{x + 14:g}",
                f"{y + 9:g}",
                name,
            )
        )
        x += 24 + 7 * len(name)
    return parts


def stacked_columns(
    title: str,
    labels: Sequence[str],
    series: Sequence[Series],
    *,
    label_every: int = 1,
    width: int = WIDTH,
    height: float = 190,
    empty: str = "Nothing finished in this window.",
) -> SafeString:
    """Return a column chart with ``series`` stacked in each of the columns named by ``labels``.

    Each column's title gives its label and every series' exact value; every ``label_every``-th
    label is written under the axis, and the y axis has round ticks.
    """
    columns = len(labels)
    totals = [sum(s.values[i] for s in series) for i in range(columns)]
    if not columns or not any(totals):
        return _empty(empty)
    left, right, top, bottom = 36, 8, 26, 22
    plot_w, plot_h = width - left - right, height - top - bottom
    step = max(1.0, nice_ceiling(max(totals) / 4))  # counts: whole ticks
    ticks = math.ceil(max(totals) / step)
    ceiling = step * ticks
    scale = plot_h / ceiling
    body = _legend([(s.name, s.css_class) for s in series], left, 4)
    for tick in range(ticks + 1):
        value = step * tick
        y = top + plot_h - value * scale
        body.append(
            format_html(
                '<line class="dj-grid" x1="{}" x2="{}" y1="{}" y2="{}"/>'
                '<text class="dj-axis" x="{}" y="{}" text-anchor="end">{}</text>',
                left,
                width - right,
                f"{y:.1f}",
                f"{y:.1f}",
                left - 4,
                f"{y + 3:.1f}",
                number(value),
            )
        )
    step = plot_w / columns
    for i, label in enumerate(labels):
        x = left + i * step
        summary = ", ".join(f"{number(s.values[i])} {s.name}" for s in series)
        marks = [
            format_html(
                '<rect class="dj-hit" x="{}" y="{}" width="{}" height="{}"/>',
                f"{x:.1f}",
                top,
                f"{step:.1f}",
                f"{plot_h:g}",
            )
        ]
        base = top + plot_h
        for s in series:
            h = s.values[i] * scale
            if h > 0:
                base -= h
                marks.append(
                    format_html(
                        '<rect class="{}" x="{}" y="{}" width="{}" height="{}"/>',
                        s.css_class,
                        f"{x + step * 0.1:.1f}",
                        f"{base:.1f}",
                        f"{step * 0.8:.1f}",
                        f"{h:.1f}",
                    )
                )
        body.append(
            format_html(
                "<g><title>{}: {}</title>{}</g>",
                label,
                summary,
                mark_safe("".join(marks)),
            )
        )
        if i % label_every == 0 or i == columns - 1:
            body.append(
                format_html(
                    '<text class="dj-axis" x="{}" y="{}" text-anchor="middle">{}</text>',
                    f"{x + step / 2:.1f}",
                    f"{height - 6:g}",
                    label,
                )
            )
    return _svg(title, width, height, body, "dj-columns")


def bars(
    title: str,
    rows: Sequence[Bar],
    *,
    maximum: float | None = None,
    axis: Callable[[float], str] = number,
    css_class: str = "dj-s-failed",
    width: int = WIDTH,
    empty: str = "No jobs finished in this window.",
) -> SafeString:
    """Return one horizontal bar per row, scaled to ``maximum`` (a round ceiling by default).

    The row's ``text`` is written after its bar; its title holds the label, ``text`` and
    ``detail``. ``axis`` formats the tick values (``percent`` for rates).
    """
    if not rows:
        return _empty(empty)
    ceiling = maximum or nice_ceiling(max(row.value for row in rows))
    left, right, top = LABEL_WIDTH, 64, 20
    plot_w = width - left - right
    height = top + ROW * len(rows) + 4
    body = []
    for tick in range(5):
        value = ceiling * tick / 4
        x = left + plot_w * tick / 4
        body.append(
            format_html(
                '<line class="dj-grid" x1="{}" x2="{}" y1="{}" y2="{}"/>'
                '<text class="dj-axis" x="{}" y="12" text-anchor="middle">{}</text>',
                f"{x:.1f}",
                f"{x:.1f}",
                top - 4,
                height - 4,
                f"{x:.1f}",
                axis(value),
            )
        )
    for i, row in enumerate(rows):
        y = top + i * ROW
        w = plot_w * min(row.value, ceiling) / ceiling
        body.append(
            format_html(
                '<g><title>{}: {}{}</title><rect class="dj-hit" x="0" y="{}" width="{}" '
                'height="{}"/><text class="dj-label" x="{}" y="{}" text-anchor="end">{}</text>'
                '<rect class="{}" x="{}" y="{}" width="{}" height="{}" rx="2"/>'
                '<text class="dj-value" x="{}" y="{}">{}</text></g>',
                row.label,
                row.text,
                f" ({row.detail})" if row.detail else "",
                y,
                width,
                ROW,
                left - 6,
                y + 14,
                _short(row.label),
                css_class,
                left,
                y + 3,
                f"{w:.1f}",
                ROW - 6,
                f"{left + w + 4:.1f}",
                y + 14,
                row.text,
            )
        )
    return _svg(title, width, height, body, "dj-bars")


def spreads(
    title: str,
    rows: Sequence[Spread],
    *,
    width: int = WIDTH,
    empty: str = "No attempts in this window.",
) -> SafeString:
    """Return one row of percentile marks per operation on a logarithmic time axis.

    The axis spans the ``TIME_TICKS`` around the values (a longer one is drawn to the edge).

    Each row is drawn as nested bars, darkest for the lowest percentile: the first mark's bar
    (``dj-q0``) over the second's (``dj-q1``) and so on, the longest drawn first. A row's title
    gives every mark exactly.
    """
    values = [v for row in rows for _, v in row.marks if v is not None and v > 0]
    if not values:
        return _empty(empty)
    low = max([t for t in TIME_TICKS if t <= min(values)], default=TIME_TICKS[0])
    high = min([t for t in TIME_TICKS if t >= max(values)], default=TIME_TICKS[-1])
    if high <= low:
        high = TIME_TICKS[TIME_TICKS.index(low) + 1] if low < TIME_TICKS[-1] else low * 10
    left, right, top = LABEL_WIDTH, 56, 34
    plot_w = width - left - right
    height = top + ROW * len(rows) + 4

    def x_of(seconds: float) -> float:
        seconds = min(max(seconds, low), high)
        return left + plot_w * math.log10(seconds / low) / math.log10(high / low)

    names = [name for name, _ in rows[0].marks]
    body = _legend([(name, f"dj-q{i}") for i, name in enumerate(names)], left, 2)
    for tick in (t for t in TIME_TICKS if low <= t <= high):
        x = x_of(tick)
        body.append(
            format_html(
                '<line class="dj-grid" x1="{}" x2="{}" y1="{}" y2="{}"/>'
                '<text class="dj-axis" x="{}" y="{}" text-anchor="middle">{}</text>',
                f"{x:.1f}",
                f"{x:.1f}",
                top - 4,
                height - 4,
                f"{x:.1f}",
                top - 8,
                duration(tick),
            )
        )
    for i, row in enumerate(rows):
        y = top + i * ROW
        summary = ", ".join(f"{name} {exact_seconds(v)}" for name, v in row.marks)
        marks = []
        for q in reversed(range(len(row.marks))):
            value = row.marks[q][1]
            if value is not None and value > 0:
                marks.append(
                    format_html(
                        '<rect class="dj-q{}" x="{}" y="{}" width="{}" height="{}" rx="2"/>',
                        q,
                        left,
                        y + 3,
                        f"{x_of(value) - left:.1f}",
                        ROW - 6,
                    )
                )
        last = next((v for _, v in reversed(row.marks) if v is not None), None)
        body.append(
            format_html(
                '<g><title>{}: {}{}</title><rect class="dj-hit" x="0" y="{}" width="{}" '
                'height="{}"/><text class="dj-label" x="{}" y="{}" text-anchor="end">{}</text>'
                '{}<text class="dj-value" x="{}" y="{}">{}</text></g>',
                row.label,
                summary,
                f" ({row.detail})" if row.detail else "",
                y,
                width,
                ROW,
                left - 6,
                y + 14,
                _short(row.label),
                mark_safe("".join(marks)),
                f"{(x_of(last) if last else left) + 4:.1f}",
                y + 14,
                duration(last),
            )
        )
    return _svg(title, width, height, body, "dj-spreads")
