"""Times for people: "12 s ago", "in 18 s" — one wording for the admin and the CLI."""

from __future__ import annotations

from datetime import datetime


def relative(moment: datetime | None, now: datetime) -> str:
    """Return ``"12 s ago"`` for a past moment, ``"in 18 s"`` for a future one, ``"-"`` for None."""
    if moment is None:
        return "-"
    seconds = (now - moment).total_seconds()
    text = span(seconds)
    return f"{text} ago" if seconds >= 0 else f"in {text}"


def span(seconds: float) -> str:
    """Return a duration in its largest sensible unit, rounded down: "90 s", "5 min", "3 h", "2 d"."""
    seconds = abs(seconds)
    if seconds < 120:
        return f"{int(seconds)} s"
    if seconds < 7200:
        return f"{int(seconds // 60)} min"
    if seconds < 172800:
        return f"{int(seconds // 3600)} h"
    return f"{int(seconds // 86400)} d"
