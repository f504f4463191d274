"""DurableJobStore: the only code that writes job and attempt rows.

Every mutation opens and commits its own transaction. Every write that only the lease holder may make
changes the row only where id, owner, epoch, ``status = running`` and an unexpired lease all match in
SQL, and raises ``LeaseLost`` when nothing matched. Each attempt leaves its ``JobAttempt`` row in the
transaction that ends it.

The class is assembled from one module per concern (submissions, reads, claims, outcomes) over a
shared base (schedule rows too: ``schedules.py``); all of them live in this package, so fencing is audited by reading this folder.
"""

import builtins
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from ..execution import Execution, Identity, bind_write_fence
from ..models import Job, Schedule, WorkerProcess
from ..schedules import ScheduleSpec
from ..values import (
    AttemptOutcome,
    CandidatePage,
    Finalization,
    Lease,
    PageQuery,
    RequestResult,
    Submission,
)
from . import clock as clock_room
from . import reads, schedules, submitting, ticks, workers
from .claims import ClaimMixin
from .client import Client
from .clock import ClockReading
from .fence import assert_write_fence
from .outcomes import OutcomeMixin
from .schedules import Reconciliation, ScheduleNotFound
from .ticks import MISSED_AFTER, TickPass

__all__ = [
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
    "Reconciliation",
    "RequestResult",
    "ScheduleNotFound",
    "Submission",
    "TickPass",
    "assert_write_fence",
    "bind_write_fence",
]


class DurableJobStore(
    ClaimMixin,
    OutcomeMixin,
):
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
        self._claim_statements: dict[tuple, Any] = {}  # compiled claims, see batches.py
        self._turn = ""  # the scope this client's last claim of pending work served (claims.py)

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
