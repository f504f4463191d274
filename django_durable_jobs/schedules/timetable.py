"""The arithmetic of ticks: when a schedule fires, in UTC, with bounded work (see the package)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, tzinfo
from functools import cache
from itertools import islice, takewhile
from typing import Protocol
from zoneinfo import ZoneInfo

from cronsim import CronSim

MAX_TICKS = 10_000  # the most ticks one call of ``ticks()`` returns
LOOKBACK = timedelta(days=366 * 50)  # how far ``latest_tick`` looks back without ``after``


class Timetable(Protocol):
    """What tick arithmetic reads: a ``ScheduleSpec`` or a ``Schedule`` row."""

    cron: str | None
    interval_seconds: int | None
    anchor: datetime | None
    timezone: str


def ticks(
    schedule: Timetable, after: datetime, until: datetime, *, limit: int = MAX_TICKS
) -> Iterator[datetime]:
    """Yield the ticks ``t`` with ``after < t <= until``, oldest first, at most ``limit`` of them.

    Ticks are aware UTC datetimes. To go on past the ``limit``-th, call again after it.
    """
    _check_aware(after, "after")
    _check_aware(until, "until")
    return islice(takewhile(until.__ge__, _ticks_after(schedule, after)), limit)


def next_tick(schedule: Timetable, after: datetime) -> datetime | None:
    """Return the first tick after ``after``, or None when there is none (within reach)."""
    _check_aware(after, "after")
    return next(_ticks_after(schedule, after), None)


def newest_ticks(
    schedule: Timetable, after: datetime, until: datetime, limit: int
) -> list[datetime]:
    """Return the newest ``limit`` ticks ``t`` with ``after < t <= until``, oldest first.

    Intervals are computed, not walked. For a cron expression, each probe walks at most
    ``2 * limit + 10`` ticks forward from a start before ``until``: the start moves back (twice
    as far each time) until the window holds ``limit`` ticks or reaches ``after``, then halves
    the gap when a window holds too many. So the work grows with ``limit`` and the logarithm of
    the range, never with the number of ticks in ``(after, until]``.
    """
    _check_aware(after, "after")
    _check_aware(until, "until")
    if limit < 1 or until <= after:
        return []
    interval = _interval(schedule)
    if interval is not None:
        anchor, step = interval
        last = (until - anchor) // step
        first = max((after - anchor) // step + 1, last - limit + 1)
        found = []
        for k in range(first, last + 1):
            try:
                found.append((anchor + k * step).astimezone(UTC))
            except OverflowError:
                break
        return found
    return _newest_cron_ticks(schedule, after, until, limit)


def latest_tick(
    schedule: Timetable, until: datetime, *, after: datetime | None = None
) -> datetime | None:
    """Return the newest tick at or before ``until`` (and after ``after``), or None.

    Without ``after``, looks back at most fifty years.
    """
    _check_aware(until, "until")
    if after is None:
        try:
            after = until - LOOKBACK
        except OverflowError:
            after = datetime.min.replace(tzinfo=UTC)
    found = newest_ticks(schedule, after, until, 1)
    return found[0] if found else None


def tick_key(name: str, tick: datetime) -> str:
    """Return the idempotency key of the job of ``name``'s tick at ``tick``.

    ``schedule:<name>:<tick in UTC, ISO 8601 to the second>Z``, such as
    ``schedule:nightly-sales:2026-12-01T03:00:00Z``; every process builds the same key for the
    same tick, so the tick's job is submitted once.
    """
    _check_aware(tick, "tick")
    stamp = tick.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="seconds")
    return f"schedule:{name}:{stamp}Z"


def _newest_cron_ticks(
    schedule: Timetable, after: datetime, until: datetime, limit: int
) -> list[datetime]:
    """Return the newest ``limit`` cron ticks in ``(after, until]`` by probing windows."""
    cap = 2 * limit + 10
    crowded: datetime | None = None  # a start whose window holds more than ``cap`` ticks
    sparse = until  # a start whose window holds fewer than ``limit`` ticks
    window = timedelta(seconds=limit)
    while True:
        if crowded is None:
            try:
                start = max(after, until - window)
            except OverflowError:
                start = after
        else:  # ticks are whole seconds apart: this ends before the gap is one second
            start = crowded + (sparse - crowded) / 2
        found = _walk(schedule, start, until, cap)
        if found is None:
            crowded = start
        elif len(found) >= limit or start == after:
            return found[-limit:]
        else:
            sparse = start
            window *= 2


def _walk(schedule: Timetable, start: datetime, until: datetime, cap: int) -> list[datetime] | None:
    """Return the ticks in ``(start, until]``, or None when there are more than ``cap``."""
    found = []
    for tick in _ticks_after(schedule, start):
        if tick > until:
            break
        if len(found) == cap:
            return None
        found.append(tick)
    return found


def _ticks_after(schedule: Timetable, after: datetime) -> Iterator[datetime]:
    """Yield every tick after ``after``, ascending, in UTC."""
    interval = _interval(schedule)
    if interval is not None:
        anchor, step = interval
        k = (after - anchor) // step + 1
        while True:
            try:
                yield (anchor + k * step).astimezone(UTC)
            except OverflowError:
                return
            k += 1
    cron = getattr(schedule, "cron", None)
    if not cron:
        raise ValueError(f"{schedule!r} has neither a cron expression nor an interval.")
    local = zone(getattr(schedule, "timezone", None) or "UTC")
    walk = CronSim(cron, after.astimezone(local))
    last = after
    while True:
        try:
            tick = next(walk).astimezone(UTC)
        except (StopIteration, OverflowError):
            return
        # Starting inside a repeated hour, cronsim may give that hour's earlier occurrence.
        if tick > last:
            last = tick
            yield tick


def _interval(schedule: Timetable) -> tuple[datetime, timedelta] | None:
    """Return the anchor and step of an interval schedule, or None for a cron schedule."""
    seconds = getattr(schedule, "interval_seconds", None)
    if seconds is None:
        return None
    if seconds < 1:
        raise ValueError(f"An interval is at least one second; got {seconds!r}.")
    anchor = getattr(schedule, "anchor", None)
    if anchor is None:
        raise ValueError(
            f"Interval schedule {getattr(schedule, 'name', schedule)!r} has no anchor yet; its "
            f"ticks are counted from the anchor of its row."
        )
    return anchor, timedelta(seconds=seconds)


@cache
def zone(name: str) -> tzinfo:
    """Return the time zone ``name``; ``datetime.UTC`` for UTC, which cronsim walks fastest."""
    return UTC if name == "UTC" else ZoneInfo(name)


def _check_aware(value: datetime, what: str) -> None:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ValueError(f"{what} must be an aware datetime; got {value!r}.")
