"""Requests anyone may make of a job: cancel it, retry it.

Each locks the row, decides with the vocabulary's rules (``cancel_answer``, ``retry_answer``)
and returns a ``RequestResult`` saying what it did, with the row as it left it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..database.dbvendor import notify_work
from ..database.transactions import bounded_atomic
from ..models import Job
from ..rules import validation
from ..rules.errors import NotReclaimable, ScopeMismatch
from ..rules.execution import Execution
from ..rules.values import RequestResult
from ..rules.vocabulary import (
    JobStatus,
    RequestAnswer,
    assess_ownership,
    cancel_answer,
    retry_answer,
    retry_refusal,
)
from . import client as client_room
from . import workflows
from .client import Client


def request_cancel(client: Client, job_id: Any, *, execution: Execution | None) -> RequestResult:
    """Ask for cancellation and return what it did, with the job as it left it.

    A pending, waiting or sleeping job is cancelled at once (a workflow's waiting children of it
    are cancelled too, or released, as ``on_upstream_failure`` says); a running one gets a request its owner carries out
    (the first request wins, the status stays running); a job that ended keeps its result.
    """
    validation.job_id(job_id)
    if execution is not None:
        client_room.check_identity(client, execution)
    with bounded_atomic(client.using, execution):
        now = client_room.now(client)
        row = client_room.locked_row(client, job_id)
        if execution is not None:
            check_job_scope(execution, row)
        answer = cancel_answer(row)
        changes: dict[str, Any] = {}
        if answer == RequestAnswer.CANCELLED_NOW:
            changes.update(status=JobStatus.CANCELLED, completed_at=now)
            if row.retry_requested_at is not None:  # a sleeping job: it must not wake up
                changes["retry_requested_at"] = None
        if answer.accepted and row.cancellation_requested_at is None:
            changes["cancellation_requested_at"] = now
        if changes:
            Job.objects.using(client.using).filter(pk=row.pk, status=row.status).update(**changes)
        if answer == RequestAnswer.CANCELLED_NOW and row.workflow_id is not None:
            ended = answered(answer, row, changes, now, "cancellation_requested_at")
            workflows.hand_off(client, [row], now)  # its waiting children hear of it
            return ended
        return answered(answer, row, changes, now, "cancellation_requested_at")


def request_retry(client: Client, job_id: Any) -> RequestResult:
    """Record that a person wants a new attempt; return what it did, with the job after it.

    A job that has not ended needs no retry (``not-ended``); a complete, legacy or defective
    one is refused (``NotReclaimable``), and so is a workflow job whose parents did not all
    complete (``workflows.retrying``). The request is due at once: a person does not wait out
    a retry policy's backoff.
    """
    validation.job_id(job_id)
    with bounded_atomic(client.using):
        now = client_room.now(client)
        row = client_room.locked_row(client, job_id)
        answer = retry_answer(row, now)
        changes: dict[str, Any] = {}
        if answer.accepted:
            refusal = retry_refusal(row, now)
            if refusal is not None:
                raise NotReclaimable(refusal)
            if row.retry_requested_at is None:
                changes["retry_requested_at"] = now
                workflows.retrying(client, row)  # refuses a run before its parents
            if row.run_after > now:
                changes["run_after"] = now
        if changes:
            Job.objects.using(client.using).filter(pk=row.pk).update(**changes)
            notify_work(client.using, row.queue)
        return answered(answer, row, changes, now, "retry_requested_at")


def answered(
    answer: RequestAnswer, row: Job | None, changes: dict, now: datetime, field: str
) -> RequestResult:
    """Return the result of a request, the row showing the changes it committed."""
    if row is None:
        return RequestResult(answer, None, None)
    for name, value in changes.items():
        setattr(row, name, value)
    row.ownership = assess_ownership(row, now)
    return RequestResult(answer, row, getattr(row, field))


def check_job_scope(execution: Execution, row: Job | None) -> None:
    """Refuse an execution acting for another scope than the job's (``ScopeMismatch``)."""
    if row is not None and execution.identity.scope != row.scope:
        raise ScopeMismatch(
            f"The execution acts for scope {execution.identity.scope!r} but job {row.pk} "
            f"belongs to another scope; use an execution of the job's scope."
        )
