"""Whether a stored schedule row can be read here: the same answer for the scheduler and every
surface (admin, ``manage.py jobs schedules``, the REST API).

A row is written by a worker from a checked declaration, but what another host wrote may not
read on this one (a time zone its time zone database does not have yet, during a rolling
deploy), and a row may have been changed by hand. :func:`row_problem` says what is wrong with
the parts of a row its ticks are computed from, with the fix; the scheduler skips such a
*broken* row (every other schedule goes on ticking) and the surfaces show it as broken. Nothing
here touches the database.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfoNotFoundError

from cronsim import CronSim

from ..rules import validation
from ..rules.errors import InputInvalid
from .declared import CATCH_UP_CHOICES, CATCH_UP_LIMIT_MAX, INTERVAL_MAX_SECONDS, OVERLAP_CHOICES
from .timetable import zone

__all__ = ["SKIPPED", "could_be_name", "problem_summary", "row_problem", "tick_failure"]

SKIPPED = (
    "The scheduler skips it until then; a worker that declares it validly rewrites its row when "
    "it starts and about every minute."
)
DECLARATION = 'its declaration (@operation(..., schedule=...) or DURABLE_JOBS["SCHEDULES"])'


def row_problem(row: Any) -> str | None:
    """Return why the schedule row ``row`` cannot be read on this host, or None when it can.

    Checks what ticks are computed from: a cron expression or an interval (exactly one), the
    cron expression, its time zone, the overlap and catch-up policies. What a tick's job is
    made of (operation, scope, queue, priority, payload) is checked when it is submitted, like
    any submission. The message names the schedule and says how to fix it.
    """
    name = getattr(row, "name", "?")
    cron = row.cron or ""
    seconds = row.interval_seconds
    if bool(cron) == (seconds is not None):
        has = (
            "both a cron expression and an interval"
            if cron
            else "neither a cron expression nor an interval"
        )
        return _say(
            name, f"its row has {has}", f"give exactly one of cron and every in {DECLARATION}"
        )
    if seconds is not None:
        if not isinstance(seconds, int) or not 1 <= seconds <= INTERVAL_MAX_SECONDS:
            return _say(
                name,
                f"interval {seconds!r} is not 1 to {INTERVAL_MAX_SECONDS} seconds",
                f"fix every in {DECLARATION}",
            )
    else:
        problem = _cron_problem(cron)
        if problem:
            return _say(
                name,
                f"cron {cron!r} is not a cron expression ({problem})",
                f'fix the cron expression in {DECLARATION}, such as "0 3 * * *"',
            )
        timezone = row.timezone or "UTC"
        try:
            zone(timezone)
        except (ZoneInfoNotFoundError, ValueError, OSError, TypeError):
            return _say(
                name,
                f"time zone {timezone!r} is unknown on this host",
                "install or update the time zone database here (pip install -U tzdata), or "
                f"give a zone every host knows in {DECLARATION}",
            )
    for key, choices in (("overlap", OVERLAP_CHOICES), ("catch_up", CATCH_UP_CHOICES)):
        value = getattr(row, key)
        if value not in choices:
            return _say(
                name,
                f"{key} {value!r} is not one of {', '.join(choices)}",
                f"fix {key} in {DECLARATION}",
            )
    limit = row.catch_up_limit
    if not isinstance(limit, int) or not 1 <= limit <= CATCH_UP_LIMIT_MAX:
        return _say(
            name,
            f"catch_up_limit {limit!r} is not 1 to {CATCH_UP_LIMIT_MAX}",
            f"fix catch_up_limit in {DECLARATION}",
        )
    return None


def could_be_name(value: Any) -> bool:
    """Return whether ``value`` could name a schedule: what a declaration accepts.

    A lookup by any other value (a NUL byte, which PostgreSQL refuses in a query; a control
    character; 201 characters) finds no schedule, on every database, without a query.
    """
    try:
        validation.name(value, "schedule name")
    except InputInvalid:
        return False
    return True


def tick_failure(name: str, exc: Exception) -> str:
    """Return the message of a row whose ticks failed to compute with ``exc`` (a row that
    :func:`row_problem` passed, which should not happen)."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return _say(name, f"its ticks cannot be computed ({text})", f"check {DECLARATION}")


def _cron_problem(cron: str) -> str | None:
    try:
        next(CronSim(cron, datetime(2000, 1, 1, tzinfo=UTC)))
    except StopIteration:
        return "it never fires"
    except Exception as exc:  # noqa: BLE001 - cronsim refuses text in more ways than one
        return " ".join(str(exc).split()) or type(exc).__name__
    return None


def _say(name: str, problem: str, fix: str) -> str:
    return f"Schedule {name!r}: {problem}; {fix}. {SKIPPED}"


def problem_summary(name: str, problem: str) -> str:
    """Return what is wrong with schedule ``name``, without its name or the fix: a list cell.

    ``problem`` is what :func:`row_problem` returned; text in another form comes back whole.
    """
    prefix = f"Schedule {name!r}: "
    if not problem.startswith(prefix):
        return problem
    what, _, _ = problem.removeprefix(prefix).partition("; ")
    return what[:1].upper() + what[1:]
