"""How the admin shows a row's values: badges, a progress bar, stored JSON; pure functions.

Stored JSON is shown pretty-printed and as stored, each capped at ``DISPLAY_CAP_BYTES`` of HTML
and built in time linear in what is shown; the raw view (``JobAdmin.raw_view``) has the rest.
"""

from __future__ import annotations

from datetime import datetime

from django.utils.html import escape, format_html
from django.utils.safestring import mark_safe

from ..jsontext import DISPLAY_CAP_BYTES, JsonTooDeep, Shown, excerpt, pretty, utf8_len
from ..validation import loads_strict
from ..vocabulary import Ownership, WorkerState, worker_state

OWNERSHIP_COLOURS = {
    Ownership.CURRENT: "#1e7e34",
    Ownership.EXPIRED: "#c0392b",
    Ownership.UNCLAIMED: "#2c6fbb",
    Ownership.LEGACY_UNKNOWN: "#8e44ad",
    Ownership.TERMINAL: "#6c757d",
}
NOT_JSON = mark_safe('<em class="durable-jobs-not-json">not valid JSON (see stored text)</em>')
# The owner of a running job has no ``WorkerProcess`` row (a script claimed it, say).
WORKER_UNKNOWN = "unknown"
WORKER_COLOURS = {
    WorkerState.ALIVE: "#1e7e34",
    WorkerState.STALE: "#c0392b",
    WorkerState.STOPPED: "#6c757d",
    WORKER_UNKNOWN: "#8e44ad",
}


def badge(text: str, colour: str):
    """Return a small coloured label; ``text`` is escaped."""
    return format_html(
        '<span class="durable-jobs-badge" style="background:{};color:#fff;padding:1px 6px;'
        'border-radius:8px;white-space:nowrap">{}</span>',
        colour,
        text,
    )


def ownership_badge(state: str):
    return badge(state, OWNERSHIP_COLOURS.get(state, "#333"))


def worker_badge(state: str):
    return badge(state, WORKER_COLOURS.get(state, "#333"))


def owner_worker_state(
    heartbeat_at: datetime | None,
    stopped_at: datetime | None,
    lease_seconds: float | None,
    now: datetime,
) -> str:
    """Return the state of a worker's row read as columns, or ``unknown`` when it has none."""
    if heartbeat_at is None:
        return WORKER_UNKNOWN
    return worker_state(stopped_at, heartbeat_at, lease_seconds or 0, now)


def progress_bar(percent: float | None):
    """Return an HTML bar for a 0-100 progress value (clamped for display only)."""
    value = 0.0 if percent is None else max(0.0, min(100.0, float(percent)))
    return format_html(
        '<div class="durable-jobs-progress" title="{}%" style="width:100px;background:#e9ecef;'
        'border-radius:3px;height:10px;display:inline-block;vertical-align:middle">'
        '<div style="width:{}%;background:#417690;height:10px;border-radius:3px"></div></div>'
        " {}%",
        f"{value:g}",
        f"{value:.0f}",
        f"{value:.0f}",
    )


def _html_bytes(text: str) -> int:
    """Return the size of ``text`` once escaped into the page, in UTF-8 bytes."""
    return utf8_len(escape(text))


def _truncated(shown: Shown, raw_url: str | None):
    """Return the marker after a display the cap cut short, with a link to the whole text."""
    if not shown.truncated:
        return ""
    link = format_html('; <a href="{}">the whole stored text</a>', raw_url) if raw_url else ""
    return format_html('<p class="durable-jobs-truncated">{}{}</p>', shown.note(), link)


def pretty_json(text: str | None, raw_url: str | None = None):
    """Return stored JSON text indented in a ``<pre>``, or a note when it is absent or not JSON.

    At most ``DISPLAY_CAP_BYTES`` of HTML, however big or deep the value: a longer display ends
    with a marker saying how much of the stored text it shows, and a link to ``raw_url``.
    """
    if text is None:
        return "-"
    try:
        loads_strict(text)
    except JsonTooDeep as exc:
        return format_html(
            '<em class="durable-jobs-not-json">{} (see stored text)</em>', exc.nesting
        )
    except (TypeError, ValueError):
        return NOT_JSON
    shown = pretty(text, DISPLAY_CAP_BYTES, measure=_html_bytes)
    return format_html(
        '<pre class="durable-jobs-json">{}</pre>{}', shown.text, _truncated(shown, raw_url)
    )


def stored_text(text: str | None, raw_url: str | None = None):
    """Return the exact stored text in a ``<pre>``; ``-`` when NULL.

    At most ``DISPLAY_CAP_BYTES`` of HTML: longer text is cut, with a marker and a link to
    ``raw_url``.
    """
    if text is None:
        return "-"
    shown = excerpt(text, DISPLAY_CAP_BYTES, measure=_html_bytes)
    return format_html(
        '<pre class="durable-jobs-raw">{}</pre>{}', shown.text, _truncated(shown, raw_url)
    )
