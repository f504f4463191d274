"""Durable sleep on every database: ``store.sleep`` and ``ctx.sleep``.

Proves: a sleep frees the slot and the lease at once (status ``sleeping``, no owner, the
attempt given back, a ``slept`` attempt row), the job is not claimable before its wake-up time
and is claimable from it, with its checkpoint and steps intact; sleeps never use up a retry
policy's attempts; a stale owner's sleep is refused with nothing written; a sleeping job is
cancelled at once by ``request_cancel`` and by its workflow's cancel, and is not woken after;
a bad delay is refused with nothing written.
"""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from django_durable_jobs import Workflow
from django_durable_jobs.models import Job, JobAttempt, JobStep
from django_durable_jobs.rules.errors import (
    InputInvalid,
    JobCancelled,
    LeaseLost,
    NotReclaimable,
)
from django_durable_jobs.store.steps import SLEEP_MAX_SECONDS
from django_durable_jobs.worker.context import JobContext, Slept
from tests.support import LEASE, assert_refused, submission

pytestmark = pytest.mark.django_db(transaction=True)

STEPS, FLAKY, ECHO = "tests.wf.steps", "tests.wf.flaky", "tests.wf.echo"


def claimed(store, operation: str = STEPS, payload=None):
    """Defer a job of ``operation`` and claim it; return the claim (lease and row)."""
    store.defer(operation, submission(payload or {"n": 1}))
    [claim] = store.claim_batch(limit=1, resume_expired=[])
    return claim


def outcomes(job_id) -> list[str]:
    rows = JobAttempt.objects.filter(job_id=job_id).order_by("epoch", "id")
    return list(rows.values_list("outcome", flat=True))


def test_a_sleep_frees_the_slot_and_the_lease_and_keeps_checkpoint_and_steps(store, clock):
    store.defer(STEPS, submission({"n": 1}))
    store.defer(STEPS, submission({"n": 2}))
    [first] = store.claim_batch(limit=1, max_running=1, resume_expired=[])
    assert store.claim_batch(limit=1, max_running=1, resume_expired=[]) == []  # slot taken
    ctx = JobContext(store, first.lease, first.job)
    ctx.checkpoint({"at": 3})
    ctx.step("fetched", lambda: [1, 2])

    with pytest.raises(Slept) as slept:
        ctx.sleep(timedelta(seconds=30))
    until = clock() + timedelta(seconds=30)
    assert slept.value.until == until and ctx.slept_until == until and ctx.completed
    row = Job.objects.get(pk=first.job_id)
    assert (row.status, row.owner_id, row.lease_expires_at, row.claimed_by) == (
        "sleeping",
        None,
        None,
        "",
    )
    assert (row.attempts, row.fencing_epoch) == (0, 1)
    assert (row.run_after, row.sleep_until) == (until, until)
    assert row.checkpoint == '{"at":3}'
    assert outcomes(row.pk) == ["slept"]
    assert JobAttempt.objects.get(job_id=row.pk).epoch == 1
    assert store.get(row.pk).ownership == "unclaimed"

    [second] = store.claim_batch(limit=1, max_running=1, resume_expired=[])  # the slot is free
    assert second.job_id != first.job_id
    store.complete(second.lease, None)

    clock.advance(29)
    assert store.claim_batch(limit=5, resume_expired=[]) == []
    with pytest.raises(NotReclaimable):
        store.claim(first.job_id)
    clock.advance(1)
    [woken] = store.claim_batch(limit=5, resume_expired=[])
    assert woken.job_id == first.job_id
    assert (woken.job.attempts, woken.lease.epoch) == (1, 2)
    again = JobContext(store, woken.lease, woken.job)
    assert again.checkpoint_value == {"at": 3}
    assert again.step("fetched", lambda: "never") == [1, 2]
    assert JobStep.objects.filter(job_id=first.job_id).count() == 1
    store.complete(woken.lease, "done")
    assert outcomes(first.job_id) == ["slept", "complete"]


def test_sleeps_do_not_use_up_a_retry_policys_attempts(store, clock):
    claim = claimed(store, FLAKY)  # max_attempts=2
    job_id = claim.job_id
    for _ in range(4):
        assert claim.job.attempts == 1
        store.sleep(claim.lease, 5)
        assert Job.objects.get(pk=job_id).attempts == 0
        clock.advance(5)
        [claim] = store.claim_batch(limit=1, resume_expired=[])
        assert claim.job_id == job_id
    store.fail(claim.lease, "first real failure")
    row = Job.objects.get(pk=job_id)
    assert row.retry_requested_at is not None  # the policy still has an attempt left
    [claim] = store.claim_batch(limit=1, resume_expired=[])
    assert claim.job.attempts == 2
    store.complete(claim.lease, "ok")
    assert outcomes(job_id) == ["slept"] * 4 + ["failed", "complete"]


def test_a_zero_sleep_is_due_at_once(store):
    claim = claimed(store)
    store.sleep(claim.lease, 0)
    [again] = store.claim_batch(limit=1, resume_expired=[])
    assert again.job_id == claim.job_id


def test_a_stale_owners_sleep_is_refused(store, rival, clock):
    claim = claimed(store)
    clock.advance(LEASE + 1)
    assert_refused(LeaseLost, "E_JOB_LEASE_LOST", lambda: store.sleep(claim.lease, 5))
    [taken] = rival.claim_batch(limit=1, resume_expired=[STEPS])
    assert_refused(LeaseLost, "E_JOB_LEASE_LOST", lambda: store.sleep(claim.lease, 5))
    assert_refused(LeaseLost, "E_JOB_LEASE_LOST", lambda: store.sleep(taken.lease, 5))
    ctx = JobContext(store, claim.lease, claim.job)
    with pytest.raises(LeaseLost):
        ctx.sleep(5)
    assert ctx.lease_lost and ctx.slept_until is None
    assert Job.objects.get(pk=claim.job_id).status == "running"


def test_a_sleeping_job_is_cancelled_at_once_and_never_woken(store, clock):
    claim = claimed(store)
    store.sleep(claim.lease, 5)
    result = store.request_cancel_result(claim.job_id)
    assert result.answer == "cancelled-now" or result.accepted
    row = Job.objects.get(pk=claim.job_id)
    assert (row.status, row.completed_at) == ("cancelled", clock())
    clock.advance(10)
    assert store.claim_batch(limit=5, resume_expired=[]) == []
    assert Job.objects.get(pk=claim.job_id).status == "cancelled"


def test_a_sleeping_job_cancelled_with_its_workflow_is_never_woken(store, clock):
    wf = Workflow("wf.sleep")
    wf.job(STEPS, {}, name="sleeper")
    submitted = store.workflows.submit(wf.graph())
    [claim] = store.claim_batch(limit=1, resume_expired=[])
    store.sleep(claim.lease, 5)
    answer = store.workflows.cancel(submitted.workflow.pk)
    assert answer.changed["cancelled"] == [claim.job_id]
    clock.advance(10)
    assert store.claim_batch(limit=5, resume_expired=[]) == []
    assert Job.objects.get(pk=claim.job_id).status == "cancelled"


@pytest.mark.parametrize(
    "delay",
    [-1, -0.001, SLEEP_MAX_SECONDS + 1, math.nan, math.inf, "5", None, True, timedelta(days=-1)],
)
def test_a_bad_delay_is_refused_and_nothing_changes(store, delay):
    claim = claimed(store)
    assert_refused(InputInvalid, "E_JOB_INPUT_INVALID", lambda: store.sleep(claim.lease, delay))
    ctx = JobContext(store, claim.lease, claim.job)
    with pytest.raises(InputInvalid):
        ctx.sleep(delay)
    assert not ctx.lease_lost and ctx.slept_until is None
    assert Job.objects.get(pk=claim.job_id).status == "running"


def test_the_longest_sleep_is_accepted(store, clock):
    claim = claimed(store)
    until = store.sleep(claim.lease, timedelta(seconds=SLEEP_MAX_SECONDS))
    assert until == clock() + timedelta(seconds=SLEEP_MAX_SECONDS)


def test_a_job_asked_to_cancel_stops_instead_of_sleeping(store, clock):
    # A sleep would hide the request: the wake-up's new attempt clears it.
    claim = claimed(store)
    assert store.request_cancel(claim.job_id)  # running: a request its owner carries out
    assert_refused(JobCancelled, "E_JOB_CANCELLED", lambda: store.sleep(claim.lease, 5))
    ctx = JobContext(store, claim.lease, claim.job)
    with pytest.raises(JobCancelled):
        ctx.sleep(5)
    assert ctx.slept_until is None and not ctx.completed
    store.cancel(claim.lease)  # what the worker does with the executor's JobCancelled
    clock.advance(10)
    assert store.claim_batch(limit=5, resume_expired=[]) == []
    assert Job.objects.get(pk=claim.job_id).status == "cancelled"
