"""Request and response bodies of the REST API.

The words a body may hold (statuses, ownership states, attempt outcomes) are the vocabulary's
enums, spelled once in :mod:`django_durable_jobs.vocabulary`; the bodies' contents come from
:mod:`django_durable_jobs.rows`, shared with ``manage.py jobs``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from ninja import Schema
from pydantic import Field

from ..models import Job, JobAttempt, Schedule, rows
from ..rules import vocabulary
from ..rules.conf import jobs_settings
from ..rules.validation import loads_strict
from ..rules.values import RequestResult

# Literal types of the enums' values: the OpenAPI document lists them inline ("enum": [...]).
Status = Literal[tuple(vocabulary.JobStatus.values)]
Ownership = Literal[tuple(vocabulary.Ownership.values)]
Outcome = Literal[tuple(vocabulary.AttemptOutcomeChoice.values)]
ScheduleState = Literal[rows.SCHEDULE_STATES]
# What a response says of a stored row: one of the vocabulary's words, or, on a row written
# outside this app, whatever word it holds (the row is then legacy-unknown, with a diagnostic).
StoredStatus = Annotated[
    Status | str,
    Field(
        description="One of the statuses; a row written outside this app may hold another word "
        "(its ownership is then legacy-unknown and its diagnostic says so)."
    ),
]
StoredOutcome = Annotated[
    Outcome | str,
    Field(description="One of the outcomes; a row written outside this app may hold another."),
]


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
    status: StoredStatus
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
    workflow: UUID | None = Field(description="The workflow this job belongs to, or null.")
    node: str = Field(description="The job's name in its workflow; empty when unnamed or none.")
    waiting_on: int = Field(
        description="While waiting: how many of its workflow parents have not completed yet."
    )
    sleep_until: datetime | None = Field(
        description="When the job last called ctx.sleep: when that sleep ends (it is sleeping "
        "until then)."
    )


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
    outcome: StoredOutcome
    error: str | None
    error_class: str = Field(
        description="The class path of the exception that failed the attempt "
        '(e.g. "builtins.ValueError"); empty when no exception did.'
    )
    traceback: str | None = Field(
        description="The exception's traceback, its middle cut when it was long; null when no "
        "exception failed the attempt."
    )


class ActionOut(Schema):
    accepted: bool = Field(description="False when there was nothing to request (see message).")
    message: str
    job: JobSummaryOut


class ScheduleOut(Schema):
    name: str
    operation: str
    cron: str | None = Field(description="The cron expression, or null for an interval.")
    every_seconds: int | None = Field(description="The interval in seconds, or null for cron.")
    timezone: str = Field(description="The IANA time zone the cron expression is read in.")
    payload: Any = Field(description="The input of each tick's job, parsed.")
    scope: str
    queue: str
    priority: int
    overlap: str = Field(
        description="skip: no new tick while the last tick's job is pending or running; "
        "allow. Another value is a broken row (see problem)."
    )
    catch_up: str = Field(
        description="Which missed ticks run after downtime: latest, all (up to "
        "catch_up_limit), or none. Another value is a broken row (see problem)."
    )
    catch_up_limit: int
    state: ScheduleState = Field(
        description="active; paused (by a person); removed (no running worker declares it); "
        "broken (this server cannot read its row: it does not tick until repaired, see problem)."
    )
    problem: str | None = Field(
        description="Why the row cannot be read here, and how to fix it; null when it can."
    )
    paused_at: datetime | None
    paused_by: str | None = Field(description="Who paused it (admin, CLI or API caller).")
    removed_at: datetime | None
    next_tick: datetime | None = Field(description="The next tick; null unless active.")
    last_tick_at: datetime | None
    last_job_id: UUID | None = Field(description="The job of the last tick enqueued.")
    last_job_status: Status | str | None = Field(description="That job's status now.")
    declared_at: datetime
    created_at: datetime
    updated_at: datetime


class ScheduleActionOut(Schema):
    changed: bool = Field(description="False when there was nothing to do (see message).")
    message: str
    schedule: ScheduleOut


def _parsed(text: str | None) -> Any:
    """Return stored JSON parsed; None when missing, or changed outside the app into text this
    app does not accept (too deep, not JSON): ``diagnostic`` then says why."""
    if text is None:
        return None
    try:
        return loads_strict(text)
    except ValueError:
        return None


def summary(job: Job) -> dict[str, Any]:
    """Return the body of a job in lists: its state, lease and requests, no payloads."""
    data = rows.job_data(job)
    return {
        **data,
        "workflow": job.workflow_id,
        "node": job.node,
        "waiting_on": job.waiting_on,
        "sleep_until": job.sleep_until,
        "lease": {
            "owner_id": data["owner_id"],
            "claimed_by": data["claimed_by"],
            "claimed_at": data["claimed_at"],
            "heartbeat_at": data["heartbeat_at"],
            "expires_at": data["lease_expires_at"],
        },
        "requests": {
            "cancellation_requested_at": data["cancellation_requested_at"],
            "retry_requested_at": data["retry_requested_at"],
        },
    }


def detail(job: Job) -> dict[str, Any]:
    """Return the body of one job: :func:`summary` with its payloads parsed and its diagnostic."""
    return {
        **summary(job),
        "proposal": _parsed(job.proposal),
        "checkpoint": _parsed(job.checkpoint),
        "checkpoint_at": job.checkpoint_at,
        "result": _parsed(job.result),
        "diagnostic": job.diagnostic_error,
    }


def attempt(row: JobAttempt) -> dict[str, Any]:
    """Return the body of one ended attempt."""
    return rows.attempt_data(row)


def action(result: RequestResult, message: str) -> dict[str, Any]:
    """Return the body answering a cancellation or retry request (the job as it left it)."""
    return {"accepted": result.accepted, "message": message, "job": summary(result.job)}


def schedule(row: Schedule, now) -> dict[str, Any]:
    """Return the body of a schedule, its payload parsed and its scope resolved."""
    data = rows.schedule_data(row, now)
    return {
        **data,
        "payload": _parsed(data["payload"]),
        "scope": data["scope"] or jobs_settings.DEFAULT_SCOPE,
    }
