"""Workers by state, with the leases each really holds counted from the job rows."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Q

from ..models import Job, WorkerProcess
from ..rules.vocabulary import JobStatus, WorkerState, worker_state
from .values import WorkerRow, WorkerStats

# Alive and stale workers listed (the newest heartbeats first), and stopped ones (newest first):
# stopped rows pile up over time and are kept, so only their number grows.
ACTIVE_LIMIT = 100
STOPPED_LIMIT = 20


def lease_values(using: str) -> list[float]:
    """Return the distinct lease lengths of workers that have not stopped (a handful)."""
    rows = WorkerProcess.objects.using(using).filter(stopped_at__isnull=True)
    return sorted(set(rows.values_list("lease_seconds", flat=True).distinct().order_by()))


def stale_q(now: datetime, leases: list[float]) -> Q:
    """Return ``vocabulary.worker_state``'s stale rule in SQL: not stopped, and no heartbeat
    for longer than the worker's own lease.

    One comparison per distinct lease length, so every database evaluates it with plain
    comparisons on the indexed heartbeat column and no interval arithmetic.
    """
    rule = Q(pk__in=[])
    for seconds in leases:
        rule |= Q(lease_seconds=seconds, heartbeat_at__lt=now - timedelta(seconds=seconds))
    return Q(stopped_at__isnull=True) & rule


def holdings(using: str) -> list[tuple[str, str | None, int]]:
    """Return (owner id, scope, running jobs) for every owner of a running job."""
    rows = (
        Job.objects.using(using)
        .filter(status=JobStatus.RUNNING, owner_id__isnull=False)
        .values_list("owner_id", "scope")
        .annotate(count=Count("pk"))
        .order_by()
    )
    return list(rows)


def _row(worker: WorkerProcess, now: datetime, held: int) -> WorkerRow:
    state = worker_state(worker.stopped_at, worker.heartbeat_at, worker.lease_seconds, now)
    return WorkerRow(
        owner_id=worker.owner_id,
        actor=worker.actor,
        host=worker.host,
        pid=worker.pid,
        state=state.value,
        started_at=worker.started_at,
        heartbeat_at=worker.heartbeat_at,
        stopped_at=worker.stopped_at,
        lease_seconds=worker.lease_seconds,
        concurrency=worker.concurrency,
        leases_held=held,
        vanished=state == WorkerState.STALE and held > 0,
    )


def worker_stats(using: str, now: datetime, leases: list[float], held: list[tuple]) -> WorkerStats:
    """Return every worker counted by state, the alive and stale ones listed with the leases
    they hold, and the most recently stopped ones."""
    workers = WorkerProcess.objects.using(using)
    counts: dict[str, Any] = workers.aggregate(
        total=Count("pk"),
        stopped=Count("pk", filter=Q(stopped_at__isnull=False)),
        stale=Count("pk", filter=stale_q(now, leases)),
    )
    by_owner: Counter[str] = Counter()
    for owner, _scope, count in held:
        by_owner[owner] += count
    active = workers.filter(stopped_at__isnull=True).order_by("-heartbeat_at", "owner_id")
    stopped = workers.filter(stopped_at__isnull=False).order_by("-stopped_at", "owner_id")
    holders = workers.filter(stopped_at__isnull=True, owner_id__in=sorted(by_owner))
    vanished = sum(1 for w in holders if _row(w, now, by_owner[w.owner_id]).vanished)
    return WorkerStats(
        alive=counts["total"] - counts["stopped"] - counts["stale"],
        stale=counts["stale"],
        stopped=counts["stopped"],
        vanished=vanished,
        active=tuple(_row(w, now, by_owner[w.owner_id]) for w in active[:ACTIVE_LIMIT]),
        recently_stopped=tuple(_row(w, now, by_owner[w.owner_id]) for w in stopped[:STOPPED_LIMIT]),
    )
