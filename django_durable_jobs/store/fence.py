"""The fence: whether a write made under a lease may still change the job's row.

A lease is ``(job id, owner id, epoch)``. A write under it changes the row only where the job is
that id, held by that owner at that epoch, running, and (for an owner's writes) leased beyond
now; anything else is a lost lease (``LeaseLost``), explained by :func:`loss_of`. Every form
the check takes lives here, so a reviewer audits fencing in this one file:

* in Python, over a row read under lock: :func:`holds`, :func:`releasable`,
  :func:`completed_by`;
* in the ORM: :func:`fenced` (an owner's write), :func:`unchanged` (the compare-and-set a claim
  makes on the epoch it read), :func:`epoch_can_advance`;
* in hand-written SQL: :data:`SQL_FENCE_COLUMNS` and :func:`sql_epoch`, :func:`sql_holder`,
  which ``sql/rows.py`` builds its fenced UPDATE from;
* for a domain write: :func:`verify` and :func:`assert_write_fence`.

This module imports no other module of the store.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connections
from django.utils import timezone

from ..database.transactions import check_execution
from ..models import Job
from ..observability import history
from ..rules import validation
from ..rules.errors import InputInvalid, LeaseLost
from ..rules.execution import Execution, Identity, WriteFence
from ..rules.values import Lease
from ..rules.vocabulary import JobStatus, proposal_sha256

if TYPE_CHECKING:
    from .client import Client

#: The column that counts claims; a lease carries the value its claim set.
EPOCH_COLUMN = "fencing_epoch"
#: The columns a hand-written fenced statement compares, besides the job's id: the epoch (the
#: lease's), the owner (the client's), the status (running) and, for an owner's writes, the
#: lease's expiry (later than now).
SQL_FENCE_COLUMNS = (EPOCH_COLUMN, "owner_id", "status", "lease_expires_at")


# -- what a lease is ------------------------------------------------------------------------------


def lease_of(lease: Any) -> Lease:
    """Return ``lease``, or refuse what is not a ``Lease`` a claim returned (``InputInvalid``)."""
    if not isinstance(lease, Lease):
        raise InputInvalid(f"Expected the Lease returned by a claim; got {type(lease).__name__}.")
    # A Lease built by hand (or altered with dataclasses.replace) reaches SQL as it is: a job id
    # that is no UUID, or an epoch no column can hold, must be refused here, not fail in the
    # database driver.
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


def issued_to(client: Client, lease: Lease) -> bool:
    """Return True when ``lease`` was issued to ``client`` (its owner id is the client's)."""
    return lease.owner_id == client.owner_id


def check_lease(client: Client, lease: Any) -> Lease:
    """Return ``lease``; refuse what is not a lease, and a lease issued to another client."""
    if not issued_to(client, lease_of(lease)):
        raise lost(lease, ISSUED_ELSEWHERE)
    return lease


# -- why a lease was lost ---------------------------------------------------------------------------

ISSUED_ELSEWHERE = "the lease was issued to another store client"


def lost(lease: Lease, why: str) -> LeaseLost:
    """Return the ``LeaseLost`` of a write under ``lease`` refused because ``why``."""
    return LeaseLost(
        f"Job {lease.job_id} (epoch {lease.epoch}): {why}. Nothing was written; stop this attempt, "
        f"the job belongs to whoever holds its current lease."
    )


def loss_of(client: Client, lease: Lease, row: Job | None) -> LeaseLost:
    """Return the ``LeaseLost`` of ``lease``, whose fence ``row`` (its job now) did not pass.

    This is the one explanation of a lost lease: another client's lease, no such job, a job
    claimed again since, a job that already ended, or a lease that ran out.
    """
    if not issued_to(client, lease):
        why = ISSUED_ELSEWHERE
    elif row is None:
        why = "there is no such job in this store's scope"
    elif row.fencing_epoch != lease.epoch or row.owner_id != lease.owner_id:
        who = f" by {row.claimed_by}" if row.claimed_by else ""
        why = f"the job was claimed again{who} (now epoch {row.fencing_epoch})"
    elif row.status != JobStatus.RUNNING:
        why = f"the job is already {row.status}"
    else:
        why = f"the lease expired at {row.lease_expires_at.isoformat()}"
    return lost(lease, why)


def changed_under_lock(what: str) -> LeaseLost:
    """Return the ``LeaseLost`` of rows locked and checked that a fenced statement then missed.

    The rows are locked, so this cannot happen; if it does, the transaction rolls back whole.
    """
    return LeaseLost(f"Rows changed under their locks while {what}; nothing was written.")


# -- the fence in Python ----------------------------------------------------------------------------


def holds(client: Client, lease: Lease, row: Job | None, now: datetime) -> bool:
    """Return True when ``row`` (read under lock) is still ``lease``'s, leased beyond ``now``."""
    return (
        row is not None
        and issued_to(client, lease)
        and row.owner_id == lease.owner_id
        and row.fencing_epoch == lease.epoch
        and row.status == JobStatus.RUNNING
        and row.lease_expires_at is not None
        and row.lease_expires_at > now
    )


def releasable(client: Client, lease: Lease, row: Job | None) -> bool:
    """Return True while ``lease`` is still ``client``'s claim on ``row``.

    Its lease may have run out: as long as nobody took the job since, it is ours to hand back.
    """
    return (
        row is not None
        and row.status == JobStatus.RUNNING
        and row.owner_id == client.owner_id == lease.owner_id
        and row.fencing_epoch == lease.epoch
        and row.attempts > 0
    )


def completed_by(job: Job, lease: Lease) -> bool:
    """Return True when ``job`` is complete, and the attempt of ``lease`` completed it."""
    return (job.status, job.owner_id, job.fencing_epoch) == (
        JobStatus.COMPLETE,
        lease.owner_id,
        lease.epoch,
    )


# -- the fence in the ORM -------------------------------------------------------------------------


def fenced(client: Client, lease: Lease, now: datetime):
    """Return the job rows an owner's write under ``lease`` may change at ``now``: one or none."""
    return (
        Job.objects.using(client.using)
        .in_scope(client.scope)
        .filter(
            pk=lease.job_id,
            owner_id=lease.owner_id,
            fencing_epoch=lease.epoch,
            status=JobStatus.RUNNING,
            lease_expires_at__gt=now,
        )
    )


def unchanged(client: Client, row: Job):
    """Return ``row`` as a claim read it (same epoch, same status): the claim's compare-and-set."""
    return Job.objects.using(client.using).filter(
        pk=row.pk, fencing_epoch=row.fencing_epoch, status=row.status
    )


def epoch_can_advance(jobs):
    """Return the rows of ``jobs`` whose epoch a claim can still raise (below the column's max)."""
    return jobs.filter(fencing_epoch__lt=validation.BIGINT_MAX)


# -- the fence in hand-written SQL ----------------------------------------------------------------


def sql_epoch(column: Callable[[str], str], value: str = "%s") -> str:
    """Return the condition 'the row is at the lease's epoch', the epoch given as ``value``."""
    return f"{column(EPOCH_COLUMN)} = {value}"


def sql_holder(
    column: Callable[[str], str],
    owner_id: str,
    unexpired_at: Any = None,
) -> tuple[list[str], list[Any]]:
    """Return the conditions (and their parameters) 'held by ``owner_id``, running, unexpired'.

    ``unexpired_at`` is the time (as the database takes it) the lease must run beyond; None
    leaves the expiry out (a release hands back a claim whose lease may have run out).
    """
    _, owner, status, expiry = SQL_FENCE_COLUMNS
    where = [f"{column(owner)} = %s", f"{column(status)} = %s"]
    params: list[Any] = [owner_id, JobStatus.RUNNING]
    if unexpired_at is not None:
        where.append(f"{column(expiry)} > %s")
        params.append(unexpired_at)
    return where, params


# -- the fence of a domain write ------------------------------------------------------------------


def verify(
    fence: WriteFence,
    identity: Identity,
    using: str,
    now: datetime,
    *,
    allow_cancel_request: bool,
    write: str = "write_fence",
) -> Job:
    """Lock the fenced job row and return it, or raise ``LeaseLost`` saying what changed.

    ``write`` names the write a refusal is recorded as in the history of fenced writes.
    """
    lease = fence.lease
    if fence.using != using:
        raise lost(lease, f"the fence is for database {fence.using!r}, not {using!r}")
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
            history.fenced_writes(write, [lease], accepted=False, at=now, why=why)
            raise lost(lease, why)
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
    if not isinstance(using, str) or using not in connections.databases:
        raise InputInvalid(f"No database alias {using!r} in settings.DATABASES.")
    if not connections[using].in_atomic_block:
        raise InputInvalid(
            "assert_write_fence() must run inside transaction.atomic(using=...) together with "
            "the domain write it guards."
        )
    check_execution(execution)
    now = (fence.clock or timezone.now)()
    verify(fence, execution.identity, using, now, allow_cancel_request=False)
    history.fenced_writes("write_fence", [fence.lease], accepted=True, at=now)
