"""JobContext, what an executor sees of its job (SPEC §5), against a real database.

Proves: payload and checkpoint_value are parsed from the row; checkpoint() stores canonical JSON
under the lease and ``checkpoint_value`` becomes exactly what a later attempt will read; progress()
is fenced and clamped; cancellation is visible through ``cancelled`` / ``raise_if_cancelled()`` and
the execution; ``ctx.execution`` carries the write fence of the live lease, so
``assert_write_fence`` passes inside ``transaction.atomic`` and refuses after the lease is lost or
cancellation is requested; ``complete_atomically()`` writes the domain row and completes the job in
one fenced transaction.
"""

from __future__ import annotations

import json
import threading

import pytest
from django.db import transaction

from django_durable_jobs.models import Job, JobAttempt
from django_durable_jobs.rules.errors import InputInvalid, JobCancelled, LeaseLost
from django_durable_jobs.rules.execution import Identity
from django_durable_jobs.store import DurableJobStore, Submission, assert_write_fence
from django_durable_jobs.worker.context import UNBOUNDED_SECONDS, JobContext
from tests.support import assert_refused, db_state
from tests.testapp.models import DomainRow

pytestmark = pytest.mark.django_db(transaction=True)

PAYLOAD = {"steps": 3, "items": [1, 2], "name": "ünï"}


def context_for(store: DurableJobStore, job_id, **options) -> JobContext:
    """Claim ``job_id`` with ``store`` and build the context an executor would get."""
    lease = store.claim(job_id)
    return JobContext(store, lease, Job.objects.get(pk=job_id), **options)


@pytest.fixture
def job(store):
    return store.defer("tests.steps", Submission.of("tenant", "key-1", PAYLOAD))


@pytest.fixture
def ctx(store, job):
    return context_for(store, job.pk)


def write_fenced_row(ctx: JobContext, value: str) -> None:
    with transaction.atomic():
        assert_write_fence(ctx.execution)
        DomainRow.objects.create(job_id=ctx.job_id, value=value)


# -- what the executor reads --------------------------------------------------------------------


def test_context_exposes_the_job_its_lease_and_the_parsed_payload(store, job, ctx):
    assert (ctx.job_id, ctx.operation, ctx.attempt) == (job.pk, "tests.steps", 1)
    assert (ctx.lease.job_id, ctx.lease.owner_id, ctx.lease.epoch) == (job.pk, store.owner_id, 1)
    assert ctx.payload == PAYLOAD
    assert ctx.checkpoint_value is None
    assert not ctx.cancelled and not ctx.lease_lost and not ctx.completed


def test_a_later_attempt_sees_the_parsed_checkpoint(clock, store, rival, job, ctx):
    ctx.checkpoint({"done": 2, "seen": ["a", "b"]})
    clock.advance(11)
    later = context_for(rival, job.pk)
    assert later.attempt == 2 and later.lease.epoch == 2
    assert later.checkpoint_value == {"done": 2, "seen": ["a", "b"]}
    assert later.payload == PAYLOAD


# -- checkpoint and progress --------------------------------------------------------------------


def test_checkpoint_stores_canonical_json_and_updates_checkpoint_value(clock, ctx):
    clock.advance(2)
    ctx.checkpoint({"b": 1, "a": (1, 2), "u": "é"})
    row = Job.objects.get(pk=ctx.job_id)
    assert row.checkpoint == '{"a":[1,2],"b":1,"u":"é"}'
    assert row.checkpoint_at == clock()
    assert row.lease_expires_at == ctx.lease.expires_at  # a checkpoint does not renew the lease
    # checkpoint_value is what a later attempt will read: the stored JSON, parsed.
    assert ctx.checkpoint_value == {"a": [1, 2], "b": 1, "u": "é"}
    assert ctx.checkpoint_value == json.loads(row.checkpoint)


@pytest.mark.parametrize(
    "value", [{"x": object()}, {"x": float("nan")}, {"x": float("inf")}, {1j: 1}]
)
def test_checkpoint_refuses_values_json_cannot_hold_and_writes_nothing(ctx, value):
    ctx.checkpoint({"done": 1})
    assert_refused(InputInvalid, "E_JOB_INPUT_INVALID", lambda: ctx.checkpoint(value))
    assert ctx.checkpoint_value == {"done": 1}


def test_checkpoint_after_the_lease_was_lost_is_refused(clock, ctx):
    clock.advance(11)
    assert_refused(LeaseLost, "E_JOB_LEASE_LOST", lambda: ctx.checkpoint({"done": 3}))
    assert ctx.checkpoint_value is None


def test_progress_is_recorded_and_clamped(ctx):
    ctx.progress(42.5)
    assert Job.objects.get(pk=ctx.job_id).progress == 42.5
    ctx.progress(140)
    assert Job.objects.get(pk=ctx.job_id).progress == 100.0
    assert_refused(InputInvalid, "E_JOB_INPUT_INVALID", lambda: ctx.progress(float("nan")))
    assert_refused(InputInvalid, "E_JOB_INPUT_INVALID", lambda: ctx.progress("half"))


def test_progress_after_the_lease_was_lost_is_refused(clock, ctx):
    clock.advance(11)
    assert_refused(LeaseLost, "E_JOB_LEASE_LOST", lambda: ctx.progress(10))


# -- cancellation -------------------------------------------------------------------------------


def test_raise_if_cancelled_raises_job_cancelled_once_the_event_is_set(store, job):
    event = threading.Event()
    ctx = context_for(store, job.pk, cancel_event=event)
    assert ctx.cancel_event is event
    ctx.raise_if_cancelled()  # nothing requested: returns
    assert not ctx.execution.cancelled
    event.set()
    assert ctx.cancelled and ctx.execution.cancelled  # the execution shares the event
    with pytest.raises(JobCancelled) as caught:
        ctx.raise_if_cancelled()
    assert caught.value.code == "E_JOB_CANCELLED"
    assert str(job.pk) in caught.value.message


# -- the execution and its write fence ----------------------------------------------------------


def test_execution_carries_the_write_fence_of_the_live_lease(store, job, ctx):
    fence = ctx.execution.write_fence
    assert fence is not None
    assert fence.lease == ctx.lease
    assert fence.proposal_hash == job.proposal_hash
    assert (fence.using, fence.clock) == ("default", store.clock)
    assert ctx.execution.identity == Identity("tenant", "worker-a", "tests.steps", "key-1")
    assert ctx.execution.remaining() > UNBOUNDED_SECONDS - 60  # no operation timeout given


def test_a_timeout_bounds_the_execution(store, job):
    ctx = context_for(store, job.pk, timeout=5)
    assert 0 < ctx.execution.remaining() <= 5


def test_assert_write_fence_passes_inside_atomic_for_the_live_lease(ctx):
    write_fenced_row(ctx, "fenced")
    assert list(DomainRow.objects.values_list("job_id", "value")) == [(ctx.job_id, "fenced")]


def test_assert_write_fence_refuses_once_the_lease_expired(clock, ctx):
    clock.advance(11)
    with pytest.raises(LeaseLost) as caught:
        write_fenced_row(ctx, "late")
    assert caught.value.code == "E_JOB_LEASE_LOST" and "expired" in caught.value.message
    assert DomainRow.objects.count() == 0


def test_assert_write_fence_refuses_after_another_owner_reclaimed(clock, rival, job, ctx):
    clock.advance(11)
    rival.claim(job.pk)
    clock.advance(-11)  # even on the stale worker's own clock, the epoch moved on
    with pytest.raises(LeaseLost):
        write_fenced_row(ctx, "stale")
    assert DomainRow.objects.count() == 0


def test_assert_write_fence_refuses_once_cancellation_was_requested(clock, job, ctx):
    assert DurableJobStore(actor="operator", clock=clock).request_cancel(job.pk) is True
    with pytest.raises(LeaseLost) as caught:
        write_fenced_row(ctx, "after-request")
    assert "cancellation" in caught.value.message
    assert DomainRow.objects.count() == 0


def test_assert_write_fence_needs_the_callers_atomic_block(ctx):
    with pytest.raises(InputInvalid):
        assert_write_fence(ctx.execution)


# -- complete_atomically ------------------------------------------------------------------------


def test_complete_atomically_writes_the_domain_row_and_completes(clock, ctx):
    received = []

    def mutation(execution):
        received.append(execution)
        row = DomainRow.objects.create(job_id=ctx.job_id, value="done")
        return json.dumps({"row": row.pk})

    receipt = ctx.complete_atomically(mutation)
    row = DomainRow.objects.get()
    assert receipt == json.dumps({"row": row.pk})
    assert received == [ctx.execution]
    assert ctx.completed is True
    job = Job.objects.get(pk=ctx.job_id)
    assert (job.status, job.result, job.progress, job.completed_at) == (
        "complete",
        receipt,
        100.0,
        clock(),
    )
    assert list(JobAttempt.objects.values_list("epoch", "outcome")) == [(1, "complete")]


def test_complete_atomically_after_the_lease_was_lost_writes_nothing(clock, ctx):
    clock.advance(11)
    before = db_state()

    def mutation(execution):
        DomainRow.objects.create(job_id=ctx.job_id, value="stale")
        return "{}"

    with pytest.raises(LeaseLost):
        ctx.complete_atomically(mutation)
    assert db_state() == before and DomainRow.objects.count() == 0
    assert ctx.completed is False


def test_complete_atomically_rolls_back_the_domain_write_when_the_mutation_fails(ctx):
    before = db_state()

    def mutation(execution):
        DomainRow.objects.create(job_id=ctx.job_id, value="half")
        raise RuntimeError("domain rule broken")

    with pytest.raises(RuntimeError):
        ctx.complete_atomically(mutation)
    assert db_state() == before and DomainRow.objects.count() == 0
    assert Job.objects.get(pk=ctx.job_id).status == "running" and ctx.completed is False
