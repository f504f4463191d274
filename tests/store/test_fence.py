"""Fencing: a worker that lost its lease can never overwrite the attempt that replaced it.

After a lease expires and another client reclaims the job, every owner-only write of the old owner
(complete, fail, progress, checkpoint, heartbeat, cancel, and a fenced domain write through
``assert_write_fence``) is refused with ``LeaseLost`` and changes nothing, while the new owner's
work stands. A hand-made ``Lease`` is worth only what the row says: a stale epoch, another owner or
a later ``expires_at`` buys nothing. ``assert_write_fence`` also refuses a cancellation request, a
tampered proposal, a foreign identity, an expired lease and another database alias, holds the row
lock until the caller commits, and does nothing for an execution without a write fence.

``assert_write_fence`` reads the wall clock (``timezone.now``), not a store's clock, so tests that
expect it to let a write through start their FakeClock at the real time (``live_clock``).
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_durable_jobs.models import Job, JobAttempt
from django_durable_jobs.rules.errors import DeadlineExceeded, InputInvalid, LeaseLost
from django_durable_jobs.rules.execution import Execution, Identity, bind_write_fence
from django_durable_jobs.rules.vocabulary import proposal_sha256
from django_durable_jobs.store import DurableJobStore, Lease, assert_write_fence
from tests.support import FakeClock, db_state, execution_for, live_clock, submission
from tests.testapp.models import DomainRow

pytestmark = pytest.mark.django_db(transaction=True)

OP = "fencing.op"
LEASE = 30

# Every owner-only store write, called with some store and some lease.
OWNER_WRITES = {
    "complete": lambda store, lease: store.complete(lease, {"by": "stale"}),
    "fail": lambda store, lease: store.fail(lease, "the stale owner gave up"),
    "progress": lambda store, lease: store.progress(lease, 99),
    "checkpoint": lambda store, lease: store.checkpoint(lease, '{"step": "stale"}'),
    "heartbeat": lambda store, lease: store.heartbeat(lease),
    "cancel": lambda store, lease: store.cancel(lease),
}


def started(store: DurableJobStore, key: str = "k1") -> tuple[Lease, Job]:
    lease = store.insert(OP, submission=submission({"n": 1}, key=key))
    return lease, Job.objects.get(pk=lease.job_id)


def reclaimed(clock: FakeClock):
    """Return (old store, old lease, new store, new lease, job) after ``new`` reclaimed the job."""
    old = DurableJobStore(actor="old", lease_seconds=LEASE, clock=clock)
    new = DurableJobStore(actor="new", lease_seconds=LEASE, clock=clock)
    old_lease, job = started(old)
    clock.advance(LEASE + 1)
    new_lease = new.claim(job.pk)
    assert (new_lease.epoch, new_lease.owner_id) == (2, new.owner_id)
    return old, old_lease, new, new_lease, job


def fenced_write(execution: Execution, value: str, reached: list | None = None) -> None:
    """Write a DomainRow the way domain code should: fence check first, same transaction."""
    with transaction.atomic():
        assert_write_fence(execution)
        if reached is not None:
            reached.append(value)
        DomainRow.objects.create(job_id=execution.write_fence.lease.job_id, value=value)


def assert_refused(call) -> None:
    """Assert ``call`` raises LeaseLost and changes no job, attempt or domain row."""
    before = db_state()
    rows = DomainRow.objects.count()
    with pytest.raises(LeaseLost) as refused:
        call()
    assert refused.value.code == "E_JOB_LEASE_LOST"
    assert db_state() == before
    assert DomainRow.objects.count() == rows


# -- store writes of a stale owner -------------------------------------------------------------


@pytest.mark.parametrize("write", sorted(OWNER_WRITES))
def test_old_owner_write_after_reclaim_is_refused_with_lease_lost(write):
    clock = FakeClock()
    old, old_lease, new, _new_lease, job = reclaimed(clock)
    assert new.request_cancel(job.pk) is True  # so that cancel() would otherwise be accepted

    assert_refused(lambda: OWNER_WRITES[write](old, old_lease))

    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.owner_id, row.fencing_epoch) == ("running", new.owner_id, 2)


def test_new_owner_work_stands_while_every_old_owner_write_is_refused():
    clock = FakeClock()
    old = DurableJobStore(actor="old", lease_seconds=LEASE, clock=clock)
    new = DurableJobStore(actor="new", lease_seconds=LEASE, clock=clock)
    old_lease, job = started(old)
    old.checkpoint(old_lease, '{"step": 1}')
    old.progress(old_lease, 40)
    clock.advance(LEASE + 1)
    new_lease = new.claim(job.pk)
    assert new.get(job.pk).checkpoint == '{"step": 1}'  # the new attempt resumes from it

    new.checkpoint(new_lease, '{"step": 2}')
    for write in OWNER_WRITES.values():
        assert_refused(lambda write=write: write(old, old_lease))
    new.progress(new_lease, 70)
    new.heartbeat(new_lease)
    new.complete(new_lease, {"by": "new"})
    for write in OWNER_WRITES.values():  # still refused once the new owner has finished
        assert_refused(lambda write=write: write(old, old_lease))

    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.owner_id, row.fencing_epoch, row.attempts) == (
        "complete",
        new.owner_id,
        2,
        2,
    )
    assert (row.result, row.checkpoint, row.progress) == ('{"by":"new"}', '{"step": 2}', 100.0)
    history = list(
        JobAttempt.objects.filter(job=job.pk).values_list("epoch", "owner_id", "outcome")
    )
    assert history == [(1, old.owner_id, "interrupted"), (2, new.owner_id, "complete")]


@pytest.mark.parametrize("write", sorted(OWNER_WRITES))
def test_expired_lease_cannot_revive_itself_before_anyone_reclaims(write):
    clock = FakeClock()
    store = DurableJobStore(actor="slow", lease_seconds=LEASE, clock=clock)
    lease, job = started(store)
    store.request_cancel(job.pk)
    clock.advance(LEASE)  # expiry is exclusive: at expires_at the lease is gone

    assert_refused(lambda: OWNER_WRITES[write](store, lease))

    assert store.get(job.pk).ownership == "expired"


# -- hand-made leases ----------------------------------------------------------------------------


def test_hand_made_lease_with_a_stale_epoch_is_refused_even_for_the_same_owner():
    clock = live_clock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    first, job = started(store)
    clock.advance(LEASE + 1)
    second = store.claim(job.pk)  # the same client reclaims its own expired job: epoch 2
    assert (second.owner_id, second.epoch) == (first.owner_id, 2)
    store.request_cancel(job.pk)

    far = clock() + timedelta(hours=1)
    for epoch in (1, 3):  # the superseded epoch and one nobody was ever given
        forged = Lease(job_id=job.pk, owner_id=store.owner_id, epoch=epoch, expires_at=far)
        for write in OWNER_WRITES.values():
            assert_refused(lambda write=write, forged=forged: write(store, forged))
    # The real lease of epoch 2 is unaffected.
    store.heartbeat(second)
    assert Job.objects.get(pk=job.pk).lease_expires_at == clock() + timedelta(seconds=LEASE)


def test_hand_made_lease_with_a_stale_epoch_is_refused_by_the_write_fence():
    clock = live_clock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    first, job = started(store)
    clock.advance(LEASE + 1)
    second = store.claim(job.pk)
    forged = Lease(job.pk, store.owner_id, 1, timezone.now() + timedelta(hours=1))

    reached: list[str] = []
    assert_refused(lambda: fenced_write(execution_for(store, job, forged), "forged", reached))
    assert_refused(lambda: fenced_write(execution_for(store, job, first), "first", reached))
    assert reached == []

    fenced_write(execution_for(store, job, second), "second")
    assert list(DomainRow.objects.values_list("value", flat=True)) == ["second"]


def test_hand_made_lease_cannot_extend_an_expired_lease():
    clock = FakeClock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    lease, job = started(store)
    clock.advance(LEASE + 1)
    extended = dataclasses.replace(lease, expires_at=clock() + timedelta(hours=1))

    for write in OWNER_WRITES.values():
        assert_refused(lambda write=write: write(store, extended))
    assert Job.objects.get(pk=job.pk).lease_expires_at == lease.expires_at


def test_lease_of_another_owner_is_refused_while_the_owner_still_holds_it():
    clock = FakeClock()
    owner = DurableJobStore(actor="owner", lease_seconds=LEASE, clock=clock)
    intruder = DurableJobStore(actor="intruder", lease_seconds=LEASE, clock=clock)
    lease, job = started(owner)
    owner.request_cancel(job.pk)
    borrowed_identity = Lease(job.pk, intruder.owner_id, lease.epoch, lease.expires_at)

    for write in OWNER_WRITES.values():
        assert_refused(lambda write=write: write(intruder, lease))  # someone else's Lease
        assert_refused(lambda write=write: write(intruder, borrowed_identity))  # not the owner

    owner.complete(lease, {"by": "owner"})
    assert Job.objects.get(pk=job.pk).result == '{"by":"owner"}'


# -- the fenced domain write ---------------------------------------------------------------------


def test_old_owner_fenced_domain_write_after_reclaim_is_refused_before_anything_is_written():
    clock = live_clock()
    old, old_lease, new, new_lease, job = reclaimed(clock)
    # By the wall clock the old lease has not expired: the reclaim's new epoch refuses it.
    assert old_lease.expires_at > timezone.now()
    reached: list[str] = []

    assert_refused(lambda: fenced_write(execution_for(old, job, old_lease), "old", reached))
    assert reached == []

    fenced_write(execution_for(new, job, new_lease), "new")
    assert list(DomainRow.objects.values_list("value", flat=True)) == ["new"]


def test_assert_write_fence_lets_the_current_owner_write():
    clock = live_clock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    lease, job = started(store)
    before = db_state()

    fenced_write(execution_for(store, job, lease), "written")

    assert list(DomainRow.objects.values_list("job_id", "value")) == [(job.pk, "written")]
    assert db_state() == before  # the fence check itself changes no job row


def test_assert_write_fence_refuses_after_a_cancellation_request():
    clock = live_clock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    lease, job = started(store)
    assert store.request_cancel(job.pk) is True

    assert_refused(lambda: fenced_write(execution_for(store, job, lease), "after cancel"))


def test_assert_write_fence_refuses_a_job_that_is_no_longer_running():
    clock = live_clock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    lease, job = started(store)
    execution = execution_for(store, job, lease)
    store.complete(lease, {"done": True})

    assert_refused(lambda: fenced_write(execution, "after complete"))


def test_assert_write_fence_refuses_a_lease_that_expired_by_the_wall_clock():
    # A paused worker whose lease ran out must not write even though nobody reclaimed the job yet.
    clock = live_clock(offset=-(LEASE + 5))
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    lease, job = started(store)
    assert lease.expires_at < timezone.now()

    assert_refused(lambda: fenced_write(execution_for(store, job, lease), "late"))
    assert Job.objects.get(pk=job.pk).status == "running"


@pytest.mark.parametrize(
    "tamper",
    [
        {"proposal": '{"n": 2}'},  # text changed, stored hash left: recomputed hash differs
        {"proposal_hash": "0" * 64},  # stored hash changed
        {"proposal": '{"n": 2}', "proposal_hash": proposal_sha256('{"n": 2}')},  # consistent swap
    ],
    ids=["proposal", "proposal_hash", "both"],
)
def test_assert_write_fence_refuses_a_tampered_proposal(tamper):
    clock = live_clock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    lease, job = started(store)
    execution = execution_for(store, job, lease)
    assert Job.objects.filter(pk=job.pk).update(**tamper) == 1  # by hand, behind the store

    assert_refused(lambda: fenced_write(execution, "tampered"))


def test_assert_write_fence_refuses_a_fence_bound_to_another_proposal_hash():
    clock = live_clock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    lease, job = started(store)
    unfenced = execution_for(store, job)
    execution = bind_write_fence(unfenced, lease, proposal_sha256('{"n": 2}'))

    assert_refused(lambda: fenced_write(execution, "other input"))


@pytest.mark.parametrize(
    "change",
    [{"scope": "elsewhere"}, {"operation": "fencing.other"}, {"idempotency_key": "another-key"}],
    ids=["scope", "operation", "idempotency_key"],
)
def test_assert_write_fence_refuses_an_execution_identity_for_another_job(change):
    clock = live_clock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    lease, job = started(store)
    genuine = Identity(job.scope, "w", job.operation, job.idempotency_key)
    foreign = dataclasses.replace(genuine, **change)
    execution = bind_write_fence(Execution.start(foreign), lease, job.proposal_hash)

    assert_refused(lambda: fenced_write(execution, "foreign"))
    # The same lease with the genuine identity passes: only the identity made the difference.
    fenced_write(bind_write_fence(Execution.start(genuine), lease, job.proposal_hash), "genuine")
    assert DomainRow.objects.get().value == "genuine"


def test_assert_write_fence_refuses_a_fence_for_another_database_alias():
    clock = live_clock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    lease, job = started(store)
    execution = bind_write_fence(execution_for(store, job), lease, job.proposal_hash, using="other")

    def write() -> None:
        with transaction.atomic(using="default"):
            assert_write_fence(execution, using="default")
            DomainRow.objects.create(job_id=job.pk, value="wrong database")

    assert_refused(write)


def test_assert_write_fence_is_a_no_op_for_an_execution_without_a_write_fence():
    clock = live_clock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    lease, job = started(store)
    store.complete(lease, {"done": True})  # not even a running job: there is no fence to check
    unfenced = execution_for(store, job)
    assert unfenced.write_fence is None

    with CaptureQueriesContext(connection) as queries:
        assert assert_write_fence(unfenced) is None  # outside an atomic block too
        with transaction.atomic():
            assert assert_write_fence(unfenced) is None
    assert [q["sql"] for q in queries.captured_queries if "durable_jobs_job" in q["sql"]] == []


def test_assert_write_fence_outside_an_atomic_block_is_input_invalid():
    clock = live_clock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    lease, job = started(store)
    before = db_state()

    with pytest.raises(InputInvalid) as refused:
        assert_write_fence(execution_for(store, job, lease))
    assert refused.value.code == "E_JOB_INPUT_INVALID"
    assert db_state() == before


def test_assert_write_fence_needs_an_execution():
    clock = live_clock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    lease, _job = started(store)

    with transaction.atomic():
        with pytest.raises(InputInvalid) as refused:
            assert_write_fence(lease)
    assert refused.value.code == "E_JOB_INPUT_INVALID"


def test_assert_write_fence_holds_the_job_row_until_the_domain_write_commits():
    clock = live_clock()
    owner = DurableJobStore(actor="owner", lease_seconds=LEASE, clock=clock)
    operator = DurableJobStore(actor="operator", lease_seconds=LEASE, clock=clock)
    lease, job = started(owner)
    meanwhile: dict[str, object] = {}

    def request_cancel_from_another_connection() -> None:
        try:
            probe = Execution.start(Identity(job.scope, "operator", OP), budget=0.5)
            meanwhile["result"] = operator.request_cancel(job.pk, execution=probe)
        except Exception as exc:  # reported to the test below
            meanwhile["error"] = exc
        finally:
            connections.close_all()

    with transaction.atomic():
        assert_write_fence(execution_for(owner, job, lease))
        other = threading.Thread(target=request_cancel_from_another_connection)
        other.start()
        other.join(timeout=20)
        DomainRow.objects.create(job_id=job.pk, value="fenced")

    assert not other.is_alive()
    assert isinstance(meanwhile.get("error"), DeadlineExceeded), meanwhile
    assert Job.objects.get(pk=job.pk).cancellation_requested_at is None
    assert DomainRow.objects.get().value == "fenced"
    # Once the domain write committed, the request goes through.
    assert operator.request_cancel(job.pk) is True
    assert Job.objects.get(pk=job.pk).cancellation_requested_at == clock()


def test_stale_epoch_refusal_names_the_job_and_epoch():
    clock = FakeClock()
    old, old_lease, _new, _new_lease, job = reclaimed(clock)

    with pytest.raises(LeaseLost) as refused:
        old.complete(old_lease, None)
    assert str(job.pk) in refused.value.message
    assert "epoch 1" in refused.value.message


def test_assert_write_fence_compares_the_lease_with_the_clock_bound_to_the_fence():
    # The fence carries the issuing store's clock: moving that clock past the lease refuses the
    # write although the wall clock never reached the expiry.
    clock = FakeClock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    lease, job = started(store)
    identity = Identity(job.scope, "w", job.operation, job.idempotency_key)
    execution = bind_write_fence(
        Execution.start(identity), lease, job.proposal_hash, clock=store.clock
    )
    fenced_write(execution, "in time")
    clock.advance(LEASE + 1)

    assert_refused(lambda: fenced_write(execution, "late"))
    assert list(DomainRow.objects.values_list("value", flat=True)) == ["in time"]
