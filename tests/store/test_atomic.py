"""Atomicity: the domain write, the history row and the job change commit together or not at all.

``complete_atomically``, ``retry_atomically`` and ``finalize_atomically`` run the caller's code (the
mutation, ``retain_outcome``, the bookkeeping) inside the store's own transaction. A fault there —
an exception, a receipt that is not JSON text (a coroutine included), a cancellation observed before
COMMIT, a lease lost midway, a capacity limit — rolls back the domain rows, the ``JobAttempt`` row
and the job change alike: the job stays as it was, same status, epoch and owner.
"""

from __future__ import annotations

import gc
import json
import time
import warnings
from datetime import timedelta

import pytest
from django.utils import timezone

from django_durable_jobs.models import Job, JobAttempt
from django_durable_jobs.rules.errors import (
    CapacityReached,
    DeadlineExceeded,
    ExecutionStopped,
    InputInvalid,
    LeaseLost,
    NotReclaimable,
)
from django_durable_jobs.store import (
    AttemptOutcome,
    DurableJobStore,
    Finalization,
    assert_write_fence,
)
from tests.support import FakeClock, db_state, execution_for, submission
from tests.testapp.models import DomainRow, RetryHistory

pytestmark = pytest.mark.django_db(transaction=True)

OP = "atomicity.op"
LEASE = 30


def running_job(store: DurableJobStore, key: str = "k1"):
    """Insert a running job owned by ``store``; return (lease, job, fenced execution)."""
    lease = store.insert(OP, submission=submission({"n": 1}, key=key))
    job = Job.objects.get(pk=lease.job_id)
    return lease, job, execution_for(store, job, lease)


def assert_untouched(job: Job, owner: DurableJobStore, epoch: int = 1) -> None:
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.fencing_epoch, row.owner_id) == ("running", epoch, owner.owner_id)
    assert (row.result, row.completed_at) == (None, None)
    assert not JobAttempt.objects.filter(job=job.pk, epoch=epoch).exists()
    assert not DomainRow.objects.exists()


# -- complete_atomically -----------------------------------------------------------------------


def test_complete_atomically_commits_domain_write_receipt_and_history_together():
    clock = FakeClock(now=timezone.now())  # the mutation's assert_write_fence reads the wall clock
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    lease, job, execution = running_job(store)

    def mutation(e):
        assert_write_fence(e)  # the documented use: domain code checks the fence in the same tx
        DomainRow.objects.create(job_id=job.pk, value="written")
        return '{"rows": 1}'

    receipt = store.complete_atomically(execution, mutation)

    assert receipt == '{"rows": 1}'
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.result, row.progress) == ("complete", receipt, 100.0)
    assert (row.fencing_epoch, row.owner_id, row.completed_at) == (1, store.owner_id, clock())
    assert DomainRow.objects.get().value == "written"
    attempt = JobAttempt.objects.get(job=job.pk)
    assert (attempt.outcome, attempt.epoch, attempt.owner_id) == ("complete", 1, store.owner_id)
    assert attempt.snapshot["status"] == "complete"
    assert attempt.snapshot["result"] == receipt


def _mutation(behaviour: str, job: Job, clock: FakeClock):
    def mutation(execution):
        DomainRow.objects.create(job_id=job.pk, value=behaviour)
        if behaviour == "raises":
            raise RuntimeError("the domain write failed")
        if behaviour == "cancels":
            execution.cancel()
            return '{"rows": 1}'
        if behaviour == "outlives-lease":
            clock.advance(LEASE + 1)
            return '{"rows": 1}'
        return {"text": "not json", "dict": {"rows": 1}, "nan": "NaN", "none": None}[behaviour]

    return mutation


@pytest.mark.parametrize(
    "behaviour, error, code",
    [
        ("raises", RuntimeError, None),
        ("cancels", ExecutionStopped, "E_OPERATION_CANCELLED"),
        ("outlives-lease", LeaseLost, "E_JOB_LEASE_LOST"),
        ("text", InputInvalid, "E_JOB_INPUT_INVALID"),
        ("dict", InputInvalid, "E_JOB_INPUT_INVALID"),
        ("nan", InputInvalid, "E_JOB_INPUT_INVALID"),
        ("none", InputInvalid, "E_JOB_INPUT_INVALID"),
    ],
)
def test_complete_atomically_fault_rolls_back_domain_write_history_and_job(behaviour, error, code):
    clock = FakeClock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    lease, job, execution = running_job(store)
    before = db_state()

    with pytest.raises(error) as refused:
        store.complete_atomically(execution, _mutation(behaviour, job, clock))

    if code is not None:
        assert refused.value.code == code
    assert db_state() == before
    assert_untouched(job, store)
    if behaviour != "outlives-lease":  # nothing is wedged: the owner can still end the attempt
        store.complete(lease, {"plain": True})
        assert Job.objects.get(pk=job.pk).status == "complete"


def test_complete_atomically_refuses_a_coroutine_receipt_without_a_never_awaited_warning():
    clock = FakeClock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    lease, job, execution = running_job(store)
    before = db_state()

    async def write(execution):
        return '{"rows": 1}'

    def mutation(execution):
        DomainRow.objects.create(job_id=job.pk, value="async")
        return write(execution)  # forgot to await

    def attempt() -> str | None:
        try:
            store.complete_atomically(execution, mutation)
        except InputInvalid as exc:
            return exc.code
        return None

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = attempt()
        gc.collect()
        # Control: the harness does see the warning of a coroutine left un-awaited.
        write(execution)
        gc.collect()

    never_awaited = [w for w in caught if "never awaited" in str(w.message)]
    assert code == "E_JOB_INPUT_INVALID"
    assert len(never_awaited) == 1, [str(w.message) for w in caught]  # only the control's
    assert db_state() == before
    assert_untouched(job, store)


def reclaimed_from_old_owner():
    """Return (old store, new store, job, old owner's fenced execution) after the new owner
    reclaimed the expired job."""
    clock = FakeClock()
    old = DurableJobStore(actor="old", lease_seconds=LEASE, clock=clock)
    new = DurableJobStore(actor="new", lease_seconds=LEASE, clock=clock)
    _old_lease, job, old_execution = running_job(old)
    clock.advance(LEASE + 1)
    new.claim(job.pk)
    return old, new, job, old_execution


def test_complete_atomically_by_a_stale_owner_after_reclaim_is_refused_without_running_mutation():
    old, new, job, old_execution = reclaimed_from_old_owner()
    before = db_state()
    called: list[bool] = []

    def mutation(execution):
        called.append(True)
        DomainRow.objects.create(job_id=job.pk, value="stale")
        return '{"rows": 1}'

    with pytest.raises(LeaseLost) as refused:
        old.complete_atomically(old_execution, mutation)

    assert refused.value.code == "E_JOB_LEASE_LOST"
    assert called == []
    assert db_state() == before
    assert_untouched(job, new, epoch=2)


def test_complete_atomically_refuses_the_domain_write_after_a_cancellation_request():
    # Unlike complete(), the atomic path guards a domain write, which a cancellation request
    # forbids (SPEC §4, assert_write_fence): the mutation must not run.
    clock = FakeClock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    _lease, job, execution = running_job(store)
    store.request_cancel(job.pk)
    called: list[bool] = []
    before = db_state()

    with pytest.raises(LeaseLost) as refused:
        store.complete_atomically(execution, lambda e: called.append(True) or "{}")

    assert refused.value.code == "E_JOB_LEASE_LOST"
    assert called == []
    assert db_state() == before


def test_complete_atomically_mutation_outlasting_the_budget_rolls_back():
    clock = FakeClock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    lease, job, _ = running_job(store)
    execution = execution_for(store, job, lease, budget=0.5)
    before = db_state()

    def slow_mutation(e):
        DomainRow.objects.create(job_id=job.pk, value="slow")
        time.sleep(0.6)  # the execution's budget runs on time.monotonic, not on the store clock
        return '{"rows": 1}'

    with pytest.raises(DeadlineExceeded) as refused:
        store.complete_atomically(execution, slow_mutation)

    assert refused.value.code == "E_JOB_DEADLINE_EXCEEDED"
    assert db_state() == before
    assert_untouched(job, store)


# -- retry_atomically --------------------------------------------------------------------------


def failed_job(clock: FakeClock):
    """Return (worker store, job) for a job that failed with a result, an error and a request."""
    worker = DurableJobStore(actor="worker", lease_seconds=LEASE, clock=clock)
    lease, job, execution = running_job(worker)
    worker.checkpoint(lease, '{"step": 3}')
    worker.request_cancel(job.pk)
    done = worker.finalize_atomically(
        execution, AttemptOutcome("failed", "boom"), lambda e: '{"cleanup": "done"}'
    )
    assert done.state == "finalized", done
    row = Job.objects.get(pk=job.pk)
    assert row.status == "failed" and row.result == '{"cleanup": "done"}' and row.error == "boom"
    assert row.completed_at is not None and row.cancellation_requested_at is not None
    return worker, row


def test_retry_atomically_starts_a_new_attempt_together_with_the_retained_outcome():
    clock = FakeClock()
    _worker, job = failed_job(clock)
    clock.advance(5)
    retrier = DurableJobStore(actor="retrier", lease_seconds=LEASE, clock=clock)
    seen: list[dict] = []

    def retain_outcome(previous_json: str) -> str:
        previous = json.loads(previous_json)
        seen.append(previous)
        RetryHistory.objects.create(
            job_id=job.pk,
            previous_status=previous["status"],
            previous_epoch=previous["fencing_epoch"],
        )
        return json.dumps({"retained": previous["fencing_epoch"]})

    lease = retrier.retry_atomically(job.pk, execution_for(retrier, job), retain_outcome)

    assert (lease.job_id, lease.owner_id, lease.epoch) == (job.pk, retrier.owner_id, 2)
    assert len(seen) == 1
    assert (seen[0]["id"], seen[0]["status"], seen[0]["fencing_epoch"]) == (
        str(job.pk),
        "failed",
        1,
    )
    assert (seen[0]["result"], seen[0]["error"]) == ('{"cleanup": "done"}', "boom")
    history = RetryHistory.objects.get()
    assert (history.job_id, history.previous_status, history.previous_epoch) == (
        job.pk,
        "failed",
        1,
    )
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.fencing_epoch, row.attempts, row.owner_id) == (
        "running",
        2,
        2,
        retrier.owner_id,
    )
    assert (row.result, row.error, row.completed_at, row.cancellation_requested_at) == (
        None,
        None,
        None,
        None,
    )
    assert row.checkpoint == '{"step": 3}'
    assert row.lease_expires_at == clock() + timedelta(seconds=LEASE)
    # The failed attempt's history row is kept; the retry itself ends no attempt.
    assert list(JobAttempt.objects.values_list("epoch", "outcome")) == [(1, "failed")]
    retrier.complete(lease, {"second": "attempt"})
    assert Job.objects.get(pk=job.pk).status == "complete"


def _retain(behaviour: str, job: Job, execution, called: list):
    def retain_outcome(previous_json: str):
        called.append(behaviour)
        RetryHistory.objects.create(job_id=job.pk, previous_status="failed", previous_epoch=1)
        if behaviour == "raises":
            raise RuntimeError("bookkeeping failed")
        if behaviour == "cancels":
            execution.cancel()
        if behaviour == "non-json":
            return "retained!"
        return '{"retained": true}'

    return retain_outcome


@pytest.mark.parametrize(
    "behaviour, error, code",
    [
        ("raises", RuntimeError, None),
        ("non-json", InputInvalid, "E_JOB_INPUT_INVALID"),
        ("cancels", ExecutionStopped, "E_OPERATION_CANCELLED"),
        ("capacity", CapacityReached, "E_JOB_CAPACITY_REACHED"),
    ],
)
def test_retry_atomically_fault_rolls_back_retained_outcome_and_retry(behaviour, error, code):
    clock = FakeClock()
    worker, job = failed_job(clock)
    max_running = None
    if behaviour == "capacity":  # another attempt of the operation holds the only slot
        running_job(worker, key="blocker")
        max_running = 1
    retrier = DurableJobStore(actor="retrier", lease_seconds=LEASE, clock=clock)
    execution = execution_for(retrier, job)
    called: list[str] = []
    before = db_state()

    with pytest.raises(error) as refused:
        retrier.retry_atomically(
            job.pk,
            execution,
            _retain(behaviour, job, execution, called),
            max_running=max_running,
        )

    if code is not None:
        assert refused.value.code == code
    assert called == [behaviour]  # the bookkeeping ran, and was rolled back with the retry
    assert not RetryHistory.objects.exists()
    assert db_state() == before
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.fencing_epoch, row.owner_id) == ("failed", 1, worker.owner_id)
    # Nothing is wedged: a clean retry still works.
    lease = retrier.retry_atomically(job.pk, execution_for(retrier, job))
    assert lease.epoch == 2


def test_retry_atomically_of_an_expired_attempt_writes_its_history_row_only_on_commit():
    clock = FakeClock()
    worker = DurableJobStore(actor="worker", lease_seconds=LEASE, clock=clock)
    _lease, job, _ = running_job(worker)
    clock.advance(LEASE + 1)
    retrier = DurableJobStore(actor="retrier", lease_seconds=LEASE, clock=clock)
    cancelled = execution_for(retrier, job)
    before = db_state()

    def retain_then_cancel(previous_json: str) -> str:
        RetryHistory.objects.create(job_id=job.pk, previous_status="running", previous_epoch=1)
        cancelled.cancel()  # observed before COMMIT, after the interrupted attempt was recorded
        return "{}"

    with pytest.raises(ExecutionStopped) as refused:
        retrier.retry_atomically(job.pk, cancelled, retain_then_cancel)

    assert refused.value.code == "E_OPERATION_CANCELLED"
    assert db_state() == before  # no "interrupted" JobAttempt, no retry
    assert not RetryHistory.objects.exists()
    assert_untouched(job, worker)

    lease = retrier.retry_atomically(job.pk, execution_for(retrier, job))
    assert (lease.epoch, lease.owner_id) == (2, retrier.owner_id)
    history = list(JobAttempt.objects.values_list("epoch", "owner_id", "outcome"))
    assert history == [(1, worker.owner_id, "interrupted")]


def test_retry_atomically_never_reopens_a_complete_job():
    clock = FakeClock()
    worker = DurableJobStore(actor="worker", lease_seconds=LEASE, clock=clock)
    lease, job, _execution = running_job(worker)
    worker.complete(lease, {"done": True})
    retrier = DurableJobStore(actor="retrier", lease_seconds=LEASE, clock=clock)
    called: list[str] = []
    before = db_state()

    with pytest.raises(NotReclaimable) as refused:
        retrier.retry_atomically(
            job.pk, execution_for(retrier, job), lambda previous: called.append(previous) or "{}"
        )

    assert refused.value.code == "E_JOB_NOT_RECLAIMABLE"
    assert called == []
    assert db_state() == before
    assert not RetryHistory.objects.exists()


# -- finalize_atomically -----------------------------------------------------------------------


def test_finalize_atomically_records_the_failure_with_its_bookkeeping():
    clock = FakeClock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    _lease, job, execution = running_job(store)

    def bookkeeping(e):
        DomainRow.objects.create(job_id=job.pk, value="cleanup noted")
        return '{"cleaned": true}'

    result = store.finalize_atomically(execution, AttemptOutcome("failed", "boom"), bookkeeping)

    assert isinstance(result, Finalization)
    assert (result.state, result.result_json) == ("finalized", '{"cleaned": true}')
    assert (result.reason, result.cleanup_error, result.deadline_exceeded) == (None, None, False)
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.error, row.result) == ("failed", "boom", '{"cleaned": true}')
    assert row.completed_at == clock()
    attempt = JobAttempt.objects.get(job=job.pk)
    assert (attempt.outcome, attempt.error, attempt.epoch) == ("failed", "boom", 1)
    assert attempt.snapshot["status"] == "failed"
    assert DomainRow.objects.get().value == "cleanup noted"


def test_finalize_atomically_acknowledges_a_cancellation_request():
    clock = FakeClock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    _lease, job, execution = running_job(store)
    store.request_cancel(job.pk)

    result = store.finalize_atomically(
        execution, AttemptOutcome("cancelled", "stopped on request"), lambda e: None
    )

    assert result.state == "finalized", result
    assert Job.objects.get(pk=job.pk).status == "cancelled"
    assert JobAttempt.objects.get(job=job.pk).outcome == "cancelled"


def test_finalize_atomically_bookkeeping_fault_leaves_pending_finalization_and_writes_nothing():
    clock = FakeClock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    _lease, job, execution = running_job(store)
    before = db_state()

    def bookkeeping(e):
        DomainRow.objects.create(job_id=job.pk, value="cleanup")
        RetryHistory.objects.create(job_id=job.pk, previous_status="running", previous_epoch=1)
        raise RuntimeError("cleanup failed")

    result = store.finalize_atomically(execution, AttemptOutcome("failed", "boom"), bookkeeping)

    assert result.state == "pending-finalization"
    assert result.reason and "cleanup failed" in result.reason
    assert result.cleanup_error == "RuntimeError: cleanup failed"
    assert result.result_json is None
    assert db_state() == before
    assert not RetryHistory.objects.exists()
    assert_untouched(job, store)


@pytest.mark.parametrize(
    "behaviour, code",
    [("cancels", "E_OPERATION_CANCELLED"), ("non-json", "E_JOB_INPUT_INVALID")],
)
def test_finalize_atomically_refused_bookkeeping_result_leaves_pending_finalization(
    behaviour, code
):
    clock = FakeClock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    _lease, job, execution = running_job(store)
    before = db_state()

    def bookkeeping(e):
        DomainRow.objects.create(job_id=job.pk, value=behaviour)
        if behaviour == "cancels":
            e.cancel()
            return '{"noted": true}'
        return "noted"

    result = store.finalize_atomically(execution, AttemptOutcome("failed", "boom"), bookkeeping)

    assert result.state == "pending-finalization"
    assert result.reason and result.reason.startswith(code)
    assert db_state() == before
    assert_untouched(job, store)


def test_finalize_atomically_with_a_stale_lease_never_raises_and_runs_no_bookkeeping():
    old, new, job, old_execution = reclaimed_from_old_owner()
    called: list[bool] = []
    before = db_state()

    result = old.finalize_atomically(
        old_execution, AttemptOutcome("failed", "boom"), lambda e: called.append(True)
    )

    assert result.state == "pending-finalization"
    assert result.reason and "E_JOB_LEASE_LOST" in result.reason
    assert called == []
    assert db_state() == before
    assert_untouched(job, new, epoch=2)


@pytest.mark.parametrize(
    "outcome",
    [
        AttemptOutcome("complete", "done"),
        AttemptOutcome("running", "still going"),
        AttemptOutcome("bogus", "what"),
        ("failed", "a tuple, not an AttemptOutcome"),
    ],
    ids=["complete", "running", "bogus", "tuple"],
)
def test_finalize_atomically_with_an_invalid_outcome_is_pending_finalization(outcome):
    clock = FakeClock()
    store = DurableJobStore(actor="w", lease_seconds=LEASE, clock=clock)
    _lease, job, execution = running_job(store)
    called: list[bool] = []
    before = db_state()

    result = store.finalize_atomically(execution, outcome, lambda e: called.append(True))

    assert result.state == "pending-finalization"
    assert result.reason and result.reason.startswith("E_JOB_INPUT_INVALID")
    assert called == []
    assert db_state() == before
    assert_untouched(job, store)
