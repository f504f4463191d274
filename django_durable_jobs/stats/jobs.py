"""The snapshot's job numbers: live rows by ownership, queues, recent outcomes and durations.

Each function is one query whatever the number of operations or queues, and each reads an
index range bounded by the live work (pending and running rows) or by a recent time window,
never by the whole table; ``docs/stats.md`` gives the measured cost at a million rows.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import Count, Min, Q, QuerySet
from django.db.models.functions import Greatest

from ..models import Job, JobAttempt
from ..models.querysets import JobQuerySet
from ..rules.vocabulary import TERMINAL_STATUSES, AttemptOutcomeChoice, JobStatus
from .values import HistoryBucket, JobCount, OperationStats, Percentiles, QueueStats

# Every status not ended: a waiting job (its parents have not all completed) and a sleeping one
# (due again at its ``run_after``) are live work too, held by nobody.
LIVE = [JobStatus.PENDING, JobStatus.RUNNING, JobStatus.WAITING, JobStatus.SLEEPING]
# Whose ``run_after`` having come makes them claimable: pending work, and sleep that is over.
DUE_STATUSES = [JobStatus.PENDING, JobStatus.SLEEPING]
ENDED = [JobStatus.COMPLETE, JobStatus.FAILED, JobStatus.CANCELLED]
TERMINAL_WINDOW = timedelta(hours=24)
OPERATIONS_WINDOW = timedelta(hours=1)
MINUTES = 60
HOURS = 24
# The newest attempts that ended within the operations window, read to measure durations.
ATTEMPT_SAMPLE = 2000
RUN_OUTCOMES = {
    AttemptOutcomeChoice.COMPLETE,
    AttemptOutcomeChoice.FAILED,
    AttemptOutcomeChoice.CANCELLED,
}


def live_counts(jobs: JobQuerySet, now: datetime) -> tuple[list[JobCount], list[QueueStats]]:
    """Return live rows (pending, running, waiting, sleeping) by operation, queue, status and
    ownership, and per queue the backlog, the due part of it and the oldest due job.

    Due are the pending jobs and the sleeping ones whose ``run_after`` has come; a waiting job
    is never due (its parents release it).

    The ownership is the app's own assessment in SQL (``JobQuerySet.with_ownership``).
    """
    due = Q(status__in=DUE_STATUSES, run_after__lte=now)
    rows = (
        jobs.filter(status__in=LIVE)
        .with_ownership(now)
        .values("operation", "queue", "status", "ownership_sql")
        .annotate(
            count=Count("pk"),
            due=Count("pk", filter=due),
            oldest_due=Min(Greatest("created_at", "run_after"), filter=due),
        )
        .order_by()
    )
    counts: list[JobCount] = []
    queues: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"pending": 0, "due": 0, "running": 0, "waiting": 0, "sleeping": 0, "oldest": None}
    )
    for row in rows:
        counts.append(
            JobCount(
                row["operation"], row["queue"], row["status"], row["ownership_sql"], row["count"]
            )
        )
        queue = queues[row["queue"]]
        queue[row["status"]] += row["count"]
        queue["due"] += row["due"]
        if row["oldest_due"] is not None and (
            queue["oldest"] is None or row["oldest_due"] < queue["oldest"]
        ):
            queue["oldest"] = row["oldest_due"]
    counts.sort(key=lambda c: (c.operation, c.queue, c.status, c.ownership))
    return counts, [
        QueueStats(
            queue=name,
            pending=q["pending"],
            due=q["due"],
            running=q["running"],
            waiting=q["waiting"],
            sleeping=q["sleeping"],
            oldest_due_at=q["oldest"],
            lag_seconds=max(0.0, (now - q["oldest"]).total_seconds()) if q["oldest"] else 0.0,
        )
        for name, q in sorted(queues.items())
    ]


def terminal_counts(jobs: JobQuerySet, now: datetime) -> list[tuple[str, str, str, int, int]]:
    """Return (operation, queue, status, ended in the last 24 hours, ended in the last hour)."""
    last_hour = Q(completed_at__gte=now - OPERATIONS_WINDOW)
    rows = (
        jobs.filter(completed_at__gte=now - TERMINAL_WINDOW, completed_at__lte=now)
        .values_list("operation", "queue", "status")
        .annotate(day=Count("pk"), hour=Count("pk", filter=last_hour))
        .order_by()
    )
    return sorted(row for row in rows if row[2] in TERMINAL_STATUSES)


def minute_starts(now: datetime) -> list[datetime]:
    """Return the starts of the 60 one-minute buckets ending with the current minute."""
    current = now.replace(second=0, microsecond=0)
    return [current - timedelta(minutes=MINUTES - 1 - i) for i in range(MINUTES)]


def hour_starts(now: datetime) -> list[datetime]:
    """Return the starts of the 24 one-hour buckets ending with the current hour."""
    current = now.replace(minute=0, second=0, microsecond=0)
    return [current - timedelta(hours=HOURS - 1 - i) for i in range(HOURS)]


def _bucket_sql(
    column: str, starts: list[datetime], stamp: Callable[[datetime], Any]
) -> tuple[str, list]:
    """Return SQL giving the index of the bucket ``column`` falls in, found by binary search
    over the buckets' ``starts`` (about log2(n) comparisons per row), with its parameters."""
    if len(starts) == 1:
        return "0", []
    middle = len(starts) // 2
    low_sql, low_params = _bucket_sql(column, starts[:middle], stamp)
    high_sql, high_params = _bucket_sql(column, starts[middle:], stamp)
    sql = f"CASE WHEN {column} >= %s THEN {middle} + ({high_sql}) ELSE ({low_sql}) END"
    return sql, [stamp(starts[middle]), *high_params, *low_params]


def history(
    using: str, scope: str | None, now: datetime
) -> tuple[list[HistoryBucket], list[HistoryBucket]]:
    """Return complete, failed and cancelled jobs per minute over the last hour and per hour
    over the last day, zeros included, from one aggregate over the completion-time index.

    Each row's hour (and, within the last hour, minute) is found by comparing its completion
    time with the buckets' bounds, so every database counts the same way in UTC and no per-row
    function runs. The statement is written here rather than by the ORM: a binary search of
    bounds is a nested CASE the ORM cannot group by, and the ORM's alternative, one conditional
    count per bucket, compared every row 84 times (0.9 s for a day of 33,000 jobs on SQLite).
    """
    minutes = minute_starts(now)
    hours = hour_starts(now)
    connection = connections[using]
    quote = connection.ops.quote_name
    stamp = connection.ops.adapt_datetimefield_value
    column = quote("completed_at")
    hour_sql, hour_params = _bucket_sql(column, hours, stamp)
    minute_sql, minute_params = _bucket_sql(column, minutes, stamp)
    where = f"{column} >= %s AND {column} < %s"
    params = [*hour_params, stamp(minutes[0]), *minute_params]
    params += [stamp(hours[0]), stamp(hours[-1] + timedelta(hours=1))]
    if scope is not None:
        where += f" AND {quote('scope')} = %s"
        params.append(scope)
    sql = (
        f"SELECT {quote('status')}, {hour_sql}, "
        f"CASE WHEN {column} >= %s THEN {minute_sql} ELSE -1 END, COUNT(*) "
        f"FROM {quote(Job._meta.db_table)} WHERE {where} GROUP BY 1, 2, 3"
    )
    per_hour = [dict.fromkeys(ENDED, 0) for _ in hours]
    per_minute = [dict.fromkeys(ENDED, 0) for _ in minutes]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for status, hour, minute, count in cursor.fetchall():
            if status in ENDED:
                per_hour[int(hour)][status] += int(count)
                if int(minute) >= 0:
                    per_minute[int(minute)][status] += int(count)

    def buckets(starts: list[datetime], counts: list[dict]) -> list[HistoryBucket]:
        return [
            HistoryBucket(start, c[JobStatus.COMPLETE], c[JobStatus.FAILED], c[JobStatus.CANCELLED])
            for start, c in zip(starts, counts, strict=True)
        ]

    return buckets(minutes, per_minute), buckets(hours, per_hour)


def attempt_sample(attempts: QuerySet[JobAttempt], now: datetime) -> list[dict]:
    """Return the newest attempts (at most ``ATTEMPT_SAMPLE``) that ended in the last hour,
    with their job's operation and due time."""
    return list(
        attempts.filter(ended_at__gte=now - OPERATIONS_WINDOW, ended_at__lte=now)
        .order_by("-ended_at", "-id")
        .values(
            "epoch",
            "outcome",
            "started_at",
            "ended_at",
            "job__operation",
            "job__created_at",
            "job__run_after",
        )[:ATTEMPT_SAMPLE]
    )


def percentiles(values: list[float]) -> Percentiles:
    """Return the nearest-rank 50th, 95th and 99th percentiles of ``values``."""
    if not values:
        return Percentiles(0, None, None, None)
    ordered = sorted(values)

    def rank(p: int) -> float:
        return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]

    return Percentiles(len(ordered), rank(50), rank(95), rank(99))


def enqueue_to_start(attempt: dict) -> float | None:
    """Return how long a first attempt's job waited once due, or None when it cannot be told.

    Only a first claim (epoch 1) measures the wait from submission; a job's ``run_after`` moves
    when an automatic retry is scheduled, and a first attempt whose job's ``run_after`` is now
    later than its start is left out rather than measured from the wrong time.
    """
    started = attempt["started_at"]
    if (
        attempt["epoch"] != 1
        or started is None
        or attempt["outcome"] == AttemptOutcomeChoice.RELEASED
    ):
        return None
    if attempt["job__run_after"] > started:
        return None
    due = max(attempt["job__created_at"], attempt["job__run_after"])
    return max(0.0, (started - due).total_seconds())


def operation_stats(terminal: list[tuple], sample: list[dict]) -> list[OperationStats]:
    """Return per operation the last hour's outcomes (exact) and durations (from the sample)."""
    ended: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(ENDED, 0))
    for operation, _queue, status, _day, hour in terminal:
        if status in ENDED:
            ended[operation][status] += hour
    waits: dict[str, list[float]] = defaultdict(list)
    runs: dict[str, list[float]] = defaultdict(list)
    for attempt in sample:
        operation = attempt["job__operation"]
        wait = enqueue_to_start(attempt)
        if wait is not None:
            waits[operation].append(wait)
        if attempt["outcome"] in RUN_OUTCOMES and attempt["started_at"] is not None:
            runs[operation].append(
                max(0.0, (attempt["ended_at"] - attempt["started_at"]).total_seconds())
            )
    names = sorted({n for n, c in ended.items() if any(c.values())} | set(waits) | set(runs))
    result = []
    for name in names:
        c = ended[name]
        finished = sum(c.values())
        result.append(
            OperationStats(
                operation=name,
                finished=finished,
                complete=c[JobStatus.COMPLETE],
                failed=c[JobStatus.FAILED],
                cancelled=c[JobStatus.CANCELLED],
                failure_rate=c[JobStatus.FAILED] / finished if finished else None,
                enqueue_to_start=percentiles(waits[name]),
                run_time=percentiles(runs[name]),
            )
        )
    return result


def in_scope_attempts(scope: str | None, using: str) -> QuerySet[JobAttempt]:
    """Return the attempt rows of ``scope``'s jobs (all of them for ``None``)."""
    attempts = JobAttempt.objects.using(using)
    return attempts if scope is None else attempts.filter(job__scope=scope)


def in_scope_jobs(scope: str | None, using: str) -> JobQuerySet:
    """Return the job rows of ``scope`` (all of them for ``None``)."""
    return Job.objects.using(using).in_scope(scope)
