"""The history of fenced writes (``django_durable_jobs.history``) on every database.

Every fenced write of the store logs one record on ``django_durable_jobs.history`` at DEBUG, for
an accepted write and a refused one alike, carrying the job, the epoch and owner of the lease,
the verdict and the store's clock; nothing is logged, and no generator of leases consumed, while
that logger is not enabled for DEBUG. The chaos run (tests/chaos) reads these records.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from django_durable_jobs.models import Job
from django_durable_jobs.observability import history
from django_durable_jobs.rules.errors import LeaseLost
from django_durable_jobs.rules.values import Lease, Outcome
from django_durable_jobs.store import AttemptOutcome, DurableJobStore, assert_write_fence
from tests.support import LEASE, FakeClock, execution_for, submission

pytestmark = [pytest.mark.proof, pytest.mark.django_db(transaction=True)]

OP = "history.op"
FIELDS = ("kind", "job_id", "epoch", "owner_id", "accepted", "at", "why")


@pytest.fixture
def recorded(caplog: pytest.LogCaptureFixture):
    """Return ``() -> [fields of each history record]``, capturing the logger at DEBUG."""
    caplog.set_level(logging.DEBUG, logger=history.logger.name)

    def records() -> list[dict]:
        found = [r for r in caplog.records if r.name == history.logger.name]
        caplog.clear()
        return [{name: getattr(r, name) for name in FIELDS} for r in found]

    return records


def record(kind, lease, accepted, at, why=None) -> dict:
    """Return the fields a record of ``lease``'s write of ``kind`` carries."""
    return {
        "kind": kind,
        "job_id": str(lease.job_id),
        "epoch": lease.epoch,
        "owner_id": lease.owner_id,
        "accepted": accepted,
        "at": at.isoformat(),
        "why": why,
    }


def expire_and_take_over(store, rival, clock, lease) -> Lease:
    """Let ``lease`` expire and have ``rival`` claim the job at the next epoch."""
    clock.advance(LEASE + 1)
    taken = rival.claim(lease.job_id)
    assert taken.epoch == lease.epoch + 1
    return taken


def test_nothing_is_built_or_logged_unless_the_logger_is_enabled_for_debug(store, caplog):
    caplog.set_level(logging.INFO, logger=history.logger.name)
    assert not history.enabled()
    lease = store.insert(OP, submission=submission(key="quiet"))
    store.heartbeat(lease)
    store.complete(lease, {"done": True})

    def never_iterated():
        raise AssertionError("a disabled history consumed its leases")
        yield  # pragma: no cover

    history.fenced_writes("x", never_iterated(), accepted=True, at=timezone.now())
    history.fenced_verdicts("x", never_iterated(), never_iterated(), at=timezone.now())
    assert [r for r in caplog.records if r.name == history.logger.name] == []


def test_an_accepted_and_a_refused_heartbeat_carry_every_field(store, rival, clock, recorded):
    lease = store.insert(OP, submission=submission(key="beat"))
    store.heartbeat(lease)
    assert recorded() == [record("heartbeat", lease, True, clock())]

    taken = expire_and_take_over(store, rival, clock, lease)
    recorded()
    with pytest.raises(LeaseLost):
        store.heartbeat(lease)
    assert recorded() == [record("heartbeat", lease, False, clock(), "fence")]
    rival.heartbeat(taken)
    [accepted] = recorded()
    assert (accepted["owner_id"], accepted["epoch"]) == (rival.owner_id, 2)


@pytest.mark.parametrize(
    "kind, write",
    [
        ("checkpoint", lambda store, lease: store.checkpoint(lease, '{"step": 1}')),
        ("progress", lambda store, lease: store.progress(lease, 50)),
        ("complete", lambda store, lease: store.complete(lease, {"n": 1})),
        ("failed", lambda store, lease: store.fail(lease, "boom")),
        ("cancelled", lambda store, lease: store.cancel(lease)),
    ],
)
def test_each_owner_write_records_its_acceptance_and_its_refusal(
    store, rival, clock, recorded, kind, write
):
    accepted = store.insert(OP, submission=submission(key=f"{kind}-1"))
    refused = store.insert(OP, submission=submission(key=f"{kind}-2"))
    for lease in (accepted, refused):
        store.request_cancel(lease.job_id)  # cancel() needs a request; the others ignore it
    recorded()
    write(store, accepted)
    assert recorded() == [record(kind, accepted, True, clock())]

    expire_and_take_over(store, rival, clock, refused)
    recorded()
    with pytest.raises(LeaseLost):
        write(store, refused)
    assert recorded() == [record(kind, refused, False, clock(), "fence")]


def test_the_worker_batches_record_each_lease(store, rival, clock, recorded):
    for n in range(3):
        store.defer(OP, submission({"n": n}, key=f"batch-{n}"))
    claimed = [c.lease for c in store.claim_batch(limit=3, resume_expired=[])]
    lost = claimed[1]
    clock.advance(LEASE + 1)
    Job.objects.exclude(pk=lost.job_id).update(lease_expires_at=clock() + timedelta(seconds=LEASE))
    rival.claim(lost.job_id)
    recorded()

    store.renew_leases(claimed)
    verdicts = [lease is not lost for lease in claimed]
    assert recorded() == [
        record("renew", lease, ok, clock(), None if ok else "fence")
        for lease, ok in zip(claimed, verdicts, strict=True)
    ]

    store.record_outcomes([Outcome.completed(lease, "{}") for lease in claimed[:2]])
    assert recorded() == [
        record("outcome", lost, False, clock(), "fence"),
        record("outcome", claimed[0], True, clock()),
    ]

    store.release([lost, claimed[2]])
    assert recorded() == [
        record("release", lost, False, clock(), "fence"),
        record("release", claimed[2], True, clock()),
    ]


def test_the_atomic_outcomes_and_the_write_fence_record_their_verdicts(recorded):
    clock = FakeClock(now=timezone.now())  # assert_write_fence reads the wall clock
    store = DurableJobStore(actor="worker-a", lease_seconds=LEASE, clock=clock)
    rival = DurableJobStore(actor="worker-b", lease_seconds=LEASE, clock=clock)

    def running(key):
        lease = store.insert(OP, submission=submission(key=key))
        return lease, execution_for(store, Job.objects.get(pk=lease.job_id), lease)

    def mutation(execution):
        assert_write_fence(execution)
        return '{"rows": 1}'

    (done, done_execution), (ended, ended_execution) = running("atomic-1"), running("atomic-2")
    recorded()
    store.complete_atomically(done_execution, mutation)
    fence_records = recorded()
    assert [(r["kind"], r["accepted"]) for r in fence_records] == [
        ("write_fence", True),
        ("complete_atomically", True),
    ]
    assert fence_records[1] == record("complete_atomically", done, True, clock())
    failure = AttemptOutcome("failed", "gave up")
    assert store.finalize_atomically(ended_execution, failure, lambda e: None).state == "finalized"
    assert recorded() == [record("finalize_atomically", ended, True, clock())]

    (late, late_execution), (gone, gone_execution) = running("atomic-3"), running("atomic-4")
    for lease in (late, gone):
        expire_and_take_over(store, rival, clock, lease)
    recorded()
    with pytest.raises(LeaseLost):
        store.complete_atomically(late_execution, mutation)
    why = "another owner holds the job"
    assert recorded() == [record("complete_atomically", late, False, clock(), why)]
    assert store.finalize_atomically(gone_execution, failure, lambda e: None).state != "finalized"
    assert recorded() == [record("finalize_atomically", gone, False, clock(), why)]
    with transaction.atomic(), pytest.raises(LeaseLost):
        assert_write_fence(gone_execution)
    [refusal] = recorded()
    assert (refusal["kind"], refusal["accepted"], refusal["why"]) == ("write_fence", False, why)
    assert refusal["job_id"] == str(uuid.UUID(str(gone.job_id)))
