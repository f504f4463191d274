"""Races between separate OS processes: exactly one winner, whatever the database.

Each test starts N client processes (``tests.race_child``) that set Django up, build their store and
open their connection, then wait for one start instant, so that they really collide on the row:

* claiming one expired lease → one new lease (epoch 2), the rest ``NotReclaimable``, one
  ``interrupted`` attempt recorded;
* deferring one submission under different job ids → one row, every caller gets its id;
* retrying one failed job with bookkeeping → one new attempt and one bookkeeping row;
* ``claim_next`` loops over a batch → every job claimed exactly once, at epoch 1.

Children that need an expired lease use a fixed clock an hour ahead instead of sleeping.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import timedelta

import pytest

from django_durable_jobs.models import Job, JobAttempt, JobStatus
from django_durable_jobs.store import DurableJobStore
from tests.race_child import Children
from tests.support import FakeClock, db_state, live_clock, submission
from tests.testapp.models import RetryHistory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

N = 6
OP = "races.op"
NOT_RECLAIMABLE = "E_JOB_NOT_RECLAIMABLE"


@pytest.fixture
def clock() -> FakeClock:
    """The parent's clock, at the real time (children compare against real-time-based clocks)."""
    return live_clock()


def _later(clock: FakeClock, seconds: float = 3600) -> str:
    """Return a fixed child clock ``seconds`` after the parent's, as ISO text."""
    return (clock.now + timedelta(seconds=seconds)).isoformat()


def _no_surprises(outcomes: list[dict]) -> None:
    """Fail on any outcome that is neither a win nor a JobError (deadlocks, driver errors)."""
    unexpected = [o["unexpected"] for o in outcomes if "unexpected" in o]
    assert not unexpected, unexpected


def _winners_and_codes(outcomes: list[dict]) -> tuple[list[dict], Counter]:
    _no_surprises(outcomes)
    winners = [o for o in outcomes if "code" not in o]
    codes = Counter(o["code"] for o in outcomes if "code" in o)
    return winners, codes


@pytest.mark.parametrize("state", ["expired", "unclaimed"])
def test_concurrent_claims_of_one_job_issue_exactly_one_lease(db_settings_env, clock, state):
    store = DurableJobStore(actor="parent", clock=clock)
    job = store.defer(OP, submission({"claim": state}, key=f"claim-{state}"))
    expected_epoch = 1
    if state == "expired":
        store.claim(job.pk)  # epoch 1, expires 30 s after the parent's now
        expected_epoch = 2
    args = [
        {"job_id": str(job.pk), "clock": _later(clock), "actor": f"racer-{i}"} for i in range(N)
    ]

    with Children(db_settings_env, "claim", args) as children:
        outcomes = children.race()

    winners, codes = _winners_and_codes(outcomes)
    assert len(winners) == 1, outcomes
    assert codes == {NOT_RECLAIMABLE: N - 1}, outcomes
    (winner,) = winners
    assert winner["epoch"] == expected_epoch
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.RUNNING
    assert (row.owner_id, row.fencing_epoch, row.attempts) == (
        winner["owner_id"],
        expected_epoch,
        expected_epoch,
    )
    assert row.lease_expires_at == clock.now + timedelta(seconds=3600 + 30)
    attempts = list(JobAttempt.objects.filter(job=row).values_list("epoch", "outcome"))
    assert attempts == ([(1, "interrupted")] if state == "expired" else [])


def test_concurrent_defers_of_one_submission_keep_one_row(db_settings_env, clock):
    ids = [str(uuid.uuid4()) for _ in range(N)]
    args = [
        {
            "operation": OP,
            "scope": None,
            "key": "same-submission",
            "payload": {"report": 7},
            "job_id": job_id,
            "clock": _later(clock, 0),
            "actor": f"racer-{i}",
        }
        for i, job_id in enumerate(ids)
    ]

    with Children(db_settings_env, "defer", args) as children:
        outcomes = children.race()

    _no_surprises(outcomes)
    assert all("code" not in o for o in outcomes), outcomes
    returned = {o["job_id"] for o in outcomes}
    assert len(returned) == 1, outcomes
    (winner_id,) = returned
    assert winner_id in ids
    assert all((o["status"], o["epoch"]) == ("pending", 0) for o in outcomes), outcomes
    rows = list(Job.objects.all())
    assert [str(r.pk) for r in rows] == [winner_id]
    (row,) = rows
    assert (row.scope, row.operation, row.idempotency_key) == ("default", OP, "same-submission")
    assert row.proposal == submission({"report": 7}).proposal
    assert (row.status, row.fencing_epoch, row.attempts, row.owner_id) == ("pending", 0, 0, None)
    assert JobAttempt.objects.count() == 0


def test_concurrent_retries_of_one_failed_job_start_exactly_one_attempt(db_settings_env, clock):
    store = DurableJobStore(actor="parent", clock=clock)
    job = store.defer(OP, submission({"retry": 1}, key="retry-me"))
    lease = store.claim(job.pk)
    store.checkpoint(lease, '{"step": 3}')
    store.fail(lease, "boom")
    args = [
        {
            "job_id": str(job.pk),
            "scope": job.scope,
            "operation": OP,
            "key": job.idempotency_key,
            "clock": _later(clock, 60),
            "actor": f"racer-{i}",
        }
        for i in range(N)
    ]

    with Children(db_settings_env, "retry", args) as children:
        outcomes = children.race()

    winners, codes = _winners_and_codes(outcomes)
    assert len(winners) == 1, outcomes
    assert codes == {NOT_RECLAIMABLE: N - 1}, outcomes
    (winner,) = winners
    assert winner["epoch"] == 2
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.owner_id, row.fencing_epoch, row.attempts) == (
        JobStatus.RUNNING,
        winner["owner_id"],
        2,
        2,
    )
    assert (row.error, row.result, row.completed_at) == (None, None, None)
    assert row.checkpoint == '{"step": 3}'
    history = list(RetryHistory.objects.values_list("job_id", "previous_status", "previous_epoch"))
    assert history == [(job.pk, "failed", 1)]
    attempts = list(JobAttempt.objects.filter(job=row).values_list("epoch", "outcome"))
    assert attempts == [(1, "failed")]


def test_concurrent_claim_next_loops_claim_every_job_exactly_once(db_settings_env, clock):
    store = DurableJobStore(actor="parent", clock=clock)
    total = 200
    ids = {str(store.defer(OP, submission({"i": i}, key=f"batch-{i}")).pk) for i in range(total)}
    args = [{"limit": 5, "clock": _later(clock, 60), "actor": f"worker-{i}"} for i in range(N)]

    with Children(db_settings_env, "claim_next", args) as children:
        outcomes = children.race()

    winners, codes = _winners_and_codes(outcomes)
    assert not codes, outcomes
    claimed = [job_id for o in winners for job_id, _ in o["claimed"]]
    duplicates = [job_id for job_id, n in Counter(claimed).items() if n > 1]
    assert not duplicates, duplicates
    assert set(claimed) == ids
    assert {epoch for o in winners for _, epoch in o["claimed"]} == {1}
    assert all(len(o["claimed"]) <= 5 * o["batches"] for o in winners)
    owner_of = {job_id: o["owner_id"] for o in winners for job_id, _ in o["claimed"]}
    rows = Job.objects.values_list("id", "status", "owner_id", "fencing_epoch", "attempts")
    assert sorted((str(pk), s, own, e, a) for pk, s, own, e, a in rows) == sorted(
        (job_id, "running", owner_of[job_id], 1, 1) for job_id in ids
    )
    assert JobAttempt.objects.count() == 0
    # Every claimable row is gone: one more claim finds nothing and changes nothing.
    before = db_state()
    assert DurableJobStore(actor="late", clock=clock).claim_next(limit=5) == []
    assert db_state() == before
