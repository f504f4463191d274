"""Request and response bodies of the REST API."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from ninja import Schema
from pydantic import Field

from ..models import Job, JobAttempt
from ..vocabulary import OWNERSHIP_STATES, JobStatus

Status = Literal["pending", "running", "complete", "failed", "cancelled", "orphaned"]
Ownership = Literal["terminal", "unclaimed", "legacy-unknown", "expired", "current"]
assert set(Status.__args__) == set(JobStatus.values)  # noqa: S101 - kept in step with the model
assert set(Ownership.__args__) == set(OWNERSHIP_STATES)  # noqa: S101


class ErrorOut(Schema):
    code: str = Field(description="Stable machine-readable code, e.g. E_JOB_NOT_FOUND.")
    message: str = Field(description="What went wrong and what to do instead.")


class SubmitIn(Schema):
    operation: str = Field(min_length=1, max_length=200, description="A registered operation.")
    payload: Any = Field(
        default=None,
        description="The input as JSON; stored as canonical JSON. Give this or `proposal`.",
    )
    proposal: str | None = Field(
        default=None, description="The input as exact JSON text, stored byte for byte."
    )
    idempotency_key: str | None = Field(
        default=None,
        max_length=255,
        description="Same operation, key and input: the same job (200). Different input: 409.",
    )
    queue: str | None = Field(default=None, max_length=200)
    priority: int = Field(default=0, ge=-100, le=100)
    run_after: datetime | None = Field(
        default=None, description="Not before this time (with a UTC offset)."
    )


class LeaseOut(Schema):
    owner_id: str | None
    claimed_by: str
    claimed_at: datetime | None
    heartbeat_at: datetime | None
    expires_at: datetime | None


class RequestsOut(Schema):
    cancellation_requested_at: datetime | None
    retry_requested_at: datetime | None


class JobSummaryOut(Schema):
    id: UUID
    operation: str
    scope: str | None
    status: Status
    ownership: Ownership
    idempotency_key: str
    queue: str
    priority: int
    created_at: datetime
    run_after: datetime
    completed_at: datetime | None
    epoch: int
    attempts: int
    progress: float
    lease: LeaseOut
    requests: RequestsOut
    error: str | None


class JobOut(JobSummaryOut):
    proposal: Any = Field(description="The stored input, parsed (null when missing or broken).")
    checkpoint: Any = Field(description="The last checkpoint, parsed, or null.")
    checkpoint_at: datetime | None
    result: Any = Field(description="The result, parsed, or null.")
    diagnostic: str | None = Field(description="A defect found while reading the row, if any.")


class JobPageOut(Schema):
    items: list[JobSummaryOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null at end.")


class AttemptOut(Schema):
    epoch: int
    owner_id: str | None
    claimed_by: str
    started_at: datetime | None
    ended_at: datetime
    outcome: Literal["complete", "failed", "cancelled", "interrupted", "released"]
    error: str | None


class ActionOut(Schema):
    accepted: bool = Field(description="False when there was nothing to request (see message).")
    message: str
    job: JobSummaryOut


def _parsed(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def summary(job: Job) -> dict[str, Any]:
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
        "lease": {
            "owner_id": job.owner_id,
            "claimed_by": job.claimed_by,
            "claimed_at": job.claimed_at,
            "heartbeat_at": job.heartbeat_at,
            "expires_at": job.lease_expires_at,
        },
        "requests": {
            "cancellation_requested_at": job.cancellation_requested_at,
            "retry_requested_at": job.retry_requested_at,
        },
        "error": job.error,
    }


def detail(job: Job) -> dict[str, Any]:
    return {
        **summary(job),
        "proposal": _parsed(job.proposal),
        "checkpoint": _parsed(job.checkpoint),
        "checkpoint_at": job.checkpoint_at,
        "result": _parsed(job.result),
        "diagnostic": job.diagnostic_error,
    }


def attempt(row: JobAttempt) -> dict[str, Any]:
    return {
        "epoch": row.epoch,
        "owner_id": row.owner_id,
        "claimed_by": row.claimed_by,
        "started_at": row.started_at,
        "ended_at": row.ended_at,
        "outcome": row.outcome,
        "error": row.error,
    }
