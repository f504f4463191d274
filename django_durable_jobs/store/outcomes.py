"""Owner writes, requests, retries and atomic outcomes."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from .. import history, registry, validation
from ..dbvendor import notify_work
from ..errors import DeadlineExceeded, InputInvalid, JobError, NotReclaimable, ScopeMismatch
from ..execution import Execution, WriteFence
from ..models import Job
from ..outcome import (  # noqa: F401 - the documented django_durable_jobs.store.outcomes names
    ERROR_CLASS_MAX,
    ERROR_MAX_CHARS,
    TRACEBACK_MAX_CHARS,
    error_class_path,
    failure_details,
    refused_result,
    result_text,
    storable_message,
    traceback_text,
)
from ..transactions import bounded_atomic
from ..values import AttemptOutcome, Finalization, Lease, RequestResult
from ..vocabulary import (
    JobStatus,
    RequestAnswer,
    assess_ownership,
    cancel_answer,
    retry_answer,
    retry_refusal,
)
from . import capacity
from .base import StoreBase, _snapshot
from .fence import _lease_lost, _verify_fence


class OutcomeMixin(StoreBase):
    """Owner writes, requests from anyone, and atomic outcomes."""

    def heartbeat(self, lease: Lease) -> Job:
        """Renew the lease and return the row (so the owner sees requests made meanwhile)."""
        return self._fenced_update(
            lease,
            "heartbeat",
            lease_expires_at=lambda now: now + timedelta(seconds=self.lease_seconds),
            heartbeat_at=lambda now: now,
        )

    def checkpoint(self, lease: Lease, value_json: str) -> None:
        """Record the owner's checkpoint (exact JSON text); it survives reclaim and retry."""
        value = validation.json_text(value_json, "checkpoint")
        self._fenced_update(lease, "checkpoint", checkpoint=value, checkpoint_at=lambda now: now)

    def progress(self, lease: Lease, percent: float) -> None:
        """Record progress, clamped to 0-100."""
        self._fenced_update(
            lease, "progress", progress=validation.percent(percent), heartbeat_at=lambda now: now
        )

    def cancel(self, lease: Lease) -> None:
        """Acknowledge a recorded cancellation request: running → cancelled."""

        def requested(row: Job) -> None:
            if row.cancellation_requested_at is None:
                raise InputInvalid(
                    f"Job {row.pk} has no cancellation request to acknowledge; use fail() to end "
                    f"it, or request_cancel() first."
                )

        self._end_fenced(lease, JobStatus.CANCELLED, guard=requested)

    def complete(self, lease: Lease, result: Any = None) -> None:
        """Record the outcome: running → complete, progress 100, ``result`` stored as JSON."""
        self._end_fenced(lease, JobStatus.COMPLETE, result=result_text(result), progress=100.0)

    def fail(self, lease: Lease, error: Any) -> None:
        """Record a failure: running → failed with ``error`` as the message.

        When ``error`` is an exception, its attempt's history row also keeps its class path and
        its traceback (bounded: :func:`traceback_text`).
        """
        message = _error_text(error)
        self._end_fenced(
            lease,
            JobStatus.FAILED,
            then=self._schedule_retry,
            error=message,
            **failure_details(error),
        )

    def _schedule_retry(self, row: Job, now: datetime) -> None:
        """Ask for another attempt after the backoff when the operation's retry policy allows."""
        spec = registry.get(row.operation)
        policy = spec.retry if spec else None
        if policy is None or not policy.allows_another(row.attempts):
            return
        due = now + timedelta(seconds=policy.delay(row.attempts))
        Job.objects.using(self.using).filter(pk=row.pk).update(
            retry_requested_at=now, run_after=due
        )

    # -- requests --------------------------------------------------------------------------------

    def request_cancel(self, job_id: Any, *, execution: Execution | None = None) -> bool:
        """Ask for cancellation; return False when the job ended or does not exist.

        :meth:`request_cancel_result` says what happened in more words.
        """
        return self.request_cancel_result(job_id, execution=execution).accepted

    def request_cancel_result(
        self, job_id: Any, *, execution: Execution | None = None
    ) -> RequestResult:
        """Ask for cancellation and return what it did, with the job as it left it.

        A pending job is cancelled at once; a running one gets a request its owner carries out
        (the first request wins, the status stays running); a job that ended keeps its result.
        """
        validation.job_id(job_id)
        if execution is not None:
            self._check_identity(execution)
        with bounded_atomic(self.using, execution):
            now = self._now()
            row = self._locked_row(job_id)
            if execution is not None:
                _check_job_scope(execution, row)
            answer = cancel_answer(row)
            changes: dict[str, Any] = {}
            if answer == RequestAnswer.CANCELLED_NOW:
                changes.update(status=JobStatus.CANCELLED, completed_at=now)
            if answer.accepted and row.cancellation_requested_at is None:
                changes["cancellation_requested_at"] = now
            if changes:
                Job.objects.using(self.using).filter(pk=row.pk, status=row.status).update(**changes)
            return self._answered(answer, row, changes, now, "cancellation_requested_at")

    def request_retry(self, job_id: Any) -> bool:
        """Ask for a new attempt of a failed, cancelled or expired job; False when not ended.

        :meth:`request_retry_result` says what happened in more words.
        """
        return self.request_retry_result(job_id).accepted

    def request_retry_result(self, job_id: Any) -> RequestResult:
        """Record that a person wants a new attempt; return what it did, with the job after it.

        A job that has not ended needs no retry (``not-ended``); a complete, legacy or defective
        one is refused (``NotReclaimable``). The request is due at once: a person does not wait
        out a retry policy's backoff.
        """
        validation.job_id(job_id)
        with bounded_atomic(self.using):
            now = self._now()
            row = self._locked_row(job_id)
            answer = retry_answer(row, now)
            changes: dict[str, Any] = {}
            if answer.accepted:
                refusal = retry_refusal(row, now)
                if refusal is not None:
                    raise NotReclaimable(refusal)
                if row.retry_requested_at is None:
                    changes["retry_requested_at"] = now
                if row.run_after > now:
                    changes["run_after"] = now
            if changes:
                Job.objects.using(self.using).filter(pk=row.pk).update(**changes)
                notify_work(self.using, row.queue)
            return self._answered(answer, row, changes, now, "retry_requested_at")

    def _answered(
        self, answer: RequestAnswer, row: Job | None, changes: dict, now: datetime, field: str
    ) -> RequestResult:
        """Return the result of a request, the row showing the changes it committed."""
        if row is None:
            return RequestResult(answer, None, None)
        for name, value in changes.items():
            setattr(row, name, value)
        row.ownership = assess_ownership(row, now)
        return RequestResult(answer, row, getattr(row, field))

    def retry_atomically(
        self,
        job_id: Any,
        execution: Execution,
        retain_outcome: Callable[[str], str] | None = None,
        *,
        max_running: int | None = None,
    ) -> Lease:
        """Start a new attempt of a failed, cancelled or expired job, with the caller's bookkeeping.

        ``retain_outcome(previous_row_json) -> receipt_json`` runs inside the same transaction; any
        fault rolls back both. Clears result, error, completion time and requests; keeps the
        checkpoint. A complete job is never reopened.
        """
        validation.job_id(job_id)
        self._check_identity(execution)
        capacity.checked_max_running(max_running)
        with bounded_atomic(self.using, execution):
            now = self._now()
            row = self._locked_row(job_id)
            if row is None:
                raise NotReclaimable(f"There is no job {job_id} in this store's scope.")
            refusal = retry_refusal(row, now)
            if refusal is not None:
                raise NotReclaimable(refusal)
            if retain_outcome is not None:
                previous = json.dumps(_snapshot(row), sort_keys=True)
                validation.json_text(retain_outcome(previous), "retain_outcome receipt")
            capacity.require_operation_room(
                self._client,
                row.operation,
                capacity.operation_cap(row.operation, max_running),
                row.pk,
            )
            capacity.require_scope_room(self._client, row.scope, row.pk)
            return self._take(row, now, new_attempt=True)

    # -- atomic outcomes -------------------------------------------------------------------------

    def _fence_of(self, execution: Execution) -> WriteFence:
        self._check_identity(execution)
        fence = execution.write_fence
        if fence is None:
            raise InputInvalid("This call needs an execution bound with bind_write_fence().")
        self._check_lease(fence.lease)
        return fence

    def complete_atomically(
        self, execution: Execution, mutation: Callable[[Execution], str]
    ) -> str:
        """Run the domain write and complete the job in one fenced transaction; return the receipt.

        Any fault rolls everything back and the job stays running at the same epoch.
        """
        fence = self._fence_of(execution)
        identity = execution.identity
        checks = {"allow_cancel_request": False, "write": "complete_atomically"}
        with bounded_atomic(self.using, execution):
            row = _verify_fence(fence, identity, self.using, self._now(), **checks)
            receipt = validation.json_text(mutation(execution), "receipt")
            now = self._now()
            _verify_fence(fence, identity, self.using, now, **checks)
            self._end(row, now, JobStatus.COMPLETE, result=receipt, progress=100.0)
            stored = Job.objects.using(self.using).get(pk=row.pk)
            if (stored.status, stored.result, stored.fencing_epoch) != (
                JobStatus.COMPLETE,
                receipt,
                fence.lease.epoch,
            ):
                raise _lease_lost(fence.lease, "the completion did not read back as written")
        history.fenced_writes("complete_atomically", [fence.lease], accepted=True, at=now)
        return receipt

    def finalize_atomically(
        self,
        execution: Execution,
        outcome: AttemptOutcome,
        bookkeeping: Callable[[Execution], str | None],
    ) -> Finalization:
        """Record a failed or cancelled outcome with metadata-only bookkeeping; never raise.

        Returns ``state="finalized"``, or ``state="pending-finalization"`` with the reason when
        anything refused or failed; then nothing was written and the row stays running.
        """
        started = time.monotonic()
        cleanup_error = None
        try:
            if not isinstance(outcome, AttemptOutcome) or outcome.status not in (
                JobStatus.FAILED,
                JobStatus.CANCELLED,
            ):
                raise InputInvalid("outcome must be AttemptOutcome('failed' or 'cancelled', ...).")
            fence = self._fence_of(execution)
            with bounded_atomic(self.using, execution):
                now = self._now()
                row = _verify_fence(
                    fence,
                    execution.identity,
                    self.using,
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
                error = _error_text(outcome.message) if outcome.message else None
                changes: dict[str, Any] = {"error": error}
                if receipt is not None:
                    changes["result"] = receipt
                self._end(row, now, outcome.status, **changes)
            history.fenced_writes("finalize_atomically", [fence.lease], accepted=True, at=now)
        except Exception as exc:  # noqa: BLE001 - documented: never raises
            reason = exc.code if isinstance(exc, JobError) else type(exc).__name__
            return Finalization(
                state="pending-finalization",
                reason=f"{reason}: {getattr(exc, 'message', exc)}",
                cleanup_error=cleanup_error,
                elapsed=time.monotonic() - started,
                deadline_exceeded=isinstance(exc, DeadlineExceeded),
            )
        return Finalization(
            state="finalized", result_json=receipt, elapsed=time.monotonic() - started
        )

    def purge_older_than(self, cutoff: datetime) -> int:
        """Return 0: age alone never authorises deleting evidence (rows and attempts are kept)."""
        validation.aware(cutoff, "cutoff")
        return 0


def _error_text(error: Any) -> str:
    """Return the failure message of ``error`` for ``fail`` and ``finalize_atomically``.

    As in a batched flush (:func:`storable_message`), a character no database can store is
    replaced, the same on every database: a lone surrogate (an ``os.listdir()`` name in an
    exception) has no UTF-8 form, and PostgreSQL refuses NUL. Refusing the message instead
    would leave the attempt running, with its failure unrecorded.
    """
    if isinstance(error, BaseException):
        text = f"{type(error).__name__}: {error}"
    else:
        text = str(error)
    text = text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")
    if not text.strip():
        raise InputInvalid("A failure needs a message saying what went wrong.")
    validation.check_size(text, "error message")
    return text


def _check_job_scope(execution: Execution, row: Job | None) -> None:
    """Refuse an execution acting for another scope than the job's (``ScopeMismatch``)."""
    if row is not None and execution.identity.scope != row.scope:
        raise ScopeMismatch(
            f"The execution acts for scope {execution.identity.scope!r} but job {row.pk} "
            f"belongs to another scope; use an execution of the job's scope."
        )
