"""The typed answers to cancellation and retry requests, on every database.

``request_cancel_result`` and ``request_retry_result`` return a ``RequestResult``: what the
request did (``RequestAnswer``), when it was first recorded, and the job as it left it — the same
row a fresh read returns. Answers that change nothing write nothing; refusals stay ``JobError``s
and write nothing either. ``request_cancel`` and ``request_retry`` still answer with a bool, the
same as ``result.accepted``.
"""

from __future__ import annotations

import uuid

import pytest

from django_durable_jobs.models import Job
from django_durable_jobs.rules.errors import NotReclaimable
from django_durable_jobs.rules.vocabulary import JobStatus, Ownership, RequestAnswer
from django_durable_jobs.store import DurableJobStore, RequestResult
from tests.support import assert_refused, db_state, submission

pytestmark = pytest.mark.django_db(transaction=True)

OP = "requests.op"


def _same_as_stored(result: RequestResult) -> None:
    """The job in the result is the row as committed, assessed at the store's clock."""
    stored = Job.objects.get(pk=result.job.pk)
    for field in ("status", "cancellation_requested_at", "retry_requested_at", "run_after"):
        assert getattr(result.job, field) == getattr(stored, field), field


def test_cancelling_pending_work_ends_it_at_once(store, clock):
    job = store.defer(OP, submission(key="p"))
    result = store.request_cancel_result(job.pk)
    assert (result.answer, result.accepted) == (RequestAnswer.CANCELLED_NOW, True)
    assert result.job.status == JobStatus.CANCELLED
    assert result.job.ownership == Ownership.TERMINAL
    assert result.requested_at == clock.now == result.job.completed_at
    _same_as_stored(result)


def test_cancelling_running_work_records_one_request_the_first_wins(store, clock):
    lease = store.insert(OP, submission=submission(key="r"))
    first = store.request_cancel_result(lease.job_id)
    assert first.answer == RequestAnswer.REQUESTED
    assert (first.job.status, first.job.ownership) == (JobStatus.RUNNING, Ownership.CURRENT)
    _same_as_stored(first)
    asked_at = first.requested_at
    clock.advance(1)
    before = db_state()
    again = store.request_cancel_result(lease.job_id)
    assert (again.answer, again.accepted) == (RequestAnswer.ALREADY_REQUESTED, True)
    assert again.requested_at == asked_at  # the earlier request, not now
    assert db_state() == before


def test_cancelling_a_finished_job_keeps_its_result(store):
    lease = store.insert(OP, submission=submission(key="c"))
    store.complete(lease, {"done": True})
    before = db_state()
    result = store.request_cancel_result(lease.job_id)
    assert (result.answer, result.accepted) == (RequestAnswer.ALREADY_ENDED, False)
    assert (result.job.status, result.job.result) == (JobStatus.COMPLETE, '{"done":true}')
    assert result.requested_at is None
    assert db_state() == before
    assert store.request_cancel(lease.job_id) is False


def test_a_missing_or_foreign_job_is_not_found_and_nothing_changes(store, clock):
    foreign = DurableJobStore(scope="other", clock=clock).defer(OP, submission(key="f"))
    scoped = DurableJobStore(scope="mine", clock=clock)
    before = db_state()
    for asker, job_id in ((store, uuid.uuid4()), (scoped, foreign.pk)):
        for ask in (asker.request_cancel_result, asker.request_retry_result):
            result = ask(job_id)
            assert (result.answer, result.job, result.accepted) == (
                RequestAnswer.NOT_FOUND,
                None,
                False,
            )
    assert db_state() == before


def test_retrying_a_failed_job_records_a_request_due_now(store, clock):
    lease = store.insert(OP, submission=submission(key="x"))
    store.fail(lease, "boom")
    clock.advance(5)
    result = store.request_retry_result(lease.job_id)
    assert (result.answer, result.accepted) == (RequestAnswer.REQUESTED, True)
    assert result.requested_at == clock.now == result.job.retry_requested_at
    assert result.job.run_after <= clock.now
    _same_as_stored(result)
    before = db_state()
    again = store.request_retry_result(lease.job_id)
    assert (again.answer, again.requested_at) == (RequestAnswer.ALREADY_REQUESTED, clock.now)
    assert db_state() == before


def test_retrying_work_that_has_not_ended_changes_nothing(store):
    lease = store.insert(OP, submission=submission(key="live"))
    pending = store.defer(OP, submission(key="waiting"))
    before = db_state()
    for job_id in (lease.job_id, pending.pk):
        result = store.request_retry_result(job_id)
        assert (result.answer, result.accepted) == (RequestAnswer.NOT_ENDED, False)
        assert store.request_retry(job_id) is False
    assert db_state() == before


def test_retrying_a_complete_job_is_still_a_refusal(store):
    lease = store.insert(OP, submission=submission(key="done"))
    store.complete(lease, None)
    error = assert_refused(
        NotReclaimable,
        "E_JOB_NOT_RECLAIMABLE",
        lambda: store.request_retry_result(lease.job_id),
    )
    assert "never reopened" in error.message


def test_the_old_lease_keyword_still_works_with_a_deprecation_warning(clock):
    with pytest.warns(DeprecationWarning, match="lease_seconds"):
        store = DurableJobStore(lease=12.5, clock=clock)
    assert store.lease_seconds == store.lease == 12.5
    lease = store.insert(OP, submission=submission(key="old-name"))
    assert (lease.expires_at - clock.now).total_seconds() == 12.5
