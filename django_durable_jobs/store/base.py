"""The store client's state and the helpers every store method shares."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

from .. import history, validation
from ..dbvendor import lock_for_update
from ..errors import InputInvalid, LeaseLost, NotReclaimable
from ..execution import Execution
from ..models import Job, JobAttempt
from ..transactions import bounded_atomic
from ..values import Lease
from ..vocabulary import AttemptOutcomeChoice, JobStatus
from . import client as client_room
from .client import Client
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
    """Helpers the store's remaining mixins share; each reads ``self._client``."""

    _client: Client

    # -- helpers ---------------------------------------------------------------------------------

    def _now(self) -> datetime:
        return client_room.now(self._client)

    def _jobs(self):
        return client_room.jobs(self._client)

    def _annotate(self, job: Job | None, now: datetime | None = None) -> Job | None:
        return client_room.annotate(self._client, job, now)

    def _resolve_scope(self, scope: str | None) -> str:
        return client_room.resolve_scope(self._client, scope)

    def _check_identity(self, execution: Execution) -> None:
        client_room.check_identity(self._client, execution)

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
        return client_room.locked_row(self._client, job_id)

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
