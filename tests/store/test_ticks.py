"""The scheduler's pass at the store: due ticks submitted once, catch-up, overlap, quotas, scope.

Time is the store's clock (a FakeClock), so downtime is a jump of the clock, not a sleep. The
real ``runjobs`` processes are in tests/worker/test_scheduler.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings

from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.store import DurableJobStore
from tests.store.schedule_support import declare, every, jobs_of, keys, row, worker
from tests.support import T0

pytestmark = pytest.mark.django_db(transaction=True)

# -- the scheduler's pass --------------------------------------------------------------------------


def test_the_first_tick_is_the_first_after_the_row_was_created(store, clock):
    worker(clock).reconcile_schedules(declare(flush=every(60)))
    assert store.enqueue_due_ticks(T0 + timedelta(seconds=59)).enqueued == 0
    summary = store.enqueue_due_ticks(T0 + timedelta(seconds=61))
    assert summary.enqueued == 1
    assert jobs_of("flush") == keys("flush", T0 + timedelta(seconds=60))
    job = Job.objects.get()
    assert (job.operation, job.status, job.scope, job.proposal) == (
        "tests.tick",
        JobStatus.PENDING,
        "default",
        "{}",
    )
    flush = row("flush")
    assert (flush.last_tick_at, flush.last_job_id) == (T0 + timedelta(seconds=60), job.pk)
    assert store.enqueue_due_ticks(T0 + timedelta(seconds=61)).enqueued == 0  # done already


def test_the_job_gets_the_schedule_s_payload_scope_queue_and_priority(store, clock):
    spec = every(60, payload={"a": [1, 2]}, scope="tenant-1", queue="reports", priority=5)
    worker(clock).reconcile_schedules(declare(flush=spec))
    store.enqueue_due_ticks(T0 + timedelta(seconds=60))
    job = Job.objects.get()
    assert (job.scope, job.queue, job.priority) == ("tenant-1", "reports", 5)
    assert job.proposal == '{"a":[1,2]}'


def test_two_processes_passing_at_once_enqueue_each_tick_once(store, rival, clock):
    worker(clock).reconcile_schedules(declare(flush=every(10, overlap="allow")))
    for step in range(1, 6):
        now = T0 + timedelta(seconds=10 * step)
        store.enqueue_due_ticks(now)
        rival.enqueue_due_ticks(now)
    assert jobs_of("flush") == keys("flush", *(T0 + timedelta(seconds=10 * k) for k in range(1, 6)))
    assert Job.objects.count() == 5


def _down_for(clock, spec, *, ticks: int = 10):
    """Declare ``flush`` (60 s), enqueue its first tick, then let the workers be down."""
    worker(clock).reconcile_schedules(declare(flush=spec))
    store = DurableJobStore(actor="scheduler", clock=clock)
    store.enqueue_due_ticks(T0 + timedelta(seconds=60))
    Job.objects.update(status=JobStatus.COMPLETE)  # as if a worker had run it
    return store, T0 + timedelta(seconds=60 * (1 + ticks) + 30)  # the newest is missed too


def test_catch_up_latest_enqueues_only_the_newest_missed_tick(clock):
    store, now = _down_for(clock, every(60, catch_up="latest"))
    summary = store.enqueue_due_ticks(now)
    assert (summary.enqueued, summary.passed_over) == (1, 1)
    assert jobs_of("flush") == keys("flush", T0 + timedelta(seconds=60), T0 + timedelta(minutes=11))
    assert row("flush").last_tick_at == T0 + timedelta(minutes=11)


def test_catch_up_all_enqueues_the_newest_missed_ticks_up_to_the_limit(clock):
    store, now = _down_for(clock, every(60, catch_up="all", catch_up_limit=4, overlap="allow"))
    assert store.enqueue_due_ticks(now).enqueued == 4
    newest = [T0 + timedelta(minutes=m) for m in (8, 9, 10, 11)]
    assert jobs_of("flush") == keys("flush", T0 + timedelta(minutes=1), *newest)


def test_catch_up_all_below_the_limit_enqueues_every_missed_tick(clock):
    store, now = _down_for(clock, every(60, catch_up="all", overlap="allow"), ticks=3)
    assert store.enqueue_due_ticks(now).enqueued == 3
    assert len(jobs_of("flush")) == 4


def test_catch_up_none_enqueues_no_missed_tick_and_moves_past_them(clock):
    store, now = _down_for(clock, every(60, catch_up="none"))
    summary = store.enqueue_due_ticks(now)
    assert (summary.enqueued, summary.passed_over) == (0, 1)
    assert row("flush").last_tick_at == T0 + timedelta(minutes=11)
    # The next tick is on time, and enqueued.
    assert store.enqueue_due_ticks(T0 + timedelta(minutes=12, seconds=1)).enqueued == 1


def test_a_tick_is_on_time_for_missed_after_seconds(clock):
    store, _ = _down_for(clock, every(60, catch_up="none", overlap="allow"), ticks=0)
    now = T0 + timedelta(minutes=2, seconds=9)  # the tick at 2:00 fell due 9 s ago
    assert store.enqueue_due_ticks(now).enqueued == 1
    assert store.enqueue_due_ticks(T0 + timedelta(minutes=3, seconds=11)).enqueued == 0
    assert (
        store.enqueue_due_ticks(T0 + timedelta(minutes=4, seconds=11), missed_after=20).enqueued
        == 1
    )


def test_overlap_skip_passes_over_ticks_while_the_last_job_is_unfinished(clock):
    store, _ = _down_for(clock, every(60, overlap="skip"), ticks=0)
    Job.objects.update(status=JobStatus.RUNNING)
    summary = store.enqueue_due_ticks(T0 + timedelta(minutes=2, seconds=1))
    assert (summary.enqueued, summary.skipped) == (0, 1)
    assert row("flush").last_tick_at == T0 + timedelta(minutes=2)  # skipped, not retried
    Job.objects.update(status=JobStatus.COMPLETE)
    assert store.enqueue_due_ticks(T0 + timedelta(minutes=3, seconds=1)).enqueued == 1
    assert jobs_of("flush") == keys("flush", T0 + timedelta(minutes=1), T0 + timedelta(minutes=3))


def test_overlap_allow_enqueues_while_the_last_job_runs(clock):
    store, _ = _down_for(clock, every(60, overlap="allow"), ticks=0)
    Job.objects.update(status=JobStatus.RUNNING)
    assert store.enqueue_due_ticks(T0 + timedelta(minutes=2, seconds=1)).enqueued == 1


def test_a_paused_schedule_enqueues_nothing_and_catches_up_when_resumed(clock):
    store, _ = _down_for(clock, every(60, catch_up="latest"), ticks=0)
    store.pause_schedule("flush")
    assert store.enqueue_due_ticks(T0 + timedelta(minutes=5, seconds=1)).enqueued == 0
    assert row("flush").last_tick_at == T0 + timedelta(minutes=1)
    store.resume_schedule("flush")
    assert store.enqueue_due_ticks(T0 + timedelta(minutes=5, seconds=30)).enqueued == 1
    assert jobs_of("flush") == keys("flush", T0 + timedelta(minutes=1), T0 + timedelta(minutes=5))


def test_a_quota_refusal_leaves_the_tick_for_a_later_pass(clock):
    scope_full = {"SCOPE_QUOTAS": {"tenant-1": {"MAX_PENDING": 1}}}
    spec = every(60, scope="tenant-1", overlap="allow")
    worker(clock).reconcile_schedules(declare(flush=spec))
    store = DurableJobStore(actor="scheduler", clock=clock)
    with override_settings(DURABLE_JOBS={**scope_full, "SCHEDULES": {"flush": spec}}):
        blocker = store.defer("tests.noop", _submission("tenant-1"))
        summary = store.enqueue_due_ticks(T0 + timedelta(seconds=61))
        assert (summary.enqueued, list(summary.refused)) == (0, ["flush"])
        assert row("flush").last_tick_at is None  # not advanced: tried again
        assert store.enqueue_due_ticks(T0 + timedelta(seconds=62)).refused
        Job.objects.filter(pk=blocker.pk).update(status=JobStatus.COMPLETE)  # room again
        assert store.enqueue_due_ticks(T0 + timedelta(seconds=63)).enqueued == 1
    assert jobs_of("flush") == keys("flush", T0 + timedelta(seconds=60))


def test_a_refused_tick_is_not_lost_when_more_ticks_fall_due_meanwhile(clock):
    spec = every(60, scope="tenant-1", overlap="allow", catch_up="all")
    worker(clock).reconcile_schedules(declare(flush=spec))
    store = DurableJobStore(actor="scheduler", clock=clock)
    quota = {"SCOPE_QUOTAS": {"tenant-1": {"MAX_PENDING": 1}}, "SCHEDULES": {"flush": spec}}
    with override_settings(DURABLE_JOBS=quota):
        blocker = store.defer("tests.noop", _submission("tenant-1"))
        store.enqueue_due_ticks(T0 + timedelta(seconds=61))
        Job.objects.filter(pk=blocker.pk).update(status=JobStatus.COMPLETE)
        store.enqueue_due_ticks(T0 + timedelta(seconds=125))
        Job.objects.filter(operation="tests.tick").update(status=JobStatus.COMPLETE)
        store.enqueue_due_ticks(T0 + timedelta(seconds=126))
    expected = keys("flush", T0 + timedelta(seconds=60), T0 + timedelta(seconds=120))
    assert jobs_of("flush") == expected


def test_a_scoped_store_only_serves_its_scope_s_schedules(clock):
    specs = declare(mine=every(60, scope="t1"), theirs=every(60, scope="t2"))
    worker(clock).reconcile_schedules(specs)
    scoped = DurableJobStore(scope="t1", clock=clock)
    assert scoped.enqueue_due_ticks(T0 + timedelta(seconds=61)).enqueued == 1
    assert jobs_of("theirs") == []


def _submission(scope):
    from django_durable_jobs.store import Submission

    return Submission.of(scope, None, {"n": 1})
