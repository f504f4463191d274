"""What ``runjobs`` may be asked: ``WorkerOptions``, the bounds of each option and their check.

Every refusal is a ``ValueError`` whose message names the option as ``runjobs`` spells it and
says what it accepts, raised before the worker touches the database (``runjobs`` turns it into a
``CommandError``). Values come from the command line (so ``inf``, ``nan`` and 20-digit numbers
parse) or from code building ``WorkerOptions`` directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from django.db import connections

from ..rules import registry, validation
from ..rules.conf import jobs_settings
from ..rules.errors import InputInvalid, JobError
from .scheduler import declared, refusal

# (low, high) of each numeric option; a job thread holds a database connection, a lease is
# renewed every third of its length, and a wait longer than ``threading.TIMEOUT_MAX`` overflows.
CONCURRENCY = (1, 1000)
PREFETCH = (0, 10_000)
PROCESSES = (1, 256)
ASYNC_SLOTS = (0, 10_000)
MAX_JOBS = (1, 1_000_000_000)
LEASE_SECONDS = (0.1, 86_400.0)
POLL_SECONDS = (0.01, 3_600.0)
WATCH_SECONDS = (0.0, 60.0)
GRACE_SECONDS = (0.0, 86_400.0)
TIMEOUT_GRACE = 5.0  # seconds a timed-out executor gets to stop before it is abandoned

__all__ = [
    "ASYNC_SLOTS",
    "CONCURRENCY",
    "GRACE_SECONDS",
    "LEASE_SECONDS",
    "MAX_JOBS",
    "POLL_SECONDS",
    "PREFETCH",
    "PROCESSES",
    "TIMEOUT_GRACE",
    "WATCH_SECONDS",
    "WorkerOptions",
    "check",
    "check_processes",
    "check_schedules",
    "seconds",
    "setting_lease_seconds",
    "whole",
]


@dataclass
class WorkerOptions:
    """What ``runjobs`` was asked to do; checked before anything starts."""

    concurrency: int = 4
    prefetch: int | None = None  # claimed jobs waiting for a job thread; None: grows (pace.py)
    # Attempts of ``async def`` operations running at once on the event loop (eventloop.py);
    # 0 runs them in the job threads, each to its end in a loop of its own.
    async_slots: int = 100
    operations: list[str] | None = None
    queues: list[str] | None = None
    lease_seconds: float = 30.0
    poll: float = 1.0
    # Seconds between looks for new submissions where there is no NOTIFY (watch.py); None: the
    # database's default, 0: no watch (the poll alone).
    watch: float | None = None
    burst: bool = False
    max_jobs: int | None = None
    scope: str | None = None
    grace: float = 30.0
    timeout_grace: float = TIMEOUT_GRACE  # a timed-out attempt's time to stop before abandonment
    using: str | None = None
    actor: str | None = None
    status_every: float | None = None
    schedules: bool = True  # run the scheduler (runjobs --no-schedules turns it off)

    def validate(self) -> None:
        """Raise ValueError naming the option that cannot work."""
        check(self)


def check(options: WorkerOptions) -> None:
    """Raise ValueError naming the first option of ``options`` that cannot work."""
    whole(options.concurrency, "--concurrency", CONCURRENCY)
    if options.prefetch is not None:
        whole(options.prefetch, "--prefetch", PREFETCH)
    whole(options.async_slots, "--async-slots", ASYNC_SLOTS)
    seconds(options.lease_seconds, "--lease-seconds", LEASE_SECONDS)
    seconds(options.poll, "--poll", POLL_SECONDS)
    if options.watch is not None:
        seconds(options.watch, "--watch", WATCH_SECONDS)
    if options.max_jobs is not None:
        whole(options.max_jobs, "--max-jobs", MAX_JOBS)
    seconds(options.grace, "--grace", GRACE_SECONDS)
    seconds(options.timeout_grace, "--timeout-grace", GRACE_SECONDS)
    if options.scope is not None:
        _checked(validation.scope, options.scope, "--scope")
    for queue in options.queues or []:
        _name(queue, "--queue", "queue")
    for name in options.operations or []:
        _operation(name)
    unknown = [op for op in options.operations or [] if registry.get(op) is None]
    if unknown:
        known = ", ".join(sorted(registry.all_operations())) or "none"
        raise ValueError(  # names _operation() accepted: nothing to escape
            f"--operation: Unknown operation(s): {', '.join(unknown)}. "
            f"Registered operations: {known}."
        )
    if options.using is not None and options.using not in connections.databases:
        aliases = ", ".join(sorted(connections.databases))
        raise ValueError(
            f"--database must name an alias of settings.DATABASES ({aliases}); "
            f"got {options.using!r}."
        )


def check_processes(processes: Any) -> int:
    """Return ``processes`` (``runjobs --processes``) when it is within bounds; else raise."""
    return whole(processes, "--processes", PROCESSES)


def setting_lease_seconds() -> float:
    """Return ``DURABLE_JOBS['LEASE_SECONDS']``, checked as ``--lease-seconds`` is.

    A refusal names the setting, not the option: the command line did not give one.
    """
    return seconds(jobs_settings.LEASE_SECONDS, "DURABLE_JOBS['LEASE_SECONDS']", LEASE_SECONDS)


def check_schedules(options: WorkerOptions) -> None:
    """Raise ValueError saying why a declared schedule refuses the start, when schedules run.

    Pure: settings and registry, checked before any child process or database connection.
    """
    if not options.schedules:
        return
    try:
        declared()
    except JobError as exc:
        raise ValueError(refusal(exc)) from exc


def whole(value: Any, option: str, bounds: tuple[int, int]) -> int:
    """Return ``value`` when it is a whole number within ``bounds``; else raise ValueError."""
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{option} must be a whole number from {low} to {high:,}; got {value!r}.")
    return value


def seconds(value: Any, option: str, bounds: tuple[float, float]) -> float:
    """Return ``value`` when it is a finite number of seconds within ``bounds``."""
    low, high = bounds
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or not low <= value <= high:
        lowest = "a positive" if low > 0 else "a non-negative"
        raise ValueError(
            f"{option} must be {lowest} finite number of seconds from {low:g} to {high:,g}; "
            f"got {value!r}."
        )
    return float(value)


def _name(value: Any, option: str, what: str) -> None:
    _checked(lambda v: validation.name(v, what), value, option)


def _checked(check: Any, value: Any, option: str) -> None:
    try:
        check(value)
    except InputInvalid as exc:
        raise ValueError(f"{option}: {exc.message}") from None


def _operation(value: Any) -> None:
    try:
        validation.operation(value)
    except InputInvalid as exc:
        raise ValueError(f"--operation: {exc.message}") from None
