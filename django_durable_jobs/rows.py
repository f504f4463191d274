"""Job and attempt rows as plain data, named in the domain's words, for the REST API and the CLI.

One place decides what a job looks like outside the database: ``id`` for the primary key,
``epoch`` for the fencing epoch, ``ownership`` for the assessment made when the row was read.
The values stay Python values (UUIDs, datetimes, the exact stored text); each surface formats
them its own way: the API through its schemas, ``manage.py jobs`` as ISO 8601 text. Nothing
here reads or writes the database.
"""

from __future__ import annotations

from typing import Any

from .models import Job, JobAttempt

__all__ = ["attempt_data", "job_columns", "job_data"]


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
