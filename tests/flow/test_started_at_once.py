"""A job created running (``store.insert``, the in-process runner's ``start_job``) starts now.

So the flow limits that hold a claim hold it too: a pause in force, a used-up rate limit and a
concurrency key at its limit refuse it with ``CapacityReached`` and write nothing (no job, no
start in a bucket); an admitted one records its start in the rate limit, which then holds
pending work of the same operation back; an identical resubmission coalesces and uses no start.
"""

from __future__ import annotations

import json

import pytest

from django_durable_jobs.models import Job, RateBucket
from django_durable_jobs.rules import flow
from django_durable_jobs.rules.errors import CapacityReached
from django_durable_jobs.store import DurableJobStore
from tests.flow.support import declared
from tests.support import FakeClock, assert_refused, submission

pytestmark = pytest.mark.django_db(transaction=True)

RATED = "flow.started.rated"
KEYED = "flow.started.keyed"
CODE = "E_JOB_CAPACITY_REACHED"


@pytest.fixture
def store(clock: FakeClock) -> DurableJobStore:
    return DurableJobStore(actor="runner", clock=clock)


def _starts() -> list[float]:
    bucket = RateBucket.objects.get(pk=flow.bucket_id("operation", RATED))
    return json.loads(bucket.starts)


def test_a_used_up_rate_limit_refuses_a_job_created_running(store, clock):
    with declared(RATED, rate_limit="2/m"):
        first = store.insert(RATED, submission=submission({"n": 1}))
        second = store.insert(RATED, submission=submission({"n": 2}))
        assert first is not None and second is not None
        assert len(_starts()) == 2
        error = assert_refused(
            CapacityReached, CODE, lambda: store.insert(RATED, submission=submission({"n": 3}))
        )
        assert "A new job of operation 'flow.started.rated' may not start now" in error.message
        assert "rate limit 2/m" in error.message and "try again after" in error.message
        assert len(_starts()) == 2  # the refusal recorded no start
        # The inserted jobs' starts count for claims too: pending work waits for the window.
        pending = store.defer(RATED, submission({"n": 4}))
        assert store.claim_next(operations=[RATED]) == []
        clock.advance(61)
        assert [c.job_id for c in store.claim_next(operations=[RATED])] == [pending.pk]
        assert store.insert(RATED, submission=submission({"n": 5})) is not None
        assert Job.objects.filter(operation=RATED).count() == 4


def test_an_identical_resubmission_coalesces_and_uses_no_start(store):
    with declared(RATED, rate_limit="2/m"):
        assert store.insert(RATED, submission=submission({"n": 1}, key="same")) is not None
        assert store.insert(RATED, submission=submission({"n": 1}, key="same")) is None
        assert len(_starts()) == 1
        assert Job.objects.filter(operation=RATED).count() == 1


def test_a_concurrency_key_at_its_limit_refuses_a_job_created_running(store):
    def customer(payload):
        return payload["customer"]

    with declared(KEYED, max_running_per_key=1, concurrency_key=customer):
        lease = store.insert(KEYED, submission=submission({"customer": "a", "n": 1}))
        error = assert_refused(
            CapacityReached,
            CODE,
            lambda: store.insert(KEYED, submission=submission({"customer": "a", "n": 2})),
        )
        assert "concurrency key 'a'" in error.message
        assert store.insert(KEYED, submission=submission({"customer": "b", "n": 3})) is not None
        store.complete(lease, None)  # key "a" is free again
        assert store.insert(KEYED, submission=submission({"customer": "a", "n": 2})) is not None


def test_a_pause_in_force_refuses_a_job_created_running_until_resumed(store):
    with declared(RATED):
        store.pause("operation", RATED, reason="provider down")
        error = assert_refused(
            CapacityReached, CODE, lambda: store.insert(RATED, submission=submission({"n": 1}))
        )
        assert "is held by a pause of operation 'flow.started.rated'" in error.message
        assert f"manage.py jobs resume --operation {RATED}" in error.message
        store.resume("operation", RATED)
        assert store.insert(RATED, submission=submission({"n": 1})) is not None
