"""One attempt: build the context of a claim, call its executor, and turn how it ended into an outcome.

The *executor* is the callable that does the job's work, ``executor(ctx)``: the function a worker
registered with ``@operation``, or the one given to ``InProcessRunner``. Whatever it does becomes
an :class:`~django_durable_jobs.values.Outcome`: return → ``complete`` (even after a late
cancellation request: finished work is recorded as finished); ``JobCancelled`` → ``cancelled``
(when a request was recorded; otherwise ``failed``); any other exception → ``failed`` with its
message, and the exception's class path and traceback for the attempt's history row (the report
of a failed attempt is logged at WARNING with that traceback). The store writes it only while the
lease holds: a lost lease writes nothing, and the report says ``lease-lost``.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync

from ..observability import tracing
from ..rules import registry
from ..rules.errors import JobCancelled
from ..rules.values import Claimed, Outcome
from ..rules.vocabulary import AttemptOutcomeChoice
from .connections import persist
from .context import JobContext, Slept
from .reports import AttemptReport, Unwritten, log, report_recorded

if TYPE_CHECKING:
    from ..store import DurableJobStore

# The app's own source files: leading frames in them are cut from a job's traceback.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep

Executor = Callable[[JobContext], Any]
AsyncExecutor = Callable[[JobContext], Awaitable[Any]]


def context_of(
    store: DurableJobStore,
    claim: Claimed,
    cancel_event: threading.Event,
    *,
    retry_until: Callable[[], bool] | None = None,
) -> JobContext:
    """Return the context of ``claim``'s attempt, bounded by its operation's timeout if any.

    The claim carries the job row as the claim left it, so nothing is read again.
    """
    spec = registry.get(claim.job.operation)
    return JobContext(
        store,
        claim.lease,
        claim.job,
        cancel_event=cancel_event,
        timeout=spec.timeout if spec else None,
        retry_until=retry_until,
    )


def registered_executor(operation: str) -> Executor:
    """Return the executor of ``operation``: its registered function, given ``ctx.payload``.

    An operation this process does not know runs as a failure that says so. An ``async def``
    operation run in a thread runs to its end in an event loop of its own (``async_to_sync``).
    """
    spec = registry.get(operation)
    if spec is None:
        unknown = (
            f"No operation {operation!r} is registered in this worker; register it with "
            f"@operation and restart, or request a retry."
        )
        return _raiser(LookupError(unknown))
    if inspect.iscoroutinefunction(spec.func):
        in_a_loop = async_to_sync(spec.func)
        return lambda ctx: in_a_loop(ctx, ctx.payload)
    return lambda ctx: spec.func(ctx, ctx.payload)


def in_a_thread(executor: Callable[..., Any]) -> Executor:
    """Return ``executor`` as a thread runs it: an ``async def`` one runs to its end in an event
    loop of its own (``async_to_sync``), as a registered ``async def`` operation in a thread does,
    instead of returning an unawaited coroutine as its result."""
    if inspect.iscoroutinefunction(executor):
        return async_to_sync(executor)
    return executor


def runs_on_loop(operation: str) -> bool:
    """Return True when ``operation``'s function is a coroutine function (``async def``)."""
    spec = registry.get(operation)
    return spec is not None and inspect.iscoroutinefunction(spec.func)


def registered_coroutine(operation: str) -> AsyncExecutor:
    """Return the executor of the ``async def`` operation ``operation``, for the event loop."""
    spec = registry.get(operation)
    if spec is None or not inspect.iscoroutinefunction(spec.func):
        raise LookupError(f"{operation!r} is not a registered async operation")
    return lambda ctx: spec.func(ctx, ctx.payload)


def run(ctx: JobContext, executor: Executor) -> Outcome | None:
    """Run ``executor(ctx)`` and return the outcome to record, or None when it recorded its own.

    Nothing is written here: the worker records outcomes in batches (``record_outcomes``).
    The attempt's consumer span (``tracing``) is current while the executor runs.
    """
    with tracing.consumer(ctx._job) as span:
        outcome, raised = _call(executor, ctx)
        span.ended(_traced(outcome, raised), raised, lease_lost=ctx.lease_lost)
    return outcome


async def run_on_loop(ctx: JobContext, executor: AsyncExecutor) -> Outcome | None:
    """Await ``executor(ctx)`` on the event loop; return the outcome as :func:`run` does.

    A ``CancelledError`` (its task was cancelled: a cancellation request, a lost lease, the
    timeout, a second signal) ends it as ``JobCancelled`` does.
    """
    with tracing.consumer(ctx._job) as span:
        outcome, raised = await _await(executor, ctx)
        span.ended(_traced(outcome, raised), raised, lease_lost=ctx.lease_lost)
    return outcome


def run_and_record(
    store: DurableJobStore,
    ctx: JobContext,
    executor: Executor,
    claim: Claimed,
    *,
    retry_until: Callable[[], bool] | None = None,
) -> AttemptReport:
    """Run ``executor(ctx)``, record its outcome at once and return the report (in-process runs).

    The rules and the write are the worker's (:func:`run`, ``record_outcomes``), one attempt
    per transaction instead of a batch. A database error is retried while ``retry_until()``
    holds, then raised: nothing was written, and the lease will expire.
    """
    started = time.monotonic()
    outcome = run(ctx, executor)
    if outcome is None:
        report = AttemptReport.of(claim, ended_itself(ctx), time.monotonic() - started)
    elif stopped_by_lost_lease(ctx, outcome):
        report = AttemptReport.of(
            claim, Unwritten.LEASE_LOST, time.monotonic() - started, outcome.error
        )
    else:
        (recorded,) = persist(
            lambda: store.record_outcomes([outcome]), retry_until or (lambda: False)
        )
        report = report_recorded(claim, recorded, time.monotonic() - started)
    log(report)
    return report


def ended_itself(ctx: JobContext | None) -> AttemptOutcomeChoice:
    """Return how an attempt that recorded its own end ended: it slept, or it completed."""
    if ctx is not None and ctx.slept_until is not None:
        return AttemptOutcomeChoice.SLEPT
    return AttemptOutcomeChoice.COMPLETE


def stopped_by_lost_lease(ctx: JobContext | None, outcome: Outcome | None) -> bool:
    """Return True when ``outcome`` must not be written: the attempt was told its lease is lost.

    A ``ctx`` write refused with ``LeaseLost``, or a heartbeat that found the lease gone, ends
    the attempt; what its code did next (raise, stop) is not the job's failure. Offering it to
    the fence anyway is not harmless: each transaction is judged by the clock when it starts, so
    a renewal sent before the refused write but reaching the database after it can revive the
    lease, and the failure then commits, ending a resumable job as ``failed`` because of the
    network (found by tests/proof/test_partition.py on a lossy link). Finished work
    (``complete``) is still offered to the fence.
    """
    return (
        ctx is not None
        and ctx.lease_lost
        and outcome is not None
        and outcome.status != AttemptOutcomeChoice.COMPLETE
    )


def _call(executor: Executor, ctx: JobContext) -> tuple[Outcome | None, Exception | None]:
    """Run ``executor(ctx)``; return the outcome it ended with, and the exception it raised.

    The outcome is None when the executor completed the job itself (``ctx.complete_atomically``):
    there is nothing left to record.
    """
    try:
        value = executor(ctx)
    except BaseException as exc:  # noqa: BLE001 - sorted by _raised, which re-raises the rest
        return _raised(ctx, exc)
    return _returned(ctx, value)


async def _await(
    executor: AsyncExecutor, ctx: JobContext
) -> tuple[Outcome | None, Exception | None]:
    """Await ``executor(ctx)``; return what :func:`_call` returns for a function."""
    try:
        value = await executor(ctx)
    except BaseException as exc:  # noqa: BLE001 - sorted by _raised, which re-raises the rest
        return _raised(ctx, exc)
    return _returned(ctx, value)


def _raised(ctx: JobContext, exc: BaseException) -> tuple[Outcome | None, Exception | None]:
    """Return the outcome of an executor that raised ``exc``; re-raise what is not the job's."""
    if isinstance(exc, Slept):
        return None, None  # ctx.sleep() ended the attempt itself
    if isinstance(exc, (JobCancelled, asyncio.CancelledError)):
        return Outcome.stopped(ctx.lease), None
    if not isinstance(exc, Exception):
        raise exc  # SystemExit, KeyboardInterrupt: not the job's failure
    raised = _from_job_code(exc)  # logged with its traceback at the end
    return Outcome.of_error(ctx.lease, raised), raised


def _returned(ctx: JobContext, value: Any) -> tuple[Outcome | None, None]:
    if ctx.completed:
        return None, None
    return Outcome.of_result(ctx.lease, value), None


def _traced(outcome: Outcome | None, raised: Exception | None) -> str:
    """Return what the attempt's span says of how the executor ended, as its code saw it.

    A value it returned is ``complete`` there even when the store refuses it as a result.
    """
    if raised is not None:
        return "failed"
    if outcome is not None and outcome.status == AttemptOutcomeChoice.CANCELLED:
        return "cancelled"
    return "complete"


def _from_job_code(error: Exception) -> Exception:
    """Return ``error`` with the app's own leading frames cut from its traceback.

    The stored and logged traceback then starts where the job's code was called, not in the
    worker's machinery. Frames of the app further down (a store call the job made) stay; an error
    raised before any job code ran keeps its last frame.
    """
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None and _is_ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return error.with_traceback(tb)


def _is_ours(filename: str) -> bool:
    return os.path.realpath(filename).startswith(_PACKAGE_DIR)


def _raiser(error: Exception) -> Executor:
    def raise_it(ctx: JobContext) -> Any:
        raise error

    return raise_it
