"""Concurrency per key at claim: ``max_running_per_key`` counted under the key's capacity gate.

In one process: at most N running jobs of one operation per ``Job.concurrency_key``; other keys
and other work are taken past a full key; a finished job frees its key's slot; the explicit
claim refuses with ``CapacityReached`` naming the key and writes nothing; a reclaim of an
expired lease replaces its attempt and is not held back by its own key.
"""

from __future__ import annotations

from collections import Counter

import pytest

from django_durable_jobs.models import CapacityGate, Job, JobStatus
from django_durable_jobs.rules.errors import CapacityReached
from django_durable_jobs.store import DurableJobStore
from tests.flow.support import declared, flow_state, pending
from tests.support import FakeClock

pytestmark = pytest.mark.django_db(transaction=True)

KEYED = "flow.claim.keyed"
FREE = "flow.free"


@pytest.fixture
def store(clock: FakeClock) -> DurableJobStore:
    return DurableJobStore(actor="worker", lease_seconds=30.0, clock=clock)


def _running_keys() -> Counter:
    rows = Job.objects.filter(operation=KEYED, status=JobStatus.RUNNING)
    return Counter(rows.values_list("concurrency_key", flat=True))


def _key_of(payload):
    return payload["customer"]


def test_each_key_runs_at_most_n_and_other_keys_pass(store):
    with declared(KEYED, max_running_per_key=2, concurrency_key=_key_of), declared(FREE):
        pending(store, KEYED, 5, concurrency_key="a", priority=10)
        pending(store, KEYED, 1, concurrency_key="b", priority=10)
        pending(store, FREE, 2)
        leases = store.claim_next(limit=20)
        assert len(leases) == 5  # a, a, b and the two free jobs
        assert _running_keys() == Counter({"a": 2, "b": 1})
        assert store.claim_next(limit=20) == []
        assert Job.objects.filter(status=JobStatus.PENDING).count() == 3


def test_a_finished_job_frees_its_keys_slot(store):
    with declared(KEYED, max_running_per_key=1, concurrency_key=_key_of):
        pending(store, KEYED, 3, concurrency_key="a")
        (lease,) = store.claim_next(limit=5)
        assert store.claim_next(limit=5) == []
        store.complete(lease, {"ok": True})
        (second,) = store.claim_next(limit=5)
        assert second.job_id != lease.job_id
        assert _running_keys() == Counter({"a": 1})
        gates = CapacityGate.objects.filter(operation__startswith="#key ")
        assert gates.count() == 1


def test_the_exact_path_with_max_running_counts_keys_too(store):
    with declared(KEYED, max_running_per_key=1, concurrency_key=_key_of, max_running=5):
        pending(store, KEYED, 3, concurrency_key="a")
        pending(store, KEYED, 3, concurrency_key="b")
        assert len(store.claim_next(limit=10)) == 2
        assert _running_keys() == Counter({"a": 1, "b": 1})


def test_the_explicit_claim_refuses_a_full_key_and_writes_nothing(store):
    with declared(KEYED, max_running_per_key=1, concurrency_key=_key_of):
        first, second = pending(store, KEYED, 2, concurrency_key="a")
        store.claim(first.pk)
        before = flow_state()
        with pytest.raises(CapacityReached) as caught:
            store.claim(second.pk)
        assert caught.value.code == "E_JOB_CAPACITY_REACHED"
        assert "concurrency key 'a'" in caught.value.message
        assert "max_running_per_key=1" in caught.value.message
        assert flow_state() == before


def test_a_reclaim_of_an_expired_lease_is_not_held_by_its_own_key(store, clock):
    with declared(KEYED, max_running_per_key=1, concurrency_key=_key_of, on_expired="resume"):
        first, _ = pending(store, KEYED, 2, concurrency_key="a")
        (lease,) = store.claim_next(limit=5)
        clock.advance(31)  # the lease expired: the row is still running, its key still full
        other = DurableJobStore(actor="rescuer", lease_seconds=30.0, clock=clock)
        (again,) = other.claim_next(limit=5)
        assert again.job_id == lease.job_id
        assert again.epoch == lease.epoch + 1
        assert _running_keys() == Counter({"a": 1})
