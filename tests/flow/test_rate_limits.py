"""Rate limits at claim: a sliding log per bucket, exact, passed over without starving other work.

In one process with a movable clock: what a full bucket holds back stays pending and is taken as
soon as its oldest start ages out; per-key buckets; a queue's limit and an operation's limit on
one job (both must admit it, both record the start); the explicit claim refuses with
``CapacityReached`` and writes nothing; a client that knows a bucket is full does not touch it.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from hypothesis import given
from hypothesis import strategies as st

from django_durable_jobs.models import Job, JobStatus, RateBucket
from django_durable_jobs.rules import flow
from django_durable_jobs.rules.errors import CapacityReached
from django_durable_jobs.store import DurableJobStore
from tests.flow.support import declared, flow_state, pending
from tests.support import FakeClock

pytestmark = pytest.mark.django_db(transaction=True)

RATED = "flow.rated"
FREE = "flow.free"


@pytest.fixture
def store(clock: FakeClock) -> DurableJobStore:
    return DurableJobStore(actor="worker", clock=clock)


def _taken(leases) -> set[str]:
    return {str(lease.job_id) for lease in leases}


def test_a_full_bucket_holds_jobs_pending_until_its_oldest_start_ages_out(store, clock):
    with declared(RATED, rate_limit="3/s"):
        jobs = pending(store, RATED, 5)
        first = store.claim_next(limit=10)
        assert len(first) == 3
        assert Job.objects.filter(status=JobStatus.PENDING).count() == 2
        clock.advance(0.5)
        assert store.claim_next(limit=10) == []
        clock.advance(0.4999)
        assert store.claim_next(limit=10) == []  # the window (now - 1 s, now] still holds 3
        clock.advance(0.0002)
        second = store.claim_next(limit=10)
        assert len(second) == 2
        assert _taken(first) | _taken(second) == {str(job.pk) for job in jobs}
        bucket = RateBucket.objects.get(pk=flow.bucket_id("operation", RATED))
        assert len(json.loads(bucket.starts)) == 3  # the N latest starts, no more


def test_limited_work_does_not_starve_the_work_behind_it(store, clock):
    with declared(RATED, rate_limit="2/m"), declared(FREE):
        limited = pending(store, RATED, 6, priority=50)
        free = pending(store, FREE, 4)
        taken = _taken(store.claim_next(limit=10))
        assert len(taken & {str(j.pk) for j in limited}) == 2
        assert taken >= {str(j.pk) for j in free}
        clock.advance(1)
        assert store.claim_next(limit=10) == []


def test_a_rate_key_gives_each_key_its_own_bucket(store, clock):
    with declared(RATED, rate_limit="1/s", rate_key=lambda p: p["provider"]):
        pending(store, RATED, 3, rate_key="a")
        pending(store, RATED, 3, rate_key="b")
        taken = Job.objects.filter(pk__in=_taken(store.claim_next(limit=10)))
        assert sorted(taken.values_list("rate_key", flat=True)) == ["a", "b"]
        clock.advance(1.001)
        assert len(store.claim_next(limit=10)) == 2


@override_settings(DURABLE_JOBS={"QUEUES": {"slow": {"rate_limit": "3/m"}}})
def test_a_queue_limit_and_an_operation_limit_both_admit_and_both_record(store, clock):
    with declared(RATED, rate_limit="2/s"), declared(FREE):
        pending(store, RATED, 4, queue="slow", priority=10)
        pending(store, FREE, 4, queue="slow")
        pending(store, FREE, 2, queue="default", prefix="d")
        taken = Job.objects.filter(pk__in=_taken(store.claim_next(limit=20)))
        by_queue = sorted(taken.values_list("queue", "operation"))
        # The queue admits 3 starts a minute; the operation 2 of them; the default queue is free.
        assert by_queue.count(("default", FREE)) == 2
        slow = [pair for pair in by_queue if pair[0] == "slow"]
        assert len(slow) == 3
        assert slow.count(("slow", RATED)) == 2
        queue_log = RateBucket.objects.get(pk=flow.bucket_id("queue", "slow"))
        op_log = RateBucket.objects.get(pk=flow.bucket_id("operation", RATED))
        assert len(json.loads(queue_log.starts)) == 3
        assert len(json.loads(op_log.starts)) == 2
        clock.advance(5)  # the operation's bucket frees; the queue's does not
        assert store.claim_next(limit=20) == []
        clock.advance(60)
        assert len(store.claim_next(limit=20)) == 3


def test_the_exact_path_with_max_running_honours_the_rate_too(store, clock):
    with declared(RATED, rate_limit="2/s", max_running=10):
        pending(store, RATED, 5)
        assert len(store.claim_next(limit=10)) == 2
        assert len(store.claim_next(limit=10, max_running=3)) == 0
        clock.advance(1.5)
        assert len(store.claim_next(limit=10, max_running=3)) == 1  # 2 running + 1 = 3


def test_the_explicit_claim_refuses_a_used_up_rate_and_writes_nothing(store, clock):
    with declared(RATED, rate_limit="1/h"):
        first, second = pending(store, RATED, 2)
        store.claim(first.pk)
        before = flow_state()
        with pytest.raises(CapacityReached) as caught:
            store.claim(second.pk)
        assert caught.value.code == "E_JOB_CAPACITY_REACHED"
        assert "rate limit 1/h of operation 'flow.rated'" in caught.value.message
        assert "try again after" in caught.value.message
        assert flow_state() == before
        clock.advance(3600)
        assert store.claim(second.pk).epoch == 1


def test_the_explicit_claim_refusal_creates_no_bucket_row(store, clock):
    """A first claim that would create its bucket and is refused by another limit leaves none."""
    with declared(RATED, rate_limit="1/s", max_running_per_key=1, concurrency_key=str):
        first, second = pending(store, RATED, 2, concurrency_key="k")
        RateBucket.objects.all().delete()
        Job.objects.filter(pk=first.pk).update(status=JobStatus.RUNNING)
        before = flow_state()
        with pytest.raises(CapacityReached):
            store.claim(second.pk)
        assert flow_state() == before


def test_a_client_that_knows_a_bucket_is_full_does_not_lock_it(store, clock):
    with declared(RATED, rate_limit="1/m"), declared(FREE):
        pending(store, RATED, 3)
        assert len(store.claim_next(limit=5)) == 1
        assert store.claim_next(limit=5) == []  # finds the bucket full, remembers until when
        pending(store, FREE, 1)
        table = RateBucket._meta.db_table
        with CaptureQueriesContext(connection) as queries:
            assert len(store.claim_next(limit=5)) == 1
        assert not [q for q in queries.captured_queries if table in q["sql"]]
        clock.advance(60.001)
        assert len(store.claim_next(limit=5)) == 1  # its memo expired: the bucket is read again


def test_a_limited_backlog_is_not_walked_for_free_work_that_is_not_there(store, clock):
    # The claim of free work passes over limited jobs in claim order: with only limited work
    # waiting it read the whole backlog at every claim. After a claim that found no free work,
    # the next ones ask the operation claim index first (fails when that probe is removed).
    ops = [RATED, FREE]
    with declared(RATED, rate_limit="1/m"), declared(FREE):
        pending(store, RATED, 30)
        assert len(store.claim_next(operations=ops, limit=5)) == 1
        assert store.claim_next(operations=ops, limit=5) == []  # no free work: noted
        table = Job._meta.db_table
        with CaptureQueriesContext(connection) as queries:
            assert store.claim_next(operations=ops, limit=5) == []
        walks = [
            q["sql"]
            for q in queries.captured_queries
            if table in q["sql"] and ("WITH claim" in q["sql"] or "FOR UPDATE" in q["sql"])
        ]
        assert not walks, walks
        assert queries.captured_queries, "the probe itself is a query"
        (free,) = pending(store, FREE, 1)
        assert _taken(store.claim_next(operations=ops, limit=5)) == {str(free.pk)}
        assert Job.objects.filter(operation=RATED, status=JobStatus.PENDING).count() == 29


def test_a_rate_start_is_recorded_for_a_retry_too(store, clock):
    with declared(RATED, rate_limit="1/m"):
        (job,) = pending(store, RATED, 1)
        lease = store.claim_next()[0]
        store.fail(lease, "boom")
        store.request_retry(job.pk)
        assert store.claim_next() == []  # the retry is a start: the bucket is used up
        clock.advance(61)
        assert len(store.claim_next()) == 1


@pytest.mark.parametrize("limit", ["rate_key", "max_running_per_key"])
def test_a_claim_never_takes_more_than_its_limit_beside_limited_work(store, limit):
    # Limited work met first (its pass takes up to half the claim) and free work after it
    # share one claim's limit: the free work gets only what the limited pass left.
    if limit == "rate_key":
        flow_of_rated = {"rate_limit": "10/s", "rate_key": lambda p: p["provider"]}
    else:
        flow_of_rated = {"max_running_per_key": 5, "concurrency_key": lambda p: p["customer"]}
    with declared(RATED, **flow_of_rated), declared(FREE):
        pending(store, RATED, 3, rate_key="a", concurrency_key="c")
        pending(store, FREE, 6)
        claimed = store.claim_next(limit=4)
        assert len(claimed) == 4
        operations = Job.objects.filter(pk__in=_taken(claimed)).values_list("operation", flat=True)
        assert sorted(operations) == [FREE, FREE, RATED, RATED]


@given(st.floats(min_value=1e9, max_value=4e9, allow_nan=False))
def test_a_start_is_recorded_rounded_up_to_the_millisecond_never_earlier(at):
    recorded = flow.recorded_start(at)
    assert at <= recorded < at + 0.001 + 1e-6
    assert recorded == round(recorded, 3)  # at most three decimals to write and read


def test_a_whole_rate_limit_takes_the_whole_claim_on_sqlite_and_half_elsewhere(store, clock):
    # A limited pass of an operation whose only limit is a whole rate limit takes its room in the
    # free claim's own transaction: on SQLite (one writer) up to the whole claim, so the free
    # work's rest needs no second claim statement under the write lock; where claims run side
    # by side, up to half, rounded up.
    with declared(RATED, rate_limit="100/s"), declared(FREE):
        pending(store, RATED, 10)
        pending(store, FREE, 10)
        ops = [RATED, FREE]  # (other tests' operations, limited ones too, may be registered)
        (first,) = store.claim_next(operations=ops, limit=1)  # creates the bucket's row
        assert Job.objects.get(pk=first.job_id).operation == FREE
        clock.advance(1)  # the next claim looks at limited work again
        claimed = store.claim_next(operations=ops, limit=5)
        operations = Job.objects.filter(pk__in=_taken(claimed)).values_list("operation", flat=True)
        if connection.vendor == "sqlite":
            assert sorted(operations) == [RATED] * 5
        else:
            assert sorted(operations) == [FREE, FREE, RATED, RATED, RATED]
        bucket = RateBucket.objects.get(pk=flow.bucket_id("operation", RATED))
        assert len(json.loads(bucket.starts)) == operations.filter(operation=RATED).count()
        assert Job.objects.filter(status=JobStatus.RUNNING).count() == 6


@pytest.mark.parametrize(
    ("spread", "gathers"),
    [
        pytest.param(0.001, True, id="gathers-what-frees-within-50ms"),
        pytest.param(0.5, False, id="admits-now-what-would-gather-later"),
    ],
)
def test_a_whole_bucket_gathers_a_few_starts_before_it_admits(store, clock, spread, gathers):
    # "100/s" gathers 5 (what frees in 50 ms at its full rate). The bucket's log holds 100 starts:
    # the first at t0, the other 99 from t0 + ``spread`` on, 1 ms apart. Just after the first
    # leaves the window there is room for 1: with the next 4 leaving within 50 ms the claim
    # admits none and takes 5 at once when they have; with them 0.5 s away it admits 1 now.
    # (Fails when gathering is removed: the first claim takes 1 in both cases.)
    with declared(RATED, rate_limit="100/s"), declared(FREE):
        assert flow.gathered_count(flow.parse_rate("100/s")) == 5
        assert flow.gathered_count(flow.parse_rate("10/s")) == 1  # slower limits never wait
        ops = [RATED, FREE]
        pending(store, RATED, 10)
        pending(store, FREE, 1)
        assert len(store.claim_next(operations=[RATED], limit=1)) == 1  # creates the bucket row
        t0 = clock().timestamp()
        log = [t0] + [round(t0 + spread + n * 0.001, 3) for n in range(99)]
        bucket = RateBucket.objects.filter(pk=flow.bucket_id("operation", RATED))
        bucket.update(starts=json.dumps(log))
        clock.advance(1.0005)  # the first start has left: room for 1
        first = store.claim_next(operations=ops, limit=10)
        taken = Job.objects.filter(pk__in=_taken(first))
        expected = [FREE] if gathers else [FREE, RATED]
        assert sorted(taken.values_list("operation", flat=True)) == expected  # free work goes on
        running = Job.objects.filter(operation=RATED, status=JobStatus.RUNNING)
        if gathers:
            assert bucket.get().starts == json.dumps(log)  # nothing admitted, nothing written
            assert running.count() == 1
            clock.advance(0.004)  # 4 more have left the window: room for 5
            second = store.claim_next(operations=ops, limit=10)
            assert len(second) == 5
            assert running.count() == 1 + 5
        else:
            assert running.count() == 1 + 1
