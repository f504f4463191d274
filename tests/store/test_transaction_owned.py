"""TransactionOwned: store mutations refuse to run inside the caller's transaction.atomic().

Every store mutation opens and commits its own transaction. Called inside the caller's atomic
block it raises ``TransactionOwned`` before sending any SQL, so the caller's transaction is left
exactly as it was: its uncommitted work survives, it stays usable (which matters on PostgreSQL,
where an error inside a transaction aborts it) and it commits normally, while the job rows do not
change. Reads are allowed inside atomic blocks, and ``defer(..., in_caller_transaction=True)`` is
the explicit opt-in for a job that exists only if the caller commits.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.models import Job
from django_durable_jobs.rules.errors import TransactionOwned
from django_durable_jobs.rules.execution import Execution, Identity
from django_durable_jobs.store import AttemptOutcome, DurableJobStore, Lease, PageQuery
from tests.support import FakeClock, db_state, execution_for, submission
from tests.testapp.models import DomainRow

pytestmark = pytest.mark.django_db(transaction=True)

OP = "owned.op"
LEASE = 30


@dataclass
class World:
    """Jobs in every state a mutation needs, all owned by ``store``."""

    clock: FakeClock
    store: DurableJobStore
    pending: Job
    running: Job
    lease: Lease
    cancelling: Job
    cancelling_lease: Lease
    failed: Job
    called: list[str] = field(default_factory=list)


def _started(store: DurableJobStore, key: str) -> tuple[Job, Lease]:
    lease = store.insert(OP, submission=submission({"key": key}, key=key))
    return Job.objects.get(pk=lease.job_id), lease


def build_world() -> World:
    clock = FakeClock()
    store = DurableJobStore(actor="worker", lease_seconds=LEASE, clock=clock)
    pending = store.defer(OP, submission({"key": "pending"}, key="pending"))
    running, lease = _started(store, "running")
    cancelling, cancelling_lease = _started(store, "cancelling")
    store.request_cancel(cancelling.pk)
    failed, failed_lease = _started(store, "failed")
    store.fail(failed_lease, "boom")
    clock.advance(1)  # so that every mutation below would change something (even a heartbeat)
    return World(clock, store, pending, running, lease, cancelling, cancelling_lease, failed)


def _retry_atomically(w: World):
    def retain_outcome(previous_json: str) -> str:
        w.called.append("retain_outcome")
        return "{}"

    return w.store.retry_atomically(w.failed.pk, execution_for(w.store, w.failed), retain_outcome)


def _complete_atomically(w: World):
    def mutation(execution: Execution) -> str:
        w.called.append("mutation")
        DomainRow.objects.create(job_id=w.running.pk, value="mutation")
        return '{"rows": 1}'

    return w.store.complete_atomically(execution_for(w.store, w.running, w.lease), mutation)


MUTATIONS: dict[str, Callable[[World], object]] = {
    "insert": lambda w: w.store.insert(OP, submission=submission({"key": "new"}, key="new")),
    "defer": lambda w: w.store.defer(OP, submission({"key": "new"}, key="new")),
    "claim": lambda w: w.store.claim(w.pending.pk),
    "claim_next": lambda w: w.store.claim_next(operations=[OP]),
    "heartbeat": lambda w: w.store.heartbeat(w.lease),
    "checkpoint": lambda w: w.store.checkpoint(w.lease, '{"step": 1}'),
    "progress": lambda w: w.store.progress(w.lease, 50),
    "request_cancel": lambda w: w.store.request_cancel(w.running.pk),
    "cancel": lambda w: w.store.cancel(w.cancelling_lease),
    "complete": lambda w: w.store.complete(w.lease, {"ok": True}),
    "fail": lambda w: w.store.fail(w.lease, "boom"),
    "request_retry": lambda w: w.store.request_retry(w.failed.pk),
    "retry_atomically": _retry_atomically,
    "complete_atomically": _complete_atomically,
}


# The caller code each mutation runs, when it runs at all.
CALLBACKS = {"retry_atomically": ["retain_outcome"], "complete_atomically": ["mutation"]}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_store_mutation_inside_caller_atomic_block_is_refused_and_leaves_it_usable(name):
    w = build_world()
    before = db_state()
    first, second = uuid.uuid4(), uuid.uuid4()

    with transaction.atomic():
        DomainRow.objects.create(job_id=first, value="before the store call")
        with CaptureQueriesContext(connection) as queries:
            with pytest.raises(TransactionOwned) as refused:
                MUTATIONS[name](w)
        # The caller's transaction is still usable after the refusal (PostgreSQL aborts a
        # transaction after any failed statement) and goes on to commit.
        DomainRow.objects.create(job_id=second, value="after the store call")

    assert refused.value.code == "E_JOB_TRANSACTION_OWNED"
    # Refused before any SQL: no row lock and no read snapshot taken in the caller's transaction.
    assert [q["sql"] for q in queries.captured_queries] == []
    assert w.called == []
    assert set(DomainRow.objects.values_list("job_id", flat=True)) == {first, second}
    assert db_state() == before


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_store_mutation_outside_any_atomic_block_goes_through(name):
    # The control for the test above: the same call, outside the caller's block, is accepted.
    w = build_world()
    before = db_state()

    MUTATIONS[name](w)

    assert db_state() != before
    assert w.called == CALLBACKS.get(name, [])


@pytest.mark.parametrize("name", ["claim", "complete"])
def test_store_mutation_while_the_caller_turned_autocommit_off_is_refused(name):
    # transaction.set_autocommit(False) is the other way a caller owns the open transaction:
    # Django's atomic() then only makes a savepoint, so the store's "own" transaction would not
    # commit and the caller could still roll the claim or completion back after it was reported.
    w = build_world()
    before = db_state()
    first, second = uuid.uuid4(), uuid.uuid4()
    transaction.set_autocommit(False)
    try:
        DomainRow.objects.create(job_id=first, value="before the store call")
        with pytest.raises(TransactionOwned) as refused:
            MUTATIONS[name](w)
        DomainRow.objects.create(job_id=second, value="after the store call")
        transaction.commit()
    finally:
        transaction.rollback()
        transaction.set_autocommit(True)

    assert refused.value.code == "E_JOB_TRANSACTION_OWNED"
    assert set(DomainRow.objects.values_list("job_id", flat=True)) == {first, second}
    assert db_state() == before


def test_finalize_atomically_inside_caller_atomic_block_reports_pending_finalization():
    w = build_world()
    before = db_state()
    execution = execution_for(w.store, w.running, w.lease)

    def bookkeeping(e: Execution) -> None:
        w.called.append("bookkeeping")

    with transaction.atomic():
        DomainRow.objects.create(job_id=uuid.uuid4(), value="before")
        result = w.store.finalize_atomically(execution, AttemptOutcome("failed", "x"), bookkeeping)
        DomainRow.objects.create(job_id=uuid.uuid4(), value="after")

    assert result.state == "pending-finalization"
    assert result.reason and result.reason.startswith("E_JOB_TRANSACTION_OWNED")
    assert w.called == []
    assert DomainRow.objects.count() == 2
    assert db_state() == before


def test_caller_transaction_can_still_roll_back_after_a_refused_store_call():
    w = build_world()
    before = db_state()

    class Abort(Exception):
        pass

    with pytest.raises(Abort):
        with transaction.atomic():
            DomainRow.objects.create(job_id=uuid.uuid4(), value="doomed")
            with pytest.raises(TransactionOwned):
                w.store.complete(w.lease, {"ok": True})
            raise Abort

    assert not DomainRow.objects.exists()
    assert db_state() == before
    w.store.complete(w.lease, {"ok": True})  # the lease is intact outside the block
    assert Job.objects.get(pk=w.running.pk).status == "complete"


def test_reads_are_allowed_inside_caller_atomic_block():
    w = build_world()
    scoped = DurableJobStore(scope="default", actor="reader", clock=w.clock)
    reader = Execution.start(Identity("default", "reader", OP))
    before = db_state()

    with transaction.atomic():
        DomainRow.objects.create(job_id=uuid.uuid4(), value="before")
        got = w.store.get(w.running.pk)
        everything = w.store.list()
        failed = w.store.list("failed")
        found = w.store.find_submission(OP, submission({"key": "pending"}, key="pending"))
        missing = w.store.find_submission(OP, submission({"key": "absent"}, key="absent"))
        page = scoped.list_page(PageQuery(OP, limit=10), reader)
        DomainRow.objects.create(job_id=uuid.uuid4(), value="after")

    assert (got.pk, got.status, got.ownership) == (w.running.pk, "running", "current")
    assert {j.pk for j in everything} == {w.pending.pk, w.running.pk, w.cancelling.pk, w.failed.pk}
    assert [j.pk for j in failed] == [w.failed.pk]
    assert (found.pk, found.ownership) == (w.pending.pk, "unclaimed")
    assert missing is None
    assert {j.pk for j in page.candidates} == {j.pk for j in everything}
    assert DomainRow.objects.count() == 2
    assert db_state() == before


def test_defer_in_caller_transaction_commits_and_rolls_back_with_the_caller():
    clock = FakeClock()
    store = DurableJobStore(actor="web", clock=clock)

    with transaction.atomic():
        DomainRow.objects.create(job_id=uuid.uuid4(), value="order placed")
        job = store.defer(OP, submission({"order": 1}, key="order-1"), in_caller_transaction=True)
        seen = store.get(job.pk)  # the caller sees its own uncommitted job
    assert (seen.status, seen.ownership) == ("pending", "unclaimed")
    assert Job.objects.get(pk=job.pk).status == "pending"
    assert DomainRow.objects.count() == 1

    class Abort(Exception):
        pass

    before = db_state()
    with pytest.raises(Abort):
        with transaction.atomic():
            DomainRow.objects.create(job_id=uuid.uuid4(), value="order abandoned")
            rolled_back = store.defer(
                OP, submission({"order": 2}, key="order-2"), in_caller_transaction=True
            )
            raise Abort
    assert not Job.objects.filter(pk=rolled_back.pk).exists()
    assert DomainRow.objects.count() == 1
    assert db_state() == before
