"""A job created running (``store.insert``, the in-process runner's ``start_job``) starts now.

So the flow limits that hold a claim hold it too: a pause in force, a used-up rate limit and a
concurrency key at its limit refuse it with ``CapacityReached`` and write nothing (no job, no
start in a bucket); an admitted one records its start in the rate limit, which then holds
pending work of the same operation back; an identical resubmission coalesces and uses no start,
also when it read before the first one committed (PostgreSQL and MariaDB).
"""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection, transaction

from django_durable_jobs.models import Job, JobAttempt, JobStatus, RateBucket
from django_durable_jobs.rules import flow
from django_durable_jobs.rules.errors import CapacityReached
from django_durable_jobs.store import DurableJobStore
from tests.flow.support import declared
from tests.settings import TEST_DB
from tests.support import FakeClock, assert_refused, sessions_running, submission, wait_for

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


@pytest.mark.skipif(
    TEST_DB == "sqlite",
    reason="SQLite runs one writer at a time: a second submission reads the first one committed",
)
def test_a_resubmission_racing_an_uncommitted_identical_one_coalesces_and_keeps_no_start(
    store,
):
    """The second of two identical submissions, which read before the first committed, finds
    it only at its INSERT: it returns None, and its transaction is rolled back whole, the start
    it had recorded in the rate limit included.

    This test plays the first submission: its job is written and not committed yet while the
    second (a thread, on its own connection) reads, records its start and inserts, waiting for
    the first's row.
    """
    same = submission({"n": 1}, key="racing")
    with declared(RATED, rate_limit="10/m"):
        assert store.insert(RATED, submission=submission({"n": 0})) is not None  # its bucket
        returned: list = []

        def second() -> None:
            try:
                returned.append(store.insert(RATED, submission=same))
            except BaseException as exc:  # reported by the assertion below
                returned.append(exc)
            finally:
                connection.close()

        racer = threading.Thread(target=second)
        with transaction.atomic():
            first = store.defer(RATED, same, in_caller_transaction=True)
            racer.start()
            wait_for(
                # On PostgreSQL the submit's INSERT is inside a WITH: the pattern is not anchored.
                lambda: (
                    sessions_running(f"%INSERT INTO %{Job._meta.db_table}%") or not racer.is_alive()
                ),
                "the second submission to reach its INSERT",
            )
            assert racer.is_alive(), returned  # it waits for the uncommitted first row
        racer.join(timeout=30)
        assert returned == [None]
        assert len(_starts()) == 1  # the priming insert's start only: the racer's was undone
        jobs = Job.objects.filter(operation=RATED, idempotency_key="racing")
        assert [(j.pk, j.status, j.owner_id) for j in jobs] == [(first.pk, JobStatus.PENDING, None)]
        assert Job.objects.filter(operation=RATED).count() == 2
        assert not JobAttempt.objects.filter(job_id=first.pk).exists()


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
