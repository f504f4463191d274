"""Recurring jobs declared in code: their validation and the arithmetic of their ticks.

A schedule is declared by ``@operation(name, schedule=...)`` or in ``DURABLE_JOBS["SCHEDULES"]``
and checked here, before anything runs: every refusal is an ``InputInvalid`` whose message names
the schedule, the key at fault and how to fix it. Nothing here touches the database; the
scheduler keeps the declared schedules as ``Schedule`` rows and submits their ticks.

A schedule may name an operation this process has not registered: another worker may run it, so
that is not an error here (a job nobody runs waits in its queue, as any other job would).

Ticks
-----
A tick is an instant (an aware UTC datetime, whole seconds) at which the schedule submits a job.

- An **interval** (``every``) ticks at ``anchor + k * every`` for every integer ``k``. The anchor
  is stored with the schedule, so every process computes the same ticks; interval ticks are in
  absolute time, and daylight-saving changes do not move them.
- A **cron** expression (five fields, or six with seconds first, read by ``cronsim``) is evaluated
  on the wall clock of the schedule's ``timezone`` (default ``"UTC"``); its ticks are returned in
  UTC.

Daylight saving
---------------
On the wall clock of a time zone that observes it, an expression that names a fixed minute and
hour (neither field starts with ``*``, e.g. ``30 2 * * *``) fires as Debian's cron does:

- A time that does not exist, because the clock jumps forward, fires once, at the first instant
  after the jump: in America/New_York, ``30 2 * * *`` fires on 8 March 2026 at 03:00 EDT
  (07:00 UTC).
- A time that happens twice, because the clock goes back, fires once, at its first occurrence:
  in America/New_York, ``30 1 * * *`` fires on 1 November 2026 at 01:30 EDT (05:30 UTC), not
  again at 01:30 EST.

An expression whose minute or hour field starts with ``*`` (``*/30 * * * *``, ``0 * * * *``)
follows absolute time instead: it fires in both occurrences of a repeated hour (01:00 and 01:30
EDT, then 01:00 and 01:30 EST) and not at all in an hour that does not exist. Six-field
expressions (with seconds) always follow absolute time.

Bounded work
------------
:func:`ticks` returns at most ``limit`` ticks (:data:`MAX_TICKS` by default), the oldest first;
:func:`newest_ticks` and :func:`latest_tick` find the newest ones without walking those before:
by arithmetic for intervals, and for cron expressions by walking windows that double in length
back from ``until``. So a scheduler that was down for a year does not walk a year of one-second
ticks.

Broken rows
-----------
A row this host cannot read (a time zone its time zone database lacks, a cron expression changed
by hand) is *broken*: :func:`row_problem` says why and how to fix it. The scheduler skips it and
every other schedule goes on ticking; the admin, ``manage.py jobs schedules`` and the REST API
show it as broken with that reason.
"""

from .declared import (
    CATCH_UP_CHOICES,
    CATCH_UP_LIMIT_MAX,
    INTERVAL_MAX_SECONDS,
    OVERLAP_CHOICES,
    ScheduleSpec,
    declared_schedules,
    every,
    operation_schedules,
    parse_operation_schedule,
    parse_settings_schedule,
    problems,
    settings_schedules,
)
from .health import could_be_name, problem_summary, row_problem, tick_failure
from .timetable import MAX_TICKS, Timetable, latest_tick, newest_ticks, next_tick, tick_key, ticks

__all__ = [
    "CATCH_UP_CHOICES",
    "CATCH_UP_LIMIT_MAX",
    "INTERVAL_MAX_SECONDS",
    "MAX_TICKS",
    "OVERLAP_CHOICES",
    "ScheduleSpec",
    "Timetable",
    "could_be_name",
    "declared_schedules",
    "every",
    "latest_tick",
    "newest_ticks",
    "next_tick",
    "operation_schedules",
    "parse_operation_schedule",
    "parse_settings_schedule",
    "problems",
    "problem_summary",
    "row_problem",
    "settings_schedules",
    "tick_failure",
    "tick_key",
    "ticks",
]
