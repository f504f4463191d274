"""The submission and read rows of the §4 store contract, on every database.

Proves `insert`, `find_submission`, `defer`, `get`, `list` and `purge_older_than` do what the
table says, that identical submissions coalesce while different bytes are refused, that a scoped
store neither sees nor writes another scope, that capacity is checked after coalescing, that
transactional enqueue lives and dies with the caller's transaction, and that constructing a store
touches nothing. Every refusal asserts its code and that the database did not change.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.models import Job, JobAttempt
from django_durable_jobs.rules.errors import (
    CapacityReached,
    IdempotencyConflict,
    InputInvalid,
    ScopeMismatch,
    TransactionOwned,
)
from django_durable_jobs.rules.vocabulary import proposal_sha256
from django_durable_jobs.store import DurableJobStore, Submission
from tests.support import LEASE, T0, FakeClock, assert_refused, db_state, submission
from tests.testapp.models import DomainRow

pytestmark = pytest.mark.django_db(transaction=True)

OP = "subs.op"


@pytest.fixture
def store(clock: FakeClock) -> DurableJobStore:
    """Override the conftest ``store``: the claimed_by assertions here expect "submitter"."""
    return DurableJobStore(actor="submitter", lease_seconds=LEASE, clock=clock)


# -- constructing a store ----------------------------------------------------------------------


def test_constructing_a_store_runs_no_query_and_writes_nothing(store):
    store.defer(OP, submission(key="existing"))
    before = db_state()
    with CaptureQueriesContext(connection) as queries:
        built = DurableJobStore(scope="tenant", actor="someone", lease_seconds=5, clock=FakeClock())
        DurableJobStore()
    assert len(queries) == 0
    assert db_state() == before
    uuid.UUID(built.owner_id)  # a real UUID string


def test_each_store_instance_has_its_own_owner_id():
    assert DurableJobStore().owner_id != DurableJobStore().owner_id


# -- insert ----------------------------------------------------------------------------------


def test_insert_creates_a_running_job_owned_by_the_caller_at_epoch_one(store, clock):
    lease = store.insert(OP, submission=submission({"n": 1}, key="k1"))
    assert lease.epoch == 1 and lease.owner_id == store.owner_id
    assert lease.expires_at == T0 + timedelta(seconds=LEASE)
    row = Job.objects.get(pk=lease.job_id)
    assert (row.status, row.fencing_epoch, row.attempts) == ("running", 1, 1)
    assert row.owner_id == store.owner_id and row.claimed_by == "submitter"
    assert (row.scope, row.operation, row.idempotency_key) == ("default", OP, "k1")
    assert row.proposal == '{"n":1}' and row.proposal_hash == proposal_sha256('{"n":1}')
    assert row.created_at == row.heartbeat_at == row.claimed_at == T0
    assert row.lease_expires_at == lease.expires_at
    assert not JobAttempt.objects.exists()


def test_insert_without_submission_uses_an_empty_proposal_and_the_job_id_as_key(store):
    first = store.insert(OP)
    second = store.insert(OP)
    assert first.job_id != second.job_id  # no key: every call is new work
    row = Job.objects.get(pk=first.job_id)
    assert row.proposal == "{}" and row.idempotency_key == str(first.job_id)


def test_insert_with_explicit_job_id_uses_it(store):
    wanted = uuid.uuid4()
    lease = store.insert(OP, submission=submission(key="k"), job_id=str(wanted))
    assert lease.job_id == wanted
    assert Job.objects.filter(pk=wanted, idempotency_key="k").exists()


def test_identical_resubmission_returns_none_and_claims_nothing(store, clock):
    store.insert(OP, submission=submission({"n": 1}, key="k1"))
    other = DurableJobStore(actor="other", lease_seconds=LEASE, clock=clock)
    before = db_state()
    clock.advance(3)
    assert store.insert(OP, submission=submission({"n": 1}, key="k1")) is None
    assert other.insert(OP, submission=submission({"n": 1}, key="k1")) is None
    assert db_state() == before  # same owner, epoch 1, attempts 1, no new row


def test_resubmission_with_different_bytes_is_an_idempotency_conflict(store):
    store.insert(OP, submission=submission({"n": 1}, key="k1"))
    refusal = assert_refused(
        IdempotencyConflict,
        "E_JOB_IDEMPOTENCY_CONFLICT",
        lambda: store.insert(OP, submission=submission({"n": 2}, key="k1")),
    )
    assert "k1" in refusal.message


def test_same_json_value_with_different_bytes_is_a_conflict(store):
    """Identity is the exact proposal text, not its parsed value."""
    store.insert(OP, submission=Submission(None, "k1", '{"a":1,"b":2}'))
    assert_refused(
        IdempotencyConflict,
        "E_JOB_IDEMPOTENCY_CONFLICT",
        lambda: store.insert(OP, submission=Submission(None, "k1", '{"b":2,"a":1}')),
    )


@pytest.mark.parametrize(
    "second",
    [
        pytest.param((OP + ".other", None), id="other-operation"),
        pytest.param((OP, "tenant-b"), id="other-scope"),
    ],
)
def test_same_key_in_another_operation_or_scope_is_a_separate_job(store, second):
    op, scope = second
    first = store.insert(OP, submission=submission({"n": 1}, key="k"))
    other = store.insert(op, submission=submission({"n": 2}, key="k", scope=scope))
    assert other is not None and other.job_id != first.job_id
    assert Job.objects.count() == 2


def test_scoped_store_refuses_to_insert_for_another_scope(clock):
    scoped = DurableJobStore(scope="tenant-a", lease_seconds=LEASE, clock=clock)
    assert_refused(
        ScopeMismatch,
        "E_JOB_SCOPE_MISMATCH",
        lambda: scoped.insert(OP, submission=submission(key="k", scope="tenant-b")),
    )
    lease = scoped.insert(OP, submission=submission(key="k"))
    assert Job.objects.get(pk=lease.job_id).scope == "tenant-a"


def test_unscoped_store_writes_the_default_scope(store):
    lease = store.insert(OP, submission=submission(key="k"))
    assert Job.objects.get(pk=lease.job_id).scope == "default"


def test_insert_at_max_running_is_refused_with_capacity_reached(store):
    store.insert(OP, submission=submission({"n": 1}, key="a"), max_running=1)
    assert_refused(
        CapacityReached,
        "E_JOB_CAPACITY_REACHED",
        lambda: store.insert(OP, submission=submission({"n": 2}, key="b"), max_running=1),
    )
    assert Job.objects.count() == 1


def test_capacity_is_checked_after_coalescing(store):
    store.insert(OP, submission=submission({"n": 1}, key="a"), max_running=1)
    before = db_state()
    assert store.insert(OP, submission=submission({"n": 1}, key="a"), max_running=1) is None
    assert db_state() == before


def test_capacity_counts_only_running_jobs_of_the_same_operation(store):
    first = store.insert(OP, submission=submission(key="a"), max_running=1)
    assert store.insert(OP + ".b", submission=submission(key="b"), max_running=1) is not None
    store.complete(first, {"done": True})
    assert store.insert(OP, submission=submission({"n": 3}, key="c"), max_running=1) is not None


# -- find_submission ---------------------------------------------------------------------------


def test_find_submission_returns_the_identical_job_and_writes_nothing(store):
    job = store.defer(OP, submission({"n": 1}, key="k"))
    before = db_state()
    with CaptureQueriesContext(connection) as queries:
        found = store.find_submission(OP, submission({"n": 1}, key="k"))
    assert found.pk == job.pk and found.ownership == "unclaimed"
    assert db_state() == before
    assert not any(
        q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")) for q in queries
    )


@pytest.mark.parametrize(
    "probe",
    [
        pytest.param(("other-key", {"n": 1}), id="unknown-key"),
        pytest.param((None, {"n": 1}), id="no-key"),
    ],
)
def test_find_submission_returns_none_when_nothing_matches(store, probe):
    store.defer(OP, submission({"n": 1}, key="k"))
    key, payload = probe
    assert store.find_submission(OP, submission(payload, key=key)) is None


def test_find_submission_with_different_bytes_is_a_conflict(store):
    store.defer(OP, submission({"n": 1}, key="k"))
    assert_refused(
        IdempotencyConflict,
        "E_JOB_IDEMPOTENCY_CONFLICT",
        lambda: store.find_submission(OP, submission({"n": 2}, key="k")),
    )


def test_find_submission_of_a_scoped_store_refuses_another_scope(clock):
    scoped = DurableJobStore(scope="tenant-a", clock=clock)
    with pytest.raises(ScopeMismatch) as caught:
        scoped.find_submission(OP, submission(key="k", scope="tenant-b"))
    assert caught.value.code == "E_JOB_SCOPE_MISMATCH"


# -- defer -----------------------------------------------------------------------------------


def test_defer_persists_pending_work_with_no_owner(store):
    job = store.defer(OP, submission({"n": 1}, key="k"))
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.fencing_epoch, row.attempts) == ("pending", 0, 0)
    assert row.owner_id is None and row.lease_expires_at is None and row.claimed_at is None
    assert (row.queue, row.priority, row.run_after, row.created_at) == ("default", 0, T0, T0)
    assert job.ownership == "unclaimed" and job.diagnostic_error is None


def test_defer_stores_queue_priority_and_run_after(store):
    later = T0 + timedelta(hours=2)
    job = store.defer(OP, submission(key="k"), queue="reports", priority=-7, run_after=later)
    row = Job.objects.get(pk=job.pk)
    assert (row.queue, row.priority, row.run_after) == ("reports", -7, later)


def test_defer_of_an_identical_submission_returns_the_same_row_unchanged(store, clock):
    job = store.defer(OP, submission({"n": 1}, key="k"))
    before = db_state()
    clock.advance(60)
    again = store.defer(OP, submission({"n": 1}, key="k"), queue="other", priority=50)
    assert again.pk == job.pk
    assert (again.queue, again.priority, again.created_at) == ("default", 0, T0)
    assert db_state() == before


def test_defer_of_a_running_job_returns_it_without_restarting_it(store):
    lease = store.insert(OP, submission=submission({"n": 1}, key="k"))
    before = db_state()
    again = store.defer(OP, submission({"n": 1}, key="k"))
    assert again.pk == lease.job_id and again.status == "running"
    assert again.ownership == "current"
    assert db_state() == before


def test_defer_with_different_bytes_is_an_idempotency_conflict(store):
    store.defer(OP, submission({"n": 1}, key="k"))
    assert_refused(
        IdempotencyConflict,
        "E_JOB_IDEMPOTENCY_CONFLICT",
        lambda: store.defer(OP, submission({"n": 2}, key="k")),
    )


def test_defer_of_a_scoped_store_refuses_another_scope(clock):
    scoped = DurableJobStore(scope="tenant-a", clock=clock)
    assert_refused(
        ScopeMismatch,
        "E_JOB_SCOPE_MISMATCH",
        lambda: scoped.defer(OP, submission(key="k", scope="tenant-b")),
    )


def test_defer_in_caller_transaction_exists_once_the_caller_commits(store):
    with transaction.atomic():
        job = store.defer(OP, submission(key="k"), in_caller_transaction=True)
        DomainRow.objects.create(job_id=job.pk, value="with the job")
    assert Job.objects.filter(pk=job.pk, status="pending").exists()
    assert DomainRow.objects.filter(job_id=job.pk).exists()


def test_defer_in_caller_transaction_vanishes_when_the_caller_rolls_back(store):
    class Abandon(Exception):
        pass

    before = db_state()
    with pytest.raises(Abandon):
        with transaction.atomic():
            job = store.defer(OP, submission(key="k"), in_caller_transaction=True)
            assert Job.objects.filter(pk=job.pk).exists()  # visible inside the transaction
            raise Abandon
    assert db_state() == before
    assert not Job.objects.filter(pk=job.pk).exists()


def test_defer_in_caller_transaction_without_an_atomic_block_is_refused(store):
    refusal = assert_refused(
        InputInvalid,
        "E_JOB_INPUT_INVALID",
        lambda: store.defer(OP, submission(key="k"), in_caller_transaction=True),
    )
    assert "atomic" in refusal.message


def test_defer_inside_a_caller_atomic_block_without_the_flag_is_transaction_owned(store):
    with transaction.atomic():
        DomainRow.objects.create(job_id=uuid.uuid4(), value="caller's own write")
        with pytest.raises(TransactionOwned) as caught:
            store.defer(OP, submission(key="k"))
        assert caught.value.code == "E_JOB_TRANSACTION_OWNED"
    # The caller's transaction was left alone and committed; no job was written.
    assert DomainRow.objects.count() == 1 and not Job.objects.exists()


# -- get ---------------------------------------------------------------------------------------


def test_get_returns_the_row_with_its_ownership(store, clock):
    lease = store.insert(OP, submission=submission(key="k"))
    assert store.get(lease.job_id).ownership == "current"
    assert store.get(str(lease.job_id)).pk == lease.job_id
    clock.advance(LEASE)
    assert store.get(lease.job_id).ownership == "expired"


def test_get_of_an_unknown_id_returns_none(store):
    assert store.get(uuid.uuid4()) is None


def test_get_reports_a_defective_pending_row_without_hiding_it(store):
    job = store.defer(OP, submission(key="k"))
    Job.objects.filter(pk=job.pk).update(proposal_hash="0" * 64)
    seen = store.get(job.pk)
    assert seen.ownership == "legacy-unknown"
    assert "SHA-256" in seen.diagnostic_error


def test_scoped_store_cannot_see_another_scopes_job_but_unscoped_sees_all(clock):
    a = DurableJobStore(scope="tenant-a", clock=clock)
    b = DurableJobStore(scope="tenant-b", clock=clock)
    operator = DurableJobStore(clock=clock)
    job_a = a.defer(OP, submission(key="k"))
    job_b = b.defer(OP, submission(key="k"))
    assert b.get(job_a.pk) is None and a.get(job_b.pk) is None
    assert a.get(job_a.pk).pk == job_a.pk
    assert {operator.get(job_a.pk).scope, operator.get(job_b.pk).scope} == {
        "tenant-a",
        "tenant-b",
    }


# -- list --------------------------------------------------------------------------------------


def test_list_returns_jobs_in_scope_oldest_first(clock):
    a = DurableJobStore(scope="tenant-a", clock=clock)
    b = DurableJobStore(scope="tenant-b", clock=clock)
    operator = DurableJobStore(clock=clock)
    first = a.defer(OP, submission(key="1"))
    clock.advance(1)
    other = b.defer(OP, submission(key="1"))
    clock.advance(1)
    second = a.defer(OP, submission(key="2"))
    assert [j.pk for j in a.list()] == [first.pk, second.pk]
    assert [j.pk for j in b.list()] == [other.pk]
    assert [j.pk for j in operator.list()] == [first.pk, other.pk, second.pk]
    assert {j.ownership for j in operator.list()} == {"unclaimed"}


@pytest.mark.parametrize(
    "status, expected",
    [
        ("pending", ["p"]),
        ("running", ["r"]),
        ("complete", ["c"]),
        ("failed", []),
        (None, list("prc")),
    ],
)
def test_list_filters_by_status(store, status, expected):
    made = {"p": store.defer(OP, submission(key="p")).pk}
    made["r"] = store.insert(OP, submission=submission(key="r")).job_id
    done = store.insert(OP, submission=submission(key="c"))
    store.complete(done)
    made["c"] = done.job_id
    assert {j.pk for j in store.list(status)} == {made[k] for k in expected}


def test_list_with_an_unknown_status_is_refused(store):
    store.defer(OP, submission(key="k"))
    refusal = assert_refused(InputInvalid, "E_JOB_INPUT_INVALID", lambda: store.list("done"))
    assert "pending" in refusal.message  # says which statuses exist


# -- purge_older_than --------------------------------------------------------------------------


def test_purge_older_than_deletes_nothing_even_for_very_old_terminal_rows(store, clock):
    for key, end in (("c", "complete"), ("f", "fail")):
        lease = store.insert(OP, submission=submission(key=key))
        if end == "complete":
            store.complete(lease)
        else:
            store.fail(lease, "boom")
    store.request_cancel(store.defer(OP, submission(key="x")).pk)
    clock.advance(100 * 365 * 24 * 3600)
    before = db_state()
    assert Job.objects.count() == 3 and JobAttempt.objects.count() == 2
    assert store.purge_older_than(clock() + timedelta(days=1)) == 0
    assert db_state() == before
