"""Worker rows: each ``runjobs`` process announces itself, heartbeats and signs off."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable

from ..models import WorkerProcess
from ..transactions import bounded_atomic
from .base import StoreBase


class WorkerRowMixin(StoreBase):
    """Keep the row that shows this store's worker process is alive."""

    def register_worker(
        self,
        *,
        concurrency: int,
        queues: Iterable[str] | None = None,
        operations: Iterable[str] | None = None,
    ) -> WorkerProcess:
        """Create (or renew) the row of the worker that owns this store's leases."""
        now = self._now()
        with bounded_atomic(self.using):
            row, _ = WorkerProcess.objects.using(self.using).update_or_create(
                owner_id=self.owner_id,
                defaults={
                    "actor": self.actor or "",
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "started_at": now,
                    "heartbeat_at": now,
                    "stopped_at": None,
                    "lease_seconds": self.lease_seconds,
                    "concurrency": concurrency,
                    "leases_held": 0,
                    "stopping": False,
                    "queues": ",".join(queues or []),
                    "operations": ",".join(operations or []),
                },
            )
        return row

    def worker_heartbeat(self, *, leases_held: int, stopping: bool) -> None:
        """Refresh this worker's row: it is alive and holds ``leases_held`` leases."""
        with bounded_atomic(self.using):
            WorkerProcess.objects.using(self.using).filter(owner_id=self.owner_id).update(
                heartbeat_at=self._now(), leases_held=leases_held, stopping=stopping
            )

    def worker_stopped(self) -> None:
        """Mark this worker's row as cleanly stopped."""
        now = self._now()
        with bounded_atomic(self.using):
            WorkerProcess.objects.using(self.using).filter(owner_id=self.owner_id).update(
                heartbeat_at=now, stopped_at=now, leases_held=0, stopping=True
            )
