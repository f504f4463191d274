"""Write fences: the check every domain write under a lease must pass."""

from __future__ import annotations

from datetime import datetime

from django.db import connections
from django.utils import timezone

from .. import history
from ..errors import InputInvalid, LeaseLost
from ..execution import Execution, Identity, WriteFence
from ..models import Job
from ..transactions import check_execution
from ..values import Lease
from ..vocabulary import JobStatus, proposal_sha256


def _lease_lost(lease: Lease, why: str) -> LeaseLost:
    return LeaseLost(
        f"Job {lease.job_id} (epoch {lease.epoch}): {why}. Nothing was written; stop this attempt, "
        f"the job belongs to whoever holds its current lease."
    )


def _verify_fence(
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
            history.fenced_writes(write, [lease], accepted=False, at=now, why=why)
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
    if not isinstance(using, str) or using not in connections.databases:
        raise InputInvalid(f"No database alias {using!r} in settings.DATABASES.")
    if not connections[using].in_atomic_block:
        raise InputInvalid(
            "assert_write_fence() must run inside transaction.atomic(using=...) together with "
            "the domain write it guards."
        )
    check_execution(execution)
    now = (fence.clock or timezone.now)()
    _verify_fence(fence, execution.identity, using, now, allow_cancel_request=False)
    history.fenced_writes("write_fence", [fence.lease], accepted=True, at=now)
