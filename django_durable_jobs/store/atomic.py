"""Atomic domain writes: the caller's own write and the job's new state in one transaction.

``retry_atomically`` takes a job again (through ``claiming.take``); ``complete_atomically`` and
``finalize_atomically`` end its attempt (through ``ending.end_rows``), each after the fence of
the domain write (``fence.verify``) passed in the same transaction.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from ..database.transactions import bounded_atomic
from ..models import Job
from ..observability import history
from ..rules import validation
from ..rules.errors import DeadlineExceeded, InputInvalid, JobError, NotReclaimable
from ..rules.execution import Execution, WriteFence
from ..rules.outcome import failure_message
from ..rules.values import AttemptOutcome, Finalization, Lease
from ..rules.vocabulary import JobStatus, retry_refusal
from . import capacity, claiming, ending, fence, workflows
from . import client as client_room
from .client import Client


def retry_atomically(
    client: Client,
    job_id: Any,
    execution: Execution,
    retain_outcome: Callable[[str], str] | None,
    *,
    max_running: int | None,
) -> Lease:
    """Start a new attempt of a failed, cancelled or expired job, with the caller's bookkeeping.

    ``retain_outcome(previous_row_json) -> receipt_json`` runs inside the same transaction; any
    fault rolls back both.
    """
    validation.job_id(job_id)
    client_room.check_identity(client, execution)
    capacity.checked_max_running(max_running)
    with bounded_atomic(client.using, execution):
        now = client_room.now(client)
        row = client_room.locked_row(client, job_id)
        if row is None:
            raise NotReclaimable(f"There is no job {job_id} in this store's scope.")
        refusal = retry_refusal(row, now)
        if refusal is not None:
            raise NotReclaimable(refusal)
        if row.retry_requested_at is None:
            workflows.retrying(client, row)  # refuses a run before its parents completed
        if retain_outcome is not None:
            previous = json.dumps(ending.snapshot(row), sort_keys=True)
            validation.json_text(retain_outcome(previous), "retain_outcome receipt")
        capacity.require_operation_room(
            client, row.operation, capacity.operation_cap(row.operation, max_running), row.pk
        )
        capacity.require_scope_room(client, row.scope, row.pk)
        return claiming.take(client, row, now, new_attempt=True)


def write_fence_of(client: Client, execution: Execution) -> WriteFence:
    """Return the write fence ``execution`` is bound to, refusing one ``client`` may not use."""
    client_room.check_identity(client, execution)
    write_fence = execution.write_fence
    if write_fence is None:
        raise InputInvalid("This call needs an execution bound with bind_write_fence().")
    fence.check_lease(client, write_fence.lease)
    return write_fence


def complete_atomically(
    client: Client, execution: Execution, mutation: Callable[[Execution], str]
) -> str:
    """Run the domain write and complete the job in one fenced transaction; return the receipt."""
    write_fence = write_fence_of(client, execution)
    identity = execution.identity
    checks = {"allow_cancel_request": False, "write": "complete_atomically"}
    with bounded_atomic(client.using, execution):
        row = fence.verify(write_fence, identity, client.using, client_room.now(client), **checks)
        receipt = validation.json_text(mutation(execution), "receipt")
        now = client_room.now(client)
        fence.verify(write_fence, identity, client.using, now, **checks)
        row.status, row.result, row.progress = JobStatus.COMPLETE, receipt, 100.0
        done = ending.Ending(write_fence.lease, row, ("result", "progress"))
        ending.end_rows(client, [done], now)
        stored = Job.objects.using(client.using).get(pk=row.pk)
        if not (fence.completed_by(stored, write_fence.lease) and stored.result == receipt):
            raise fence.lost(write_fence.lease, "the completion did not read back as written")
    history.fenced_writes("complete_atomically", [write_fence.lease], accepted=True, at=now)
    return receipt


def finalize_atomically(
    client: Client,
    execution: Execution,
    outcome: AttemptOutcome,
    bookkeeping: Callable[[Execution], str | None],
) -> Finalization:
    """Record a failed or cancelled outcome with metadata-only bookkeeping; never raise."""
    started = time.monotonic()
    cleanup_error = None
    try:
        if not isinstance(outcome, AttemptOutcome) or outcome.status not in (
            JobStatus.FAILED,
            JobStatus.CANCELLED,
        ):
            raise InputInvalid("outcome must be AttemptOutcome('failed' or 'cancelled', ...).")
        write_fence = write_fence_of(client, execution)
        with bounded_atomic(client.using, execution):
            now = client_room.now(client)
            row = fence.verify(
                write_fence,
                execution.identity,
                client.using,
                now,
                allow_cancel_request=True,
                write="finalize_atomically",
            )
            try:
                receipt = bookkeeping(execution)
            except Exception as exc:
                cleanup_error = f"{type(exc).__name__}: {exc}"
                raise
            if receipt is not None:
                receipt = validation.json_text(receipt, "bookkeeping receipt")
            row.status = outcome.status
            row.error = failure_message(outcome.message) if outcome.message else None
            fields: tuple[str, ...] = ("error",)
            if receipt is not None:
                row.result, fields = receipt, ("error", "result")
            # The bookkeeping decided the job's fate: no automatic retry.
            ending.end_rows(
                client, [ending.Ending(write_fence.lease, row, fields)], now, retry=False
            )
        history.fenced_writes("finalize_atomically", [write_fence.lease], accepted=True, at=now)
    except Exception as exc:  # noqa: BLE001 - documented: never raises
        reason = exc.code if isinstance(exc, JobError) else type(exc).__name__
        return Finalization(
            state="pending-finalization",
            reason=f"{reason}: {getattr(exc, 'message', exc)}",
            cleanup_error=cleanup_error,
            elapsed=time.monotonic() - started,
            deadline_exceeded=isinstance(exc, DeadlineExceeded),
        )
    return Finalization(state="finalized", result_json=receipt, elapsed=time.monotonic() - started)
