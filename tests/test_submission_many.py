"""``submit_many()`` and ``DurableJobStore.defer_many()`` (SPEC §5 "Submitting"), on every database.

Proves: one job per payload, in order, in a few statements; an identical earlier submission
returns its job unchanged; one conflicting row refuses the whole call and writes nothing (the
whole database is compared); a key given twice in one call returns one job twice, or is refused
when its payloads differ; the call joins the caller's transaction (and a refusal inside it undoes
only the call); bad input is refused before any SQL; calls larger than one statement hold; two
processes racing the same keys leave one row per key.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_durable_jobs import submit, submit_many
from django_durable_jobs.models import Job
from django_durable_jobs.rules.errors import (
    IdempotencyConflict,
    InputInvalid,
    ScopeMismatch,
    TransactionOwned,
)
from django_durable_jobs.rules.values import canonical_json
from django_durable_jobs.rules.vocabulary import proposal_sha256
from django_durable_jobs.store import DurableJobStore, Submission
from tests.race_child import Children
from tests.support import FakeClock, assert_refused, db_state, submission
from tests.testapp.models import DomainRow

pytestmark = pytest.mark.django_db(transaction=True)

OP = "tests.noop"
CONFLICT = "E_JOB_IDEMPOTENCY_CONFLICT"
INVALID = "E_JOB_INPUT_INVALID"


def payloads(count: int, start: int = 0) -> list[dict]:
    return [{"user": i, "email": f"user{i}@example.com"} for i in range(start, start + count)]


def keys(count: int, prefix: str = "k") -> list[str]:
    return [f"{prefix}-{i}" for i in range(count)]


# -- new work ------------------------------------------------------------------------------------


def test_submit_many_returns_one_pending_job_per_payload_in_order():
    later = timezone.now() + timedelta(hours=1)
    sent = payloads(5)
    jobs = submit_many(OP, sent, scope="t1", queue="bulk", priority=-3, run_after=later)
    assert len(jobs) == 5 and len({job.pk for job in jobs}) == 5
    rows = Job.objects.in_bulk([job.pk for job in jobs])
    for job, payload in zip(jobs, sent, strict=True):
        row = rows[job.pk]
        assert row.proposal == canonical_json(payload) == job.proposal
        assert row.proposal_hash == proposal_sha256(row.proposal)
        assert (row.operation, row.scope, row.idempotency_key) == (OP, "t1", str(row.pk))
        assert (row.status, row.queue, row.priority, row.run_after) == (
            "pending",
            "bulk",
            -3,
            later,
        )
        assert (row.fencing_epoch, row.attempts, row.owner_id) == (0, 0, None)
        assert job.ownership == "unclaimed" and job.diagnostic_error is None
    assert len({row.created_at for row in rows.values()}) == 1  # one call, one submission time


def test_submit_many_with_keys_stores_each_key():
    jobs = submit_many(OP, payloads(3), idempotency_keys=["a", None, "c"])
    assert [job.idempotency_key for job in jobs] == ["a", str(jobs[1].pk), "c"]
    assert Job.objects.count() == 3


def test_submit_many_of_nothing_runs_no_sql():
    with CaptureQueriesContext(connection) as queries:
        assert submit_many(OP, []) == []
        assert submit_many(OP, [], idempotency_keys=[]) == []
    assert len(queries) == 0


def test_submit_many_takes_any_iterable_of_payloads():
    jobs = submit_many(OP, (p for p in payloads(3)))
    assert [job.proposal for job in jobs] == [canonical_json(p) for p in payloads(3)]


@override_settings(DURABLE_JOBS={"QUOTAS": {"MAX_PENDING": None}})  # no count of the backlog
def test_a_thousand_payloads_take_a_handful_of_statements():
    with CaptureQueriesContext(connection) as queries:
        jobs = submit_many(OP, payloads(1000), idempotency_keys=keys(1000))
    assert len(jobs) == 1000 and Job.objects.count() == 1000
    assert len(queries) <= 3, [
        q["sql"][:60] for q in queries.captured_queries
    ]  # BEGIN, INSERT, COMMIT
    with CaptureQueriesContext(connection) as queries:
        again = submit_many(OP, payloads(1000), idempotency_keys=keys(1000))
    assert [job.pk for job in again] == [job.pk for job in jobs]
    assert len(queries) <= 4  # and one SELECT of the rows holding the keys


def test_a_call_larger_than_one_statement_keeps_order_and_coalesces_in_every_chunk():
    first = submit_many(OP, payloads(10, start=2490), idempotency_keys=keys(10, "late"))
    total = 2500
    sent = payloads(total)
    sent[2490:] = payloads(10, start=2490)
    names = keys(total)
    names[2490:] = keys(10, "late")  # the last ten were submitted before
    jobs = submit_many(OP, sent, idempotency_keys=names)
    assert [job.idempotency_key for job in jobs] == names
    assert [job.pk for job in jobs[2490:]] == [job.pk for job in first]
    assert Job.objects.count() == total
    assert all(job.proposal == canonical_json(p) for job, p in zip(jobs, sent, strict=True))


# -- coalescing and conflicts -------------------------------------------------------------------


def test_identical_earlier_submissions_return_their_jobs_unchanged():
    earlier = submit_many(OP, payloads(2), idempotency_keys=["a", "b"], queue="q1", priority=3)
    single = submit(OP, {"single": True}, idempotency_key="s")
    before = {row.pk: row for row in Job.objects.all()}
    jobs = submit_many(
        OP,
        [payloads(2)[1], {"single": True}, {"new": 1}, payloads(2)[0]],
        idempotency_keys=["b", "s", "n", "a"],
        queue="q2",
        priority=9,
    )
    assert [job.pk for job in jobs[:2]] == [earlier[1].pk, single.pk]
    assert jobs[3].pk == earlier[0].pk
    for job in (jobs[0], jobs[1], jobs[3]):
        row = before[job.pk]
        assert (job.queue, job.priority, job.created_at) == (
            row.queue,
            row.priority,
            row.created_at,
        )
    assert (jobs[2].queue, jobs[2].priority, jobs[2].idempotency_key) == ("q2", 9, "n")
    assert Job.objects.count() == 4
    assert all(job.ownership == "unclaimed" for job in jobs)


def test_one_conflicting_row_refuses_the_whole_call_and_writes_nothing():
    submit_many(OP, payloads(3), idempotency_keys=keys(3))
    sent = payloads(6)
    sent[4] = {"different": True}  # key k-4 is new ...
    sent[1] = {"changed": True}  # ... but k-1 was submitted with other bytes
    refusal = assert_refused(
        IdempotencyConflict,
        CONFLICT,
        lambda: submit_many(OP, sent, idempotency_keys=keys(6)),
    )
    assert "Submission 1" in refusal.message and "'k-1'" in refusal.message
    assert "Nothing from this call was written" in refusal.message
    assert Job.objects.count() == 3


def test_a_conflict_in_a_later_chunk_undoes_the_earlier_chunks():
    submit(OP, {"original": True}, idempotency_key="k-2400")
    sent = payloads(2500)
    error = assert_refused(
        IdempotencyConflict, CONFLICT, lambda: submit_many(OP, sent, idempotency_keys=keys(2500))
    )
    assert "Submission 2400" in error.message
    assert Job.objects.count() == 1


def test_a_key_given_twice_with_the_same_payload_returns_one_job_twice():
    jobs = submit_many(OP, [{"x": 1}, {"y": 2}, {"x": 1}], idempotency_keys=["dup", "other", "dup"])
    assert jobs[0].pk == jobs[2].pk != jobs[1].pk
    assert Job.objects.count() == 2


def test_a_key_given_twice_with_different_payloads_is_refused_before_any_sql():
    before = db_state()
    with CaptureQueriesContext(connection) as queries:
        with pytest.raises(IdempotencyConflict) as caught:
            submit_many(OP, [{"x": 1}, {"x": 2}], idempotency_keys=["dup", "dup"])
    assert queries.captured_queries == []
    assert db_state() == before
    assert caught.value.code == CONFLICT
    assert "Submissions 0 and 1" in caught.value.message and "'dup'" in caught.value.message


def test_the_same_key_in_another_scope_or_operation_is_another_job():
    first = submit_many(OP, [{"x": 1}], idempotency_keys=["k"])
    other_scope = submit_many(OP, [{"x": 1}], idempotency_keys=["k"], scope="elsewhere")
    other_op = submit_many("tests.steps", [{"x": 1}], idempotency_keys=["k"])
    assert len({first[0].pk, other_scope[0].pk, other_op[0].pk}) == 3


# -- transactions -------------------------------------------------------------------------------


def test_submit_many_in_a_rolled_back_transaction_leaves_nothing():
    class Abandon(Exception):
        pass

    before = db_state()
    with pytest.raises(Abandon):
        with transaction.atomic():
            jobs = submit_many(OP, payloads(4))
            assert Job.objects.filter(pk__in=[job.pk for job in jobs]).count() == 4
            raise Abandon
    assert db_state() == before


def test_submit_many_in_a_committed_transaction_lands_with_the_callers_rows():
    with transaction.atomic():
        jobs = submit_many(OP, payloads(2))
        DomainRow.objects.create(job_id=jobs[0].pk, value="with the jobs")
    assert Job.objects.count() == 2 and DomainRow.objects.count() == 1


def test_a_refusal_inside_the_callers_transaction_undoes_only_the_call():
    submit(OP, {"original": True}, idempotency_key="k-1")
    with transaction.atomic():
        DomainRow.objects.create(job_id=uuid.uuid4(), value="before")
        with pytest.raises(IdempotencyConflict):
            submit_many(OP, payloads(3), idempotency_keys=keys(3))  # k-0 goes in, then k-1 fails
        DomainRow.objects.create(job_id=uuid.uuid4(), value="after")  # still usable
    assert DomainRow.objects.count() == 2
    assert list(Job.objects.values_list("idempotency_key", flat=True)) == ["k-1"]


def test_defer_many_refuses_a_caller_transaction_unless_told_to_join_it(clock):
    store = DurableJobStore(clock=clock)
    items = [submission({"n": 1}, key="a")]
    with transaction.atomic():
        with CaptureQueriesContext(connection) as queries:
            with pytest.raises(TransactionOwned):
                store.defer_many(OP, items)
        assert queries.captured_queries == []
        joined = store.defer_many(OP, items, in_caller_transaction=True)
    assert Job.objects.get().pk == joined[0].pk
    refusal = assert_refused(
        InputInvalid, INVALID, lambda: store.defer_many(OP, items, in_caller_transaction=True)
    )
    assert "atomic" in refusal.message


# -- the store method ---------------------------------------------------------------------------


def test_defer_many_resolves_each_submissions_scope(clock):
    operator = DurableJobStore(clock=clock)
    jobs = operator.defer_many(
        OP,
        [submission({"n": 1}, key="k", scope="a"), submission({"n": 1}, key="k", scope="b")]
        + [submission({"n": 2}, key="x")],
    )
    assert [job.scope for job in jobs] == ["a", "b", "default"]
    assert all(job.created_at == clock() for job in jobs)
    scoped = DurableJobStore(scope="a", clock=clock)
    assert_refused(
        ScopeMismatch,
        "E_JOB_SCOPE_MISMATCH",
        lambda: scoped.defer_many(OP, [submission(key="z"), submission(key="y", scope="b")]),
    )
    assert scoped.defer_many(OP, [submission({"n": 1}, key="k")])[0].pk == jobs[0].pk


def test_defer_many_refuses_what_is_not_a_submission(clock):
    store = DurableJobStore(clock=clock)
    error = assert_refused(
        InputInvalid, INVALID, lambda: store.defer_many(OP, [submission(key="a"), {"n": 1}])
    )
    assert error.message.startswith("Submission 1")
    bad_json = Submission(None, "b", "{not json")
    error = assert_refused(InputInvalid, INVALID, lambda: store.defer_many(OP, [bad_json]))
    assert "Submission 0 (key 'b')" in error.message


# -- refused input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, names",
    [
        pytest.param(lambda: submit_many("tests.no_such_op", [{}]), "tests.no_such_op", id="op"),
        pytest.param(lambda: submit_many(OP, "payloads"), "str", id="str-payloads"),
        pytest.param(lambda: submit_many(OP, {"a": 1}), "dict", id="dict-payloads"),
        pytest.param(lambda: submit_many(OP, [{}], idempotency_keys="k"), "str", id="str-keys"),
        pytest.param(lambda: submit_many(OP, [{}, {}], idempotency_keys=["a"]), "1", id="length"),
        pytest.param(
            lambda: submit_many(OP, [{}], idempotency_keys=[""]), "Submission 0", id="key"
        ),
        pytest.param(lambda: submit_many(OP, [{}, {1j}]), "Payload 1", id="payload"),
        pytest.param(lambda: submit_many(OP, [{}], priority=101), "Priority", id="priority"),
        pytest.param(lambda: submit_many(OP, [{}], queue=""), "queue", id="queue"),
        pytest.param(lambda: submit_many(OP, [{}], scope="bad\x00"), "scope", id="scope"),
    ],
)
def test_submit_many_refuses_bad_input_and_writes_nothing(call, names):
    submit(OP, {"bystander": True})
    error = assert_refused(InputInvalid, INVALID, call)
    assert names in error.message


def test_submit_many_refuses_more_than_ten_thousand_payloads():
    error = assert_refused(InputInvalid, INVALID, lambda: submit_many(OP, [{}] * 10_001))
    assert "10000" in error.message or "10,000" in error.message


def test_ten_thousand_payloads_are_accepted():
    jobs = submit_many(OP, payloads(10_000))
    assert len(jobs) == 10_000 and Job.objects.count() == 10_000


# -- races between processes --------------------------------------------------------------------


@pytest.mark.processes
def test_processes_racing_the_same_keys_leave_one_row_per_key(db_settings_env):
    total = 300
    sent, names = payloads(total), keys(total, "race")
    forward = {"operation": OP, "payloads": sent, "keys": names}
    # The other racer sends the same submissions in the opposite order: the database must sort
    # out rows both insert at once without a deadlock, a failure or a duplicate.
    backward = {"operation": OP, "payloads": sent[::-1], "keys": names[::-1]}
    with Children(db_settings_env, "submit_many", [forward, backward]) as racers:
        outcomes = racers.race()
    assert all("job_ids" in outcome for outcome in outcomes), outcomes
    rows = dict(Job.objects.values_list("idempotency_key", "id"))
    assert len(rows) == total == Job.objects.count()
    assert outcomes[0]["job_ids"] == [str(rows[name]) for name in names]
    assert outcomes[1]["job_ids"] == [str(rows[name]) for name in names[::-1]]


@pytest.mark.processes
def test_processes_racing_one_call_each_get_the_same_jobs(db_settings_env):
    args = {"operation": OP, "payloads": payloads(200), "keys": keys(200, "same")}
    with Children(db_settings_env, "submit_many", [args, args, args]) as racers:
        outcomes = racers.race()
    assert all("job_ids" in outcome for outcome in outcomes), outcomes
    assert outcomes[0]["job_ids"] == outcomes[1]["job_ids"] == outcomes[2]["job_ids"]
    assert Job.objects.count() == 200


def test_a_fake_clock_stamps_every_row_of_a_call(clock: FakeClock):
    jobs = DurableJobStore(clock=clock).defer_many(OP, [submission({"n": i}) for i in range(3)])
    assert {job.created_at for job in jobs} == {job.run_after for job in jobs} == {clock()}
