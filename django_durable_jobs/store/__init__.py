"""DurableJobStore: the only code that writes job and attempt rows.

Every mutation opens and commits its own transaction. Every write that only the lease holder may make
changes the row only where id, owner, epoch, ``status = running`` and an unexpired lease all match in
SQL, and raises ``LeaseLost`` when nothing matched. Each attempt leaves its ``JobAttempt`` row in the
transaction that ends it.

Each method is a few lines calling one room of plain functions with the store's :class:`Client`
(``client.py``): ``claiming``, ``leases``, ``ending`` (the only code that ends an attempt),
``requests``, ``atomic``, ``capacity``, ``submitting`` (the one way a job is made), ``reads``,
``schedules``, ``ticks``, ``workers``, ``clock``, ``steps`` and ``workflows`` (behind
``store.workflows``, ``workflow_face.py``), over the one fence (``fence.py``) and the
hand-compiled statements of ``sql/``. Fencing is audited by reading ``fence.py``.
"""

import builtins
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ..models import Job, Schedule, WorkerProcess
from ..rules import validation
from ..rules.execution import Execution, Identity, bind_write_fence
from ..rules.outcome import failure_details, failure_message, result_text
from ..rules.values import (
    AttemptOutcome,
    CandidatePage,
    Claimed,
    Finalization,
    Lease,
    Outcome,
    PageQuery,
    Recorded,
    RequestResult,
    Submission,
)
from ..rules.vocabulary import JobStatus
from ..schedules import ScheduleSpec
from . import atomic, claiming, ending, reads, requests, schedules, submitting, ticks, workers
from . import clock as clock_room
from . import leases as lease_room
from . import pauses as pause_room
from . import steps as step_room
from . import workflows as workflow_room
from .client import Client
from .clock import ClockReading
from .fence import assert_write_fence, completed_by
from .pauses import PauseChange, PauseNotFound
from .schedules import Reconciliation, ScheduleNotFound
from .submitting import MAX_SUBMISSIONS
from .ticks import MISSED_AFTER, TickPass
from .workflow_face import WorkflowFace
from .workflows import WorkflowNotFound

__all__ = [
    "MAX_SUBMISSIONS",
    "MISSED_AFTER",
    "AttemptOutcome",
    "CandidatePage",
    "ClockReading",
    "DurableJobStore",
    "Execution",
    "Finalization",
    "Identity",
    "Lease",
    "PageQuery",
    "PauseChange",
    "PauseNotFound",
    "Reconciliation",
    "RequestResult",
    "ScheduleNotFound",
    "Submission",
    "TickPass",
    "WorkflowFace",
    "WorkflowNotFound",
    "assert_write_fence",
    "bind_write_fence",
    "completed_by",
]


class DurableJobStore:
    """A client of the job table: one owner id, one scope, one clock.

    ``DurableJobStore(*, scope=None, actor=None, lease_seconds=30.0, using=None, clock=None)``;
    ``using=None`` is the alias the ``DATABASE`` setting names (``"default"`` unless set).

    ``lease=`` is the deprecated name of ``lease_seconds=``; it still works, with a warning.
    """

    def __init__(
        self,
        *,
        scope: str | None = None,
        actor: str | None = None,
        lease_seconds: float = 30.0,
        using: str | None = None,
        clock: Callable[[], datetime] | None = None,
        lease: float | None = None,
    ) -> None:
        self._client = Client.build(
            scope=scope,
            actor=actor,
            lease_seconds=lease_seconds,
            using=using,
            clock=clock,
            lease=lease,
        )

    scope = property(lambda self: self._client.scope, doc="The scope this client serves, or None.")
    actor = property(lambda self: self._client.actor, doc="Who acts, as recorded on claims.")
    using = property(lambda self: self._client.using, doc="The database alias of the job tables.")
    clock = property(lambda self: self._client.clock, doc="The clock every write is stamped by.")
    lease_seconds = property(
        lambda self: self._client.lease_seconds, doc="How long a claim's lease lasts, in seconds."
    )

    @property
    def owner_id(self) -> str:
        """The owner id every lease this client takes carries."""
        return self._client.owner_id

    @owner_id.setter
    def owner_id(self, value: str) -> None:
        # Tests act as another process's client by taking over its owner id.
        self._client = replace(self._client, owner_id=value)

    @property
    def lease(self) -> float:
        """Deprecated name of :attr:`lease_seconds`."""
        return self.lease_seconds

    def __repr__(self) -> str:
        return f"<DurableJobStore scope={self.scope!r} actor={self.actor!r} owner={self.owner_id}>"

    # -- claiming, leases, ending, requests, atomic domain writes (rooms-core) ------------------

    def claim(
        self, job_id: Any, *, max_running: int | None = None, execution: Execution | None = None
    ) -> Lease:
        """Claim an unclaimed pending job, or take over a running job whose lease expired."""
        return claiming.claim(self._client, job_id, max_running=max_running, execution=execution)

    def claim_next(
        self,
        *,
        operations: Iterable[str] | None = None,
        queues: Iterable[str] | None = None,
        limit: int = 1,
        max_running: int | None = None,
        resume_expired: Iterable[str] | None = None,
    ) -> list[Lease]:
        """Claim up to ``limit`` claimable jobs, best first, skipping rows others are claiming.

        Claimable: unclaimed pending work that is due; expired leases of the ``resume_expired``
        operations (default: those registered with ``on_expired="resume"``); failed, cancelled or
        expired jobs with a retry request. Order: priority desc, run_after, created_at.
        """
        claimed = self.claim_batch(
            operations=operations,
            queues=queues,
            limit=limit,
            max_running=max_running,
            resume_expired=resume_expired,
        )
        return [claim.lease for claim in claimed]

    def claim_batch(
        self,
        *,
        operations: Iterable[str] | None = None,
        queues: Iterable[str] | None = None,
        limit: int = 1,
        max_running: int | None = None,
        resume_expired: Iterable[str] | None = None,
        same_turn: bool = False,
    ) -> list[Claimed]:
        """Claim as ``claim_next`` does; return each lease with its job row already loaded.

        When only pending work is claimable and no ``max_running`` limit applies, the batch is
        taken in one statement; otherwise candidates are locked and taken one by one, in claim
        order, with capacity counted as they are taken (``store/claiming.py``). Pending work is
        claimed in turns across scopes, so no scope's backlog starves another's: each claim
        starts at the scope after the one the last claim served. ``same_turn=True`` makes a
        claim the second of the last one's turn: it starts at the scope that claim started at
        (the worker's grown buffer claims its extra short jobs so, or the scope the small first
        claim missed would get every large one).
        """
        return claiming.claim_batch(
            self._client,
            operations=operations,
            queues=queues,
            limit=limit,
            max_running=max_running,
            resume_expired=resume_expired,
            same_turn=same_turn,
        )

    def heartbeat(self, lease: Lease) -> Job:
        """Renew the lease and return the row (so the owner sees requests made meanwhile)."""
        return lease_room.heartbeat(self._client, lease)

    def renew_leases(self, leases: Sequence[Lease]) -> list[Job | None]:
        """Renew every lease in one fenced statement; return each job's row, None where lost.

        The rows let the owner see cancellation requests made meanwhile. A lease that expired
        (or was taken over, or belongs to another client) cannot revive itself: None.
        """
        return lease_room.renew(self._client, leases)[0]

    def checkpoint(self, lease: Lease, value_json: str) -> None:
        """Record the owner's checkpoint (exact JSON text); it survives reclaim and retry."""
        lease_room.checkpoint(self._client, lease, value_json)

    def progress(self, lease: Lease, percent: float) -> None:
        """Record progress, clamped to 0-100."""
        lease_room.progress(self._client, lease, percent)

    def complete(self, lease: Lease, result: Any = None) -> None:
        """Record the outcome: running → complete, progress 100, ``result`` stored as JSON.

        A result that cannot be stored is refused (``InputInvalid``) before anything is written.
        """
        text = result_text(result)
        ending.end_one(self._client, Outcome.completed(lease, text), write=JobStatus.COMPLETE)

    def fail(self, lease: Lease, error: Any) -> None:
        """Record a failure: running → failed with ``error`` as the message.

        When ``error`` is an exception, its attempt's history row also keeps its class path and
        its traceback (bounded: :func:`~django_durable_jobs.rules.outcome.traceback_text`). A blank
        message is refused (``InputInvalid``) before anything is written. The operation's retry
        policy may schedule another attempt.
        """
        outcome = Outcome.failed(lease, failure_message(error), **failure_details(error))
        ending.end_one(self._client, outcome, write=JobStatus.FAILED)

    def cancel(self, lease: Lease) -> None:
        """Acknowledge a recorded cancellation request: running → cancelled.

        Without a recorded request it is refused (``InputInvalid``), as in ``record_outcomes``.
        """
        ending.end_one(self._client, Outcome.cancelled(lease), write=JobStatus.CANCELLED)

    def record_outcomes(self, outcomes: Sequence[Outcome]) -> list[Recorded]:
        """End many attempts in one transaction; return, per outcome, what was written.

        Each row is locked and must still be the outcome's lease (owner, epoch, running,
        unexpired): the UPDATE repeats that fence in SQL. A row that fails it gets ``LeaseLost``
        and is left to its new owner; the others commit, each with its ``JobAttempt`` row.
        ``complete`` stores the result and progress 100; ``failed`` schedules an automatic retry
        when the operation's policy allows; ``cancelled`` without a recorded request is refused
        for that outcome alone (``InputInvalid``, nothing written for it), as ``cancel()`` is;
        ``Outcome.stopped`` without one is a failure saying so.

        An outcome that cannot be stored as given (a result that is not storable JSON text, a
        failure message with a lone surrogate, a traceback too long) ends its own attempt as
        ``failed``, with a message saying why, and costs no other outcome of the call. Only a
        value that is not an outcome at all refuses the whole call (``InputInvalid``).
        """
        return ending.record(self._client, outcomes)

    def release(self, leases: Sequence[Lease]) -> int:
        """Hand back claims whose executor never started; return how many were released.

        No code of such an attempt ran, so it is not counted in ``attempts`` and any worker may
        take the job again at once, whatever its ``on_expired``: a job claimed from the pending
        backlog is pending again (at the claim's epoch, which never goes back); a retry or a
        resumed lease ends its lease now with a retry request. Either way the history records a
        ``released`` attempt. Leases no longer held are skipped; a lease listed twice is
        released once.
        """
        return ending.release(self._client, leases)

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
        return requests.request_cancel(self._client, job_id, execution=execution)

    def request_retry(self, job_id: Any) -> bool:
        """Ask for a new attempt of a failed, cancelled or expired job; False when not ended.

        :meth:`request_retry_result` says what happened in more words.
        """
        return self.request_retry_result(job_id).accepted

    def request_retry_result(self, job_id: Any) -> RequestResult:
        """Record that a person wants a new attempt; return what it did, with the job after it.

        A job that has not ended needs no retry (``not-ended``); a complete, legacy or defective
        one is refused (``NotReclaimable``), and so is a workflow's job whose parents have not
        all completed (retry the workflow instead). The request is due at once: a person does
        not wait out a retry policy's backoff.
        """
        return requests.request_retry(self._client, job_id)

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
        return atomic.retry_atomically(
            self._client, job_id, execution, retain_outcome, max_running=max_running
        )

    def complete_atomically(
        self, execution: Execution, mutation: Callable[[Execution], str]
    ) -> str:
        """Run the domain write and complete the job in one fenced transaction; return the receipt.

        Any fault rolls everything back and the job stays running at the same epoch.
        """
        return atomic.complete_atomically(self._client, execution, mutation)

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
        return atomic.finalize_atomically(self._client, execution, outcome, bookkeeping)

    def purge_older_than(self, cutoff: datetime) -> int:
        """Return 0, and warn: evidence is never deleted by age (deprecated; do not call it).

        Job rows and their attempts are kept whatever their age; a bad ``cutoff`` is still
        refused (``InputInvalid``).
        """
        warnings.warn(
            "purge_older_than() is deprecated and does nothing: evidence is never deleted by "
            "age (job rows and their attempts are kept).",
            DeprecationWarning,
            stacklevel=2,
        )
        validation.aware(cutoff, "cutoff")
        return 0

    # -- submitting, reads, schedules, worker rows, clock (rooms-edge) ---------------------------

    def insert(
        self,
        operation: str,
        *,
        submission: Submission | None = None,
        max_running: int | None = None,
        job_id: Any = None,
    ) -> Lease | None:
        """Submit and claim at once: the job is created running, owned by this client.

        Return its lease, or None for a repeat of an identical earlier submission (nothing is
        claimed or run then).
        """
        return submitting.insert(
            self._client,
            operation,
            submission=submission,
            max_running=max_running,
            job_id=job_id,
        )

    def find_submission(self, operation: str, submission: Submission) -> Job | None:
        """Return the job of an identical earlier submission, or None (read-only)."""
        return submitting.find_submission(self._client, operation, submission)

    def defer(
        self,
        operation: str,
        submission: Submission,
        *,
        job_id: Any = None,
        execution: Execution | None = None,
        in_caller_transaction: bool = False,
        queue: str | None = None,
        priority: int = 0,
        run_after: datetime | None = None,
    ) -> Job:
        """Submit pending work, or return the identical earlier job unchanged. Start nothing.

        With ``in_caller_transaction=True`` the row is written in the caller's open atomic block
        and exists only if the caller commits. Without an execution a new job is one statement
        (its NOTIFY included on PostgreSQL) and a repeat one two, each atomic on its own.
        """
        return submitting.defer(
            self._client,
            operation,
            submission,
            job_id=job_id,
            execution=execution,
            in_caller_transaction=in_caller_transaction,
            queue=queue,
            priority=priority,
            run_after=run_after,
        )

    def defer_many(
        self,
        operation: str,
        submissions: Iterable[Submission],
        *,
        queue: str | None = None,
        priority: int = 0,
        run_after: datetime | None = None,
        in_caller_transaction: bool = False,
    ) -> builtins.list[Job]:
        """Submit pending work for each submission; return their jobs in the same order.

        Each follows ``defer``'s rules: an identical earlier submission returns its job
        unchanged (a key given twice with the same proposal returns one job twice). One proposal
        that differs from its key's earlier one refuses the whole call with
        ``IdempotencyConflict`` and writes nothing. The rows go in a few multi-row statements
        in one transaction (a savepoint in the caller's, with ``in_caller_transaction=True``).
        """
        return submitting.defer_many(
            self._client,
            operation,
            submissions,
            queue=queue,
            priority=priority,
            run_after=run_after,
            in_caller_transaction=in_caller_transaction,
        )

    def get(self, job_id: Any) -> Job | None:
        """Return the job in this store's scope, with ``ownership`` assessed, or None."""
        return reads.get(self._client, job_id)

    def list(self, status: str | None = None) -> builtins.list[Job]:
        """Return the jobs in scope, oldest first, optionally of one status."""
        return reads.list(self._client, status)

    def list_page(self, query: PageQuery, execution: Execution) -> CandidatePage:
        """Return one bounded keyset page of an operation's jobs, ordered by (created_at, id)."""
        return reads.list_page(self._client, query, execution)

    def page(
        self,
        *,
        operation: str | None = None,
        status: str | None = None,
        ownership: str | None = None,
        limit: int = 25,
        after: str | None = None,
    ) -> CandidatePage:
        """Return one keyset page of this scope's jobs, oldest first, for triage surfaces.

        Unlike :meth:`list_page` it needs no execution and may span operations or filter by
        ownership (computed by the database). ``next_cursor`` is signed and bound to this store's
        scope and the filters; any other use, or an altered cursor, is ``ScopeMismatch``.
        """
        return reads.page(
            self._client,
            operation=operation,
            status=status,
            ownership=ownership,
            limit=limit,
            after=after,
        )

    def pause_schedule(self, name: str) -> Schedule:
        """Pause the schedule ``name``: it enqueues nothing until resumed. Return its row.

        Pausing a paused schedule changes nothing. The returned row's ``changed`` attribute says
        whether this call paused it (False: it already was, since ``paused_at`` by
        ``paused_by``). A name no row has raises :class:`ScheduleNotFound`.
        """
        return schedules.pause(self._client, name)

    def resume_schedule(self, name: str) -> Schedule:
        """Resume the schedule ``name`` and return its row (``changed``: whether it was paused).

        The ticks that fell due while it was paused are missed ticks: its catch-up policy
        decides which of them are still enqueued.
        """
        return schedules.resume(self._client, name)

    def pause(
        self,
        target: str,
        name: str,
        *,
        scope: str | None = None,
        reason: str = "",
        by: str | None = None,
    ) -> PauseChange:
        """Pause a queue or an operation (``target``), in ``scope`` or (``""``) every scope.

        Commits before it returns: from then on no worker claims the work it holds, which stays
        pending. Pausing what is already paused returns the pause in force (``changed`` False).
        ``by`` defaults to this store's actor. See ``store/pauses.py``.
        """
        return pause_room.pause(self._client, target, name, scope=scope, reason=reason, by=by)

    def resume(
        self,
        target: str | None = None,
        name: str | None = None,
        *,
        scope: str | None = None,
        pause_id: int | None = None,
        by: str | None = None,
    ) -> PauseChange:
        """End the pause in force of a queue or operation (or the pause ``pause_id``).

        The row is kept as evidence (``active`` NULL, ``resumed_at``, ``resumed_by``); on
        PostgreSQL idle workers are woken at once. Nothing in force: ``PauseNotFound``.
        """
        return pause_room.resume(self._client, target, name, scope=scope, pause_id=pause_id, by=by)

    def pauses(self, *, active: bool | None = True, limit: int = 100) -> builtins.list:
        """Return the pauses in force (``active=None``: with the ended ones), newest first."""
        return pause_room.list_pauses(self._client, active=active, limit=limit)

    def reconcile_schedules(
        self, declared: Mapping[str, ScheduleSpec], owner_id: str | None = None
    ) -> Reconciliation:
        """Bring the schedule rows in line with the schedules this process declares.

        ``owner_id`` is this process's worker row (default: this store's owner id; the row must
        exist, see ``register_worker``). Its ``schedules`` column gets ``{name: definition
        hash}`` first, so that other processes see what it declares. Then:

        * a declared schedule without a row gets one (an interval's anchor: the spec's, or now
          truncated to the whole second);
        * a row whose definition differs is updated (pause, last tick, last job and anchor are
          kept, unless the spec gives an anchor), unless a live worker that started *later*
          than this one declares another definition: this one is then an old worker of a
          rolling deploy, and the row is left to the newer one;
        * a row whose hash is the declaration's but whose stored fields are not (edited by
          hand, or broken: a cron expression or time zone this host cannot read) is rewritten
          from the declaration: *repaired*;
        * a row no live worker declares (this one included) is marked removed, never deleted.

        Each row is written in a transaction of its own. Return what changed.
        """
        return schedules.reconcile(self._client, declared, owner_id)

    def enqueue_due_ticks(
        self, now: datetime | None = None, *, missed_after: float = MISSED_AFTER
    ) -> TickPass:
        """Enqueue the due ticks of every active schedule (not paused, not removed); one pass.

        For each schedule: the ticks after its ``last_tick_at`` (or, before its first, after the
        row was created) up to ``now`` (default: the store's clock), less the missed ones its
        catch-up policy drops (see ``store/ticks.py``, ``missed_after`` in seconds). Each is
        enqueued in a transaction of its own with the idempotency key ``tick_key(name, tick)``;
        with overlap ``skip`` a tick is skipped (logged at INFO) while the schedule's last job is
        pending or running. ``last_tick_at`` only moves forward.

        A quota's refusal (``CapacityReached``) is logged at WARNING and ends that schedule's
        pass without advancing ``last_tick_at``: the tick is tried again on the next pass, not
        lost. Any other refusal (``JobError``, e.g. an operation this process does not know) is
        logged at ERROR, the same way. A scoped store only serves its scope's schedules.

        A row this host cannot read (``row_problem``), or whose ticks fail to compute, is
        skipped and named in the summary's ``broken`` with the reason and the fix; it is not
        logged here, so that a caller running a pass every second reports it once (the
        scheduler does). The other schedules are enqueued as usual. Database errors propagate:
        the caller retries the whole pass later.
        """
        return ticks.submit_due(self._client, now, missed_after=missed_after)

    def register_worker(
        self,
        *,
        concurrency: int,
        queues: Iterable[str] | None = None,
        operations: Iterable[str] | None = None,
    ) -> WorkerProcess:
        """Create (or renew) the row of the worker that owns this store's leases."""
        return workers.register(
            self._client, concurrency=concurrency, queues=queues, operations=operations
        )

    def worker_heartbeat(self, *, leases_held: int, stopping: bool) -> None:
        """Refresh this worker's row: it is alive and holds ``leases_held`` leases."""
        workers.heartbeat(self._client, leases_held=leases_held, stopping=stopping)

    def worker_stopped(self) -> None:
        """Mark this worker's row as cleanly stopped."""
        workers.stopped(self._client)

    def database_now(self) -> datetime:
        """Return the database server's current time (aware, UTC). Writes nothing."""
        return clock_room.database_now(self._client)

    def clock_skew(self) -> ClockReading:
        """Measure the store's clock against the database's with one query. Writes nothing.

        Leases are judged by the clock of whoever reads them, so two hosts whose clocks disagree
        disagree about which leases are alive; the database's clock is the reference they share.
        """
        return clock_room.clock_skew(self._client)

    # -- steps, sleep and workflows (docs/workflows.md) ----------------------------------------

    def record_step(
        self,
        lease: Lease,
        position: int,
        name: str,
        result: Any = None,
        *,
        call: Callable[[], Any] | None = None,
    ) -> str:
        """Record a step's result under ``lease``'s fence; return its JSON (``ctx.step``).

        With ``call``, the result is ``call()`` run inside the fenced transaction, so its
        writes and the record commit together (``ctx.step_atomically``).
        """
        return step_room.record_step(self._client, lease, position, name, result, call=call)

    def recorded_steps(self, job_id: Any) -> builtins.list[tuple[str, str]]:
        """Return the job's recorded steps as (name, result JSON), in order. Writes nothing."""
        return step_room.recorded_steps(self._client, job_id)

    def sleep(self, lease: Lease, seconds: Any) -> datetime:
        """End the attempt without failing it; the job is due again after ``seconds``.

        Return when it is due. The attempt is not counted; checkpoint and steps are kept.
        """
        return step_room.sleep(self._client, lease, seconds)

    def upstream(self, job_id: Any) -> dict[str, Any]:
        """Return the results of a workflow job's parents by name (or id). Writes nothing."""
        return workflow_room.upstream(self._client, job_id)

    @property
    def workflows(self) -> WorkflowFace:
        """Submit, read, cancel and retry workflows with this client."""
        return WorkflowFace(self._client)
