"""The ending room on every database: ``record_outcomes`` and ``release``, many rows a statement.

Each batch writes many rows per statement and still fences every row in SQL: a row whose lease was
taken over is refused alone (``LeaseLost``) and keeps the new owner's state and history, while the
rest of the batch commits.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.db.models.signals import post_init
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.models import Job, JobAttempt
from django_durable_jobs.rules.errors import InputInvalid, LeaseLost
from django_durable_jobs.rules.registry import operation, unregister
from django_durable_jobs.rules.retry import RetryPolicy
from django_durable_jobs.rules.values import Outcome
from django_durable_jobs.store.ending import _ENCODER, _datetime_text, snapshot
from django_durable_jobs.store.sql.rows import new_attempt
from tests.store.batch_support import OP, backlog, statements
from tests.support import LEASE, assert_refused, submission

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_DELTA = timedelta(seconds=LEASE)


def history(job_id) -> list[tuple[int, str, str | None]]:
    rows = JobAttempt.objects.filter(job_id=job_id).order_by("epoch", "id")
    return list(rows.values_list("epoch", "outcome", "owner_id"))


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
    sql = statements(queries.captured_queries)
    if connection.vendor == "postgresql":
        # No locking read first: the fenced UPDATE locks, ends and returns the rows.
        assert len(sql) == 2 and "RETURNING" in sql[0]  # update, insert history
    else:
        assert len(sql) == 3  # lock rows, update, insert history
    assert Job.objects.filter(status="complete").count() == 30


def test_a_flush_explains_each_refusal_and_ends_the_rest(store, rival, clock):
    # Four ways a lease is lost (taken over, ended, expired, no such job), in one flush of
    # completions and failures beside held leases: each refused outcome says why and changes
    # nothing; the held ones end with their history. (Another client's lease: below.)
    jobs = backlog(store, 6)
    claimed = {c.job_id: c.lease for c in store.claim_batch(limit=6, resume_expired=[])}
    held_done, held_failed, taken, ended, expired, unknown = (claimed[j.pk] for j in jobs)
    clock.advance(LEASE + 1)  # every lease expires; the rival takes one job over
    Job.objects.exclude(pk=taken.job_id).update(lease_expires_at=clock() + LEASE_DELTA)
    [again] = rival.claim_next(limit=1, resume_expired=[OP])
    assert again.job_id == taken.job_id
    Job.objects.filter(pk=expired.job_id).update(lease_expires_at=clock())  # runs out now
    store.complete(ended, "0")
    gone = type(unknown)(uuid.uuid4(), unknown.owner_id, unknown.epoch, unknown.expires_at)
    before = {row.pk: row for row in Job.objects.all()}
    history_before = set(JobAttempt.objects.values_list("job_id", "epoch", "outcome"))

    results = store.record_outcomes(
        [
            Outcome.completed(held_done, '"done"'),
            Outcome.completed(taken, '"late"'),
            Outcome.failed(ended, "twice"),
            Outcome.completed(expired, '"late"'),
            Outcome.failed(gone, "nobody"),
            Outcome.failed(held_failed, "RuntimeError: no"),
        ]
    )

    assert [r.status for r in results] == ["complete", None, None, None, None, "failed"]
    why = [r.refusal.message for r in results[1:5]]
    assert all(isinstance(r.refusal, LeaseLost) for r in results[1:5])
    assert "claimed again by worker-b" in why[0]
    assert "already complete" in why[1]
    assert "lease expired" in why[2]
    assert "no such job" in why[3]
    for lease in (taken, ended, expired):
        after, was = Job.objects.get(pk=lease.job_id), before[lease.job_id]
        assert (after.status, after.owner_id, after.fencing_epoch, after.result, after.error) == (
            was.status,
            was.owner_id,
            was.fencing_epoch,
            was.result,
            was.error,
        )
    done, failed = Job.objects.get(pk=held_done.job_id), Job.objects.get(pk=held_failed.job_id)
    assert (done.status, done.result, done.progress, done.completed_at) == (
        "complete",
        '"done"',
        100.0,
        clock(),
    )
    assert (failed.status, failed.error, failed.result) == ("failed", "RuntimeError: no", None)
    assert (results[0].error, results[5].error) == (None, "RuntimeError: no")
    written = set(JobAttempt.objects.values_list("job_id", "epoch", "outcome")) - history_before
    assert written == {(held_done.job_id, 1, "complete"), (held_failed.job_id, 1, "failed")}
    snapshot = JobAttempt.objects.get(job_id=held_done.job_id).snapshot
    assert (snapshot["status"], snapshot["result"], snapshot["progress"]) == (
        "complete",
        '"done"',
        100.0,
    )


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


# -- the history row's values ---------------------------------------------------------------------


def test_the_snapshot_is_every_column_as_djangos_encoder_writes_it(store, clock):
    [job] = backlog(store, 1)
    Job.objects.filter(pk=job.pk).update(
        workflow=None, retry_requested_at=clock(), progress=12.5, checkpoint='{"at": 1}'
    )
    [claim] = store.claim_batch(limit=1, resume_expired=[])
    store.record_outcomes([Outcome.completed(claim.lease, '{"ok": true}')])
    row = Job.objects.get(pk=job.pk)
    row.claimed_at = row.claimed_at.replace(microsecond=0)  # both forms of a time
    row.heartbeat_at = row.heartbeat_at.replace(microsecond=123456)
    expected = json.loads(
        json.dumps(
            {f.attname: getattr(row, f.attname) for f in Job._meta.concrete_fields},
            cls=DjangoJSONEncoder,
        )
    )
    assert snapshot(row) == expected
    assert json.dumps(snapshot(row)) == json.dumps(expected)  # status is text, not JobStatus(...)
    assert snapshot(row)["claimed_at"].endswith(":00Z") and ".123Z" in snapshot(row)["heartbeat_at"]

    [stored] = JobAttempt.objects.filter(job_id=job.pk)
    assert stored.snapshot["status"] == "complete" and stored.snapshot["result"] == '{"ok": true}'
    assert stored.snapshot["id"] == str(job.pk) and stored.snapshot["progress"] == 100.0
    assert (stored.epoch, stored.owner_id, stored.outcome) == (1, store.owner_id, "complete")
    assert stored.started_at == Job.objects.get(pk=job.pk).claimed_at
    assert stored.ended_at == row.completed_at and stored.error is None


def test_a_time_is_written_in_its_own_zone_however_often_an_equal_time_was_written():
    # UTC times are remembered by value; a time in another zone equals a UTC time at the same
    # instant but is written with its own offset, as Django's encoder writes it.
    utc = datetime(2026, 12, 7, 12, 0, 0, 250000, tzinfo=UTC)
    paris = utc.astimezone(timezone(timedelta(hours=1)))
    naive = utc.replace(tzinfo=None)
    assert utc == paris
    for _ in range(2):
        for value in (utc, paris, naive, utc.replace(microsecond=0)):
            assert _datetime_text(value) == _ENCODER.default(value)
    assert (_datetime_text(utc), _datetime_text(paris)) == (
        "2026-12-07T12:00:00.250Z",
        "2026-12-07T13:00:00.250+01:00",
    )


def test_a_new_history_row_is_the_instance_its_model_makes_and_init_receivers_still_run(clock):
    values = {
        "job_id": uuid.uuid4(),
        "epoch": 3,
        "owner_id": "o",
        "claimed_by": "w",
        "started_at": clock(),
        "ended_at": clock(),
        "outcome": "failed",
        "error": "boom",
        "error_class": "builtins.RuntimeError",
        "traceback": "Traceback ...",
        "snapshot": {"id": "x"},
    }
    built, made = new_attempt(**values), JobAttempt(**values)
    assert {k: v for k, v in vars(built).items() if k != "_state"} == {
        k: v for k, v in vars(made).items() if k != "_state"
    }
    # ModelState's defaults (and its lazily made field cache): compared by what they say.
    assert (built._state.adding, built._state.db) == (made._state.adding, made._state.db)
    assert (built._state.adding, built._state.db, built.job_id) == (True, None, values["job_id"])
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance)

    post_init.connect(receiver, sender=JobAttempt)
    try:
        again = new_attempt(**values)
    finally:
        post_init.disconnect(receiver, sender=JobAttempt)
    assert len(seen) == 1 and seen[0] is again and again.outcome == "failed"
