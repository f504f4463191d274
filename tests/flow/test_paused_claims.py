"""Claims pass over paused work: a ``JobPause`` row in force holds its queue's or operation's jobs.

Pauses are written here as rows (the pause API is tested with it). Paused work stays pending,
invisible to ``claim_next`` on every path (fast, exact, limited); a pause of one scope holds that
scope only; the explicit claim refuses with ``CapacityReached`` naming the pause and writes
nothing; ending the pause (``active`` NULL) releases the work at the next claim.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_durable_jobs.models import Job, JobPause, JobStatus
from django_durable_jobs.rules.errors import CapacityReached
from django_durable_jobs.store import DurableJobStore, Submission
from tests.flow.support import declared, flow_state, pending
from tests.store.batch_support import statements
from tests.support import FakeClock

pytestmark = pytest.mark.django_db(transaction=True)

OP = "flow.paused"
OTHER = "flow.other"


@pytest.fixture
def store(clock: FakeClock) -> DurableJobStore:
    return DurableJobStore(actor="worker", clock=clock)


def _pause(target: str, name: str, scope: str = "") -> JobPause:
    return JobPause.objects.create(
        target=target,
        name=name,
        scope=scope,
        reason="incident",
        paused_at=timezone.now(),
        paused_by="ops",
    )


def _resume(pause: JobPause) -> None:
    JobPause.objects.filter(pk=pause.pk).update(
        active=None, resumed_at=timezone.now(), resumed_by="ops"
    )


def _operations(leases) -> list[str]:
    rows = Job.objects.filter(pk__in=[lease.job_id for lease in leases])
    return sorted(rows.values_list("operation", flat=True))


@pytest.mark.parametrize(
    "flow",
    [{}, {"max_running": 10}, {"rate_limit": "100/s"}],
    ids=["fast path", "exact path", "limited path"],
)
def test_a_paused_operation_stays_pending_until_resumed(store, flow):
    with declared(OP, **flow), declared(OTHER):
        pending(store, OP, 3, priority=10)
        pending(store, OTHER, 2)
        pause = _pause("operation", OP)
        assert _operations(store.claim_next(limit=10)) == [OTHER, OTHER]
        assert store.claim_next(limit=10) == []
        assert Job.objects.filter(operation=OP, status=JobStatus.PENDING).count() == 3
        assert Job.objects.paused().count() == 3
        _resume(pause)
        assert _operations(store.claim_next(limit=10)) == [OP, OP, OP]


def test_a_paused_queue_holds_its_jobs_only(store):
    with declared(OP):
        pending(store, OP, 2, queue="mail")
        pending(store, OP, 2, queue="default", prefix="d")
        _pause("queue", "mail")
        leases = store.claim_next(limit=10)
        queues = Job.objects.filter(pk__in=[lease.job_id for lease in leases])
        assert sorted(queues.values_list("queue", flat=True)) == ["default", "default"]
        assert Job.objects.filter(queue="mail", status=JobStatus.PENDING).count() == 2


def test_a_pause_of_one_scope_holds_that_scope_only(clock):
    store = DurableJobStore(actor="worker", clock=clock)
    with declared(OP):
        for scope in ("acme", "globex"):
            writer = DurableJobStore(scope=scope, actor="web", clock=clock)
            for i in range(2):
                writer.defer(OP, Submission.of(scope, f"{scope}-{i}", {"i": i}))
        _pause("operation", OP, scope="acme")
        taken = []
        while leases := store.claim_next(limit=10):
            taken.extend(leases)
        scopes = Job.objects.filter(pk__in=[lease.job_id for lease in taken])
        assert sorted(scopes.values_list("scope", flat=True)) == ["globex", "globex"]
        assert Job.objects.filter(scope="acme", status=JobStatus.PENDING).count() == 2


def test_the_explicit_claim_refuses_paused_work_and_writes_nothing(store):
    with declared(OP):
        (job,) = pending(store, OP, 1)
        pause = _pause("operation", OP)
        before = flow_state()
        with pytest.raises(CapacityReached) as caught:
            store.claim(job.pk)
        assert caught.value.code == "E_JOB_CAPACITY_REACHED"
        assert f"pause of operation '{OP}'" in caught.value.message
        assert "jobs resume --operation" in caught.value.message
        assert flow_state() == before
        _resume(pause)
        assert store.claim(job.pk).epoch == 1


def test_the_fast_claim_takes_unpaused_work_before_and_after_it_meets_a_pause(store):
    """Its statement claims nothing while any pause is in force; the first miss makes it probe
    each row instead, so unpaused work keeps moving on the one-statement path."""
    with declared(OP), declared(OTHER):
        pending(store, OP, 2, priority=10)
        pending(store, OTHER, 6)
        assert _operations(store.claim_next(limit=2)) == [OP, OP]  # no pause: the cheap statement
        pending(store, OP, 2, priority=10, prefix="again")
        _pause("operation", OP)
        first = store.claim_next(limit=2)  # misses on the cheap statement, then the exact path
        with CaptureQueriesContext(connection) as queries:
            second = store.claim_next(limit=2)  # probing statement, one round
        assert _operations(first) == _operations(second) == [OTHER, OTHER]
        # The one-statement path, as with no pause (MariaDB: a locking read, an update, and its
        # read of rarer work; see tests/store/test_claiming.py).
        assert len(statements(queries.captured_queries)) == (
            3 if connection.vendor == "mysql" else 1
        )
        assert Job.objects.filter(operation=OP, status=JobStatus.PENDING).count() == 2


def test_free_work_is_claimed_beside_a_pause_and_a_limited_backlog(store):
    # A claim that found no free work asks an index whether there is any before it looks again
    # (flow control); that question ignores pauses, so a pause in force elsewhere still lets
    # the claim find the free work that is not paused.
    rated = "flow.rated"
    ops = [rated, OP, OTHER]
    with declared(rated, rate_limit="1/m"), declared(OP), declared(OTHER):
        pending(store, rated, 3)
        assert len(store.claim_next(operations=ops, limit=5)) == 1  # the bucket is full now
        assert store.claim_next(operations=ops, limit=5) == []  # and no free work
        _pause("operation", OP)
        pending(store, OP, 2)
        free = {str(job.pk) for job in pending(store, OTHER, 2)}
        taken: set[str] = set()
        for _ in range(3):
            taken |= {str(lease.job_id) for lease in store.claim_next(operations=ops, limit=5)}
        assert taken == free
        assert Job.objects.filter(operation=OP, status=JobStatus.PENDING).count() == 2
