"""Uniqueness for a window (``unique_while="active"``, ``unique_for=timedelta``) at submit.

Proves: a second submission of the same unique key (the idempotency key given, else the input's
hash) returns the job holding it while that job is in its window, and is a new job after; input
that conflicts with the holder is ``IdempotencyConflict`` and writes nothing; nothing is deleted;
every way in (store defer, insert, defer_many / submit_many, submit(), REST, a schedule's tick)
follows the rule, and a workflow's nodes are never coalesced. Races of real processes on every
database: one job per key, a new job after the first ended, a conflicting input refused.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest

from django_durable_jobs import submit, submit_many
from django_durable_jobs.models import Job
from django_durable_jobs.rules.errors import IdempotencyConflict
from django_durable_jobs.rules.vocabulary import JobStatus, proposal_sha256
from django_durable_jobs.store import uniqueness
from tests.flow import submit_ops as ops
from tests.flow.unique_child import UniqueChildren
from tests.support import assert_refused, db_state, submission

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _operations():
    with ops.registered():
        yield


CONFLICT = "E_JOB_IDEMPOTENCY_CONFLICT"


def _end(job: Job, status: str = JobStatus.COMPLETE) -> None:
    Job.objects.filter(pk=job.pk).update(status=status)  # as if a worker had ended it


# -- unique_while="active" ------------------------------------------------------------------------


def test_the_same_input_coalesces_while_active_and_is_a_new_job_after(store):
    first = store.defer(ops.ACTIVE, submission({"n": 1}))
    row = Job.objects.get(pk=first.pk)
    assert row.unique_key == proposal_sha256('{"n":1}')
    assert row.idempotency_key == str(row.pk)  # never unique forever
    before = db_state()
    again = store.defer(ops.ACTIVE, submission({"n": 1}))
    assert again.pk == first.pk
    assert db_state() == before  # coalesced: nothing written
    assert store.defer(ops.ACTIVE, submission({"n": 2})).pk != first.pk  # other input, other key
    lease = store.claim(first.pk)
    assert store.defer(ops.ACTIVE, submission({"n": 1})).pk == first.pk  # running: still held
    store.complete(lease, {"ok": True})
    after = store.defer(ops.ACTIVE, submission({"n": 1}))
    assert after.pk != first.pk
    assert Job.objects.filter(unique_key=row.unique_key).count() == 2  # the ended one is kept


@pytest.mark.parametrize(
    ("status", "retry_to_come", "held"),
    [
        (JobStatus.PENDING, False, True),
        (JobStatus.WAITING, False, True),
        (JobStatus.SLEEPING, False, True),
        (JobStatus.RUNNING, False, True),
        (JobStatus.FAILED, True, True),
        (JobStatus.CANCELLED, True, True),
        (JobStatus.FAILED, False, False),
        (JobStatus.CANCELLED, False, False),
        (JobStatus.COMPLETE, False, False),
        (JobStatus.ORPHANED, False, False),
    ],
)
def test_which_states_hold_the_key_while_active(store, clock, status, retry_to_come, held):
    first = store.defer(ops.ACTIVE, submission({"n": 1}))
    Job.objects.filter(pk=first.pk).update(
        status=status, retry_requested_at=clock() if retry_to_come else None
    )
    again = store.defer(ops.ACTIVE, submission({"n": 1}))
    assert (again.pk == first.pk) is held


def test_a_given_key_is_the_unique_key_and_other_input_under_it_is_refused(store):
    first = store.defer(ops.ACTIVE, submission({"n": 1}, key="export-7"))
    assert Job.objects.get(pk=first.pk).unique_key == "export-7"
    assert store.defer(ops.ACTIVE, submission({"n": 1}, key="export-7")).pk == first.pk
    error = assert_refused(
        IdempotencyConflict,
        CONFLICT,
        lambda: store.defer(ops.ACTIVE, submission({"n": 2}, key="export-7")),
    )
    assert str(first.pk) in error.message
    _end(first)
    # After the window the key is free, for any input.
    assert store.defer(ops.ACTIVE, submission({"n": 2}, key="export-7")).pk != first.pk


def test_keys_are_per_scope(store):
    red = store.defer(ops.ACTIVE, submission({"n": 1}, scope="red"))
    blue = store.defer(ops.ACTIVE, submission({"n": 1}, scope="blue"))
    assert red.pk != blue.pk


def test_insert_coalesces_with_the_active_job(store):
    first = store.defer(ops.ACTIVE, submission({"n": 1}))
    before = db_state()
    assert store.insert(ops.ACTIVE, submission=submission({"n": 1})) is None
    assert db_state() == before
    _end(first)
    lease = store.insert(ops.ACTIVE, submission=submission({"n": 1}))
    assert lease is not None and lease.job_id != first.pk


def test_find_submission_finds_the_holder(store):
    assert store.find_submission(ops.ACTIVE, submission({"n": 1})) is None
    first = store.defer(ops.ACTIVE, submission({"n": 1}))
    assert store.find_submission(ops.ACTIVE, submission({"n": 1})).pk == first.pk


def test_in_the_callers_transaction(store):
    from django.db import transaction

    with transaction.atomic():
        first = submit(ops.ACTIVE, {"n": 1})
        assert submit(ops.ACTIVE, {"n": 1}).pk == first.pk
    with pytest.raises(RuntimeError), transaction.atomic():
        submit(ops.ACTIVE, {"n": 3})
        raise RuntimeError("roll back")
    assert not Job.objects.filter(proposal='{"n":3}').exists()


# -- unique_for=timedelta ---------------------------------------------------------------------------


def test_unique_for_coalesces_within_the_window_whatever_the_state(store, clock):
    first = store.defer(ops.WINDOW, submission({"n": 1}))
    _end(first)  # ended, but created within the window
    clock.advance(ops.WINDOW_LENGTH.total_seconds() - 1)
    assert store.defer(ops.WINDOW, submission({"n": 1})).pk == first.pk
    assert_refused(
        IdempotencyConflict,
        CONFLICT,
        lambda: store.defer(ops.WINDOW, submission({"n": 2}, key=first.unique_key)),
    )
    clock.advance(1)  # the window is (now - length, now]
    second = store.defer(ops.WINDOW, submission({"n": 1}))
    assert second.pk != first.pk
    clock.advance(180)
    assert store.defer(ops.WINDOW, submission({"n": 1})).pk == second.pk  # the latest holds


# -- many at once ----------------------------------------------------------------------------------


def test_submit_many_coalesces_within_the_call_and_with_earlier_jobs(store):
    earlier = submit(ops.ACTIVE, {"n": 0})
    jobs = submit_many(ops.ACTIVE, [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 1}, {"n": 3}])
    assert jobs[0].pk == earlier.pk
    assert jobs[1].pk == jobs[3].pk
    assert len({job.pk for job in jobs}) == 4
    assert Job.objects.count() == 4
    assert all(Job.objects.get(pk=job.pk).idempotency_key == str(job.pk) for job in jobs)


def test_submit_many_refuses_a_conflict_and_writes_nothing(store):
    submit(ops.ACTIVE, {"n": 0}, idempotency_key="a")
    error = assert_refused(
        IdempotencyConflict,
        CONFLICT,
        lambda: submit_many(ops.ACTIVE, [{"n": 9}, {"n": 1}], idempotency_keys=["b", "a"]),
    )
    assert "Submission 1" in error.message
    assert_refused(
        IdempotencyConflict,
        CONFLICT,
        lambda: submit_many(ops.ACTIVE, [{"n": 1}, {"n": 2}], idempotency_keys=["c", "c"]),
    )


# -- schedules, workflows, REST ----------------------------------------------------------------------


def test_a_schedule_s_tick_coalesces_under_unique_while(store, clock):
    from tests.store.schedule_support import declare, every, worker

    spec = every(60, operation=ops.ACTIVE, payload={"sync": 1}, overlap="allow")
    worker(clock).reconcile_schedules(declare(sync=spec))
    start = clock()
    assert store.enqueue_due_ticks(start + timedelta(seconds=60)).enqueued == 1
    first = Job.objects.get()
    assert first.unique_key == proposal_sha256('{"sync":1}')
    store.enqueue_due_ticks(start + timedelta(seconds=120))  # the first still pending
    assert list(Job.objects.values_list("pk", flat=True)) == [first.pk]
    _end(first)
    store.enqueue_due_ticks(start + timedelta(seconds=180))
    assert Job.objects.count() == 2


def test_workflow_nodes_are_never_coalesced(store):
    from django_durable_jobs.workflows import Workflow

    submit(ops.ACTIVE, {"n": 1})
    for name in ("one", "two"):
        graph = Workflow(name)
        graph.job(ops.ACTIVE, {"n": 1})
        graph.submit()
    nodes = Job.objects.exclude(workflow=None)
    assert nodes.count() == 2
    assert set(nodes.values_list("unique_key", flat=True)) == {None}


def test_rest_submit_coalesces_with_200_and_refuses_a_conflict_with_409(db):
    from django_durable_jobs.models.tokens import create_token
    from tests.api.support import Api, make_user

    api = Api(create_token(make_user("alice"), "red", "tests").token)
    body = {"operation": ops.ACTIVE, "payload": {"n": 1}, "idempotency_key": "k"}
    first = api.post("/jobs", body)
    assert first.status_code == 201, first.content
    again = api.post("/jobs", body)
    assert (again.status_code, again.json()["id"]) == (200, first.json()["id"])
    before = db_state()
    refused = api.post("/jobs", {**body, "payload": {"n": 2}})
    assert refused.status_code == 409, refused.content
    assert db_state() == before


# -- races of real processes -------------------------------------------------------------------------


def _racers(key, payloads, **extra):
    return [
        {"operation": ops.ACTIVE, "key": key, "payload": payload, **extra} for payload in payloads
    ]


def test_six_submitters_of_one_input_make_one_job(db_settings_env):
    with UniqueChildren(db_settings_env, "defer", _racers(None, [{"n": 1}] * 6)) as children:
        outcomes = children.race()
    assert all("job_id" in outcome for outcome in outcomes), outcomes
    assert len({outcome["job_id"] for outcome in outcomes}) == 1
    (job,) = Job.objects.all()
    _end(job)
    with UniqueChildren(db_settings_env, "defer", _racers(None, [{"n": 1}] * 6)) as children:
        outcomes = children.race()
    ids = {outcome.get("job_id") for outcome in outcomes}
    assert len(ids) == 1 and str(job.pk) not in ids, outcomes
    assert Job.objects.count() == 2


def test_six_submitters_within_unique_for_make_one_job_even_after_it_ended(db_settings_env):
    racers = [{"operation": ops.WINDOW, "key": "w", "payload": {"n": 1}}] * 6
    with UniqueChildren(db_settings_env, "defer", racers) as children:
        outcomes = children.race()
    assert len({outcome.get("job_id") for outcome in outcomes}) == 1, outcomes
    _end(Job.objects.get())
    with UniqueChildren(db_settings_env, "defer", racers) as children:
        again = children.race()
    assert {outcome.get("job_id") for outcome in again} == {outcomes[0]["job_id"]}, again
    assert Job.objects.count() == 1


def test_six_submitters_of_one_key_with_different_input_one_wins(db_settings_env):
    payloads = [{"n": n} for n in range(6)]
    with UniqueChildren(db_settings_env, "defer", _racers("k", payloads)) as children:
        outcomes = children.race()
    won = [outcome for outcome in outcomes if "job_id" in outcome]
    assert len(won) == 1, outcomes
    assert sorted(o.get("code") for o in outcomes if o not in won) == [CONFLICT] * 5, outcomes
    (job,) = Job.objects.all()
    assert str(job.pk) == won[0]["job_id"] and job.unique_key == "k"


def test_submitters_whose_transaction_read_first_still_see_the_holder(db_settings_env):
    # Half submit at once, half inside a transaction whose snapshot began before the others
    # committed (REPEATABLE READ on MariaDB): one job all the same.
    racers = _racers(None, [{"n": 1}] * 3)
    with (
        UniqueChildren(db_settings_env, "submit_after_a_read", racers) as late,
        UniqueChildren(db_settings_env, "defer", racers) as early,
    ):
        for child in late.children + early.children:
            assert child.read() == {"ready": True}
        start_at = time.time() + 0.2
        for child in late.children + early.children:
            child.send(f"go {start_at!r}")
        outcomes = [child.read() for child in late.children + early.children]
    assert all("job_id" in outcome for outcome in outcomes), outcomes
    assert len({outcome["job_id"] for outcome in outcomes}) == 1, outcomes
    assert Job.objects.count() == 1


def test_submit_many_racers_over_shared_keys_in_any_order_make_one_job_per_key(db_settings_env):
    payloads = [{"n": n} for n in range(40)]
    args = []
    for index in range(6):
        mine = payloads[index:] + payloads[:index]  # the same keys, in different orders
        args.append({"operation": ops.ACTIVE, "payloads": mine[::-1] if index % 2 else mine})
    with UniqueChildren(db_settings_env, "submit_many", args) as children:
        outcomes = children.race()
    assert all("job_ids" in outcome for outcome in outcomes), outcomes
    assert Job.objects.count() == 40
    by_input = {job.proposal: str(job.pk) for job in Job.objects.all()}
    for outcome, racer in zip(outcomes, args, strict=True):
        expected = [by_input[json.dumps(p, separators=(",", ":"))] for p in racer["payloads"]]
        assert outcome["job_ids"] == expected


def test_the_gate_stripes_keys():
    gates = {uniqueness.gate_of("default", ops.ACTIVE, str(n)) for n in range(60_000)}
    assert len(gates) == uniqueness.STRIPES
    assert uniqueness.gate_of("a", "b", "c") == uniqueness.gate_of("a", "b", "c")
