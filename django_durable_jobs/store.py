"""DurableJobStore: the only code that writes job and attempt rows.

Every mutation opens and commits its own transaction. Every write that only the lease holder may make
changes the row only where id, owner, epoch, ``status = running`` and an unexpired lease all match in
SQL, and raises ``LeaseLost`` when nothing matched. Each attempt leaves its ``JobAttempt`` row in the
transaction that ends it.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from django.core import signing
from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, connections, transaction
from django.db.models import Q
from django.utils import timezone

from . import conf, registry, validation
from .dbvendor import bounded_atomic, check_execution, lock_for_update
from .errors import (
    CapacityReached,
    DeadlineExceeded,
    IdempotencyConflict,
    InputInvalid,
    JobError,
    LeaseLost,
    NotReclaimable,
    ScopeMismatch,
)
from .execution import Execution, Identity, WriteFence, bind_write_fence
from .models import (
    CURRENT,
    EXPIRED,
    LEGACY_UNKNOWN,
    UNCLAIMED,
    CapacityGate,
    Job,
    JobAttempt,
    JobStatus,
    assess_ownership,
    is_authentic_pending,
    proposal_defect,
    proposal_sha256,
)
from .values import (
    AttemptOutcome,
    CandidatePage,
    Finalization,
    Lease,
    PageQuery,
    Submission,
    canonical_json,
)

__all__ = [
    "AttemptOutcome",
    "CandidatePage",
    "DurableJobStore",
    "Execution",
    "Finalization",
    "Identity",
    "Lease",
    "PageQuery",
    "Submission",
    "assert_write_fence",
    "bind_write_fence",
]

CURSOR_SALT = "django_durable_jobs.store.list_page"
PAGE_LIMIT_MAX = 100
PAGE_BYTES_MAX = 1_048_576
CLAIM_BATCH_MAX = 1000
EMPTY_PROPOSAL = "{}"
INTERRUPTED_ERROR = "The lease expired before the attempt ended; its outcome is unknown."


def _snapshot(job: Job) -> dict[str, Any]:
    """Return a JSON-safe image of every column of ``job``."""
    row = {f.attname: getattr(job, f.attname) for f in Job._meta.concrete_fields}
    return json.loads(json.dumps(row, cls=DjangoJSONEncoder))


def _lease_lost(lease: Lease, why: str) -> LeaseLost:
    return LeaseLost(
        f"Job {lease.job_id} (epoch {lease.epoch}): {why}. Nothing was written; stop this attempt, "
        f"the job belongs to whoever holds its current lease."
    )


def _verify_fence(
    fence: WriteFence, identity: Identity, using: str, now: datetime, *, allow_cancel_request: bool
) -> Job:
    """Lock the fenced job row and return it, or raise ``LeaseLost`` saying what changed."""
    lease = fence.lease
    if fence.using != using:
        raise _lease_lost(lease, f"the fence is for database {fence.using!r}, not {using!r}")
    row = Job.objects.using(using).select_for_update().filter(pk=lease.job_id).first()
    checks = (
        (row is None, "the job no longer exists"),
        (row is not None and row.status != JobStatus.RUNNING, "the job is not running"),
        (row is not None and row.owner_id != lease.owner_id, "another owner holds the job"),
        (row is not None and row.fencing_epoch != lease.epoch, "the job was claimed again"),
        (
            row is not None and (row.lease_expires_at is None or row.lease_expires_at <= now),
            "the lease expired",
        ),
        (
            row is not None
            and not allow_cancel_request
            and row.cancellation_requested_at is not None,
            "cancellation was requested",
        ),
        (row is not None and row.scope != identity.scope, "the scope differs from the execution's"),
        (row is not None and row.operation != identity.operation, "the operation differs"),
        (
            row is not None
            and identity.idempotency_key is not None
            and row.idempotency_key != identity.idempotency_key,
            "the idempotency key differs",
        ),
        (
            row is not None
            and (
                row.proposal_hash != fence.proposal_hash
                or row.proposal is None
                or proposal_sha256(row.proposal) != fence.proposal_hash
            ),
            "the proposal does not match the fenced hash",
        ),
    )
    for failed, why in checks:
        if failed:
            raise _lease_lost(lease, why)
    return row


def assert_write_fence(execution: Execution, *, using: str = "default") -> None:
    """Refuse a domain write unless the execution's lease is still current.

    Call it inside your own ``transaction.atomic(using=...)`` block, before the write: it locks and
    re-reads the job row, so the check holds until your transaction commits. Does nothing for an
    execution without a write fence.
    """
    if not isinstance(execution, Execution):
        raise InputInvalid("assert_write_fence() needs an Execution.")
    fence = execution.write_fence
    if fence is None:
        return
    if not connections[using].in_atomic_block:
        raise InputInvalid(
            "assert_write_fence() must run inside transaction.atomic(using=...) together with "
            "the domain write it guards."
        )
    check_execution(execution)
    now = (fence.clock or timezone.now)()
    _verify_fence(fence, execution.identity, using, now, allow_cancel_request=False)


class DurableJobStore:
    """A client of the job table: one owner id, one scope, one clock."""

    def __init__(
        self,
        *,
        scope: str | None = None,
        actor: str | None = None,
        lease: float = 30.0,
        using: str = "default",
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.scope = None if scope is None else validation.name(scope, "scope")
        self.actor = None if actor is None else validation.name(actor, "actor")
        if isinstance(lease, bool) or not isinstance(lease, (int, float)):
            raise InputInvalid(f"lease is a number of seconds; got {lease!r}.")
        if not math.isfinite(lease) or lease <= 0:
            raise InputInvalid(f"lease must be a positive number of seconds; got {lease!r}.")
        if using not in connections.databases:
            raise InputInvalid(f"No database alias {using!r} in settings.DATABASES.")
        self.lease = float(lease)
        self.using = using
        self.clock = clock or timezone.now
        self.owner_id = str(uuid.uuid4())

    def __repr__(self) -> str:
        return f"<DurableJobStore scope={self.scope!r} actor={self.actor!r} owner={self.owner_id}>"

    # -- helpers ---------------------------------------------------------------------------------

    def _now(self) -> datetime:
        return validation.aware(self.clock(), "The store clock's value")

    def _jobs(self):
        return Job.objects.using(self.using).in_scope(self.scope)

    def _annotate(self, job: Job | None, now: datetime | None = None) -> Job | None:
        if job is not None:
            job.ownership = assess_ownership(job, now or self._now())
        return job

    def _resolve_scope(self, scope: str | None) -> str:
        resolved = scope if scope is not None else self.scope or conf.get("DEFAULT_SCOPE")
        validation.name(resolved, "scope")
        if self.scope is not None and resolved != self.scope:
            raise ScopeMismatch(
                f"This store is scoped to {self.scope!r} and cannot act for scope {resolved!r}; "
                f"use a store of that scope."
            )
        return resolved

    def _check_identity(self, execution: Execution) -> None:
        if not isinstance(execution, Execution):
            raise InputInvalid("This call needs an Execution (Execution.start(identity, ...)).")
        if self.scope is not None and execution.identity.scope != self.scope:
            raise ScopeMismatch(
                f"The execution acts for scope {execution.identity.scope!r} but this store is "
                f"scoped to {self.scope!r}."
            )

    def _check_lease(self, lease: Lease) -> None:
        if not isinstance(lease, Lease):
            raise InputInvalid(
                f"Expected the Lease returned by a claim; got {type(lease).__name__}."
            )
        if lease.owner_id != self.owner_id:
            raise _lease_lost(lease, "the lease was issued to another store client")

    def _fenced(self, lease: Lease, now: datetime):
        return (
            Job.objects.using(self.using)
            .in_scope(self.scope)
            .filter(
                pk=lease.job_id,
                owner_id=lease.owner_id,
                fencing_epoch=lease.epoch,
                status=JobStatus.RUNNING,
                lease_expires_at__gt=now,
            )
        )

    def _fenced_update(self, lease: Lease, **changes: Any) -> Job:
        """Apply ``changes`` under the lease's fence and return the updated row."""
        self._check_lease(lease)
        with bounded_atomic(self.using):
            now = self._now()
            changes = {k: (v(now) if callable(v) else v) for k, v in changes.items()}
            if self._fenced(lease, now).update(**changes) != 1:
                raise self._loss(lease, now)
            return self._annotate(Job.objects.using(self.using).get(pk=lease.job_id), now)

    def _loss(self, lease: Lease, now: datetime) -> LeaseLost:
        """Return the LeaseLost for a fenced write that matched nothing, saying what changed."""
        row = self._jobs().filter(pk=lease.job_id).first()
        if row is None:
            why = "there is no such job in this store's scope"
        elif row.fencing_epoch != lease.epoch or row.owner_id != lease.owner_id:
            who = f" by {row.claimed_by}" if row.claimed_by else ""
            why = f"the job was claimed again{who} (now epoch {row.fencing_epoch})"
        elif row.status != JobStatus.RUNNING:
            why = f"the job is already {row.status}"
        else:
            why = f"the lease expired at {row.lease_expires_at.isoformat()}"
        return _lease_lost(lease, why)

    def _locked_row(self, job_id: Any) -> Job | None:
        pk = validation.job_id(job_id)
        return lock_for_update(self._jobs().filter(pk=pk)).first()

    def _capacity(self, operation: str, max_running: int | None) -> int | None:
        if max_running is None:
            spec = registry.get(operation)
            max_running = spec.max_running if spec else None
        if max_running is None:
            return None
        if isinstance(max_running, bool) or not isinstance(max_running, int) or max_running < 0:
            raise InputInvalid(f"max_running is a non-negative integer; got {max_running!r}.")
        return max_running

    def _free_slots(self, operation: str, cap: int, exclude: Any = None) -> int:
        """Lock the operation's gate and return how many more may run (atomic with the claim)."""
        CapacityGate.objects.using(self.using).get_or_create(operation=operation)
        CapacityGate.objects.using(self.using).select_for_update().get(operation=operation)
        running = Job.objects.using(self.using).filter(
            operation=operation, status=JobStatus.RUNNING
        )
        if exclude is not None:
            running = running.exclude(pk=exclude)
        return cap - running.count()

    def _require_capacity(self, operation: str, cap: int | None, exclude: Any = None) -> None:
        if cap is not None and self._free_slots(operation, cap, exclude) <= 0:
            raise CapacityReached(
                f"Operation {operation!r} already has {cap} running job(s) (max_running={cap}); "
                f"try again when one finishes."
            )

    def _record_attempt(self, job: Job, now: datetime, outcome: str, error: str | None) -> None:
        JobAttempt.objects.using(self.using).create(
            job_id=job.pk,
            epoch=job.fencing_epoch,
            owner_id=job.owner_id,
            claimed_by=job.claimed_by or "",
            started_at=job.claimed_at,
            ended_at=now,
            outcome=outcome,
            error=error,
            snapshot=_snapshot(job),
        )

    def _take(self, row: Job, now: datetime, *, new_attempt: bool) -> Lease:
        """Make this client the owner of ``row`` at the next epoch (a locked row)."""
        epoch = validation.bump(row.fencing_epoch, validation.BIGINT_MAX, "fencing epoch")
        attempts = validation.bump(row.attempts, validation.ATTEMPTS_MAX, "attempts")
        if row.status == JobStatus.RUNNING:  # an expired attempt, superseded: uncertain outcome
            self._record_attempt(row, now, "interrupted", INTERRUPTED_ERROR)
        expires = now + timedelta(seconds=self.lease)
        changes: dict[str, Any] = {
            "status": JobStatus.RUNNING,
            "owner_id": self.owner_id,
            "fencing_epoch": epoch,
            "attempts": attempts,
            "lease_expires_at": expires,
            "heartbeat_at": now,
            "claimed_at": now,
            "claimed_by": self.actor or "",
        }
        if new_attempt:
            changes.update(
                result=None,
                error=None,
                completed_at=None,
                cancellation_requested_at=None,
                retry_requested_at=None,
                progress=0.0,
            )
        matched = (
            Job.objects.using(self.using)
            .filter(pk=row.pk, fencing_epoch=row.fencing_epoch, status=row.status)
            .update(**changes)
        )
        if matched != 1:
            raise NotReclaimable(f"Job {row.pk} changed while it was being claimed; try again.")
        return Lease(job_id=row.pk, owner_id=self.owner_id, epoch=epoch, expires_at=expires)

    def _end(self, row: Job, now: datetime, status: str, **changes: Any) -> None:
        """Move the locked, fenced ``row`` to a terminal status and record its attempt."""
        changes.update(status=status, completed_at=now)
        for name, value in changes.items():
            setattr(row, name, value)
        matched = (
            Job.objects.using(self.using)
            .filter(
                pk=row.pk,
                owner_id=row.owner_id,
                fencing_epoch=row.fencing_epoch,
                status=JobStatus.RUNNING,
            )
            .update(**changes)
        )
        if matched != 1:
            raise LeaseLost(f"Job {row.pk} changed under its lock; nothing was written.")
        self._record_attempt(row, now, status, changes.get("error"))

    def _end_fenced(self, lease: Lease, status: str, guard=None, **changes: Any) -> None:
        self._check_lease(lease)
        with bounded_atomic(self.using):
            now = self._now()
            row = lock_for_update(self._fenced(lease, now)).first()
            if row is None:
                raise self._loss(lease, now)
            if guard is not None:
                guard(row)
            self._end(row, now, status, **changes)

    # -- submissions ---------------------------------------------------------------------------

    def _prepare(
        self, operation: str, submission: Submission | None, job_id: Any
    ) -> tuple[str, str, str, str, uuid.UUID]:
        op = validation.operation(operation)
        if submission is None:
            submission = Submission(scope=None, idempotency_key=None, proposal=EMPTY_PROPOSAL)
        if not isinstance(submission, Submission):
            raise InputInvalid("Pass a Submission (Submission.of(scope, key, payload)).")
        scope = self._resolve_scope(submission.scope)
        pk = uuid.uuid4() if job_id is None else validation.job_id(job_id)
        key = submission.idempotency_key
        key = str(pk) if key is None else validation.idempotency_key(key)
        proposal = validation.json_text(submission.proposal, "proposal")
        return op, scope, key, proposal, pk

    def _existing(self, operation: str, scope: str, key: str, proposal: str) -> Job | None:
        """Return the earlier identical submission, refuse a different one, or None."""
        row = (
            Job.objects.using(self.using)
            .filter(scope=scope, operation=operation, idempotency_key=key)
            .first()
        )
        if row is not None and (
            row.proposal_hash != proposal_sha256(proposal) or row.proposal != proposal
        ):
            raise IdempotencyConflict(
                f"{operation!r} with key {key!r} in scope {scope!r} was already submitted with a "
                f"different proposal (job {row.pk}); use a new idempotency key for new input."
            )
        return row

    def _create(self, job: Job) -> tuple[Job, bool]:
        """Insert ``job``; on a concurrent identical submission return that one instead."""
        try:
            with transaction.atomic(using=self.using):
                job.save(force_insert=True, using=self.using)
        except IntegrityError:
            existing = self._existing(job.operation, job.scope, job.idempotency_key, job.proposal)
            if existing is None:
                raise InputInvalid(f"Job id {job.pk} is already in use; omit job_id.") from None
            return existing, False
        return job, True

    def _new_row(self, op, scope, key, proposal, pk, now, **fields: Any) -> Job:
        return Job(
            id=pk,
            operation=op,
            scope=scope,
            idempotency_key=key,
            proposal=proposal,
            proposal_hash=proposal_sha256(proposal),
            created_at=now,
            run_after=now,
            **fields,
        )

    def insert(
        self,
        operation: str,
        *,
        submission: Submission | None = None,
        max_running: int | None = None,
        job_id: Any = None,
    ) -> Lease | None:
        """Create a job already running and owned by this client; None for a repeat submission."""
        op, scope, key, proposal, pk = self._prepare(operation, submission, job_id)
        cap = self._capacity(op, max_running)
        with bounded_atomic(self.using):
            now = self._now()
            if self._existing(op, scope, key, proposal) is not None:
                return None
            self._require_capacity(op, cap)
            expires = now + timedelta(seconds=self.lease)
            row = self._new_row(
                op,
                scope,
                key,
                proposal,
                pk,
                now,
                status=JobStatus.RUNNING,
                owner_id=self.owner_id,
                fencing_epoch=1,
                attempts=1,
                lease_expires_at=expires,
                heartbeat_at=now,
                claimed_at=now,
                claimed_by=self.actor or "",
            )
            row, created = self._create(row)
            if not created:
                return None
        return Lease(job_id=pk, owner_id=self.owner_id, epoch=1, expires_at=expires)

    def find_submission(self, operation: str, submission: Submission) -> Job | None:
        """Return the job of an identical earlier submission, or None (read-only)."""
        op, scope, key, proposal, _ = self._prepare(operation, submission, None)
        if submission.idempotency_key is None:
            return None  # a fresh key (the new job's id) matches nothing
        return self._annotate(self._existing(op, scope, key, proposal))

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
        """Persist pending work, or return the identical earlier job unchanged. Starts nothing.

        With ``in_caller_transaction=True`` the row is written in the caller's open atomic block
        and exists only if the caller commits.
        """
        op, scope, key, proposal, pk = self._prepare(operation, submission, job_id)
        queue = "default" if queue is None else validation.name(queue, "queue")
        priority = validation.priority(priority)
        if run_after is not None:
            validation.aware(run_after, "run_after")
        if execution is not None:
            self._check_identity(execution)

        def write() -> Job:
            now = self._now()
            existing = self._existing(op, scope, key, proposal)
            if existing is not None:
                return self._annotate(existing, now)
            row = self._new_row(op, scope, key, proposal, pk, now, queue=queue, priority=priority)
            if run_after is not None:
                row.run_after = run_after
            return self._annotate(self._create(row)[0], now)

        if in_caller_transaction:
            if not connections[self.using].in_atomic_block:
                raise InputInvalid(
                    "in_caller_transaction=True needs an open transaction.atomic() on "
                    f"{self.using!r}; call defer() inside it, or drop the flag."
                )
            if execution is not None:
                check_execution(execution)
            return write()
        with bounded_atomic(self.using, execution):
            return write()

    # -- reads ---------------------------------------------------------------------------------

    def get(self, job_id: Any) -> Job | None:
        """Return the job in this store's scope, with ``ownership`` assessed, or None."""
        pk = validation.job_id(job_id)
        return self._annotate(self._jobs().filter(pk=pk).first())

    def list(self, status: str | None = None) -> list[Job]:
        """Return the jobs in scope, oldest first, optionally of one status."""
        rows = self._jobs()
        if status is not None:
            rows = rows.filter(status=_status(status))
        now = self._now()
        return [self._annotate(row, now) for row in rows.order_by("created_at", "id")]

    def list_page(self, query: PageQuery, execution: Execution) -> CandidatePage:
        """Return one bounded keyset page of an operation's jobs, ordered by (created_at, id)."""
        if not isinstance(query, PageQuery):
            raise InputInvalid("list_page() takes a PageQuery.")
        self._check_identity(execution)
        check_execution(execution)
        identity = execution.identity
        if self.scope is None or self.actor is None:
            raise ScopeMismatch("list_page() needs a store with both a scope and an actor.")
        if identity.actor != self.actor:
            raise ScopeMismatch(
                f"The execution's actor {identity.actor!r} is not this store's ({self.actor!r})."
            )
        op = validation.operation(query.operation)
        if op != identity.operation:
            raise ScopeMismatch(f"The execution is for {identity.operation!r}, not {op!r}.")
        status = None if query.status is None else _status(query.status)
        limit, cap = query.limit, query.max_payload_bytes
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not 1 <= limit <= PAGE_LIMIT_MAX
        ):
            raise InputInvalid(
                f"limit is a whole number from 1 to {PAGE_LIMIT_MAX}; got {limit!r}."
            )
        if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= PAGE_BYTES_MAX:
            raise InputInvalid(
                f"max_payload_bytes is a whole number from 1 to {PAGE_BYTES_MAX}; got {cap!r}."
            )
        binding = {"s": self.scope, "a": self.actor, "o": op, "st": status, "l": limit, "c": cap}
        rows = self._jobs().filter(operation=op)
        if status is not None:
            rows = rows.filter(status=status)
        if query.after is not None:
            created, last_id = _read_cursor(query.after, binding)
            rows = rows.filter(Q(created_at__gt=created) | Q(created_at=created, id__gt=last_id))
        page = list(rows.order_by("created_at", "id")[: limit + 1])
        has_more = len(page) > limit
        page = page[:limit]
        for row in page:
            size = sum(validation.utf8_size(t) for t in (row.proposal, row.checkpoint, row.result))
            if size > cap:
                raise InputInvalid(
                    f"Job {row.pk} carries {size} UTF-8 bytes, over this page's cap of {cap}; "
                    f"raise max_payload_bytes (at most {PAGE_BYTES_MAX}) or read it with get()."
                )
        now = self._now()
        cursor = None
        if has_more:
            last = page[-1]
            cursor = signing.dumps(
                {**binding, "t": last.created_at.isoformat(), "i": str(last.pk)}, salt=CURSOR_SALT
            )
        return CandidatePage(
            candidates=[self._annotate(row, now) for row in page],
            scanned_count=len(page),
            has_more=has_more,
            next_cursor=cursor,
        )

    # -- claims ----------------------------------------------------------------------------------

    def claim(
        self, job_id: Any, *, max_running: int | None = None, execution: Execution | None = None
    ) -> Lease:
        """Claim an unclaimed pending job, or take over a running job whose lease expired."""
        with bounded_atomic(self.using, execution):
            now = self._now()
            row = self._locked_row(job_id)
            if row is None:
                raise NotReclaimable(f"There is no job {job_id} in this store's scope.")
            state = assess_ownership(row, now)
            if state not in (UNCLAIMED, EXPIRED):
                raise NotReclaimable(_why_not_claimable(row, state))
            self._require_capacity(
                row.operation, self._capacity(row.operation, max_running), row.pk
            )
            return self._take(row, now, new_attempt=False)

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
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not 1 <= limit <= CLAIM_BATCH_MAX
        ):
            raise InputInvalid(
                f"limit is a whole number from 1 to {CLAIM_BATCH_MAX}; got {limit!r}."
            )
        ops = _names(operations, validation.operation)
        queue_names = _names(queues, lambda q: validation.name(q, "queue"))
        if resume_expired is None:
            resume = registry.resumable_operations()
        else:
            resume = frozenset(_names(resume_expired, validation.operation))
        with bounded_atomic(self.using):
            now = self._now()
            base = self._jobs().filter(
                fencing_epoch__lt=validation.BIGINT_MAX, attempts__lt=validation.ATTEMPTS_MAX
            )
            if ops is not None:
                base = base.filter(operation__in=ops)
            if queue_names is not None:
                base = base.filter(queue__in=queue_names)
            sets = [base.pending_due(now), base.retry_requested()]
            sets.append(base.lease_expired(now).filter(retry_requested_at__isnull=False))
            if resume:
                sets.append(base.lease_expired(now).filter(operation__in=sorted(resume)))
            return self._claim_from(sets, now, limit, max_running)

    def _claim_from(self, sets: list, now: datetime, limit: int, max_running: int | None) -> list:
        """Claim up to ``limit`` rows from the candidate ``sets``, best first.

        Rows that cannot be taken (a defective proposal, an operation at capacity) are passed
        over and the window widens, so they never starve the work behind them.
        """
        leases: list[Lease] = []
        seen: set = set()
        full: set[str] = set()
        slots: dict[str, int | None] = {}
        window = limit
        while True:
            found: dict[Any, Job] = {}
            for rows in sets:
                rows = rows.exclude(pk__in=seen).exclude(operation__in=full).in_claim_order()
                for row in lock_for_update(rows, skip_locked=True)[:window]:
                    found[row.pk] = row
            exhausted = len(found) < window
            seen.update(found)
            for row in sorted(found.values(), key=_claim_order):
                if len(leases) == limit:
                    return leases
                if row.operation in full or not _takeable(row):
                    continue
                if row.operation not in slots:
                    cap = self._capacity(row.operation, max_running)
                    slots[row.operation] = (
                        None if cap is None else self._free_slots(row.operation, cap)
                    )
                free = slots[row.operation]
                adds_running = row.status != JobStatus.RUNNING  # a reclaim replaces its attempt
                if free is not None:
                    if free - adds_running < 0:
                        full.add(row.operation)
                        continue
                    slots[row.operation] = free - adds_running
                retrying = row.retry_requested_at is not None
                leases.append(self._take(row, now, new_attempt=retrying))
            if exhausted or len(leases) == limit or window >= CLAIM_BATCH_MAX:
                return leases
            window = min(window * 4, CLAIM_BATCH_MAX)

    # -- owner writes ----------------------------------------------------------------------------

    def heartbeat(self, lease: Lease) -> Job:
        """Renew the lease and return the row (so the owner sees requests made meanwhile)."""
        return self._fenced_update(
            lease,
            lease_expires_at=lambda now: now + timedelta(seconds=self.lease),
            heartbeat_at=lambda now: now,
        )

    def checkpoint(self, lease: Lease, value_json: str) -> None:
        """Record the owner's checkpoint (exact JSON text); it survives reclaim and retry."""
        value = validation.json_text(value_json, "checkpoint")
        self._fenced_update(lease, checkpoint=value, checkpoint_at=lambda now: now)

    def progress(self, lease: Lease, percent: float) -> None:
        """Record progress, clamped to 0-100."""
        self._fenced_update(
            lease, progress=validation.percent(percent), heartbeat_at=lambda now: now
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
        self._end_fenced(lease, JobStatus.COMPLETE, result=_result_text(result), progress=100.0)

    def fail(self, lease: Lease, error: Any) -> None:
        """Record a failure: running → failed with ``error`` as the message."""
        message = _error_text(error)
        self._end_fenced(lease, JobStatus.FAILED, error=message)

    # -- requests --------------------------------------------------------------------------------

    def request_cancel(self, job_id: Any, *, execution: Execution | None = None) -> bool:
        """Ask for cancellation: pending jobs end now, running jobs get a request for the owner."""
        validation.job_id(job_id)
        with bounded_atomic(self.using, execution):
            now = self._now()
            row = self._locked_row(job_id)
            if row is None or row.is_terminal:
                return False
            changes: dict[str, Any] = {"cancellation_requested_at": now}
            if row.cancellation_requested_at is not None:
                changes = {}
            if row.status == JobStatus.PENDING:
                changes.update(status=JobStatus.CANCELLED, completed_at=now)
            if changes:
                Job.objects.using(self.using).filter(pk=row.pk, status=row.status).update(**changes)
            return True

    def request_retry(self, job_id: Any) -> bool:
        """Record that a person wants a new attempt of a failed, cancelled or expired job."""
        validation.job_id(job_id)
        with bounded_atomic(self.using):
            now = self._now()
            row = self._locked_row(job_id)
            if row is None:
                return False
            if assess_ownership(row, now) in (UNCLAIMED, CURRENT):
                return False  # it has not ended: nothing to retry yet
            refusal = _retry_refusal(row, now)
            if refusal is not None:
                raise NotReclaimable(refusal)
            if row.retry_requested_at is None:
                Job.objects.using(self.using).filter(pk=row.pk).update(retry_requested_at=now)
            return True

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
        with bounded_atomic(self.using, execution):
            now = self._now()
            row = self._locked_row(job_id)
            if row is None:
                raise NotReclaimable(f"There is no job {job_id} in this store's scope.")
            refusal = _retry_refusal(row, now)
            if refusal is not None:
                raise NotReclaimable(refusal)
            if retain_outcome is not None:
                previous = json.dumps(_snapshot(row), sort_keys=True)
                validation.json_text(retain_outcome(previous), "retain_outcome receipt")
            self._require_capacity(
                row.operation, self._capacity(row.operation, max_running), row.pk
            )
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
        with bounded_atomic(self.using, execution):
            row = _verify_fence(
                fence, identity, self.using, self._now(), allow_cancel_request=False
            )
            receipt = validation.json_text(mutation(execution), "receipt")
            now = self._now()
            _verify_fence(fence, identity, self.using, now, allow_cancel_request=False)
            self._end(row, now, JobStatus.COMPLETE, result=receipt, progress=100.0)
            stored = Job.objects.using(self.using).get(pk=row.pk)
            if (stored.status, stored.result, stored.fencing_epoch) != (
                JobStatus.COMPLETE,
                receipt,
                fence.lease.epoch,
            ):
                raise _lease_lost(fence.lease, "the completion did not read back as written")
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
                    fence, execution.identity, self.using, now, allow_cancel_request=True
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


def _status(value: Any) -> str:
    if value not in JobStatus.values:
        raise InputInvalid(f"Unknown status {value!r}; use one of {', '.join(JobStatus.values)}.")
    return value


def _read_cursor(cursor: Any, binding: dict[str, Any]) -> tuple[datetime, uuid.UUID]:
    """Return the (created_at, id) a page cursor points after, or refuse a foreign cursor."""
    foreign = ScopeMismatch(
        "This page cursor was not issued for this caller and query (or was altered); start again "
        "without `after`."
    )
    if not isinstance(cursor, str):
        raise foreign
    try:
        data = signing.loads(cursor, salt=CURSOR_SALT)
        if {k: data.get(k) for k in binding} != binding:
            raise foreign
        return datetime.fromisoformat(data["t"]), uuid.UUID(data["i"])
    except (signing.BadSignature, KeyError, TypeError, ValueError, AttributeError):
        raise foreign from None


def _names(values: Iterable[str] | None, check: Callable[[Any], str]) -> list[str] | None:
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    return [check(v) for v in values]


def _takeable(row: Job) -> bool:
    """Return True unless the row is defective (only authentic pending rows start)."""
    if row.status == JobStatus.PENDING:
        return is_authentic_pending(row)
    return proposal_defect(row) is None


def _claim_order(row: Job) -> tuple:
    return (-row.priority, row.run_after, row.created_at, str(row.pk))


def _why_not_claimable(row: Job, state: str) -> str:
    reasons = {
        CURRENT: "another owner holds a live lease; wait for it to expire",
        LEGACY_UNKNOWN: "its ownership cannot be established (legacy or defective row); triage it",
        "terminal": f"it is {row.status}; use retry for failed or cancelled jobs",
    }
    why = reasons.get(state, "it is not claimable")
    if row.status == JobStatus.PENDING and proposal_defect(row):
        why = f"its proposal is defective ({proposal_defect(row)})"
    return f"Job {row.pk} cannot be claimed: {why}."


def _retry_refusal(row: Job, now: datetime) -> str | None:
    """Return why ``row`` cannot get a new attempt, or None when it can."""
    state = assess_ownership(row, now)
    if row.status == JobStatus.COMPLETE:
        return f"Job {row.pk} is complete and is never reopened; submit a new job instead."
    defect = proposal_defect(row)
    if defect:
        return f"Job {row.pk} cannot be retried: {defect}."
    if row.status in (JobStatus.FAILED, JobStatus.CANCELLED) or state == EXPIRED:
        return None
    if state == LEGACY_UNKNOWN or row.status == JobStatus.ORPHANED:
        return f"Job {row.pk} has no trustworthy ownership (legacy row); triage it by hand."
    return f"Job {row.pk} is {row.status} and has not ended; there is nothing to retry."


def _result_text(result: Any) -> str:
    if hasattr(result, "__await__") or hasattr(result, "cr_code"):
        validation.json_text(result, "result")  # refuses (and closes) a coroutine
    try:
        text = canonical_json(result)
    except (TypeError, ValueError) as exc:
        raise InputInvalid(f"The result cannot be stored as JSON: {exc}.") from exc
    validation.check_size(text, "result")
    return text


def _error_text(error: Any) -> str:
    if isinstance(error, BaseException):
        text = f"{type(error).__name__}: {error}"
    else:
        text = str(error)
    if not text.strip():
        raise InputInvalid("A failure needs a message saying what went wrong.")
    validation.check_size(text, "error message")
    return text
