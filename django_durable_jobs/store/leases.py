"""Leases: renewal, checkpoint and progress, the owner's writes while its attempt runs.

Each is fenced (``store/fence.py``): it changes the row only while the lease is still the job's,
and says why not when it is not. ``heartbeat`` is a one-item call of :func:`renew`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ..database.transactions import bounded_atomic
from ..models import Job
from ..observability import history
from ..rules import validation
from ..rules.values import Lease
from . import client as client_room
from . import fence
from .client import Client
from .sql.rows import JobRows


def renew(
    client: Client, leases: Sequence[Lease], *, write: str = "renew"
) -> tuple[list[Job | None], dict[Any, Job], datetime | None]:
    """Renew every lease in one fenced statement.

    Return each job's row (None where its lease is lost), every row found by id in scope (to
    explain a loss), and the time of the renewal. ``write`` names the write in the history of
    fenced writes. No lease asks nothing of the database (and no time: None).
    """
    leases = [fence.lease_of(lease) for lease in validation.listed(leases, "leases")]
    if not leases:
        return [], {}, None
    rows = JobRows(client.using, client.scope)
    with bounded_atomic(client.using):
        now = client_room.now(client)
        renewal = {
            "lease_expires_at": now + timedelta(seconds=client.lease_seconds),
            "heartbeat_at": now,
        }
        mine = [lease for lease in leases if fence.issued_to(client, lease)]
        rows.update_fenced(mine, renewal, owner_id=client.owner_id, unexpired_at=now)
        found = rows.get(lease.job_id for lease in leases)
    renewed = [
        row if fence.holds(client, lease, row := found.get(lease.job_id), now) else None
        for lease in leases
    ]
    history.fenced_verdicts(write, leases, renewed, at=now)
    return renewed, found, now


def heartbeat(client: Client, lease: Lease) -> Job:
    """Renew one lease as :func:`renew` does; return its row, or raise why it was lost."""
    fence.check_lease(client, lease)
    (row,), found, now = renew(client, [lease], write="heartbeat")
    if row is None:
        raise fence.loss_of(client, lease, found.get(lease.job_id))
    return client_room.annotate(client, row, now)


def checkpoint(client: Client, lease: Lease, value_json: str) -> None:
    """Record the owner's checkpoint (exact JSON text); it survives reclaim and retry."""
    value = validation.json_text(value_json, "checkpoint")
    fenced_update(client, lease, "checkpoint", checkpoint=value, checkpoint_at=lambda now: now)


def progress(client: Client, lease: Lease, percent: float) -> None:
    """Record progress, clamped to 0-100."""
    fenced_update(
        client,
        lease,
        "progress",
        progress=validation.percent(percent),
        heartbeat_at=lambda now: now,
    )


def fenced_update(client: Client, lease: Lease, write: str, **changes: Any) -> Job:
    """Apply ``changes`` under the lease's fence and return the updated row.

    A change given as a callable is called with the transaction's time. ``write`` names the
    write in the history of fenced writes.
    """
    fence.check_lease(client, lease)
    with bounded_atomic(client.using):
        now = client_room.now(client)
        changes = {k: (v(now) if callable(v) else v) for k, v in changes.items()}
        if fence.fenced(client, lease, now).update(**changes) != 1:
            history.fenced_writes(write, [lease], accepted=False, at=now, why="fence")
            raise fence.loss_of(
                client, lease, client_room.jobs(client).filter(pk=lease.job_id).first()
            )
        row = client_room.annotate(
            client, Job.objects.using(client.using).get(pk=lease.job_id), now
        )
    history.fenced_writes(write, [lease], accepted=True, at=now)
    return row
