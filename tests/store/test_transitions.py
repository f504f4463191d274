"""The state-transition rows of the §4 store contract, on every database.

Proves `claim`, `claim_next`, `heartbeat`, `checkpoint`, `progress`, `request_cancel`, `cancel`,
`complete`, `fail` and `request_retry`: each allowed transition writes exactly what the contract
says (epochs, attempts, timestamps, attempt history), and each refusal raises its code and leaves
the database as it was. Fenced writes are refused for an expired, reclaimed, foreign, stale-epoch
or forged lease.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import pytest

from django_durable_jobs.models import Job, JobAttempt
from django_durable_jobs.rules.errors import (
    CapacityReached,
    InputInvalid,
    LeaseLost,
    NotReclaimable,
)
from django_durable_jobs.rules.vocabulary import proposal_sha256
from django_durable_jobs.store import DurableJobStore, Lease
from tests.support import LEASE, T0, assert_refused, db_state, submission

pytestmark = pytest.mark.django_db(transaction=True)

OP = "trans.op"


def row(job_id) -> Job:
    return Job.objects.get(pk=job_id)


def pending(store: DurableJobStore, key: str = "k", op: str = OP, **kwargs) -> Job:
    return store.defer(op, submission({"key": key}, key=key), **kwargs)


def running(store: DurableJobStore, key: str = "k", op: str = OP) -> Lease:
    return store.insert(op, submission=submission({"key": key}, key=key))


def attempts_of(job_id) -> list[tuple[int, str]]:
    return list(
        JobAttempt.objects.filter(job_id=job_id).order_by("epoch").values_list("epoch", "outcome")
    )


def _ended(kind: str, store, clock) -> uuid.UUID:
    """Return the id of a job that ended as ``kind`` (failed, cancelled or expired)."""
    if kind == "cancelled-while-pending":
        job = pending(store)
        store.request_cancel(job.pk)
        return job.pk
    lease = running(store)
    store.checkpoint(lease, '{"page": 7}')
    if kind == "failed":
        store.fail(lease, "boom")
    elif kind == "cancelled":
        store.request_cancel(lease.job_id)
        store.cancel(lease)
    elif kind == "expired":
        clock.advance(LEASE)
    return lease.job_id


# -- claim -------------------------------------------------------------------------------------


def test_claim_takes_pending_work_at_epoch_one(store, clock):
    job = pending(store)
    clock.advance(2)
    lease = store.claim(job.pk)
    assert (lease.job_id, lease.owner_id, lease.epoch) == (job.pk, store.owner_id, 1)
    assert lease.expires_at == clock() + timedelta(seconds=LEASE)
    stored = row(job.pk)
    assert (stored.status, stored.fencing_epoch, stored.attempts) == ("running", 1, 1)
    assert stored.owner_id == store.owner_id and stored.claimed_by == "worker-a"
    assert stored.claimed_at == stored.heartbeat_at == clock()
    assert stored.created_at == T0  # never changes
    assert attempts_of(job.pk) == []


def test_claim_of_an_expired_lease_starts_a_new_attempt_and_keeps_the_evidence(store, rival, clock):
    first = running(store)
    store.checkpoint(first, '{"step": 3}')
    store.progress(first, 40)
    store.request_cancel(first.job_id)
    requested_at = clock()
    clock.advance(LEASE)
    second = rival.claim(first.job_id)
    assert (second.epoch, second.owner_id) == (2, rival.owner_id)
    stored = row(first.job_id)
    assert (stored.status, stored.fencing_epoch, stored.attempts) == ("running", 2, 2)
    assert stored.owner_id == rival.owner_id and stored.claimed_by == "worker-b"
    assert stored.checkpoint == '{"step": 3}' and stored.progress == 40
    assert stored.cancellation_requested_at == requested_at
    interrupted = JobAttempt.objects.get(job_id=first.job_id)
    assert (interrupted.epoch, interrupted.outcome) == (1, "interrupted")
    assert interrupted.owner_id == store.owner_id and interrupted.claimed_by == "worker-a"
    assert interrupted.started_at == T0 and interrupted.ended_at == clock()
    assert interrupted.error and interrupted.snapshot["fencing_epoch"] == 1


def test_claim_of_a_live_lease_is_refused(store, rival, clock):
    lease = running(store)
    clock.advance(LEASE - 1)
    assert_refused(NotReclaimable, "E_JOB_NOT_RECLAIMABLE", lambda: rival.claim(lease.job_id))
    assert_refused(NotReclaimable, "E_JOB_NOT_RECLAIMABLE", lambda: store.claim(lease.job_id))


def test_claim_of_a_terminal_job_is_refused(store, rival):
    ended = {}
    for end in ("complete", "fail", "cancel"):
        lease = running(store, end)
        store.request_cancel(lease.job_id)
        getattr(store, end)(lease, *(["boom"] if end == "fail" else []))
        ended[end] = lease.job_id
    ended["cancelled-while-pending"] = pending(store, "p").pk
    store.request_cancel(ended["cancelled-while-pending"])
    for job_id in ended.values():
        error = assert_refused(
            NotReclaimable, "E_JOB_NOT_RECLAIMABLE", lambda j=job_id: rival.claim(j)
        )
        assert "retry" in error.message  # says what to do instead


LEGACY_OWNERSHIP = [
    {"owner_id": None, "lease_expires_at": T0 - timedelta(hours=1)},  # expired, but whose?
    {"owner_id": "someone", "lease_expires_at": None},
    {"owner_id": None, "lease_expires_at": None},
]


def test_claim_of_a_hand_made_legacy_running_row_is_refused(store):
    for n, fields in enumerate(LEGACY_OWNERSHIP):
        legacy = Job.objects.create(
            operation=OP,
            status="running",
            scope="default",
            idempotency_key=f"legacy-{n}",
            proposal="{}",
            proposal_hash=proposal_sha256("{}"),
            created_at=T0 - timedelta(days=30),
            run_after=T0 - timedelta(days=30),
            fencing_epoch=4,
            attempts=4,
            **fields,
        )
        assert store.get(legacy.pk).ownership == "legacy-unknown"
        assert_refused(NotReclaimable, "E_JOB_NOT_RECLAIMABLE", lambda j=legacy.pk: store.claim(j))
    assert store.claim_next(limit=10, resume_expired=[OP]) == []


PROPOSAL_DAMAGE = [
    {"proposal_hash": "0" * 64},
    # Rewritten outside the app: the store never checked this text (no proposal_checked).
    {"proposal": "{oops", "proposal_hash": proposal_sha256("{oops"), "proposal_checked": None},
    {"proposal_checked": None},
    {"proposal": None},
]


def test_claim_of_a_defective_pending_row_is_refused(store):
    for n, damage in enumerate(PROPOSAL_DAMAGE):
        job = pending(store, str(n))
        Job.objects.filter(pk=job.pk).update(**damage)
        error = assert_refused(
            NotReclaimable, "E_JOB_NOT_RECLAIMABLE", lambda j=job.pk: store.claim(j)
        )
        assert "proposal" in error.message, damage
    assert store.claim_next(limit=10, resume_expired=[]) == []


def test_claim_of_an_unknown_or_out_of_scope_id_is_refused(clock):
    mine = DurableJobStore(scope="tenant-a", clock=clock)
    theirs = DurableJobStore(scope="tenant-b", clock=clock).defer(OP, submission(key="k"))
    for job_id in (uuid.uuid4(), theirs.pk):
        assert_refused(NotReclaimable, "E_JOB_NOT_RECLAIMABLE", lambda j=job_id: mine.claim(j))


def test_claim_at_max_running_is_refused_with_capacity_reached(store, clock):
    running(store, "busy")
    job = pending(store, "waiting")
    assert_refused(
        CapacityReached, "E_JOB_CAPACITY_REACHED", lambda: store.claim(job.pk, max_running=1)
    )
    assert store.claim(job.pk, max_running=2).epoch == 1


# -- claim_next --------------------------------------------------------------------------------


def test_claim_next_orders_by_priority_then_run_after_then_created_at(store, clock):
    ago = lambda s: T0 - timedelta(seconds=s)  # noqa: E731
    plan = [("low-old", 0, ago(30)), ("high-late", 5, ago(10)), ("high-early", 5, ago(20))]
    plan.append(("low-old-later", 0, ago(30)))  # same priority and run_after, created later
    ids = {}
    for key, priority, run_after in plan:
        ids[key] = pending(store, key, priority=priority, run_after=run_after).pk
        clock.advance(1)
    expected = [ids[k] for k in ("high-early", "high-late", "low-old", "low-old-later")]
    one_by_one = [store.claim_next(limit=1, resume_expired=[])[0].job_id for _ in plan]
    assert one_by_one == expected
    assert store.claim_next(resume_expired=[]) == []


def test_claim_next_returns_a_batch_in_claim_order(store, clock):
    ids = [pending(store, str(p), priority=p).pk for p in (1, 3, 2)]
    leases = store.claim_next(limit=10, resume_expired=[])
    assert [lease.job_id for lease in leases] == [ids[1], ids[2], ids[0]]
    assert all(lease.epoch == 1 and lease.owner_id == store.owner_id for lease in leases)


def test_claim_next_leaves_future_work_until_the_clock_reaches_it(store, clock):
    job = pending(store, run_after=T0 + timedelta(seconds=60))
    clock.advance(59)
    assert store.claim_next(resume_expired=[]) == []
    assert row(job.pk).status == "pending"
    clock.advance(1)
    assert [lease.job_id for lease in store.claim_next(resume_expired=[])] == [job.pk]


@pytest.mark.parametrize(
    "filters, wanted",
    [
        ({"operations": ["trans.b"]}, {"b-default"}),
        ({"operations": "trans.b"}, {"b-default"}),
        ({"queues": ["reports"]}, {"a-reports"}),
        ({"operations": ["trans.a"], "queues": ["default"]}, {"a-default"}),
        ({"operations": ["trans.a", "trans.b"]}, {"a-default", "a-reports", "b-default"}),
    ],
)
def test_claim_next_filters_by_operation_and_queue(store, filters, wanted):
    ids = {
        "a-default": pending(store, "1", op="trans.a").pk,
        "a-reports": pending(store, "2", op="trans.a", queue="reports").pk,
        "b-default": pending(store, "3", op="trans.b").pk,
    }
    leases = store.claim_next(limit=10, resume_expired=[], **filters)
    assert {lease.job_id for lease in leases} == {ids[k] for k in wanted}
    untouched = set(ids) - wanted
    assert {row(ids[k]).status for k in untouched} <= {"pending"}


def test_claim_next_claims_at_most_limit_jobs(store):
    ids = [pending(store, str(n)).pk for n in range(3)]
    assert len(store.claim_next(limit=2, resume_expired=[])) == 2
    assert sorted(row(i).status for i in ids) == ["pending", "running", "running"]


def test_claim_next_never_takes_a_live_lease(store, rival, clock):
    running(store)
    clock.advance(LEASE - 1)
    assert rival.claim_next(limit=5, resume_expired=[OP]) == []


def test_claim_next_resumes_expired_leases_only_of_named_operations(store, rival, clock):
    resumed = running(store, "r", op="trans.resume")
    held = running(store, "h", op="trans.hold")
    clock.advance(LEASE)
    before_held = row(held.job_id)
    assert rival.claim_next(limit=5, resume_expired=[]) == []
    leases = rival.claim_next(limit=5, resume_expired=["trans.resume"])
    assert [(lease.job_id, lease.epoch) for lease in leases] == [(resumed.job_id, 2)]
    assert attempts_of(resumed.job_id) == [(1, "interrupted")]
    after_held = row(held.job_id)
    assert (after_held.owner_id, after_held.fencing_epoch) == (store.owner_id, 1)
    assert after_held.lease_expires_at == before_held.lease_expires_at
    assert attempts_of(held.job_id) == []


@pytest.mark.parametrize(
    "kind, outcome",
    [("failed", "failed"), ("cancelled", "cancelled"), ("expired", "interrupted")],
)
def test_claim_next_runs_a_retry_requested_job_as_a_new_attempt(store, rival, clock, kind, outcome):
    job_id = _ended(kind, store, clock)
    clock.advance(5)
    assert store.request_retry(job_id) is True
    (retry,) = rival.claim_next(resume_expired=[])  # not resumable: claimed for the request
    assert (retry.job_id, retry.epoch, retry.owner_id) == (job_id, 2, rival.owner_id)
    stored = row(job_id)
    assert (stored.status, stored.fencing_epoch, stored.attempts) == ("running", 2, 2)
    assert stored.result is None and stored.error is None and stored.completed_at is None
    assert stored.retry_requested_at is None and stored.cancellation_requested_at is None
    assert stored.checkpoint == '{"page": 7}'
    assert attempts_of(job_id) == [(1, outcome)]  # one row per ended attempt, none invented


def test_claim_next_honours_max_running(store, clock):
    running(store, "busy")
    ids = []
    for n in range(3):
        clock.advance(1)
        ids.append(pending(store, str(n)).pk)
    leases = store.claim_next(limit=5, max_running=2, resume_expired=[])
    assert [lease.job_id for lease in leases] == ids[:1]
    assert store.claim_next(limit=5, max_running=2, resume_expired=[]) == []
    assert Job.objects.filter(status="running").count() == 2


def test_claim_next_at_capacity_for_one_operation_still_claims_another(store):
    """A full operation at the head of the queue must not starve other operations' work."""
    running(store, "busy", op="trans.full")
    pending(store, "waiting", op="trans.full", priority=10)
    other = pending(store, "other", op="trans.free", priority=0)
    leases = store.claim_next(limit=1, max_running=1, resume_expired=[])
    assert [lease.job_id for lease in leases] == [other.pk]


def test_claim_next_skips_a_defective_pending_row_and_claims_the_next(store):
    """A defective row at the head of the queue is not claimable and must not block others."""
    bad = pending(store, "bad", priority=10)
    Job.objects.filter(pk=bad.pk).update(proposal_hash="0" * 64)
    good = pending(store, "good", priority=0)
    leases = store.claim_next(limit=1, resume_expired=[])
    assert [lease.job_id for lease in leases] == [good.pk]
    assert row(bad.pk).status == "pending"


def test_claim_next_reclaims_an_expired_job_at_max_running_one(store, rival, clock):
    """Reclaiming an expired attempt replaces it; the expired row does not occupy its own slot."""
    lease = running(store)
    clock.advance(LEASE)
    second = rival.claim(lease.job_id, max_running=1)  # claim() excludes the row it replaces
    clock.advance(LEASE)
    leases = store.claim_next(max_running=1, resume_expired=[OP])
    assert [(claimed.job_id, claimed.epoch) for claimed in leases] == [(second.job_id, 3)]


# -- heartbeat, checkpoint, progress ----------------------------------------------------------


def test_heartbeat_renews_the_lease_by_the_stores_lease_length(store, clock):
    lease = running(store)
    clock.advance(7)
    seen = store.heartbeat(lease)
    assert seen.lease_expires_at == clock() + timedelta(seconds=LEASE)
    assert seen.heartbeat_at == clock() and seen.ownership == "current"
    stored = row(lease.job_id)
    assert stored.lease_expires_at == T0 + timedelta(seconds=7 + LEASE)
    assert (stored.fencing_epoch, stored.attempts) == (1, 1)
    clock.advance(LEASE - 1)  # past the original expiry, within the renewed one
    assert store.heartbeat(lease).status == "running"


def test_heartbeat_shows_the_owner_a_cancellation_request(store, rival, clock):
    lease = running(store)
    assert store.heartbeat(lease).cancellation_requested_at is None
    clock.advance(1)
    assert rival.request_cancel(lease.job_id) is True
    clock.advance(1)
    assert store.heartbeat(lease).cancellation_requested_at == T0 + timedelta(seconds=1)


def test_checkpoint_is_fenced_and_does_not_renew_the_lease(store, clock):
    lease = running(store)
    clock.advance(4)
    store.checkpoint(lease, '{"cursor": "é", "n": 2}')
    stored = row(lease.job_id)
    assert stored.checkpoint == '{"cursor": "é", "n": 2}' and stored.checkpoint_at == clock()
    assert stored.lease_expires_at == lease.expires_at and stored.heartbeat_at == T0


def test_progress_is_clamped_to_0_100_and_does_not_renew_the_lease(store, clock):
    lease = running(store)
    for given, stored in ((42.5, 42.5), (-5, 0.0), (250, 100.0), (0, 0.0), (100, 100.0)):
        clock.advance(1)
        store.progress(lease, given)
        after = row(lease.job_id)
        assert after.progress == stored, given
        assert after.lease_expires_at == lease.expires_at


def test_progress_records_the_heartbeat_time(store, clock):
    """SPEC §2: heartbeat_at is the "last heartbeat/progress/claim time"."""
    lease = running(store)
    clock.advance(3)
    store.progress(lease, 10)
    assert row(lease.job_id).heartbeat_at == clock()


# -- fenced writes refuse a lease that is not current -----------------------------------------


def _lost_lease(kind: str, store, rival, clock) -> tuple[DurableJobStore, Lease]:
    """Return (caller, lease) where ``lease`` is no longer the job's current lease."""
    lease = running(store)
    store.request_cancel(lease.job_id)  # so a refused cancel() is about the lease, not the request
    if kind == "expired-at-boundary":
        clock.advance(LEASE)
    elif kind == "long-expired":
        clock.advance(LEASE * 100)
    elif kind == "reclaimed-by-rival":
        clock.advance(LEASE)
        rival.claim(lease.job_id)
    elif kind == "other-store-instance":
        return rival, lease
    elif kind == "forged-owner":  # a rival copies the lease but puts its own owner id in it
        return rival, dataclasses.replace(lease, owner_id=rival.owner_id)
    elif kind == "stale-epoch":
        clock.advance(LEASE)
        current = store.claim(lease.job_id)
        forged = Lease(
            lease.job_id, store.owner_id, current.epoch - 1, clock() + timedelta(hours=1)
        )
        return store, forged
    elif kind == "forged-expiry":
        clock.advance(LEASE)
        return store, dataclasses.replace(lease, expires_at=clock() + timedelta(hours=1))
    elif kind == "already-ended":
        store.complete(lease, 1)
    return store, lease


FENCED_CALLS = {
    "heartbeat": lambda s, lease: s.heartbeat(lease),
    "checkpoint": lambda s, lease: s.checkpoint(lease, '{"x": 1}'),
    "progress": lambda s, lease: s.progress(lease, 50),
    "complete": lambda s, lease: s.complete(lease, {"ok": True}),
    "fail": lambda s, lease: s.fail(lease, "boom"),
    "cancel": lambda s, lease: s.cancel(lease),
}
LOST_KINDS = [
    "expired-at-boundary",
    "long-expired",
    "reclaimed-by-rival",
    "other-store-instance",
    "forged-owner",
    "stale-epoch",
    "forged-expiry",
    "already-ended",
]


@pytest.mark.parametrize("kind", LOST_KINDS)
def test_every_fenced_write_with_a_lease_that_is_not_current_is_refused(store, rival, clock, kind):
    caller, lease = _lost_lease(kind, store, rival, clock)
    for method, call in FENCED_CALLS.items():
        error = assert_refused(LeaseLost, "E_JOB_LEASE_LOST", lambda call=call: call(caller, lease))
        assert str(lease.job_id) in error.message, method


# -- request_cancel and cancel -----------------------------------------------------------------


def test_request_cancel_of_pending_work_cancels_it_at_once(store, clock):
    job = pending(store)
    clock.advance(2)
    assert store.request_cancel(job.pk) is True
    stored = row(job.pk)
    assert (stored.status, stored.completed_at) == ("cancelled", clock())
    assert stored.owner_id is None and stored.fencing_epoch == 0
    assert store.claim_next(resume_expired=[]) == []


def test_request_cancel_of_running_work_records_the_first_request_only(store, rival, clock):
    lease = running(store)
    clock.advance(2)
    assert rival.request_cancel(lease.job_id) is True
    first = row(lease.job_id)
    assert (first.status, first.cancellation_requested_at) == ("running", clock())
    assert first.owner_id == store.owner_id and first.completed_at is None
    clock.advance(5)
    before = db_state()
    assert rival.request_cancel(str(lease.job_id)) is True
    assert db_state() == before  # first request wins: timestamp unchanged


@pytest.mark.parametrize("end", ["complete", "fail"])
def test_request_cancel_of_a_terminal_job_returns_false_and_keeps_its_result(store, end):
    lease = running(store)
    if end == "complete":
        store.complete(lease, {"total": 3})
    else:
        store.fail(lease, "boom")
    before = db_state()
    assert store.request_cancel(lease.job_id) is False
    assert db_state() == before
    assert row(lease.job_id).status == {"complete": "complete", "fail": "failed"}[end]


def test_request_cancel_of_a_missing_or_out_of_scope_job_returns_false(clock):
    mine = DurableJobStore(scope="tenant-a", clock=clock)
    theirs = DurableJobStore(scope="tenant-b", clock=clock).defer(OP, submission(key="k"))
    before = db_state()
    assert mine.request_cancel(uuid.uuid4()) is False
    assert mine.request_cancel(theirs.pk) is False
    assert db_state() == before


def test_cancel_acknowledges_a_request_and_records_the_attempt(store, rival, clock):
    lease = running(store)
    rival.request_cancel(lease.job_id)
    clock.advance(3)
    store.cancel(lease)
    stored = row(lease.job_id)
    assert (stored.status, stored.completed_at) == ("cancelled", clock())
    attempt = JobAttempt.objects.get(job_id=lease.job_id)
    assert (attempt.epoch, attempt.outcome, attempt.owner_id) == (1, "cancelled", store.owner_id)
    assert attempt.ended_at == clock() and attempt.snapshot["status"] == "cancelled"


def test_cancel_without_a_request_is_refused(store):
    lease = running(store)
    refusal = assert_refused(InputInvalid, "E_JOB_INPUT_INVALID", lambda: store.cancel(lease))
    assert "request_cancel" in refusal.message
    assert row(lease.job_id).status == "running"


# -- complete and fail -------------------------------------------------------------------------


def test_complete_records_the_result_as_json_text_and_the_attempt(store, clock):
    lease = running(store)
    store.progress(lease, 30)
    clock.advance(4)
    store.complete(lease, {"b": [1, "ü"], "a": None})
    stored = row(lease.job_id)
    assert (stored.status, stored.progress, stored.completed_at) == ("complete", 100.0, clock())
    assert isinstance(stored.result, str) and stored.result == '{"a":null,"b":[1,"ü"]}'
    attempt = JobAttempt.objects.get(job_id=lease.job_id)
    assert (attempt.epoch, attempt.outcome, attempt.error) == (1, "complete", None)
    assert attempt.started_at == T0 and attempt.ended_at == clock()


def test_complete_without_a_result_stores_json_null(store):
    lease = running(store)
    store.complete(lease)
    assert row(lease.job_id).result == "null"


def test_a_cancellation_request_does_not_block_completion(store, rival):
    lease = running(store)
    rival.request_cancel(lease.job_id)
    store.complete(lease, "finished anyway")
    stored = row(lease.job_id)
    assert (stored.status, stored.result) == ("complete", '"finished anyway"')
    assert attempts_of(lease.job_id) == [(1, "complete")]


@pytest.mark.parametrize(
    "error, message",
    [("disk full", "disk full"), (ValueError("bad row 7"), "ValueError: bad row 7")],
)
def test_fail_records_the_error_and_the_attempt(store, clock, error, message):
    lease = running(store)
    clock.advance(2)
    store.fail(lease, error)
    stored = row(lease.job_id)
    assert (stored.status, stored.error, stored.completed_at) == ("failed", message, clock())
    attempt = JobAttempt.objects.get(job_id=lease.job_id)
    assert (attempt.outcome, attempt.error, attempt.epoch) == ("failed", message, 1)


# -- request_retry -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["failed", "cancelled", "cancelled-while-pending", "expired"])
def test_request_retry_of_an_ended_job_records_the_request(store, clock, kind):
    job_id = _ended(kind, store, clock)
    clock.advance(3)
    status = row(job_id).status
    assert store.request_retry(job_id) is True
    stored = row(job_id)
    assert stored.retry_requested_at == clock() and stored.status == status
    clock.advance(3)
    assert store.request_retry(job_id) is True
    assert row(job_id).retry_requested_at == stored.retry_requested_at  # first request kept


def test_request_retry_of_a_complete_job_is_refused(store):
    lease = running(store)
    store.complete(lease, 1)
    refusal = assert_refused(
        NotReclaimable, "E_JOB_NOT_RECLAIMABLE", lambda: store.request_retry(lease.job_id)
    )
    assert "never reopened" in refusal.message


@pytest.mark.parametrize("kind", ["pending", "live", "missing"])
def test_request_retry_of_unended_or_missing_work_returns_false(store, clock, kind):
    job_id = {
        "pending": lambda: pending(store).pk,
        "live": lambda: running(store).job_id,
        "missing": uuid.uuid4,
    }[kind]()
    clock.advance(LEASE - 1)
    before = db_state()
    assert store.request_retry(job_id) is False
    assert db_state() == before
