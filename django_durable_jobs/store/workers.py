"""Worker rows: each ``runjobs`` process announces itself, heartbeats and signs off.

A worker row is keyed by the client's owner id: the process that holds the leases is the one
whose row says it is alive.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable

from ..database.transactions import bounded_atomic
from ..models import WorkerProcess
from .client import Client, now


def register(
    client: Client,
    *,
    concurrency: int,
    queues: Iterable[str] | None = None,
    operations: Iterable[str] | None = None,
) -> WorkerProcess:
    """Create (or renew) the row of the worker that owns the client's leases."""
    at = now(client)
    with bounded_atomic(client.using):
        row, _ = WorkerProcess.objects.using(client.using).update_or_create(
            owner_id=client.owner_id,
            defaults={
                "actor": client.actor or "",
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "started_at": at,
                "heartbeat_at": at,
                "stopped_at": None,
                "lease_seconds": client.lease_seconds,
                "concurrency": concurrency,
                "leases_held": 0,
                "stopping": False,
                "queues": ",".join(queues or []),
                "operations": ",".join(operations or []),
            },
        )
    return row


def heartbeat(client: Client, *, leases_held: int, stopping: bool) -> None:
    """Refresh the worker's row: it is alive and holds ``leases_held`` leases."""
    with bounded_atomic(client.using):
        WorkerProcess.objects.using(client.using).filter(owner_id=client.owner_id).update(
            heartbeat_at=now(client), leases_held=leases_held, stopping=stopping
        )


def stopped(client: Client) -> None:
    """Mark the worker's row as cleanly stopped."""
    at = now(client)
    with bounded_atomic(client.using):
        WorkerProcess.objects.using(client.using).filter(owner_id=client.owner_id).update(
            heartbeat_at=at, stopped_at=at, leases_held=0, stopping=True
        )
