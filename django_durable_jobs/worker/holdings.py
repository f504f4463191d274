"""Holdings: every claim a process holds, under one lock, and one heartbeat pass over them all.

``Worker`` and ``InProcessRunner`` both keep their claims here, from the claim until the outcome
committed, so both renew their leases the same way: every lease in one fenced statement
(``DurableJobStore.renew_leases``), passing what the rows say (a cancellation request, a lost
lease) to the executors.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError

from .. import metrics
from .connections import reset_broken_connections
from .held import Held, HeldState, key

if TYPE_CHECKING:
    from ..models import Job
    from ..store import DurableJobStore
    from .reports import AttemptReport

logger = logging.getLogger("django_durable_jobs.worker")


class Holdings:
    """The claims one store client holds; methods marked so need ``lock`` held by the caller.

    The lock also guards whatever the owner counts alongside (the worker's tallies, the
    in-process runner's finished executors), so that both change together.
    """

    def __init__(self, store: DurableJobStore) -> None:
        self.store = store
        self.lock = threading.Lock()
        self.held: dict[tuple, Held] = {}
        self.counts: Counter[HeldState] = Counter()  # held claims by state
        self.loop_counts: Counter[HeldState] = Counter()  # ... of them, those on the event loop

    def __len__(self) -> int:
        return len(self.held)

    def entries(self) -> list[Held]:
        """Return the claims held now."""
        with self.lock:
            return list(self.held.values())

    def find(self, job_id: Any) -> Held | None:
        """Return the newest claim held of ``job_id``, or None."""
        with self.lock:
            found = [entry for entry in self.held.values() if entry.lease.job_id == job_id]
        return max(found, key=lambda entry: entry.lease.epoch, default=None)

    def add(self, entry: Held) -> None:
        """Hold ``entry`` (call with the lock held)."""
        self.held[key(entry.lease)] = entry
        self._count(entry, entry.state, 1)

    def move(self, entry: Held, state: HeldState) -> None:
        """Change ``entry``'s state (call with the lock held)."""
        self._count(entry, entry.state, -1)
        self._count(entry, state, 1)
        entry.state = state

    def finish(self, entry: Held, report: AttemptReport | None) -> None:
        """Stop holding ``entry``, whose attempt ended as ``report`` says (call with the lock held).

        ``report`` is None only when nobody knows how it ended (its outcome could not be written).
        """
        if self.held.get(key(entry.lease)) is entry:
            del self.held[key(entry.lease)]
        self._count(entry, entry.state, -1)
        entry.state = HeldState.DONE
        entry.report = report
        entry.done.set()

    def _count(self, entry: Held, state: HeldState, change: int) -> None:
        self.counts[state] += change
        if entry.on_loop:
            self.loop_counts[state] += change

    def renew(self) -> int | None:
        """Renew every held lease in one statement; tell the executors what the rows say.

        Return how many claims were held, or None when the database was unavailable (the next
        pass tries again).
        """
        entries = self.entries()
        try:
            rows = self.store.renew_leases([entry.lease for entry in entries])
        except DatabaseError:
            logger.warning("heartbeat failed: database unavailable", exc_info=True)
            reset_broken_connections()
            return None
        for entry, row in zip(entries, rows, strict=True):
            _pass_on(entry, row)
        return len(entries)


def _pass_on(entry: Held, row: Job | None) -> None:
    """Tell ``entry``'s executor what its renewed row says: a lost lease, or a request."""
    if row is None:
        if entry.state != HeldState.DONE:
            logger.warning("job %s lease lost", entry.lease.job_id)
            metrics.stale_write_refused(entry.claim.job.operation, "heartbeat")
        entry.lose()
        return
    entry.expires_at = row.lease_expires_at
    if row.cancellation_requested_at is not None and not entry.cancel.is_set():
        logger.info("job %s cancellation requested", entry.lease.job_id)
        entry.cancel.set()
