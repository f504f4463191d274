"""Submitting work: insert, defer and lookups of earlier submissions."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connections, transaction

from .. import validation
from ..dbvendor import bounded_atomic, check_execution, notify_work
from ..errors import IdempotencyConflict, InputInvalid
from ..execution import Execution
from ..models import Job, JobStatus, proposal_sha256
from ..values import Lease, Submission
from .base import StoreBase

EMPTY_PROPOSAL = "{}"


class SubmissionMixin(StoreBase):
    """Insert and defer jobs; coalesce identical submissions."""

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
            row, created = self._create(row)
            if created:
                notify_work(self.using, row.queue)
            return self._annotate(row, now)

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
