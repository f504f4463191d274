"""The store's batched paths on every database: claim_batch, record_outcomes, renew_leases, release.

Each batch writes many rows per statement and still fences every row in SQL: a row whose lease was
taken over is refused alone (``LeaseLost``) and keeps the new owner's state and history, while the
rest of the batch commits.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.errors import InputInvalid, LeaseLost
from django_durable_jobs.models import Job, JobAttempt
from django_durable_jobs.registry import operation, unregister
from django_durable_jobs.retry import RetryPolicy
from django_durable_jobs.store import DurableJobStore
from django_durable_jobs.values import Claimed, Outcome
from django_durable_jobs.vocabulary import proposal_sha256
from tests.support import LEASE, assert_refused, submission

pytestmark = pytest.mark.django_db(transaction=True)

OP = "batch.op"
LEASE_DELTA = timedelta(seconds=LEASE)


def backlog(store: DurableJobStore, count: int, op: str = OP, **kwargs) -> list[Job]:
    """Defer ``count`` jobs at the clock's time; return them in claim order.

    They tie on priority, ``run_after`` and ``created_at``, so the id decides, in the database's
    own order of ids (MariaDB's UUID type does not sort like the text of the id).
    """
    jobs = [store.defer(op, submission({"n": n}, key=f"{op}-{n}"), **kwargs) for n in range(count)]
    return list(Job.objects.filter(pk__in=[j.pk for j in jobs]).order_by("created_at", "id"))


def history(job_id) -> list[tuple[int, str, str | None]]:
    rows = JobAttempt.objects.filter(job_id=job_id).order_by("epoch", "id")
    return list(rows.values_list("epoch", "outcome", "owner_id"))


def statements(queries) -> list[str]:
    """Return the SQL of ``queries`` without transaction control and lock-policy chatter."""
    skip = ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE", "ROLLBACK")
    return [q["sql"] for q in queries if not q["sql"].upper().startswith(skip)]


# -- claim_batch -----------------------------------------------------------------------------------


def test_a_batch_is_claimed_in_one_statement_with_its_rows_loaded(store, clock):
    jobs = backlog(store, 6)
    with CaptureQueriesContext(connection) as queries:
        claimed = store.claim_batch(limit=4, resume_expired=[])
    expected = 2 if connection.vendor == "mysql" else 1  # MariaDB: no UPDATE … RETURNING
    extra = 1 if connection.vendor == "mysql" else 0  # … and its rarer-work check is a read
    assert len(statements(queries.captured_queries)) == expected + extra
    # The first four in claim order (within a batch of ties the order of ids may differ: MariaDB
    # sorts its UUID type its own way).
    assert {c.job_id for c in claimed} == {j.pk for j in jobs[:4]}
    for claim in claimed:
        assert isinstance(claim, Claimed)
        stored = Job.objects.get(pk=claim.job_id)
        assert (claim.lease.epoch, claim.lease.owner_id) == (1, store.owner_id)
        for field in Job._meta.concrete_fields:
            loaded, written = getattr(claim.job, field.attname), getattr(stored, field.attname)
            assert loaded == written, field.attname
        assert (stored.status, stored.attempts, stored.fencing_epoch) == ("running", 1, 1)
        assert stored.lease_expires_at == clock() + LEASE_DELTA


def test_claim_order_is_exact_when_a_retry_waits_among_pending_work(store, rival, clock):
    backlog(store, 3, priority=0)
    failed = store.defer(OP, submission({"retry": 1}, key="retry"), priority=50)
    [lease] = store.claim_next(limit=1, resume_expired=[])
    assert lease.job_id == failed.pk
    store.fail(lease, "boom")
    store.request_retry(failed.pk)
    claimed = rival.claim_batch(limit=2, resume_expired=[])
    assert [c.job_id for c in claimed][0] == failed.pk  # the higher priority retry comes first
    assert claimed[0].job.attempts == 2 and claimed[0].job.status == "running"


def test_a_pending_row_whose_hash_does_not_match_is_never_started_nor_in_the_way(store):
    bad, *good = backlog(store, 4)
    Job.objects.filter(pk=bad.pk).update(proposal_hash="0" * 64)
    assert [c.job_id for c in store.claim_batch(limit=1, resume_expired=[])] == [good[0].pk]
    rest = store.claim_batch(limit=5, resume_expired=[])
    assert {c.job_id for c in rest} == {good[1].pk, good[2].pk}
    assert store.claim_batch(limit=5, resume_expired=[]) == []
    assert Job.objects.get(pk=bad.pk).status == "pending"


def test_a_forged_hash_over_invalid_json_is_passed_over(store):
    # Written outside the app (the flag the store sets after checking the JSON is not set): SQL
    # and Python both refuse to trust it, and the claim takes the work behind the row.
    bad, good = backlog(store, 2)
    text = "{not json"
    Job.objects.filter(pk=bad.pk).update(
        proposal=text, proposal_hash=proposal_sha256(text), proposal_checked=None
    )
    claimed = store.claim_batch(limit=2, resume_expired=[])
    assert [c.job_id for c in claimed] == [good.pk]
    bad_row = Job.objects.get(pk=bad.pk)
    assert (bad_row.status, bad_row.fencing_epoch, bad_row.owner_id) == ("pending", 0, None)


def test_a_claim_with_max_running_counts_capacity(store):
    backlog(store, 5)
    assert len(store.claim_batch(limit=5, max_running=2, resume_expired=[])) == 2
    assert store.claim_batch(limit=5, max_running=2, resume_expired=[]) == []


# -- record_outcomes --------------------------------------------------------------------------------


def test_a_flush_refuses_only_the_row_another_owner_took_over(store, rival, clock):
    jobs = backlog(store, 4)
    claimed = store.claim_batch(limit=4, resume_expired=[])
    lost = claimed[1]
    clock.advance(LEASE + 1)  # every lease expires; the rival takes one job over
    Job.objects.exclude(pk=lost.job_id).update(lease_expires_at=clock() + LEASE_DELTA)
    [taken] = rival.claim_next(limit=1, resume_expired=[OP])
    assert taken.job_id == lost.job_id and taken.epoch == 2
    rival_row = Job.objects.get(pk=lost.job_id)
    rival_history = history(lost.job_id)

    results = store.record_outcomes(
        [Outcome.completed(c.lease, json.dumps({"n": n})) for n, c in enumerate(claimed)]
    )

    assert [r.status for r in results] == ["complete", None, "complete", "complete"]
    refusal = results[1].refusal
    assert isinstance(refusal, LeaseLost) and "claimed again by worker-b" in refusal.message
    after = Job.objects.get(pk=lost.job_id)
    assert (after.status, after.owner_id, after.fencing_epoch) == ("running", rival.owner_id, 2)
    assert after.lease_expires_at == rival_row.lease_expires_at
    assert history(lost.job_id) == rival_history == [(1, "interrupted", store.owner_id)]
    for n, claim in enumerate(claimed):
        if claim is lost:
            continue
        row = Job.objects.get(pk=claim.job_id)
        assert (row.status, row.result, row.progress) == ("complete", json.dumps({"n": n}), 100.0)
        assert history(claim.job_id) == [(1, "complete", store.owner_id)]
        snapshot = JobAttempt.objects.get(job_id=claim.job_id).snapshot
        assert snapshot["status"] == "complete" and snapshot["result"] == row.result
    assert {j.pk for j in jobs} == {c.job_id for c in claimed}


def test_a_flush_mixes_outcomes_and_applies_each_rule(store, clock):
    @operation("batch.retried", retry=RetryPolicy(max_attempts=3, base_delay=5.0, jitter=0.0))
    def retried(ctx, payload):  # pragma: no cover - never run here
        return None

    try:
        done, failed, cancelled, unrequested = backlog(store, 4)
        retry = store.defer("batch.retried", submission({"r": 1}, key="r"))
        claimed = {c.job_id: c.lease for c in store.claim_batch(limit=5, resume_expired=[])}
        store.request_cancel(cancelled.pk)
        results = store.record_outcomes(
            [
                Outcome.completed(claimed[done.pk], '{"ok":true}'),
                Outcome.failed(claimed[failed.pk], "RuntimeError: no"),
                Outcome.cancelled(claimed[cancelled.pk]),
                Outcome.stopped(claimed[unrequested.pk]),
                Outcome.failed(claimed[retry.pk], "flaky"),
            ]
        )
    finally:
        unregister("batch.retried")
    assert [r.status for r in results] == ["complete", "failed", "cancelled", "failed", "failed"]
    assert [r.error for r in results][:3] == [None, "RuntimeError: no", None]
    assert "without a request" in results[3].error and results[4].error == "flaky"
    rows = {j.pk: Job.objects.get(pk=j.pk) for j in (done, failed, cancelled, unrequested, retry)}
    assert (rows[done.pk].result, rows[done.pk].error) == ('{"ok":true}', None)
    assert (rows[failed.pk].error, rows[failed.pk].result) == ("RuntimeError: no", None)
    assert rows[cancelled.pk].status == "cancelled" and rows[cancelled.pk].error is None
    assert "without a request" in rows[unrequested.pk].error
    assert rows[retry.pk].retry_requested_at == clock()
    assert rows[retry.pk].run_after > clock()  # the policy's backoff
    outcomes = dict(JobAttempt.objects.values_list("job_id", "outcome"))
    assert outcomes == {
        done.pk: "complete",
        failed.pk: "failed",
        cancelled.pk: "cancelled",
        unrequested.pk: "failed",
        retry.pk: "failed",
    }
    assert all(row.completed_at == clock() for row in rows.values())


def test_an_acknowledgement_nobody_requested_is_refused_alone(store):
    # One rule on every path: a cancellation is recorded only where one was requested.
    # Outcome.cancelled acknowledges a request (refused without one, as cancel() is);
    # Outcome.stopped, what a worker sends when its executor raised JobCancelled, fails instead.
    done, unrequested = backlog(store, 2)
    claimed = {c.job_id: c.lease for c in store.claim_batch(limit=2, resume_expired=[])}
    results = store.record_outcomes(
        [
            Outcome.completed(claimed[done.pk], "1"),
            Outcome.cancelled(claimed[unrequested.pk]),
        ]
    )
    assert [r.status for r in results] == ["complete", None]
    assert isinstance(results[1].refusal, InputInvalid)
    assert "no cancellation request" in results[1].refusal.message
    row = Job.objects.get(pk=unrequested.pk)
    assert (row.status, row.error, row.owner_id) == ("running", None, store.owner_id)
    assert not JobAttempt.objects.filter(job_id=unrequested.pk).exists()
    with pytest.raises(InputInvalid):
        store.cancel(claimed[unrequested.pk])
    [stopped] = store.record_outcomes([Outcome.stopped(claimed[unrequested.pk])])
    assert stopped.status == "failed" and "without a request" in stopped.error


def test_a_flush_is_a_handful_of_statements_however_many_rows(store):
    backlog(store, 30)
    claimed = store.claim_batch(limit=30, resume_expired=[])
    outcomes = [Outcome.completed(c.lease, json.dumps({"n": n})) for n, c in enumerate(claimed)]
    with CaptureQueriesContext(connection) as queries:
        store.record_outcomes(outcomes)
    assert len(statements(queries.captured_queries)) == 3  # lock rows, update, insert history
    assert Job.objects.filter(status="complete").count() == 30


def test_a_value_that_is_no_outcome_refuses_the_whole_flush(store):
    # Unstorable outcomes end their own attempts (tests/store/test_unstorable_outcomes.py);
    # a value no constructor of Outcome builds has no attempt to end.
    backlog(store, 2)
    first, second = store.claim_batch(limit=2, resume_expired=[])
    for bad in (
        [Outcome.completed(second.lease, "1"), Outcome(first.lease, "running")],
        [Outcome.completed(second.lease, "1"), "complete"],
    ):
        assert_refused(InputInvalid, "E_JOB_INPUT_INVALID", lambda b=bad: store.record_outcomes(b))


def test_another_clients_lease_is_refused_in_a_flush(store, rival):
    backlog(store, 1)
    [claim] = store.claim_batch(limit=1, resume_expired=[])
    [result] = rival.record_outcomes([Outcome.completed(claim.lease, "null")])
    assert isinstance(result.refusal, LeaseLost)
    assert Job.objects.get(pk=claim.job_id).status == "running"


# -- renew_leases ------------------------------------------------------------------------------------


def test_one_statement_renews_every_lease_and_reports_lost_ones(store, rival, clock):
    backlog(store, 5)
    claimed = store.claim_batch(limit=5, resume_expired=[])
    gone = claimed[0]
    Job.objects.filter(pk=gone.job_id).update(lease_expires_at=clock())  # expired just now
    store.request_cancel(claimed[1].job_id)
    clock.advance(3)
    with CaptureQueriesContext(connection) as queries:
        rows = store.renew_leases([c.lease for c in claimed])
    assert len(statements(queries.captured_queries)) == 2  # one UPDATE, one read back
    assert rows[0] is None  # an expired lease cannot revive itself
    assert rows[1].cancellation_requested_at is not None
    for claim, row in zip(claimed[1:], rows[1:], strict=True):
        assert row.lease_expires_at == clock() + LEASE_DELTA
        assert Job.objects.get(pk=claim.job_id).lease_expires_at == clock() + LEASE_DELTA
    assert rival.renew_leases([claimed[2].lease]) == [None]
    assert store.renew_leases([]) == []


# -- release -------------------------------------------------------------------------------------------


def test_released_claims_go_back_to_pending_and_history_says_so(store, rival, clock):
    backlog(store, 3)
    claimed = store.claim_batch(limit=3, resume_expired=[])
    assert store.release([c.lease for c in claimed[:2]]) == 2
    for claim in claimed[:2]:
        row = Job.objects.get(pk=claim.job_id)
        assert (row.status, row.attempts, row.fencing_epoch) == ("pending", 0, 1)
        assert (row.owner_id, row.lease_expires_at, row.claimed_by) == (None, None, "")
        assert store.get(row.pk).ownership == "unclaimed"
        assert history(row.pk) == [(1, "released", store.owner_id)]
    again = rival.claim_batch(limit=3, resume_expired=[])
    assert {c.job_id for c in again} == {c.job_id for c in claimed[:2]}
    assert [(c.lease.epoch, c.job.attempts) for c in again] == [(2, 1), (2, 1)]
    assert store.release([claimed[0].lease]) == 0  # no longer ours: skipped


def test_a_released_retry_is_claimable_at_once_by_any_worker(store, rival, clock):
    (job,) = backlog(store, 1, op="batch.held")
    [first] = store.claim_batch(limit=1, resume_expired=[])
    store.fail(first.lease, "boom")
    store.request_retry(job.pk)
    [retry] = store.claim_batch(limit=1, resume_expired=[])
    assert retry.job.attempts == 2
    assert store.release([retry.lease]) == 1
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.lease_expires_at) == ("running", 1, clock())
    assert row.retry_requested_at == clock()
    [taken] = rival.claim_batch(limit=1, resume_expired=[])  # not resumable, yet claimable
    assert (taken.job_id, taken.lease.epoch, taken.job.attempts) == (job.pk, 3, 2)
    assert [o for _, o, _ in history(job.pk)] == ["failed", "released"]


def test_release_and_renewal_refuse_what_is_not_a_lease(store):
    backlog(store, 1)
    store.claim_batch(limit=1, resume_expired=[])
    assert_refused(InputInvalid, "E_JOB_INPUT_INVALID", lambda: store.release([uuid.uuid4()]))
    assert_refused(InputInvalid, "E_JOB_INPUT_INVALID", lambda: store.renew_leases(["lease"]))
