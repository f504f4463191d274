"""Submitting work: insert, defer, defer_many and lookups of earlier submissions.

Every path writes through one statement (``enqueue_sql``) that skips a row whose idempotency key
is taken instead of failing on it, so no savepoint is needed; the rows holding taken keys are then
read and judged: the same proposal bytes return the earlier job unchanged, different bytes are an
``IdempotencyConflict``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, transaction

from .. import quotas, tracing, validation
from ..errors import CapacityReached, IdempotencyConflict, InputInvalid, JobError
from ..execution import Execution
from ..models import Job
from ..transactions import bounded_atomic, check_execution, refuse_caller_transaction
from ..values import Lease, Submission
from ..vocabulary import JobStatus, Ownership, proposal_sha256
from . import capacity
from .base import StoreBase
from .enqueue_sql import NewRow, enqueue

EMPTY_PROPOSAL = "{}"
MAX_SUBMISSIONS = 10_000  # jobs per defer_many() / submit_many() call


class SubmissionMixin(StoreBase):
    """Insert and defer jobs; coalesce identical submissions."""

    def _row(
        self, submission: Submission | None, job_id: Any = None, scopes: dict | None = None
    ) -> tuple[str, NewRow]:
        """Return the resolved scope and the new row of ``submission`` (validated).

        ``scopes`` remembers scopes already resolved, for a call of many submissions.
        """
        if submission is None:
            submission = Submission(scope=None, idempotency_key=None, proposal=EMPTY_PROPOSAL)
        if not isinstance(submission, Submission):
            raise InputInvalid("Pass a Submission (Submission.of(scope, key, payload)).")
        given = submission.scope
        if scopes is None or not (given is None or isinstance(given, str)):
            scope = self._resolve_scope(given)
        elif (scope := scopes.get(given)) is None:
            scope = scopes[given] = self._resolve_scope(given)
        pk = uuid.uuid4() if job_id is None else validation.job_id(job_id)
        key = submission.idempotency_key
        key = str(pk) if key is None else validation.idempotency_key(key)
        proposal = validation.json_text(submission.proposal, "proposal")
        return scope, NewRow(pk, key, proposal, proposal_sha256(proposal))

    def _existing(self, operation: str, scope: str, key: str, proposal: str) -> Job | None:
        """Return the earlier identical submission, refuse a different one, or None."""
        # No ORDER BY (``first()`` would add one): the unique key holds at most one row.
        rows = Job.objects.using(self.using).filter(
            scope=scope, operation=operation, idempotency_key=key
        )
        row = next(iter(rows.order_by()[:1]), None)
        if row is not None and (
            row.proposal_hash != proposal_sha256(proposal) or row.proposal != proposal
        ):
            raise self._conflict(operation, scope, key, row)
        return row

    def _conflict(self, operation: str, scope: str, key: str, row: Job) -> IdempotencyConflict:
        return IdempotencyConflict(
            f"{operation!r} with key {key!r} in scope {scope!r} was already submitted with a "
            f"different proposal (job {row.pk}); use a new idempotency key for new input."
        )

    def _held(self, operation: str, scope: str, row: NewRow, held: Job | None) -> Job:
        """Return the job holding ``row``'s key when its proposal is the same; refuse otherwise."""
        if held is None:  # the insert skipped the row, yet no job holds its key: its id is taken
            raise InputInvalid(f"Job id {row.pk} is already in use; omit job_id.")
        if held.proposal_hash != row.proposal_hash or held.proposal != row.proposal:
            raise self._conflict(operation, scope, row.key, held)
        return held

    def _owned(self, job: Job, built: bool, now: datetime) -> Job:
        """Set ``job.ownership``; a pending job built from what was just inserted is unclaimed."""
        if built and job.status == JobStatus.PENDING:
            # Authentic by construction: validated JSON, its own SHA-256, no owner, no lease.
            job.ownership = Ownership.UNCLAIMED
            return job
        return self._annotate(job, now)

    def _pending(
        self,
        operation: str,
        scope: str,
        now: datetime,
        queue: str,
        priority: int,
        run_after: datetime | None,
        trace_context: str | None,
    ) -> dict[str, Any]:
        """Return the columns a call's pending rows share (one enqueue span's context too)."""
        return {
            "operation": operation,
            "scope": scope,
            "status": JobStatus.PENDING.value,
            "created_at": now,
            "run_after": now if run_after is None else run_after,
            "queue": queue,
            "priority": priority,
            "trace_context": trace_context,
        }

    def _schedule(self, queue: Any, priority: Any, run_after: Any) -> tuple[str, int]:
        """Validate the scheduling options; return the queue and priority."""
        queue = "default" if queue is None else validation.name(queue, "queue")
        priority = validation.priority(priority)
        if run_after is not None:
            validation.aware(run_after, "run_after")
        return queue, priority

    def insert(
        self,
        operation: str,
        *,
        submission: Submission | None = None,
        max_running: int | None = None,
        job_id: Any = None,
    ) -> Lease | None:
        """Create a job already running and owned by this client; None for a repeat submission."""
        op = validation.operation(operation)
        scope, row = self._row(submission, job_id)
        cap = capacity.operation_cap(op, max_running)
        # The rate counted is given back if anything refuses or fails, the COMMIT included.
        with (
            tracing.producer(op, queue="default", scope=scope) as sending,
            quotas.counted() as taken,
            bounded_atomic(self.using),
        ):
            now = self._now()
            if (earlier := self._existing(op, scope, row.key, row.proposal)) is not None:
                sending.sent(earlier.pk, earlier.trace_context)
                return None
            capacity.require_operation_room(self._client, op, cap)
            capacity.require_scope_room(self._client, scope)
            taken += capacity.admit(self._client, scope, 1, 0, now, pending=False)
            expires = now + timedelta(seconds=self.lease_seconds)
            fields = {
                "operation": op,
                "scope": scope,
                "status": JobStatus.RUNNING.value,
                "created_at": now,
                "run_after": now,
                "owner_id": self.owner_id,
                "fencing_epoch": 1,
                "attempts": 1,
                "lease_expires_at": expires,
                "heartbeat_at": now,
                "claimed_at": now,
                "claimed_by": self.actor or "",
                "trace_context": sending.carrier,
            }
            ((held, _),) = enqueue(self.using, fields, [row])
            job = self._held(op, scope, row, held)
            sending.sent(job.pk, job.trace_context)
            if job.pk != row.pk or job.owner_id != self.owner_id:
                return None  # an identical submission committed first
        return Lease(job_id=row.pk, owner_id=self.owner_id, epoch=1, expires_at=expires)

    def find_submission(self, operation: str, submission: Submission) -> Job | None:
        """Return the job of an identical earlier submission, or None (read-only)."""
        op = validation.operation(operation)
        scope, row = self._row(submission)
        if submission is None or submission.idempotency_key is None:
            return None  # a fresh key (the new job's id) matches nothing
        return self._annotate(self._existing(op, scope, row.key, row.proposal))

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
        and exists only if the caller commits. Without an execution a new job is one statement
        (its NOTIFY included on PostgreSQL) and a repeat one two, each atomic on its own.
        """
        op = validation.operation(operation)
        scope, row = self._row(submission, job_id)
        queue, priority = self._schedule(queue, priority, run_after)
        if execution is not None:
            self._check_identity(execution)
            check_execution(execution)  # a spent budget refuses before the quota's count
        # A refusal of the caller's transaction, too, comes before any SQL.
        if in_caller_transaction:
            self._require_caller_transaction("defer")
        else:
            refuse_caller_transaction(self.using)

        def write() -> Job:
            now = self._now()
            fields = self._pending(op, scope, now, queue, priority, run_after, sending.carrier)
            ((held, built),) = enqueue(self.using, fields, [row], notify=queue)
            job = self._owned(self._held(op, scope, row, held), built, now)
            sending.sent(job.pk, job.trace_context)
            return job

        with (
            tracing.producer(op, queue=queue, scope=scope) as sending,
            quotas.counted() as taken,  # given back if the write is refused or fails
        ):
            try:
                taken += capacity.admit(self._client, scope, 1, priority, self._now())
            except CapacityReached:
                # A repeat of an earlier submission adds nothing: it is answered, not refused.
                earlier = None
                if submission.idempotency_key is not None:
                    earlier = self._existing(op, scope, row.key, row.proposal)
                if earlier is None:
                    raise
                sending.sent(earlier.pk, earlier.trace_context)
                return self._annotate(earlier)
            if in_caller_transaction:
                if execution is not None:
                    check_execution(execution)
                return write()
            if execution is not None:
                with bounded_atomic(self.using, execution):
                    return write()
            # The insert commits on its own and the read of a taken key changes nothing, so
            # there is no transaction to open: it would only add BEGIN and COMMIT round trips.
            return write()

    def defer_many(
        self,
        operation: str,
        submissions: Iterable[Submission],
        *,
        queue: str | None = None,
        priority: int = 0,
        run_after: datetime | None = None,
        in_caller_transaction: bool = False,
    ) -> list[Job]:
        """Persist pending work for each submission; return their jobs in the same order.

        Each follows ``defer``'s rules: an identical earlier submission returns its job
        unchanged (a key given twice with the same proposal returns one job twice). One proposal
        that differs from its key's earlier one refuses the whole call with
        ``IdempotencyConflict`` and writes nothing. The rows go in a few multi-row statements
        in one transaction (a savepoint in the caller's, with ``in_caller_transaction=True``).
        """
        op = validation.operation(operation)
        queue, priority = self._schedule(queue, priority, run_after)
        items = listed(submissions, "submissions")
        rows = self._distinct_rows(op, items)
        if in_caller_transaction:
            self._require_caller_transaction("defer_many")
        if not items:
            return []
        if not in_caller_transaction:
            refuse_caller_transaction(self.using)  # before the quotas' counts: no SQL at all
        now = self._now()

        def write() -> list[Job]:
            now = self._now()
            held: dict[tuple[str, str], tuple[Job | None, bool]] = {}
            for scope, group in _by_scope(rows).items():
                fields = self._pending(op, scope, now, queue, priority, run_after, sending.carrier)
                found = enqueue(self.using, fields, group, notify=queue)
                held.update(
                    ((scope, row.key), pair) for row, pair in zip(group, found, strict=True)
                )
            jobs = []
            for index, (scope, row) in enumerate(rows):
                job, built = held[scope, row.key]
                try:
                    jobs.append(self._owned(self._held(op, scope, row, job), built, now))
                except JobError as exc:
                    raise _of_row(exc, index, row.key) from None
            sending.sent_many(job.trace_context for job in jobs)
            return jobs

        # One producer span for the call: its jobs share its context.
        span_scope = ",".join(sorted({scope for scope, _ in rows})) if tracing.installed() else ""
        with (
            tracing.producer(op, queue=queue, scope=span_scope, count=len(items)) as sending,
            quotas.counted() as taken,  # given back if the write is refused or fails
        ):
            for scope, group in _by_scope(rows).items():
                taken += capacity.admit(self._client, scope, len(group), priority, now)
            if in_caller_transaction:
                with transaction.atomic(using=self.using):  # a savepoint: a refusal undoes it
                    return write()
            with bounded_atomic(self.using):
                return write()

    def _distinct_rows(self, operation: str, items: list) -> list[tuple[str, NewRow]]:
        """Return each submission's scope and row, a repeated key sharing its first row."""
        if len(items) > MAX_SUBMISSIONS:
            raise InputInvalid(
                f"{len(items)} submissions in one call; the most is {MAX_SUBMISSIONS}. Split them."
            )
        rows: list[tuple[str, NewRow]] = []
        first: dict[tuple[str, str], tuple[int, NewRow]] = {}
        scopes: dict[str | None, str] = {}
        for index, submission in enumerate(items):
            try:
                scope, row = self._row(submission, scopes=scopes)
            except JobError as exc:
                raise _of_row(exc, index, getattr(submission, "idempotency_key", None)) from None
            earlier = first.setdefault((scope, row.key), (index, row))
            if earlier[1].proposal != row.proposal:
                raise IdempotencyConflict(
                    f"Submissions {earlier[0]} and {index} of this call share the key {row.key!r} "
                    f"(scope {scope!r}) with different proposals; nothing was written. Give "
                    f"different input different idempotency keys."
                )
            rows.append((scope, earlier[1]))
        return rows

    def _require_caller_transaction(self, method: str) -> None:
        if not connections[self.using].in_atomic_block:
            raise InputInvalid(
                "in_caller_transaction=True needs an open transaction.atomic() on "
                f"{self.using!r}; call {method}() inside it, or drop the flag."
            )


def listed(values: Any, what: str) -> list:
    """Return ``values`` as a list; refuse text, bytes and mappings, which iterate surprisingly."""
    if isinstance(values, (str, bytes, bytearray, Mapping)) or not isinstance(values, Iterable):
        raise InputInvalid(
            f"{what} must be a list or another iterable; got {type(values).__name__}."
        )
    return list(values)


def _by_scope(rows: list[tuple[str, NewRow]]) -> dict[str, list[NewRow]]:
    """Group the distinct rows by scope, in order (one enqueue per scope)."""
    groups: dict[str, dict[str, NewRow]] = {}
    for scope, row in rows:
        groups.setdefault(scope, {}).setdefault(row.key, row)
    return {scope: list(group.values()) for scope, group in groups.items()}


def _of_row(exc: JobError, index: int, key: Any) -> JobError:
    """Return ``exc`` with a message naming the submission it is about."""
    where = f"Submission {index}" + (f" (key {key!r})" if key is not None else "")
    return type(exc)(f"{where}: {exc.message} Nothing from this call was written.", code=exc.code)
