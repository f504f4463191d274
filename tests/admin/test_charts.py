"""The dashboard's SVG charts, pure functions of numbers: no database, no browser."""

from __future__ import annotations

import math
import re
from xml.etree import ElementTree

import pytest

from django_durable_jobs.admin import charts


def parse(svg: str) -> ElementTree.Element:
    """Parse a chart as XML: a chart that is not well formed fails here."""
    return ElementTree.fromstring(svg)


def titles(svg: str) -> list[str]:
    return [el.text for el in parse(svg).iter("title")]


@pytest.mark.parametrize(
    ("value", "ceiling"),
    [(0, 1), (1, 1), (3, 5), (7, 10), (12, 20), (0.3, 0.5), (250, 500), (1000, 1000)],
)
def test_nice_ceiling_is_a_round_number_at_least_the_value(value, ceiling):
    assert charts.nice_ceiling(value) == pytest.approx(ceiling)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "-"), (0.25, "250 ms"), (4.2, "4.2 s"), (90, "1.5 min"), (7560, "2.1 h")],
)
def test_duration_picks_a_unit_a_person_reads(seconds, text):
    assert charts.duration(seconds) == text


def test_columns_stack_series_and_title_each_column_with_exact_numbers():
    svg = charts.stacked_columns(
        "Ended per minute",
        ["03:00", "03:01", "03:02"],
        [
            charts.Series("complete", "dj-s-complete", [12, 0, 3]),
            charts.Series("failed", "dj-s-failed", [1, 0, 0]),
            charts.Series("cancelled", "dj-s-cancelled", [0, 0, 2]),
        ],
    )
    assert titles(svg) == [
        "Ended per minute",
        "03:00: 12 complete, 1 failed, 0 cancelled",
        "03:01: 0 complete, 0 failed, 0 cancelled",
        "03:02: 3 complete, 0 failed, 2 cancelled",
    ]
    root = parse(svg)
    # The tallest column (13) fits under a ceiling of 15, ticked every 5.
    axis = [el.text for el in root.iter("text") if el.get("class") == "dj-axis"]
    assert axis[:4] == ["0", "5", "10", "15"]
    assert axis[4:] == ["03:00", "03:01", "03:02"]
    legend = [el.text for el in root.iter("text") if el.get("class") == "dj-legend"]
    assert legend == ["complete", "failed", "cancelled"]
    first = root.find("g")
    heights = {el.get("class"): float(el.get("height")) for el in first.iter("rect")}
    # 12 of 20 and 1 of 20 of the same plot height: the ratio is exact to the rounding.
    assert heights["dj-s-complete"] / heights["dj-s-failed"] == pytest.approx(12, rel=0.05)


def test_columns_label_every_nth_column_and_the_last():
    labels = [f"{m:02d}" for m in range(60)]
    svg = charts.stacked_columns(
        "t", labels, [charts.Series("complete", "c", [1] * 60)], label_every=10
    )
    axis = [el.text for el in parse(svg).iter("text") if el.get("class") == "dj-axis"]
    # Whole ticks for a count of 1 (0 and 1), then every tenth label and the last.
    assert axis == ["0", "1", "00", "10", "20", "30", "40", "50", "59"]


def test_a_chart_of_nothing_says_so_instead_of_drawing_an_empty_frame():
    empty = charts.stacked_columns("t", ["a"], [charts.Series("complete", "c", [0])])
    assert empty == '<p class="dj-empty">Nothing finished in this window.</p>'
    assert charts.bars("t", []).startswith('<p class="dj-empty">')
    assert charts.spreads("t", [charts.Spread("op", (("p50", None),))]).startswith(
        '<p class="dj-empty">'
    )


def test_labels_are_escaped_and_long_ones_cut_with_the_whole_name_in_the_title():
    name = "<script>alert(1)</script>." + "x" * 40
    svg = charts.bars("rates", [charts.Bar(name, 0.5, "50%", "1 failed of 2 ended")], maximum=1)
    assert "<script>" not in svg
    root = parse(svg)
    assert titles(svg)[1] == f"{name}: 50% (1 failed of 2 ended)"
    label = next(el.text for el in root.iter("text") if el.get("class") == "dj-label")
    assert label == name[: charts.LABEL_CHARS - 1] + "\u2026"


def test_bars_scale_to_the_maximum_given():
    svg = charts.bars(
        "rates",
        [charts.Bar("a", 1.0, "100%"), charts.Bar("b", 0.25, "25%")],
        maximum=1.0,
        axis=charts.percent,
    )
    root = parse(svg)
    widths = [
        float(el.get("width")) for el in root.iter("rect") if el.get("class") == "dj-s-failed"
    ]
    assert widths[0] == pytest.approx(4 * widths[1], rel=0.01)
    ticks = [el.text for el in root.iter("text") if el.get("class") == "dj-axis"]
    assert ticks == ["0%", "25%", "50%", "75%", "100%"]


def test_spreads_use_a_log_axis_of_round_spans_and_title_every_percentile():
    svg = charts.spreads(
        "run time",
        [
            charts.Spread("fast", (("p50", 0.02), ("p95", 0.05), ("p99", 0.2)), "40 sampled"),
            charts.Spread("slow", (("p50", 30.0), ("p95", 80.0), ("p99", None))),
        ],
    )
    root = parse(svg)
    ticks = [el.text for el in root.iter("text") if el.get("class") == "dj-axis"]
    assert ticks == ["10 ms", "100 ms", "1 s", "10 s", "1 min", "10 min"]
    assert titles(svg)[1:] == [
        "fast: p50 0.020 s, p95 0.050 s, p99 0.200 s (40 sampled)",
        "slow: p50 30.000 s, p95 80.000 s, p99 -",
    ]
    bars = [el for el in root.iter("rect") if re.fullmatch(r"dj-q\d", el.get("class", ""))]
    # Three legend squares, three bars for "fast", two for "slow" (p99 unknown).
    assert len(bars) == 3 + 3 + 2
    fast = {el.get("class"): float(el.get("width")) for el in bars[3:6]}
    # 10 ms to 10 min is 4.78 decades; 20 ms to 200 ms is one of them.
    decade = (640 - charts.LABEL_WIDTH - 56) / math.log10(600 / 0.01)
    assert fast["dj-q2"] - fast["dj-q0"] == pytest.approx(decade, abs=0.2)
