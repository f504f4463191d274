"""One read-only snapshot of the job tables, behind the admin dashboard, ``manage.py jobs stats``,
``GET /jobs/stats`` and the Prometheus gauges.

:func:`snapshot` reads a fixed number of queries whatever the number of operations, queues or
rows: each reads the live work (pending and running rows, workers, schedules) or an index range
of a recent window (jobs that ended in the last 24 hours, attempts that ended in the last hour),
so a table of a million finished jobs costs what a table of a thousand does (``docs/stats.md``).
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count, Q
from django.utils import timezone

from ..models import Schedule
from ..rules import validation
from ..rules.conf import jobs_settings
from . import jobs as job_stats
from .attention import KINDS, TITLES, attention_jobs
from .flow import FlowStats, HeldKey, LimitInForce, PauseInForce, flow_stats, held_back
from .values import (
    AttentionItem,
    HistoryBucket,
    JobCount,
    OperationStats,
    PausedSchedule,
    Percentiles,
    QueueStats,
    ScheduleStats,
    Snapshot,
    TerminalCount,
    WorkerRow,
    WorkerStats,
)
from .workers import holdings, lease_values, worker_stats

__all__ = [
    "AttentionItem",
    "FlowStats",
    "HeldKey",
    "LimitInForce",
    "PauseInForce",
    "HistoryBucket",
    "JobCount",
    "OperationStats",
    "PausedSchedule",
    "Percentiles",
    "QueueStats",
    "ScheduleStats",
    "Snapshot",
    "TerminalCount",
    "WorkerRow",
    "WorkerStats",
    "attention_jobs",
    "held_back",
    "snapshot",
]

PAUSED_LIMIT = 100


def snapshot(
    *, scope: str | None = None, using: str | None = None, now: datetime | None = None
) -> Snapshot:
    """Return what the job tables say now, for ``scope`` (every row when None).

    Workers are shared by every scope, so they are all counted; the leases they hold are
    counted from the running rows of every scope. Nothing is written.
    """
    if scope is not None:
        validation.scope(scope)
    using = jobs_settings.database(using)
    now = now or timezone.now()
    jobs = job_stats.in_scope_jobs(scope, using)
    counts, queues = job_stats.live_counts(jobs, now)
    terminal = job_stats.terminal_counts(jobs, now)
    per_minute, per_hour = job_stats.history(using, scope, now)
    sample = job_stats.attempt_sample(job_stats.in_scope_attempts(scope, using), now)
    leases = lease_values(using)
    workers = worker_stats(using, now, leases, holdings(using))
    return Snapshot(
        taken_at=now,
        scope=scope,
        jobs=tuple(counts),
        terminal_last_24h=tuple(
            TerminalCount(op, queue, status, day) for op, queue, status, day, _hour in terminal
        ),
        queues=tuple(queues),
        workers=workers,
        schedules=_schedules(scope, using),
        history_per_minute=tuple(per_minute),
        history_per_hour=tuple(per_hour),
        operations_last_hour=tuple(job_stats.operation_stats(terminal, sample)),
        attempt_sample=len(sample),
        attention=tuple(_attention(kind, scope, using, now, leases) for kind in KINDS),
        flow=flow_stats(jobs, using, scope, now),
    )


def _attention(
    kind: str, scope: str | None, using: str, now: datetime, leases: list[float]
) -> AttentionItem:
    rows = attention_jobs(kind, now=now, using=using, leases=leases).in_scope(scope)
    params = {"attention": kind}
    if scope is not None:
        params["scope__exact"] = scope
    return AttentionItem(kind=kind, count=rows.count(), title=TITLES[kind], params=params)


def _schedules(scope: str | None, using: str) -> ScheduleStats:
    """Return the schedules not removed, counted, with the paused ones listed by name.

    A schedule belongs to the scope its jobs are enqueued in: its own, or the default scope
    when it names none.
    """
    rows = Schedule.objects.using(using).filter(removed_at__isnull=True)
    if scope is not None:
        mine = Q(scope=scope)
        if scope == jobs_settings.DEFAULT_SCOPE:
            mine |= Q(scope__isnull=True)
        rows = rows.filter(mine)
    counts = rows.aggregate(
        total=Count("pk"), paused=Count("pk", filter=Q(paused_at__isnull=False))
    )
    paused = rows.filter(paused_at__isnull=False).order_by("name")[:PAUSED_LIMIT]
    return ScheduleStats(
        total=counts["total"],
        paused=counts["paused"],
        paused_schedules=tuple(
            PausedSchedule(s.name, s.operation, s.scope, s.paused_at, s.paused_by) for s in paused
        ),
    )
