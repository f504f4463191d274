"""Say so, once per operation, when due jobs wait for an operation no running worker has.

A worker claims only the operations registered in its own process, so a job of an operation
that no deployed code registers (a typo, a module not in ``INSTALLED_APPS``, a release not yet
rolled out) would stay pending without a word. When the fetch loop has drained what it can
claim, it looks, at most every ``INTERVAL`` seconds, at a bounded sample of the due pending jobs
in its scope and queues that it does not run; an operation that no *alive* worker row declares
for that queue is logged at WARNING, once per operation for the life of the process.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from django.db import DatabaseError

from ..formatting.terminal import printable
from ..models import Job, WorkerProcess
from ..rules.vocabulary import WorkerState, worker_state

if TYPE_CHECKING:
    from ..store import DurableJobStore

logger = logging.getLogger("django_durable_jobs.worker")

INTERVAL = 10.0  # seconds between two looks: the query is cheap, but not free
SAMPLE = 200  # due pending rows read per look, in no particular order (bounded, not exhaustive)


class UnregisteredWatch:
    """Warn once per operation of due jobs that no alive worker can claim."""

    def __init__(
        self,
        store: DurableJobStore,
        operations: Iterable[str],
        queues: Iterable[str] | None,
        *,
        interval: float = INTERVAL,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.operations = frozenset(operations)
        self.queues = sorted(queues) if queues else None
        self.interval = interval
        self.monotonic = monotonic
        self.warned: set[str] = set()
        self.next_look = 0.0

    def look(self) -> list[str]:
        """Warn of the operations newly found waiting for a worker; return their names.

        Does nothing until ``interval`` seconds passed since the last look. A database that does
        not answer is left to the fetch loop, which notices it on its next claim.
        """
        now = self.monotonic()
        if now < self.next_look:
            return []
        self.next_look = now + self.interval
        try:
            waiting = self.waiting()
        except DatabaseError:
            return []
        new = sorted(set(waiting) - self.warned)
        for name in new:
            logger.warning(
                "due jobs of operation %s (queue %s) wait: no running worker has it registered. "
                "Register it (@operation in an installed app's jobs.py, or a @task) in the "
                "code the workers run, start runjobs where it is, or cancel those jobs.",
                printable(name, keep_newlines=False),
                ", ".join(printable(q, keep_newlines=False) for q in sorted(waiting[name])),
            )
        self.warned.update(new)
        return new

    def waiting(self) -> dict[str, set[str]]:
        """Return {operation: queues} of sampled due jobs that no alive worker claims."""
        rows = (
            Job.objects.using(self.store.using)
            .pending_due(self.store.clock())
            .in_scope(self.store.scope)
            .exclude(operation__in=self.operations)
        )
        if self.queues is not None:
            rows = rows.filter(queue__in=self.queues)
        pairs = set(rows.order_by().values_list("operation", "queue")[:SAMPLE])
        if not pairs:
            return {}
        claimers = self._alive_claimers()
        waiting: dict[str, set[str]] = {}
        for name, queue in pairs:
            if not any(name in ops and (not qs or queue in qs) for ops, qs in claimers):
                waiting.setdefault(name, set()).add(queue)
        return waiting

    def _alive_claimers(self) -> list[tuple[frozenset[str], frozenset[str]]]:
        """Return (operations, queues) of every alive worker row; no queues means every queue."""
        now = self.store.clock()
        found = []
        rows = WorkerProcess.objects.using(self.store.using).filter(stopped_at__isnull=True)
        for row in rows.only("stopped_at", "heartbeat_at", "lease_seconds", "queues", "operations"):
            if worker_state(row.stopped_at, row.heartbeat_at, row.lease_seconds, now) != (
                WorkerState.ALIVE
            ):
                continue
            found.append((_names(row.operations), _names(row.queues)))
        return found


def _names(text: str) -> frozenset[str]:
    """Return the names a worker row stores comma-separated (none: empty)."""
    return frozenset(name for name in (text or "").split(",") if name)
