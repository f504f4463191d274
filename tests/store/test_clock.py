"""The store reads the database's clock and measures its own against it, writing nothing."""

from __future__ import annotations

from datetime import UTC, timedelta

import pytest
from django.utils import timezone

from django_durable_jobs.store import DurableJobStore
from tests.support import T0, db_state, live_clock

pytestmark = pytest.mark.django_db


def test_database_now_is_the_servers_time_in_utc():
    before = timezone.now()
    now = DurableJobStore().database_now()
    after = timezone.now()
    assert now.utcoffset() == timedelta(0) and now.tzinfo is UTC
    # The servers run on this machine: their clock is ours, give or take SQLite's milliseconds.
    assert before - timedelta(seconds=1) <= now <= after + timedelta(seconds=1)


@pytest.mark.parametrize("offset", [0.0, 42.0, -42.0])
def test_clock_skew_is_the_database_time_minus_the_stores(offset):
    store = DurableJobStore(clock=live_clock(offset))  # a fixed time: now + offset
    reading = store.clock_skew()
    assert abs(reading.skew_seconds + offset) < 1.0
    assert reading.uncertainty_seconds == 0.0  # a fixed clock reads the same twice
    assert reading.local_time == store.clock()


def test_a_fake_clock_far_in_the_past_reads_as_far_behind(store):
    reading = store.clock_skew()
    assert reading.local_time == T0
    expected = (timezone.now() - T0).total_seconds()
    assert abs(reading.skew_seconds - expected) < 1.0


def test_measuring_writes_nothing():
    store = DurableJobStore()
    before = db_state()
    store.clock_skew()
    store.database_now()
    assert db_state() == before
