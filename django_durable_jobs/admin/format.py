"""How the admin shows a row's values: badges, a progress bar, stored JSON; pure functions.

Stored JSON is shown pretty-printed and as stored, each capped at ``DISPLAY_CAP_BYTES`` of HTML
and built in time linear in what is shown; the raw view (``JobAdmin.raw_view``) has the rest.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import mark_safe

from ..rules.jsontext import DISPLAY_CAP_BYTES, JsonTooDeep, Shown, excerpt, pretty, utf8_len
from ..rules.validation import loads_strict
from ..rules.vocabulary import AttemptOutcomeChoice, JobStatus, Ownership, WorkerState, worker_state

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


# Waiting (for its parents) is ochre, a job held back; sleeping is teal, a job resting by its own
# choice: both apart from pending's blue, running's green and complete's grey.
STATUS_COLOURS = {
    JobStatus.PENDING: "#2c6fbb",
    JobStatus.WAITING: "#876500",
    JobStatus.SLEEPING: "#0e7c86",
    JobStatus.RUNNING: "#1e7e34",
    JobStatus.COMPLETE: "#5a6268",
    JobStatus.FAILED: "#c0392b",
    JobStatus.CANCELLED: "#b36200",
    JobStatus.ORPHANED: "#8e44ad",
}
OUTCOME_COLOURS = {
    AttemptOutcomeChoice.COMPLETE: "#5a6268",
    AttemptOutcomeChoice.FAILED: "#c0392b",
    AttemptOutcomeChoice.CANCELLED: "#b36200",
    AttemptOutcomeChoice.INTERRUPTED: "#8e44ad",
    AttemptOutcomeChoice.RELEASED: "#2c6fbb",
    AttemptOutcomeChoice.SLEPT: "#0e7c86",
    "running": "#1e7e34",  # the attempt that holds the lease now: it has no history row yet
}
SHORT_ID = 8  # hex characters of a job id shown in the list; the full id is on hover


def badge(text: str, colour: str, title: str = ""):
    """Return a small coloured label; ``text`` and ``title`` are escaped."""
    return format_html(
        '<span class="durable-jobs-badge" style="background:{};color:#fff;padding:1px 6px;'
        'border-radius:8px;white-space:nowrap"{}>{}</span>',
        colour,
        format_html(' title="{}"', title) if title else "",
        text,
    )


def ownership_badge(state: str):
    return badge(state, OWNERSHIP_COLOURS.get(state, "#333"))


def worker_badge(state: str):
    return badge(state, WORKER_COLOURS.get(state, "#333"))


def status_badge(status: str):
    return badge(status, STATUS_COLOURS.get(status, "#333"))


def outcome_badge(outcome: str):
    return badge(outcome, OUTCOME_COLOURS.get(outcome, "#333"))


def short_id(job_id: object):
    """Return the first ``SHORT_ID`` hex characters of a job id, the whole id on hover."""
    text = str(job_id)
    return format_html(
        '<span class="durable-jobs-id" title="{}">{}</span>', text, text.replace("-", "")[:SHORT_ID]
    )


def breakable(name: str):
    """Return a dotted or snake_case name that may wrap after a dot or an underscore only."""
    escaped = escape(name)
    return mark_safe(escaped.replace(".", ".<wbr>").replace("_", "_<wbr>"))


def moment(when: datetime | None) -> str:
    """Return a time to the second in the current time zone, ``2026-12-02 03:11:51``; ``-``."""
    if when is None:
        return "-"
    if timezone.is_aware(when):
        when = timezone.localtime(when)
    return when.strftime("%Y-%m-%d %H:%M:%S")


def duration(seconds: float | None) -> str:
    """Return a duration to the second: ``4 s``, ``2 min 05 s``, ``1 h 02 min 05 s``, ``3 d 4 h``.

    A negative duration (clocks of two machines disagree) is shown as it is, with its sign.
    """
    if seconds is None:
        return "-"
    sign, whole = ("-" if seconds < 0 else ""), int(abs(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{sign}{days} d {hours} h"
    if hours:
        return f"{sign}{hours} h {minutes:02d} min {secs:02d} s"
    if minutes:
        return f"{sign}{minutes} min {secs:02d} s"
    return f"{sign}{secs} s"


def between(start: datetime | None, end: datetime | None) -> str:
    """Return the duration from ``start`` to ``end``, or ``-`` when either is missing."""
    if start is None or end is None:
        return "-"
    return duration((end - start).total_seconds())


ERROR_LINE_CHARS = 80


def first_line(text: str | None, limit: int = ERROR_LINE_CHARS) -> str:
    """Return the first non-blank line of ``text``, cut to ``limit`` characters with ``…``."""
    for line in (text or "").splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


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
        '<div class="durable-jobs-progress" title="{}%" style="width:60px;background:#e9ecef;'
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


# A payload longer than this (characters or lines) is shown collapsed, its size in the summary.
OPEN_CHARS, OPEN_LINES = 1_500, 25


def collapsed(shown, text: str | None):
    """Return ``shown`` inside a closed ``<details>`` when ``text`` is large, else as it is."""
    if text is None or (len(text) <= OPEN_CHARS and text.count("\n") < OPEN_LINES):
        return shown
    size = utf8_len(text)
    return format_html(
        '<details class="durable-jobs-payload"><summary>{} bytes: show</summary>{}</details>',
        f"{size:,}",
        shown,
    )
