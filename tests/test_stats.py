"""snapshot(): every number equals a count made independently from the rows, on every database."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from django_durable_jobs.admin.filters import needs_attention
from django_durable_jobs.models import Job
from django_durable_jobs.rules.errors import InputInvalid
from django_durable_jobs.stats import snapshot
from tests import stats_mix
from tests.stats_mix import expected, nearest_rank
from tests.support import live_clock, submission

pytestmark = pytest.mark.django_db(transaction=True)  # the store commits its own writes


@pytest.fixture
def mix(clock):
    stats_mix.register_operations()
    try:
        stats_mix.build_mix(clock)
        yield clock
    finally:
        stats_mix.unregister_operations()


def test_every_number_equals_an_independent_count(mix):
    """One mix, read for every scope (the mix is slow to write on a server database)."""
    now = mix()
    for scope in (None, "alpha", "beta", "nobody"):
        _check_numbers(now, scope)
    _check_workers(now)
    _check_attention(now)
    _check_schedules(now)


def _check_numbers(now, scope):
    snap = snapshot(scope=scope, now=now)
    want = expected(now, scope)
    assert snap.taken_at == now and snap.scope == scope
    got = {(c.operation, c.queue, c.status, c.ownership): c.count for c in snap.jobs}
    assert got == dict(want["live"])
    queues = {
        q.queue: {
            "pending": q.pending,
            "due": q.due,
            "running": q.running,
            "oldest": q.oldest_due_at,
        }
        for q in snap.queues
    }
    assert queues == want["queues"]
    for q in snap.queues:
        lag = (now - q.oldest_due_at).total_seconds() if q.oldest_due_at else 0.0
        assert q.lag_seconds == pytest.approx(lag)
    terminal = {(t.operation, t.queue, t.status): t.count for t in snap.terminal_last_24h}
    assert terminal == dict(want["day"])
    assert {a.kind: a.count for a in snap.attention} == want["attention"]
    for key in ("per_hour", "per_minute"):
        buckets = getattr(snap, f"history_{key}")
        assert [(b.complete, b.failed, b.cancelled) for b in buckets] == want[key]
    outcomes = {
        (o.operation, status): getattr(o, status)
        for o in snap.operations_last_hour
        for status in ("complete", "failed", "cancelled")
        if getattr(o, status)
    }
    assert outcomes == dict(want["hour_outcomes"])
    for o in snap.operations_last_hour:
        runs = want["runs"].get(o.operation, [])
        assert o.run_time.count == len(runs)
        if runs:
            assert o.run_time.p50 == pytest.approx(nearest_rank(runs, 50))
            assert o.run_time.p99 == pytest.approx(nearest_rank(runs, 99))
        waits = want["waits"].get(o.operation, [])
        assert o.enqueue_to_start.count == len(waits)
        if waits:
            assert o.enqueue_to_start.p95 == pytest.approx(nearest_rank(waits, 95))
        assert o.finished == o.complete + o.failed + o.cancelled
        assert o.failure_rate == (o.failed / o.finished if o.finished else None)


def _check_workers(now):
    want = expected(now, None)
    for scope in (None, "alpha"):
        workers = snapshot(scope=scope, now=now).workers
        assert (workers.alive, workers.stale, workers.stopped) == (
            want["states"]["alive"],
            want["states"]["stale"],
            want["states"]["stopped"],
        )
        assert {w.owner_id: w.leases_held for w in workers.active} == {
            owner: want["held"][owner]
            for owner, state in _states(now).items()
            if state != "stopped"
        }
        assert workers.vanished == want["vanished"] == 1
        assert [w.actor for w in workers.active if w.vanished] == ["gone"]
        assert [w.actor for w in workers.recently_stopped] == [
            "stopped-2",
            "stopped-1",
            "stopped-0",
        ]


def _states(now):
    from django_durable_jobs.models import WorkerProcess

    return {w.owner_id: w.state(now) for w in WorkerProcess.objects.all()}


def _check_attention(now):
    snap = snapshot(now=now)
    for scope in (None, "alpha", "beta"):
        listed = {  # what the admin job list's ?attention= filter shows
            item.kind: Job.objects.in_scope(scope)
            .filter(needs_attention(item.kind, now, "default"))
            .count()
            for item in snapshot(scope=scope, now=now).attention
        }
        assert {a.kind: a.count for a in snapshot(scope=scope, now=now).attention} == listed
    assert {a.kind: a.count for a in snap.attention} == {
        "hold-expired": 2,
        "failed-final": 3,
        "cancel-unacknowledged": 1,
        "vanished-worker": 3,
    }
    vanished = next(
        a for a in snapshot(scope="alpha", now=now).attention if a.kind == "vanished-worker"
    )
    assert vanished.params == {"attention": "vanished-worker", "scope__exact": "alpha"}


def _check_schedules(now):
    assert snapshot(now=now).schedules.total == 2
    beta = snapshot(scope="beta", now=now).schedules
    assert (beta.total, beta.paused) == (1, 1)
    assert [(p.name, p.paused_by) for p in beta.paused_schedules] == [("nightly", "ops")]
    assert snapshot(scope="alpha", now=now).schedules.paused_schedules == ()


def test_history_buckets_are_fixed_and_add_up(mix):
    now = mix()
    snap = snapshot(now=now)
    assert len(snap.history_per_minute) == 60 and len(snap.history_per_hour) == 24
    assert snap.history_per_minute[-1].start == now.replace(second=0, microsecond=0)
    assert snap.history_per_hour[-1].start == now.replace(minute=0, second=0, microsecond=0)
    day = sum(t.count for t in snap.terminal_last_24h)
    hours = sum(b.complete + b.failed + b.cancelled for b in snap.history_per_hour)
    assert 0 < day == hours  # the mix ended every job within the day
    minutes = sum(b.complete + b.failed + b.cancelled for b in snap.history_per_minute)
    in_last_hour = sum(o.finished for o in snap.operations_last_hour)
    window_start = snap.history_per_minute[0].start
    assert minutes >= in_last_hour or window_start > now.replace(second=0)

    data = snap.as_dict()
    assert json.loads(json.dumps(data)) == data
    assert isinstance(data["taken_at"], str) and isinstance(data["queues"][0]["lag_seconds"], float)


def test_a_bad_scope_is_refused():
    with pytest.raises(InputInvalid):
        snapshot(scope="")


def parked_work(clock):
    """Write a workflow (one pending job, two waiting) and two sleeping jobs, one of them due
    at ``clock() + 30 s``; return that moment."""
    from django_durable_jobs import Workflow
    from django_durable_jobs.store import DurableJobStore

    wf = Workflow("stats.parked")
    first = wf.job("tests.wf.echo", {"n": 0}, queue="flow")
    wf.job("tests.wf.echo", {"n": 1}, after=[first], queue="flow")
    wf.job("tests.wf.echo", {"n": 2}, after=[first], queue="flow")
    wf.submit()
    store = DurableJobStore(actor="w", clock=clock)
    for seconds in (10, 3600):
        job = store.defer("tests.wf.sleeper", submission({"s": seconds}), queue="nap")
        (lease,) = store.claim_next(operations=["tests.wf.sleeper"])
        assert lease.job_id == job.pk
        store.sleep(lease, seconds)
    return clock() + timedelta(seconds=30)


def test_waiting_and_sleeping_jobs_are_live_work_counted_by_status():
    clock = live_clock()
    now = parked_work(clock)
    snap = snapshot(now=now)
    got = {(c.operation, c.queue, c.status, c.ownership): c.count for c in snap.jobs}
    assert got == {
        ("tests.wf.echo", "flow", "pending", "unclaimed"): 1,
        ("tests.wf.echo", "flow", "waiting", "unclaimed"): 2,
        ("tests.wf.sleeper", "nap", "sleeping", "unclaimed"): 2,
    }
    queues = {q.queue: (q.pending, q.due, q.running, q.waiting, q.sleeping) for q in snap.queues}
    # Due: the pending job, and the sleeping job whose sleep is over (not the other, nor waiting).
    assert queues == {"flow": (1, 1, 0, 2, 0), "nap": (0, 1, 0, 0, 2)}
    nap = next(q for q in snap.queues if q.queue == "nap")
    woke = Job.objects.get(operation="tests.wf.sleeper", run_after__lte=now)
    assert nap.oldest_due_at == woke.run_after
    assert nap.lag_seconds == pytest.approx((now - woke.run_after).total_seconds())
    data = snap.as_dict()
    assert {(q["queue"], q["waiting"], q["sleeping"]) for q in data["queues"]} == {
        ("flow", 2, 0),
        ("nap", 0, 2),
    }


def test_the_workflow_state_of_the_surfaces_is_the_stores_for_every_set_of_statuses():
    from itertools import combinations
    from types import SimpleNamespace

    from django_durable_jobs.rules.vocabulary import JobStatus
    from django_durable_jobs.stats.workflows import progress, state_of, workflow_state

    statuses = list(JobStatus.values)
    seen = set()
    for size in range(len(statuses) + 1):
        for chosen in combinations(statuses, size):
            jobs = [SimpleNamespace(status=s, retry_requested_at=None) for s in chosen]
            assert workflow_state(chosen) == state_of(jobs), chosen
            seen.add(workflow_state(chosen))
    assert seen == {"running", "complete", "failed", "cancelled"}
    assert progress(["complete", "waiting", "complete"]) == {
        "total": 3,
        "complete": 2,
        "by_status": {"complete": 2, "waiting": 1},
    }
