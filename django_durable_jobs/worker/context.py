"""JobContext: what an executor sees of its job, and the fenced ways it may write."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from .. import metrics
from ..rules import validation
from ..rules.errors import InputInvalid, JobCancelled, JobError, LeaseLost
from ..rules.execution import Execution, Identity, bind_write_fence
from ..rules.validation import JsonTooDeep, loads_strict
from ..rules.values import canonical_json
from ..store import completed_by
from .connections import persist

if TYPE_CHECKING:
    from ..models import Job
    from ..store import DurableJobStore, Lease

# An executor's own execution is bounded by its operation's timeout, or effectively not at all.
UNBOUNDED_SECONDS = 10 * 365 * 86_400.0


class Slept(BaseException):  # noqa: N818 - a control-flow signal, like SystemExit, not an error
    """Raised by ``ctx.sleep()`` once the sleep is recorded, to end the executor at once.

    A ``BaseException``, so an ``except Exception`` in the job's code does not swallow it.
    """

    def __init__(self, until: datetime) -> None:
        super().__init__(f"sleeping until {until}")
        self.until = until


class StepSequenceChanged(JobError):
    """A run's steps differ from those recorded by an earlier attempt of the same job."""

    code = "E_JOB_STEP_SEQUENCE"


class JobContext:
    """The running attempt of one job, handed to its executor as ``ctx``."""

    def __init__(
        self,
        store: DurableJobStore,
        lease: Lease,
        job: Job,
        *,
        cancel_event: threading.Event | None = None,
        timeout: float | None = None,
        retry_until: Callable[[], bool] | None = None,
    ) -> None:
        self.store = store
        self.lease = lease
        self._job = job  # the row as claimed: its attempt's span reads queue and trace context
        self.job_id = job.pk
        self.operation = job.operation
        self.attempt = job.attempts
        self.payload: Any = _stored_json(job.proposal, "proposal", job.pk)
        self.checkpoint_value: Any = (
            None if job.checkpoint is None else _stored_json(job.checkpoint, "checkpoint", job.pk)
        )
        self.cancel_event = cancel_event or threading.Event()
        self.lease_lost = False
        self.completed = False
        self.slept_until: datetime | None = None
        self._steps: list[tuple[str, str]] | None = None  # recorded by earlier attempts
        self._ran: list[str] = []  # this run's step names, in order
        self._upstream: dict[str, Any] | None = None
        # While the database restarts, ctx writes wait and retry instead of failing the job.
        self.retry_until = retry_until or (lambda: False)
        identity = Identity(job.scope, store.actor, job.operation, job.idempotency_key)
        execution = Execution.start(
            identity, budget=timeout or UNBOUNDED_SECONDS, cancel_event=self.cancel_event
        )
        self.execution = bind_write_fence(
            execution, lease, job.proposal_hash, using=store.using, clock=store.clock
        )

    def __repr__(self) -> str:
        return f"<JobContext {self.operation} {self.job_id} attempt {self.attempt}>"

    @property
    def cancelled(self) -> bool:
        """True once cancellation was requested or the lease was lost: stop soon."""
        return self.cancel_event.is_set()

    def raise_if_cancelled(self) -> None:
        """Raise ``JobCancelled`` when the job should stop (acknowledged as ``cancelled``)."""
        if self.cancelled:
            raise JobCancelled(f"Job {self.job_id} stopped on request at attempt {self.attempt}.")

    def checkpoint(self, value: Any) -> None:
        """Record ``value`` (JSON-serialisable) as the checkpoint a later attempt resumes from.

        ``checkpoint_value`` becomes the stored JSON parsed again, exactly what a later attempt
        will see (tuples become lists, keys become strings).
        """
        try:
            text = canonical_json(value)
        except (TypeError, ValueError) as exc:
            raise InputInvalid(f"The checkpoint cannot be stored as JSON: {exc}.") from exc
        self._fenced("checkpoint", lambda: self.store.checkpoint(self.lease, text))
        self.checkpoint_value = loads_strict(text)

    def progress(self, percent: float) -> None:
        """Report progress (0-100)."""
        self._fenced("progress", lambda: self.store.progress(self.lease, percent))

    def complete_atomically(self, mutation: Callable[[Execution], str]) -> str:
        """Write domain data and complete the job in one fenced transaction; return the receipt."""
        first = True

        def attempt() -> str:
            nonlocal first
            try:
                return self.store.complete_atomically(self.execution, mutation)
            except JobError:
                # A retry after the connection dropped during COMMIT: the first try may have
                # committed. Our own completion at our epoch is success, anything else is not.
                # The retry may also be refused before it reaches the row (ExecutionStopped):
                # meanwhile the heartbeat found the row complete, so no longer running, and
                # cancelled the execution as lost (found by the chaos run, tests/chaos).
                stored = None if first else self.store.get(self.job_id)
                if stored is not None and completed_by(stored, self.lease):
                    return stored.result
                raise
            finally:
                first = False

        receipt = self._fenced("complete_atomically", attempt)
        self.completed = True
        return receipt

    # -- from an ``async def`` operation (docs/worker.md#async-operations) ----------------------
    # The same fenced writes, awaited: each runs in a thread (``sync_to_async``), as Django's
    # database calls must outside a running event loop.

    async def acheckpoint(self, value: Any) -> None:
        """:meth:`checkpoint`, awaited."""
        await sync_to_async(self.checkpoint)(value)

    async def aprogress(self, percent: float) -> None:
        """:meth:`progress`, awaited."""
        await sync_to_async(self.progress)(percent)

    async def acomplete_atomically(self, mutation: Callable[[Execution], str]) -> str:
        """:meth:`complete_atomically`, awaited; ``mutation`` runs in the thread, not the loop."""
        return await sync_to_async(self.complete_atomically)(mutation)

    async def asleep(self, delay: float | timedelta) -> None:
        """:meth:`sleep`, awaited: nothing after it runs."""
        await sync_to_async(self.sleep)(delay)

    async def aupstream(self) -> dict[str, Any]:
        """:meth:`upstream`, awaited."""
        return await sync_to_async(self.upstream)()

    async def astep(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """:meth:`step`, awaited; ``fn`` may be an ``async def`` function (it is awaited)."""
        position, recorded = await sync_to_async(self._next_step)(name)
        if recorded is None:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
            recorded = await sync_to_async(self._record_step)(position, name, value=value)
        self._ran.append(name)
        return loads_strict(recorded)

    # -- steps, sleep and upstream results (docs/workflows.md) --------------------------------

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` once for this job; return its JSON result.

        The result is recorded under ``name`` in a fenced write: a later attempt (a reclaim, a
        retry) gets the recorded result back without calling ``fn``. ``fn``'s effects outside
        the database are at least once (a crash after them and before the record runs it
        again); use :meth:`step_atomically` for a database write that must happen once.
        """
        position, recorded = self._next_step(name)
        if recorded is None:
            recorded = self._record_step(position, name, value=fn(*args, **kwargs))
        self._ran.append(name)
        return loads_strict(recorded)

    def step_atomically(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Like :meth:`step`, but ``fn`` runs inside the transaction that records the step.

        The job's row is locked and the lease checked first; ``fn``'s writes to the same
        database commit with the record or not at all, so they happen exactly once.
        """
        position, recorded = self._next_step(name)
        if recorded is None:
            recorded = self._record_step(position, name, call=lambda: fn(*args, **kwargs))
        self._ran.append(name)
        return loads_strict(recorded)

    def sleep(self, delay: float | timedelta) -> None:
        """End this attempt without failing it; the job is due again after ``delay``.

        ``delay`` is seconds or a ``timedelta``. The slot and the lease are freed at once;
        steps and checkpoint are kept, and the attempt is not counted against the retry
        limit. Nothing after this call runs: it raises to end the executor. A job asked to
        cancel does not sleep: it raises ``JobCancelled`` instead, acknowledged as cancelled.
        """
        until = self._fenced("sleep", lambda: self.store.sleep(self.lease, delay))
        self.completed = True  # nothing is left to record
        self.slept_until = until
        raise Slept(until)

    def upstream(self) -> dict[str, Any]:
        """Return the results of this workflow job's parents, keyed by name (or id).

        A parent that did not complete (``on_upstream_failure="run"``) maps to None.
        """
        if self._upstream is None:
            self._upstream = persist(lambda: self.store.upstream(self.job_id), self.retry_until)
        return dict(self._upstream)

    def _next_step(self, name: str) -> tuple[int, str | None]:
        """Return the next step's position and its recorded result, if an attempt recorded it."""
        name = validation.name(name, "step name")
        if name in self._ran:
            raise InputInvalid(
                f"Step {name!r} already ran in this run of job {self.job_id}; step names are "
                f"unique per run (add a counter to names in a loop)."
            )
        if self._steps is None:
            self._steps = persist(lambda: self.store.recorded_steps(self.job_id), self.retry_until)
        position = len(self._ran)
        if position < len(self._steps):
            recorded_name, result = self._steps[position]
            if recorded_name != name:
                raise StepSequenceChanged(
                    f"Step {position + 1} of job {self.job_id} is {name!r} in this run but "
                    f"{recorded_name!r} was recorded by an earlier attempt; the job's code "
                    f"changed its steps. Keep the order of steps, or submit a new job."
                )
            return position, result
        # Past the recorded steps every recorded name already ran in this run (they are
        # replayed in order), so a repeat of one is the "already ran" refusal above.
        return position, None

    def _record_step(
        self, position: int, name: str, *, value: Any = None, call: Callable[[], Any] | None = None
    ) -> str:
        """Record the step under the fence; return its result's JSON."""
        text = self._fenced(
            "step",
            lambda: self.store.record_step(self.lease, position, name, value, call=call),
        )
        if self._steps is not None:
            self._steps.append((name, text))
        return text

    def _fenced(self, write: str, call: Callable[[], Any]) -> Any:
        """Return ``call()``, retried while the database restarts; count a ``LeaseLost``.

        A refusal also sets ``lease_lost``: the attempt is over, whatever its code does next.
        """
        try:
            return persist(call, self.retry_until)
        except LeaseLost:
            self.lease_lost = True
            metrics.stale_write_refused(self.operation, write)
            raise


def _stored_json(text: str | None, what: str, job_id: Any) -> Any:
    """Return the job's stored ``what`` parsed, or refuse text this app would not accept.

    Only a row changed outside the app holds such text; its attempt fails with this message.
    """
    try:
        return loads_strict(text)
    except (TypeError, ValueError) as exc:
        why = exc.nesting if isinstance(exc, JsonTooDeep) else exc
        raise InputInvalid(
            f"Job {job_id}'s stored {what} is not JSON this app accepts ({why}); it was changed "
            f"outside the app. Submit a new job with valid input."
        ) from None
