"""A rate bucket another claimer holds: passed over, and left alone longer each time in a row.

A batch claim takes a whole rate limit's bucket row with ``SKIP LOCKED``; when another claimer
holds it, the claim takes free work only and the client leaves the bucket alone for a while
(``limits.BUSY_SECONDS``, doubled each time in a row it finds it held, up to
``limits.BUSY_MAX_SECONDS``). The other claimer here is a second connection holding the row in
a transaction of its own. SQLite has no row locks (its claimers take turns on its one write
lock), so a bucket is never found held there.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.models import Job, JobStatus, RateBucket
from django_durable_jobs.rules import flow
from django_durable_jobs.store import DurableJobStore, limits
from tests.flow.support import declared, pending
from tests.support import FakeClock, second_alias

OTHER = "durable_jobs_bucket_holder"
RATED = "flow.busy.rated"
FREE = "flow.busy.free"

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", OTHER])


@pytest.fixture(scope="module", autouse=True)
def _second_alias(django_db_setup):
    with second_alias(OTHER):
        yield


@pytest.fixture
def store(clock: FakeClock) -> DurableJobStore:
    return DurableJobStore(actor="worker", clock=clock)


def _looks(store: DurableJobStore) -> tuple[int, list[str]]:
    """Claim up to 4 jobs; return how many statements locked a bucket row (a look at the
    bucket), and the operations taken."""
    table = RateBucket._meta.db_table
    with CaptureQueriesContext(connection) as queries:
        leases = store.claim_next(limit=4)
    taken = Job.objects.filter(pk__in=[lease.job_id for lease in leases])
    locks = [q for q in queries.captured_queries if table in q["sql"] and "FOR UPDATE" in q["sql"]]
    return len(locks), sorted(taken.values_list("operation", flat=True))


def test_a_held_bucket_is_left_alone_longer_each_time_it_is_found_held(store, clock):
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no row locks: its claimers take turns on its one write lock")
    bucket_id = flow.bucket_id("operation", RATED)
    busy = limits.BUSY_SECONDS
    with declared(RATED, rate_limit="100/s"), declared(FREE):
        pending(store, RATED, 10)
        pending(store, FREE, 60)
        assert _looks(store)[1] == [FREE] * 4  # no bucket yet: created after the claim
        clock.advance(0.06)
        assert _looks(store) == (1, [FREE, FREE, RATED, RATED])  # half the claim each
        before = RateBucket.objects.get(pk=bucket_id).starts
        with transaction.atomic(using=OTHER):
            RateBucket.objects.using(OTHER).select_for_update().get(pk=bucket_id)
            # Held: each look finds it so and the claim takes free work only, the whole claim.
            clock.advance(1.0)
            assert _looks(store) == (1, [FREE] * 4)
            clock.advance(busy + 0.01)  # past the first wait (at most BUSY_SECONDS)
            assert _looks(store) == (1, [FREE] * 4)
            clock.advance(2 * busy + 0.01)  # past the second (at most twice that)
            assert _looks(store) == (1, [FREE] * 4)
            clock.advance(2 * busy - 0.001)  # the third is at least that: not looked at yet
            assert _looks(store) == (0, [FREE] * 4)
            clock.advance(limits.BUSY_MAX_SECONDS)  # the wait never grows past this
            assert _looks(store) == (1, [FREE] * 4)
        assert RateBucket.objects.get(pk=bucket_id).starts == before  # a miss writes nothing
        clock.advance(limits.BUSY_MAX_SECONDS + 0.001)
        assert _looks(store) == (1, [FREE, FREE, RATED, RATED])  # free again: taken
        with transaction.atomic(using=OTHER):
            RateBucket.objects.using(OTHER).select_for_update().get(pk=bucket_id)
            clock.advance(busy + 0.01)
            assert _looks(store) == (1, [FREE] * 4)
            clock.advance(busy + 0.01)  # the row was taken in between: the waits start over
            assert _looks(store) == (1, [FREE] * 4)
    assert len(json.loads(RateBucket.objects.get(pk=bucket_id).starts)) == 4


def test_a_bucket_row_that_vanished_is_read_plainly_again_and_recreated(store, clock, monkeypatch):
    # A claim that finds no row to lock cannot tell a held row from a deleted one (a flushed
    # table); once its last sighting is EXISTING_SECONDS old, it reads plainly and recreates it.
    monkeypatch.setattr(limits, "EXISTING_SECONDS", 0.0)
    with declared(RATED, rate_limit="100/s"), declared(FREE):
        pending(store, RATED, 10)
        assert len(store.claim_next(limit=2)) == 2
        RateBucket.objects.all().delete()
        clock.advance(1.0)
        assert store.claim_next(limit=2) == []  # no row to lock: taken for a held one
        clock.advance(1.0)
        assert len(store.claim_next(limit=2)) == 2  # read plainly, recreated, claimed from
        assert RateBucket.objects.filter(pk=flow.bucket_id("operation", RATED)).exists()
        assert Job.objects.filter(operation=RATED, status=JobStatus.PENDING).count() == 6
