"""The store client's state and the helpers every store method shares."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connections
from django.utils import timezone

from .. import history, registry, validation
from ..conf import jobs_settings
from ..dbvendor import lock_for_update, lock_gate
from ..errors import CapacityReached, InputInvalid, LeaseLost, NotReclaimable, ScopeMismatch
from ..execution import Execution
from ..models import Job, JobAttempt
from ..transactions import bounded_atomic
from ..values import Lease
from ..vocabulary import AttemptOutcomeChoice, JobStatus, assess_ownership
from .fence import _lease_lost

INTERRUPTED_ERROR = "The lease expired before the attempt ended; its outcome is unknown."


def _attempt_of(
    job: Job,
    now: datetime,
    outcome: str,
    error: str | None,
    *,
    error_class: str = "",
    traceback: str | None = None,
) -> JobAttempt:
    """Return the (unsaved) history row of ``job``'s attempt, ended now with ``outcome``.

    A failure an exception caused also keeps the exception's class path and traceback.
    """
    return JobAttempt(
        job_id=job.pk,
        epoch=job.fencing_epoch,
        owner_id=job.owner_id,
        claimed_by=job.claimed_by or "",
        started_at=job.claimed_at,
        ended_at=now,
        outcome=outcome,
        error=error,
        error_class=error_class,
        traceback=traceback,
        snapshot=_snapshot(job),
    )


_ENCODER = DjangoJSONEncoder()
_PLAIN = (str, int, float)


def _snapshot(job: Job) -> dict[str, Any]:
    """Return a JSON-safe image of every column of ``job`` (times and ids as Django encodes them)."""
    row = {}
    for field in Job._meta.concrete_fields:
        value = getattr(job, field.attname)
        if value is not None and not isinstance(value, _PLAIN):
            value = _ENCODER.default(value)
        row[field.attname] = value
    return row


class StoreBase:
    """State and shared helpers of a store client: one owner id, one scope, one clock."""

    def __init__(
        self,
        *,
        scope: str | None = None,
        actor: str | None = None,
        lease_seconds: float = 30.0,
        using: str = "default",
        clock: Callable[[], datetime] | None = None,
        lease: float | None = None,
    ) -> None:
        self.scope = None if scope is None else validation.scope(scope)
        self.actor = None if actor is None else validation.name(actor, "actor")
        self.lease_seconds = validation.lease_seconds(lease_seconds, lease)
        if not isinstance(using, str) or using not in connections.databases:
            raise InputInvalid(f"No database alias {using!r} in settings.DATABASES.")
        self.using = using
        if clock is not None and not callable(clock):
            raise InputInvalid(
                f"clock is a zero-argument callable returning an aware datetime (or None for "
                f"django.utils.timezone.now); got {clock!r}."
            )
        self.clock = clock or timezone.now
        self.owner_id = str(uuid.uuid4())
        self._claim_statements: dict[tuple, Any] = {}  # compiled claims, see batches.py
        self._turn = ""  # the scope this client's last claim of pending work served (claims.py)

    @property
    def lease(self) -> float:
        """Deprecated name of :attr:`lease_seconds`."""
        return self.lease_seconds

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
        resolved = scope if scope is not None else self.scope or jobs_settings.DEFAULT_SCOPE
        validation.scope(resolved)
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

    def _lease_of(self, lease: Any) -> Lease:
        """Return ``lease``, or refuse what is not a ``Lease`` (``InputInvalid``)."""
        if not isinstance(lease, Lease):
            raise InputInvalid(
                f"Expected the Lease returned by a claim; got {type(lease).__name__}."
            )
        # A Lease built by hand (or altered with dataclasses.replace) reaches SQL as it is: a
        # job id that is no UUID, or an epoch no column can hold, must be refused here, not
        # fail in the database driver.
        epoch = lease.epoch
        if (
            not isinstance(lease.job_id, uuid.UUID)
            or not isinstance(lease.owner_id, str)
            or isinstance(epoch, bool)
            or not isinstance(epoch, int)
            or not 0 <= epoch <= validation.BIGINT_MAX
        ):
            raise InputInvalid(
                f"This is not a Lease a claim returned (job_id a UUID, owner_id text, epoch a "
                f"whole number from 0 to {validation.BIGINT_MAX}); got {lease!r}."
            )
        return lease

    def _check_lease(self, lease: Lease) -> None:
        """Refuse what is not a lease, and a lease issued to another store client."""
        if self._lease_of(lease).owner_id != self.owner_id:
            raise _lease_lost(lease, "the lease was issued to another store client")

    def _fenced(self, lease: Lease, now: datetime):
        return self._jobs().filter(
            pk=lease.job_id,
            owner_id=lease.owner_id,
            fencing_epoch=lease.epoch,
            status=JobStatus.RUNNING,
            lease_expires_at__gt=now,
        )

    def _fenced_update(self, lease: Lease, write: str = "update", **changes: Any) -> Job:
        """Apply ``changes`` under the lease's fence and return the updated row.

        ``write`` names the write in the history of fenced writes (``history.py``).
        """
        self._check_lease(lease)
        with bounded_atomic(self.using):
            now = self._now()
            changes = {k: (v(now) if callable(v) else v) for k, v in changes.items()}
            if self._fenced(lease, now).update(**changes) != 1:
                history.fenced_writes(write, [lease], accepted=False, at=now, why="fence")
                raise self._loss(lease, now)
            row = self._annotate(Job.objects.using(self.using).get(pk=lease.job_id), now)
        history.fenced_writes(write, [lease], accepted=True, at=now)
        return row

    def _loss(self, lease: Lease, now: datetime) -> LeaseLost:
        """Return the LeaseLost for a fenced write that matched nothing, saying what changed."""
        return _loss_of(lease, self._jobs().filter(pk=lease.job_id).first())

    def _fence_holds(self, lease: Lease, row: Job | None, now: datetime) -> bool:
        """Return True when ``row`` (read under lock) is still ``lease``'s: the fence in Python."""
        return (
            row is not None
            and lease.owner_id == self.owner_id
            and row.owner_id == lease.owner_id
            and row.fencing_epoch == lease.epoch
            and row.status == JobStatus.RUNNING
            and row.lease_expires_at is not None
            and row.lease_expires_at > now
        )

    def _locked_row(self, job_id: Any) -> Job | None:
        pk = validation.job_id(job_id)
        return lock_for_update(self._jobs().filter(pk=pk)).first()

    @staticmethod
    def _max_running(max_running: Any) -> int | None:
        """Return ``max_running`` when it is None or a positive whole number; else refuse it.

        Called first by every method that takes it, so a bad value is ``InputInvalid`` before
        any SQL, never a ``CapacityReached`` (``max_running=0`` would allow nothing, ever).
        """
        if max_running is not None and (
            isinstance(max_running, bool) or not isinstance(max_running, int) or max_running < 1
        ):
            raise InputInvalid(
                f"max_running is a positive whole number, or None for the operation's own "
                f"limit; got {max_running!r}."
            )
        return max_running

    def _capacity(self, operation: str, max_running: int | None) -> int | None:
        if self._max_running(max_running) is None:
            spec = registry.get(operation)
            max_running = spec.max_running if spec else None
        return self._max_running(max_running)

    def _free_slots(self, operation: str, cap: int, exclude: Any = None) -> int:
        """Lock the operation's gate and return how many more may run (atomic with the claim)."""
        return self._gated_slots(operation, cap, exclude, operation=operation)

    def _gated_slots(self, gate: str, cap: int, exclude: Any = None, **running_of: Any) -> int:
        """Lock capacity gate ``gate``; return ``cap`` less the running jobs ``running_of`` names.

        ``exclude`` is a job not to count (the one being claimed again).
        """
        lock_gate(self.using, gate)
        running = Job.objects.using(self.using).filter(status=JobStatus.RUNNING, **running_of)
        if exclude is not None:
            running = running.exclude(pk=exclude)
        return cap - running.count()

    def _require_capacity(self, operation: str, cap: int | None, exclude: Any = None) -> None:
        if cap is not None and self._free_slots(operation, cap, exclude) <= 0:
            raise CapacityReached(
                f"Operation {operation!r} already has {cap} running job(s) (max_running={cap}); "
                f"try again when one finishes."
            )

    def _record_attempt(
        self, job: Job, now: datetime, outcome: str, error: str | None, **failure: Any
    ) -> None:
        _attempt_of(job, now, outcome, error, **failure).save(using=self.using, force_insert=True)

    def _take(self, row: Job, now: datetime, *, new_attempt: bool) -> Lease:
        """Make this client the owner of ``row`` at the next epoch (a locked row)."""
        epoch = validation.bump(row.fencing_epoch, validation.BIGINT_MAX, "fencing epoch")
        attempts = validation.bump(row.attempts, validation.ATTEMPTS_MAX, "attempts")
        if row.status == JobStatus.RUNNING and not self._attempt_recorded(row):
            # An expired attempt, superseded: its outcome is uncertain. (A released attempt
            # already has its history row.)
            self._record_attempt(row, now, AttemptOutcomeChoice.INTERRUPTED, INTERRUPTED_ERROR)
        expires = now + timedelta(seconds=self.lease_seconds)
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
        for name, value in changes.items():
            setattr(row, name, value)
        return Lease(job_id=row.pk, owner_id=self.owner_id, epoch=epoch, expires_at=expires)

    def _attempt_recorded(self, row: Job) -> bool:
        return (
            JobAttempt.objects.using(self.using)
            .filter(job_id=row.pk, epoch=row.fencing_epoch)
            .exists()
        )

    def _end(
        self,
        row: Job,
        now: datetime,
        status: str,
        *,
        error_class: str = "",
        traceback: str | None = None,
        **changes: Any,
    ) -> None:
        """Move the locked, fenced ``row`` to a terminal status and record its attempt.

        ``changes`` are the row's new values; ``error_class`` and ``traceback`` go to the
        attempt's history row only.
        """
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
        self._record_attempt(
            row, now, status, changes.get("error"), error_class=error_class, traceback=traceback
        )

    def _end_fenced(self, lease: Lease, status: str, guard=None, then=None, **changes: Any) -> None:
        """End the attempt under the lease's fence; ``guard(row)`` may refuse first, and
        ``then(row, now)`` runs after, in the same transaction."""
        self._check_lease(lease)
        with bounded_atomic(self.using):
            now = self._now()
            row = lock_for_update(self._fenced(lease, now)).first()
            if row is None:
                history.fenced_writes(status, [lease], accepted=False, at=now, why="fence")
                raise self._loss(lease, now)
            if guard is not None:
                guard(row)
            self._end(row, now, status, **changes)
            if then is not None:
                then(row, now)
        history.fenced_writes(status, [lease], accepted=True, at=now)


def _loss_of(lease: Lease, row: Job | None) -> LeaseLost:
    """Return the LeaseLost for ``lease`` whose fence ``row`` no longer passes, saying why."""
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
