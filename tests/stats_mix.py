"""A prepared mix of jobs, attempts, workers and schedules for the snapshot's tests, and the
same numbers counted independently: in plain Python over every row, not with the snapshot's SQL.
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime, timedelta

from django_durable_jobs.models import Job, JobAttempt, WorkerProcess
from django_durable_jobs.rules import registry
from django_durable_jobs.rules.conf import jobs_settings
from django_durable_jobs.rules.retry import RetryPolicy
from django_durable_jobs.rules.vocabulary import TERMINAL_STATUSES, assess_ownership, worker_state
from django_durable_jobs.store import DurableJobStore
from tests.schedule_rows import make_schedule
from tests.support import LEASE, FakeClock, submission

HOLD, RESUME, RETRYING = "stats.hold", "stats.resume", "stats.retrying"
OPERATIONS = (HOLD, RESUME, RETRYING)
ENDED = ("complete", "failed", "cancelled")


def register_operations() -> None:
    registry.operation(HOLD)(lambda ctx, payload: None)
    registry.operation(RESUME, on_expired="resume")(lambda ctx, payload: None)
    registry.operation(RETRYING, retry=RetryPolicy(max_attempts=2, jitter=0))(
        lambda ctx, payload: None
    )


def unregister_operations() -> None:
    for name in OPERATIONS:
        registry.unregister(name)


def build_mix(clock: FakeClock) -> dict[str, DurableJobStore]:
    """Write the mix through the store (and a few worker and schedule rows); return the stores.

    Scopes alpha and beta; queues default, fast and slow; a vanished worker holding two hold
    leases and a resume lease; an alive worker holding a live lease with a late cancellation
    request; failures with and without a retry left; a scheduled job; a paused schedule.
    """
    stores = {
        name: DurableJobStore(scope=scope, actor=name, lease_seconds=LEASE, clock=clock)
        for name, scope in (("gone", "alpha"), ("alive", "beta"), ("beta", "beta"))
    }
    gone, alive, beta = stores["gone"], stores["alive"], stores["beta"]
    gone.register_worker(concurrency=4)
    n = iter(range(1000))

    def job(store, operation, queue="default", **kw):
        return store.defer(operation, submission({"n": next(n)}), queue=queue, **kw)

    # An hour and a half of history: outcomes spread over the last 90 minutes.
    for i in range(6):
        row = job(beta, HOLD, "fast")
        lease = beta.claim(row.pk)
        clock.advance(i + 1)
        (beta.complete if i % 3 else beta.fail)(lease, "boom" if i % 3 == 0 else None)
        clock.advance(900)
    retried = beta.claim(job(beta, RETRYING, "slow").pk)
    clock.advance(5)
    beta.fail(retried, "first failure: retried automatically")
    final = beta.claim(job(beta, RETRYING, "slow").pk)
    Job.objects.filter(pk=final.job_id).update(attempts=2)  # as if it were its last attempt
    clock.advance(3)
    beta.fail(final, "no retry left for this one")
    requested = beta.claim(job(beta, HOLD).pk)
    beta.fail(requested, "failed, then a person asked for a retry")
    beta.request_retry(requested.job_id)
    beta.request_cancel(job(beta, HOLD, "slow").pk)  # pending: cancelled at once
    # Held by the worker that will vanish: two hold leases, one resume lease (alpha).
    for operation in (HOLD, HOLD, RESUME):
        gone.claim(job(gone, operation).pk)
    clock.advance(1200)
    # Now: pending work, one of it scheduled for later, and a late cancellation request.
    for queue in ("default", "default", "fast"):
        job(gone, HOLD, queue)
        clock.advance(7)
    job(beta, RESUME, "fast", run_after=clock() + timedelta(hours=2))
    alive.register_worker(concurrency=2)
    cancelling = alive.claim(job(alive, HOLD, "slow").pk)
    alive.request_cancel(cancelling.job_id)
    for _ in range(math.ceil(jobs_settings.LEASE_SECONDS / (LEASE / 2)) + 1):
        clock.advance(LEASE / 2)
        alive.heartbeat(cancelling)
    alive.worker_heartbeat(leases_held=1, stopping=False)
    # Stopped workers, kept: listed newest first, counted all.
    for i in range(3):
        gone_too = DurableJobStore(actor=f"stopped-{i}", lease_seconds=LEASE, clock=clock)
        gone_too.register_worker(concurrency=1)
        gone_too.worker_stopped()
        clock.advance(1)
    make_schedule("nightly", operation=HOLD, scope="beta", paused_at=clock(), paused_by="ops")
    make_schedule("hourly", operation=HOLD, scope="alpha")
    make_schedule("old", operation=HOLD, removed_at=clock())
    return stores


def expected(now: datetime, scope: str | None) -> dict:
    """Return the snapshot's numbers counted in Python from every row."""
    jobs = [j for j in Job.objects.all() if scope is None or j.scope == scope]
    live = Counter(
        (j.operation, j.queue, j.status, assess_ownership(j, now).value)
        for j in jobs
        if j.status not in TERMINAL_STATUSES
    )
    queues: dict[str, dict] = {}
    for j in jobs:
        if j.status in ("pending", "running"):
            q = queues.setdefault(j.queue, {"pending": 0, "due": 0, "running": 0, "oldest": None})
            q[j.status] += 1
            due_at = max(j.created_at, j.run_after)
            if j.status == "pending" and j.run_after <= now:
                q["due"] += 1
                q["oldest"] = due_at if q["oldest"] is None else min(q["oldest"], due_at)
    day = Counter(
        (j.operation, j.queue, j.status)
        for j in jobs
        if j.status in ENDED and now - timedelta(hours=24) <= j.completed_at <= now
    )
    workers = list(WorkerProcess.objects.all())
    states = {
        w.owner_id: worker_state(w.stopped_at, w.heartbeat_at, w.lease_seconds, now)
        for w in workers
    }
    running = [j for j in Job.objects.all() if j.status == "running"]
    held = Counter(j.owner_id for j in running)
    stale = {o for o, s in states.items() if s == "stale"}
    resumable = registry.resumable_operations()
    late = now - timedelta(seconds=jobs_settings.LEASE_SECONDS)
    attention = {
        "hold-expired": sum(
            1
            for j in jobs
            if assess_ownership(j, now) == "expired" and j.operation not in resumable
        ),
        "failed-final": sum(
            1 for j in jobs if j.status == "failed" and j.retry_requested_at is None
        ),
        "cancel-unacknowledged": sum(
            1
            for j in jobs
            if j.status == "running"
            and j.cancellation_requested_at is not None
            and j.cancellation_requested_at <= late
        ),
        "vanished-worker": sum(1 for j in jobs if j.status == "running" and j.owner_id in stale),
    }
    return {
        "live": live,
        "queues": queues,
        "day": day,
        "states": Counter(states.values()),
        "held": held,
        "vanished": sum(1 for o in stale if held[o]),
        "attention": attention,
        "hour_outcomes": Counter(
            (j.operation, j.status)
            for j in jobs
            if j.status in ENDED and now - timedelta(hours=1) <= j.completed_at <= now
        ),
        "runs": _runs(now, scope),
        "per_hour": _buckets(jobs, now, timedelta(hours=1), 24),
        "per_minute": _buckets(jobs, now, timedelta(minutes=1), 60),
        "waits": _waits(now, scope),
    }


def _runs(now: datetime, scope: str | None) -> dict[str, list[float]]:
    runs: dict[str, list[float]] = {}
    for a in JobAttempt.objects.select_related("job"):
        if scope is not None and a.job.scope != scope:
            continue
        if now - timedelta(hours=1) <= a.ended_at <= now and a.outcome in ENDED:
            runs.setdefault(a.job.operation, []).append((a.ended_at - a.started_at).total_seconds())
    return runs


def nearest_rank(values: list[float], p: int) -> float:
    ordered = sorted(values)
    return ordered[math.ceil(p / 100 * len(ordered)) - 1]


def _waits(now: datetime, scope: str | None) -> dict[str, list[float]]:
    """Return the first attempts' waits: from due (submission or ``run_after``) to their start."""
    waits: dict[str, list[float]] = {}
    for a in JobAttempt.objects.select_related("job"):
        job = a.job
        if scope is not None and job.scope != scope:
            continue
        if not now - timedelta(hours=1) <= a.ended_at <= now or a.epoch != 1:
            continue
        if a.outcome == "released" or job.run_after > a.started_at:
            continue  # run_after moved by a retry after this attempt: its due time is lost
        due = max(job.created_at, job.run_after)
        waits.setdefault(job.operation, []).append((a.started_at - due).total_seconds())
    return waits


def _buckets(jobs: list[Job], now: datetime, size: timedelta, count: int) -> list[tuple]:
    """Return (complete, failed, cancelled) per bucket of ``size``, the last one holding now."""
    epoch = datetime(2000, 1, 1, tzinfo=now.tzinfo)
    current = epoch + (now - epoch) // size * size
    first = current - size * (count - 1)
    found = [[0, 0, 0] for _ in range(count)]
    for j in jobs:
        if j.status in ENDED and first <= j.completed_at < current + size:
            found[(j.completed_at - first) // size][ENDED.index(j.status)] += 1
    return [tuple(b) for b in found]
