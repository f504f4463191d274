"""Job, attempt and schedule rows as plain data, in the domain's words, for the REST API and the CLI.

One place decides what a job looks like outside the database: ``id`` for the primary key,
``epoch`` for the fencing epoch, ``ownership`` for the assessment made when the row was read.
The values stay Python values (UUIDs, datetimes, the exact stored text); each surface formats
them its own way: the API through its schemas, ``manage.py jobs`` as ISO 8601 text. Nothing
here reads or writes the database.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from . import Job, JobAttempt, Schedule

__all__ = [
    "SCHEDULE_ACTIVE",
    "SCHEDULE_BROKEN",
    "SCHEDULE_PAUSED",
    "SCHEDULE_REMOVED",
    "SCHEDULE_STATES",
    "attempt_data",
    "job_columns",
    "job_data",
    "schedule_data",
    "schedule_every",
    "schedule_health",
    "schedule_state",
    "schedule_timing",
]

# What a schedule's row says of it: it ticks, a person paused it, no live worker declares it
# any more ("removed from code"; its row and history are kept), or this host cannot read it
# ("broken": skipped by the scheduler until repaired; ``schedule_data`` says why).
SCHEDULE_ACTIVE, SCHEDULE_PAUSED, SCHEDULE_REMOVED = "active", "paused", "removed"
SCHEDULE_BROKEN = "broken"
SCHEDULE_STATES = (SCHEDULE_ACTIVE, SCHEDULE_PAUSED, SCHEDULE_REMOVED, SCHEDULE_BROKEN)


def job_data(job: Job) -> dict[str, Any]:
    """Return a job's state without its payloads: what it is, who holds it, what was asked of it.

    ``ownership`` is ``job.ownership``: set it first when the read assessed it another way
    (in SQL, say), or it is assessed now.
    """
    return {
        "id": job.pk,
        "operation": job.operation,
        "scope": job.scope,
        "status": job.status,
        "ownership": job.ownership,
        "idempotency_key": job.idempotency_key,
        "queue": job.queue,
        "priority": job.priority,
        "created_at": job.created_at,
        "run_after": job.run_after,
        "completed_at": job.completed_at,
        "epoch": job.fencing_epoch,
        "attempts": job.attempts,
        "progress": job.progress,
        "owner_id": job.owner_id,
        "claimed_by": job.claimed_by,
        "claimed_at": job.claimed_at,
        "heartbeat_at": job.heartbeat_at,
        "lease_expires_at": job.lease_expires_at,
        "cancellation_requested_at": job.cancellation_requested_at,
        "retry_requested_at": job.retry_requested_at,
        "error": job.error,
    }


def job_columns(job: Job) -> dict[str, Any]:
    """Return every stored column of ``job`` by its column name, the payloads as exact text."""
    return {field.attname: getattr(job, field.attname) for field in Job._meta.concrete_fields}


def attempt_data(attempt: JobAttempt) -> dict[str, Any]:
    """Return one ended attempt: its epoch, how it ended, who ran it and when.

    A failure an exception caused also names the exception's class and keeps its traceback.
    """
    return {
        "epoch": attempt.epoch,
        "outcome": attempt.outcome,
        "owner_id": attempt.owner_id,
        "claimed_by": attempt.claimed_by,
        "started_at": attempt.started_at,
        "ended_at": attempt.ended_at,
        "error": attempt.error,
        "error_class": attempt.error_class,
        "traceback": attempt.traceback,
    }


def schedule_state(row: Schedule) -> str:
    """Return ``removed`` when no live worker declares the schedule, else ``broken`` when this
    host cannot read its row, else ``paused`` or ``active``. A removed schedule enqueues
    nothing, paused or not; a broken one nothing until repaired."""
    return schedule_health(row)[0]


def schedule_health(row: Schedule) -> tuple[str, str | None]:
    """Return the schedule's state and why this host cannot read its row (None when it can),
    reading the row once for both."""
    from ..schedules import row_problem  # pure

    problem = row_problem(row)
    if row.removed_at is not None:
        return SCHEDULE_REMOVED, problem
    if problem is not None:
        return SCHEDULE_BROKEN, problem
    return (SCHEDULE_PAUSED if row.paused_at is not None else SCHEDULE_ACTIVE), None


def schedule_every(seconds: int) -> str:
    """Return an interval in its largest whole unit: ``every 30 s``, ``every 5 min``, ``every 2 h``."""
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"every {seconds // size} {unit}"
    return f"every {seconds} s"


def schedule_timing(row: Schedule) -> str:
    """Return when the schedule ticks: ``cron 0 3 * * *`` or ``every 30 s``."""
    if row.interval_seconds:
        return schedule_every(row.interval_seconds)
    return f"cron {row.cron}"


def schedule_data(row: Schedule, now: datetime) -> dict[str, Any]:
    """Return a schedule as operators see it: its definition, its state, its ticks, its last job.

    ``next_tick`` is the first tick after ``now`` (None when the schedule is paused, removed or
    broken: it will not tick). ``problem`` says why a row cannot be read here and how to fix it
    (None when it can; a removed row may have one too). ``last_job_status`` is
    ``row.last_job_status`` when the read annotated it (``F("last_job__status")``), else the
    last job's own status.
    """
    from ..schedules import next_tick  # pure tick arithmetic

    state, problem = schedule_health(row)
    if hasattr(row, "last_job_status"):
        last_status = row.last_job_status
    else:
        last_status = row.last_job.status if row.last_job_id is not None else None
    return {
        "name": row.name,
        "operation": row.operation,
        "cron": row.cron or None,
        "every_seconds": row.interval_seconds,
        "timezone": row.timezone,
        "payload": row.payload,
        "scope": row.scope,
        "queue": row.queue,
        "priority": row.priority,
        "overlap": row.overlap,
        "catch_up": row.catch_up,
        "catch_up_limit": row.catch_up_limit,
        "state": state,
        "problem": problem,
        "paused_at": row.paused_at,
        "paused_by": row.paused_by or None,
        "removed_at": row.removed_at,
        "next_tick": next_tick(row, now) if state == SCHEDULE_ACTIVE else None,
        "last_tick_at": row.last_tick_at,
        "last_job_id": row.last_job_id,
        "last_job_status": last_status,
        "declared_at": row.declared_at,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }
