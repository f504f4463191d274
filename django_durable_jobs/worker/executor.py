"""Run one claimed job and turn whatever happens into its outcome.

Return → ``complete`` (even after a late cancellation request: finished work is recorded as
finished); ``JobCancelled`` → ``cancelled`` when a request was recorded; any other exception →
``failed`` with its message. A lost lease means the outcome belongs to the new owner: nothing is
written and the loss is logged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import registry
from ..errors import InputInvalid, JobCancelled, LeaseLost
from ..store.outcomes import result_text
from ..values import Claimed, Outcome
from .connections import persist
from .context import JobContext

if TYPE_CHECKING:
    from ..store import DurableJobStore, Lease

logger = logging.getLogger("django_durable_jobs.worker")

COMPLETE = "complete"
FAILED = "failed"
CANCELLED = "cancelled"
LEASE_LOST = "lease-lost"
RECORDED = "recorded"  # the executor completed the job itself (ctx.complete_atomically)
ERROR_MAX_CHARS = 10_000


@dataclass(frozen=True)
class ExecutionReport:
    job_id: object
    operation: str
    attempt: int
    epoch: int
    outcome: str
    duration: float
    error: str | None = None


def prepare(
    store: DurableJobStore,
    claim: Claimed,
    cancel_event: threading.Event,
    *,
    retry_until: Callable[[], bool] | None = None,
) -> tuple[JobContext, Callable[[JobContext], Any]]:
    """Return the context of ``claim``'s attempt and the callable that runs it.

    The claim carries the job row as the claim left it, so nothing is read again. An operation
    this process does not know runs as a failure that says so.
    """
    job = claim.job
    spec = registry.get(job.operation)
    ctx = JobContext(
        store,
        claim.lease,
        job,
        cancel_event=cancel_event,
        timeout=spec.timeout if spec else None,
        retry_until=retry_until,
    )
    if spec is None:
        unknown = (
            f"No operation {job.operation!r} is registered in this worker; register it with "
            f"@operation and restart, or request a retry."
        )
        return ctx, _raiser(LookupError(unknown))
    return ctx, lambda c: spec.func(c, c.payload)


def run(ctx: JobContext, func: Callable[[JobContext], Any]) -> Outcome | None:
    """Run ``func(ctx)`` and return the outcome to record, or None when it recorded its own.

    Nothing is written here: the worker records outcomes in batches (``record_outcomes``).
    """
    kind, value = _call(func, ctx)
    if kind == RECORDED:
        return None
    if kind == COMPLETE:
        try:
            return Outcome.completed(ctx.lease, result_text(value))
        except InputInvalid as exc:  # the return value cannot be stored: the job failed
            return Outcome.failed(ctx.lease, f"The executor's result was refused: {exc.message}")
    if kind == CANCELLED:
        return Outcome.cancelled(ctx.lease)
    return Outcome.failed(ctx.lease, message_of(value))


def _raiser(error: Exception) -> Callable[[JobContext], Any]:
    def raise_it(ctx: JobContext) -> Any:
        raise error

    return raise_it


def run_and_record(
    store: DurableJobStore,
    ctx: JobContext,
    func: Callable[[JobContext], Any],
    *,
    retry_until: Callable[[], bool] | None = None,
) -> ExecutionReport:
    """Run ``func(ctx)`` and record its outcome under ``ctx.lease``, as :func:`execute` does.

    For callers that hold a lease and an executor callable rather than a registered operation
    (``JobManager``). The outcome rules are the same: return → complete, ``JobCancelled`` →
    cancelled, any other exception → failed, a lost lease → nothing written.
    """
    started = time.monotonic()
    outcome = _call(func, ctx)
    kind, error = persist(
        lambda: _record(store, ctx.lease, *outcome), retry_until or (lambda: False)
    )
    report = ExecutionReport(
        ctx.job_id,
        ctx.operation,
        ctx.attempt,
        ctx.lease.epoch,
        kind,
        time.monotonic() - started,
        error,
    )
    log(report)
    return report


def log(report: ExecutionReport) -> None:
    """Log one line for an attempt that ended."""
    logger.info(
        "job %s %s attempt=%s epoch=%s outcome=%s duration=%.3fs%s",
        report.job_id,
        report.operation,
        report.attempt,
        report.epoch,
        report.outcome,
        report.duration,
        f" error={report.error}" if report.error else "",
    )


def _call(func: Callable[[JobContext], Any], ctx: JobContext) -> tuple[str, Any]:
    """Run ``func(ctx)``; return the outcome to record, without writing anything yet."""
    try:
        value = func(ctx)
    except JobCancelled:
        return CANCELLED, None
    except Exception as exc:  # noqa: BLE001 - any crash of the executor is the job's failure
        logger.debug("executor of %s raised", ctx.job_id, exc_info=True)
        return FAILED, exc
    if ctx.completed:
        return RECORDED, None
    return COMPLETE, value


def _record(store: DurableJobStore, lease: Lease, kind: str, value: Any) -> tuple[str, str | None]:
    """Write the outcome under the lease; a lost lease writes nothing and says so."""
    try:
        if kind == RECORDED:
            return COMPLETE, None
        if kind == COMPLETE:
            try:
                store.complete(lease, value)
                return COMPLETE, None
            except InputInvalid as exc:  # the return value cannot be stored: the job failed
                kind, value = FAILED, f"The executor's result was refused: {exc.message}"
        if kind == CANCELLED:
            try:
                store.cancel(lease)
                return CANCELLED, None
            except InputInvalid:  # stopped without a recorded request
                kind, value = FAILED, "The executor raised JobCancelled without a request."
        message = message_of(value)
        store.fail(lease, message)
        return FAILED, message
    except LeaseLost as exc:
        return LEASE_LOST, exc.message


def message_of(error: Any) -> str:
    """Return ``error`` as a failure message the store always accepts.

    Bounded in length, and with characters that have no UTF-8 form (lone surrogates) replaced:
    the worker writes outcomes in batches, where one refused message would refuse them all.
    """
    text = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else str(error)
    text = text.encode("utf-8", "replace").decode("utf-8").strip()
    text = text or "The executor failed without a message."
    return text if len(text) <= ERROR_MAX_CHARS else text[: ERROR_MAX_CHARS - 1] + "…"
