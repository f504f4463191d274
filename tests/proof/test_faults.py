"""Faults inside the store's transactions: every transition commits whole or not at all.

For each transition the worker depends on — ``claim_next`` (the one-statement claim of pending
work), ``claim_batch`` (the row-by-row claim that reclaims expired leases), ``record_outcomes``
(the completer's batched flush, also where it schedules a failed job's automatic retry),
``complete_atomically``, ``retry_atomically``, ``renew_leases`` and a schedule tick — a fault
fires at a chosen row event *after* the transition already wrote something in its transaction
(tests/proof/faults.py). ``claim_next`` and ``renew_leases`` are one statement each (on
PostgreSQL and SQLite; MariaDB's claim is a locking SELECT and an UPDATE): there the fault
fires at the second row of the statement, so it proves that no row of it is kept.

* a statement that fails there (a trigger that raises): the call raises the database's error,
  which the store lets through as Django's ``DatabaseError`` (it is not a refusal: nothing was
  wrong with the request, and the worker retries such errors);
* the connection killed there (PostgreSQL ``pg_terminate_backend``, MariaDB ``KILL CONNECTION``,
  from a second connection while the trigger holds the transaction), and on SQLite, which has no
  server, the process SIGKILLed there (a child process holding inside the trigger).

Each time every table (jobs, attempts, gates, schedules, domain rows) is exactly as before, and
the same call made again afterwards succeeds and leaves the right final state.

``test_atomic.py`` already proves that a fault raised by the *caller's* code (a mutation, a
``retain_outcome``) rolls back; these faults come from the database, between the store's own
statements.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import DatabaseError, connections

from django_durable_jobs.models import CapacityGate, Job, JobAttempt, Schedule
from django_durable_jobs.rules import registry
from django_durable_jobs.rules.errors import JobError
from django_durable_jobs.rules.retry import RetryPolicy
from django_durable_jobs.rules.values import Outcome
from django_durable_jobs.schedules import tick_key
from django_durable_jobs.store import DurableJobStore
from django_durable_jobs.worker.connections import reset_broken_connections
from tests.proof.faults import (
    MESSAGE,
    Faults,
    Killer,
    Point,
    SecondConnection,
    register_hold,
    snapshot,
)
from tests.schedule_rows import make_schedule
from tests.settings import REPO_ROOT, TEST_DB
from tests.support import LEASE, FakeClock, execution_for, submission, wait_for
from tests.testapp.models import DomainRow, RetryHistory

pytestmark = [pytest.mark.proof, pytest.mark.django_db(transaction=True)]

OP = "proof.faults"  # not registered: no retry policy or capacity limit applies
RETRIED = "proof.faults.retried"  # registered by the ``faults`` fixture, with RETRY_POLICY
RETRY_POLICY = RetryPolicy(max_attempts=3, base_delay=5.0, max_delay=5.0, jitter=0.0)
JOB = Job._meta.db_table
ATTEMPT = JobAttempt._meta.db_table
SCHEDULE = Schedule._meta.db_table
TAKEN = "NEW.fencing_epoch > OLD.fencing_epoch"  # a claim or a retry takes the row
RENEWED = (
    "OLD.status = 'running' AND NEW.status = 'running' AND NEW.fencing_epoch = "
    "OLD.fencing_epoch AND NEW.lease_expires_at > OLD.lease_expires_at"
)


@pytest.fixture
def faults(transactional_db) -> Iterator[Faults]:
    """Return the fault triggers of this test; all are dropped when it ends, even on failure."""
    installed = Faults()
    installed.setup()
    _register_retried()
    try:
        yield installed
    finally:
        registry.unregister(RETRIED)
        reset_broken_connections()  # a killed connection is replaced first
        installed.drop_all()


def _register_retried() -> None:
    registry.operation(RETRIED, retry=RETRY_POLICY)(lambda ctx, payload: None)


# -- the transitions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Transition:
    """A store call, the point inside its transaction where the fault fires, and its outcome.

    ``prepare`` commits the rows the call starts from and returns what it needs (picklable, for
    a child process); ``call`` makes it; ``check`` proves the state after it succeeded.
    """

    at: Point
    prepare: Callable[[DurableJobStore, DurableJobStore, FakeClock], dict]
    call: Callable[[DurableJobStore, dict], Any]
    check: Callable[[DurableJobStore, dict, Any], None]


def _pending(store: DurableJobStore, clock: FakeClock, count: int = 3) -> list:
    jobs = [store.defer(OP, submission({"n": n}, key=f"p{n}")).pk for n in range(count)]
    clock.advance(1)
    return jobs


def _running(store: DurableJobStore, count: int = 3, prefix: str = "r") -> list:
    return [
        store.insert(OP, submission=submission({"n": n}, key=f"{prefix}{n}")) for n in range(count)
    ]


def _prepare_claim_next(store, rival, clock) -> dict:
    return {"jobs": _pending(store, clock)}


def _check_claim_next(store, scene, leases) -> None:
    assert sorted(lease.job_id for lease in leases) == sorted(scene["jobs"])
    for row in Job.objects.filter(pk__in=scene["jobs"]):
        assert (row.status, row.owner_id, row.fencing_epoch, row.attempts) == (
            "running",
            store.owner_id,
            1,
            1,
        )
    assert not JobAttempt.objects.exists()


def _prepare_claim_batch(store, rival, clock) -> dict:
    expired = [lease.job_id for lease in _running(rival, 2)]
    clock.advance(LEASE + 1)
    return {"expired": expired, "pending": _pending(store, clock, 1), "rival": rival.owner_id}


def _call_claim_batch(store, scene):
    # With a max_running limit: the capacity gate's row is written first.
    return store.claim_batch(operations=[OP], limit=3, resume_expired=[OP], max_running=10)


def _check_claim_batch(store, scene, claimed) -> None:
    everything = [*scene["expired"], *scene["pending"]]
    assert sorted(claim.lease.job_id for claim in claimed) == sorted(everything)
    for row in Job.objects.filter(pk__in=everything):
        epoch = 2 if row.pk in scene["expired"] else 1
        assert (row.status, row.owner_id, row.fencing_epoch) == ("running", store.owner_id, epoch)
    interrupted = JobAttempt.objects.values_list("job_id", "epoch", "owner_id", "outcome")
    assert sorted(interrupted) == sorted(
        (job_id, 1, scene["rival"], "interrupted") for job_id in scene["expired"]
    )
    assert list(CapacityGate.objects.values_list("operation", flat=True)) == [OP]


def _prepare_leases(store, rival, clock) -> dict:
    leases = _running(store)
    clock.advance(3)
    return {"leases": leases}


def _call_record_outcomes(store, scene):
    return store.record_outcomes(
        [Outcome.completed(lease, json.dumps({"n": n})) for n, lease in enumerate(scene["leases"])]
    )


def _check_record_outcomes(store, scene, recorded) -> None:
    assert [r.status for r in recorded] == ["complete"] * 3
    for n, lease in enumerate(scene["leases"]):
        row = Job.objects.get(pk=lease.job_id)
        assert (row.status, row.result, row.progress) == ("complete", json.dumps({"n": n}), 100)
        history = JobAttempt.objects.filter(job_id=lease.job_id)
        assert list(history.values_list("epoch", "outcome")) == [(1, "complete")]


def _prepare_retried(store, rival, clock) -> dict:
    leases = [store.insert(RETRIED, submission=submission({"n": n}, key=f"f{n}")) for n in range(3)]
    clock.advance(1)
    return {"leases": leases}


def _call_record_failures(store, scene):
    first, *failing = scene["leases"]
    return store.record_outcomes(
        [Outcome.completed(first, "{}"), *(Outcome.failed(lease, "flaky") for lease in failing)]
    )


def _check_record_failures(store, scene, recorded) -> None:
    now = store.clock()
    assert [r.status for r in recorded] == ["complete", "failed", "failed"]
    first, *failing = scene["leases"]
    for lease in failing:
        row = Job.objects.get(pk=lease.job_id)
        assert (row.status, row.error, row.retry_requested_at) == ("failed", "flaky", now)
        assert row.run_after == now + timedelta(seconds=RETRY_POLICY.delay(1))
    outcomes = JobAttempt.objects.values_list("job_id", "outcome")
    assert sorted(outcomes) == sorted(
        [(first.job_id, "complete"), *((lease.job_id, "failed") for lease in failing)]
    )


def _prepare_one(store, rival, clock) -> dict:
    return {"lease": _running(store, 1)[0]}


def _call_complete_atomically(store, scene):
    lease = scene["lease"]
    job = Job.objects.get(pk=lease.job_id)

    def mutation(execution) -> str:
        DomainRow.objects.create(job_id=job.pk, value="written")
        return '{"rows": 1}'

    return store.complete_atomically(execution_for(store, job, lease), mutation)


def _check_complete_atomically(store, scene, receipt) -> None:
    job_id = scene["lease"].job_id
    row = Job.objects.get(pk=job_id)
    assert receipt == '{"rows": 1}'
    assert (row.status, row.result, row.fencing_epoch) == ("complete", receipt, 1)
    assert list(DomainRow.objects.values_list("job_id", "value")) == [(job_id, "written")]
    history = JobAttempt.objects.filter(job_id=job_id)
    assert list(history.values_list("epoch", "outcome")) == [(1, "complete")]


def _prepare_expired(store, rival, clock) -> dict:
    (lease,) = _running(rival, 1)
    clock.advance(LEASE + 1)
    return {"job": lease.job_id, "rival": rival.owner_id}


def _call_retry_atomically(store, scene):
    job = Job.objects.get(pk=scene["job"])

    def retain(previous_json: str) -> str:
        previous = json.loads(previous_json)
        RetryHistory.objects.create(
            job_id=job.pk,
            previous_status=previous["status"],
            previous_epoch=previous["fencing_epoch"],
        )
        return '{"retained": true}'

    return store.retry_atomically(job.pk, execution_for(store, job), retain)


def _check_retry_atomically(store, scene, lease) -> None:
    row = Job.objects.get(pk=scene["job"])
    assert (lease.job_id, lease.owner_id, lease.epoch) == (row.pk, store.owner_id, 2)
    assert (row.status, row.owner_id, row.fencing_epoch, row.attempts) == (
        "running",
        store.owner_id,
        2,
        2,
    )
    retained = RetryHistory.objects.values_list("job_id", "previous_status", "previous_epoch")
    assert list(retained) == [(row.pk, "running", 1)]
    history = JobAttempt.objects.values_list("epoch", "owner_id", "outcome")
    assert list(history) == [(1, scene["rival"], "interrupted")]


def _call_renew_leases(store, scene):
    return store.renew_leases(scene["leases"])


def _check_renew_leases(store, scene, rows) -> None:
    now = store.clock()
    assert [row.pk for row in rows] == [lease.job_id for lease in scene["leases"]]
    for lease in scene["leases"]:
        row = Job.objects.get(pk=lease.job_id)
        assert (row.lease_expires_at, row.heartbeat_at) == (now + timedelta(seconds=LEASE), now)


def _prepare_schedule(store, rival, clock) -> dict:
    tick = clock()
    make_schedule(
        "proof-faults",
        interval_seconds=60,
        anchor=tick,
        created_at=tick - timedelta(seconds=30),
        updated_at=tick,
        declared_at=tick,
    )
    clock.advance(5)
    return {"tick": tick}


def _call_schedule_tick(store, scene):
    return store.enqueue_due_ticks()


def _check_schedule_tick(store, scene, summary) -> None:
    assert (summary.enqueued, summary.refused, summary.broken) == (1, {}, {})
    (job,) = Job.objects.all()
    assert (job.idempotency_key, job.status) == (tick_key("proof-faults", scene["tick"]), "pending")
    row = Schedule.objects.get(name="proof-faults")
    assert (row.last_tick_at, row.last_job_id) == (scene["tick"], job.pk)


TRANSITIONS: dict[str, Transition] = {
    # The second of three pending rows taken by one UPDATE (one locking SELECT + UPDATE on MariaDB).
    "claim_next": Transition(
        Point(JOB, "UPDATE", "OLD.status = 'pending' AND NEW.status = 'running'", skip=1),
        _prepare_claim_next,
        lambda store, scene: store.claim_next(operations=[OP], limit=3),
        _check_claim_next,
    ),
    # Row by row: the second row taken, after the first's "interrupted" attempt and UPDATE.
    "claim_batch": Transition(
        Point(JOB, "UPDATE", TAKEN, skip=1),
        _prepare_claim_batch,
        _call_claim_batch,
        _check_claim_batch,
    ),
    # The second history row of the flush's one INSERT, after the UPDATE that ended all three.
    "record_outcomes": Transition(
        Point(ATTEMPT, "INSERT", "NEW.outcome = 'complete'", skip=1),
        _prepare_leases,
        _call_record_outcomes,
        _check_record_outcomes,
    ),
    # The retry scheduled for the second failure, after the UPDATE that ended the three attempts
    # and their history rows (an operation with a retry policy).
    "record_outcomes_retry": Transition(
        Point(
            JOB,
            "UPDATE",
            "NEW.retry_requested_at IS NOT NULL AND OLD.retry_requested_at IS NULL",
            skip=1,
        ),
        _prepare_retried,
        _call_record_failures,
        _check_record_failures,
    ),
    # The history row, after the domain row and the job's UPDATE.
    "complete_atomically": Transition(
        Point(ATTEMPT, "INSERT", "NEW.outcome = 'complete'"),
        _prepare_one,
        _call_complete_atomically,
        _check_complete_atomically,
    ),
    # The job's UPDATE, after the retained outcome and the expired attempt's history row.
    "retry_atomically": Transition(
        Point(JOB, "UPDATE", TAKEN),
        _prepare_expired,
        _call_retry_atomically,
        _check_retry_atomically,
    ),
    # The second of three leases renewed by one UPDATE.
    "renew_leases": Transition(
        Point(JOB, "UPDATE", RENEWED, skip=1),
        _prepare_leases,
        _call_renew_leases,
        _check_renew_leases,
    ),
    # The schedule row's advance, after the tick's job was inserted.
    "schedule_tick": Transition(
        Point(SCHEDULE, "UPDATE", "NEW.last_job_id IS NOT NULL"),
        _prepare_schedule,
        _call_schedule_tick,
        _check_schedule_tick,
    ),
}


# -- a statement fails ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TRANSITIONS)
def test_a_statement_failing_inside_the_transition_commits_nothing(
    name, faults, store, rival, clock
):
    transition = TRANSITIONS[name]
    scene = transition.prepare(store, rival, clock)
    fault = faults.raising(f"proof_fault_{name}", transition.at)
    before = snapshot()
    fault.arm()

    with pytest.raises(DatabaseError) as caught:
        transition.call(store, scene)

    # The database's own error, let through: not a refusal (a JobError) of the request.
    assert not isinstance(caught.value, JobError)
    assert f"{MESSAGE} proof_fault_{name}" in str(caught.value)
    assert snapshot() == before
    if not faults.can_fire_once:
        fault.disarm()  # SQLite's count was rolled back with the fault: it would fire again
    transition.check(store, scene, transition.call(store, scene))


# -- the connection dies ------------------------------------------------------------------------


@pytest.mark.parametrize("name", TRANSITIONS)
def test_a_connection_killed_inside_the_transition_commits_nothing(
    name, faults, store, rival, clock, db_settings_env, tmp_path
):
    transition = TRANSITIONS[name]
    scene = transition.prepare(store, rival, clock)
    fault = faults.holding(f"proof_fault_{name}", transition.at)
    before = snapshot()
    fault.arm()

    if faults.vendor == "sqlite":
        _sigkill_held_child(name, store, scene, db_settings_env, tmp_path)
        fault.disarm()
    else:
        with Killer(faults) as killer:
            killed = killer.kill_in_background()
            with pytest.raises(DatabaseError) as caught:
                transition.call(store, scene)
            killed()
        # The driver's error for a connection the server closed, let through as it is.
        assert type(caught.value).__name__ in ("OperationalError", "InterfaceError")
        assert not isinstance(caught.value, JobError)
        reset_broken_connections()  # what a worker does: the next query reconnects

    assert snapshot() == before
    transition.check(store, scene, transition.call(store, scene))


def _sigkill_held_child(
    name: str, store: DurableJobStore, scene: dict, env: dict[str, str], folder: Path
) -> None:
    """Make the call in a child process that holds at the fault, then SIGKILL it there."""
    marker = folder / "held"
    payload = base64.b64encode(
        pickle.dumps(
            {"name": name, "owner_id": store.owner_id, "now": store.clock(), "scene": scene}
        )
    ).decode()
    code = (
        "import django; django.setup()\n"
        "from tests.proof.test_faults import child_main\n"
        f"child_main({str(marker)!r}, {payload!r})\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def held() -> bool:
            if child.poll() is not None:
                out, err = child.communicate()
                raise AssertionError(f"the child ended before the fault:\n{out}\n{err}")
            return marker.exists()

        wait_for(held, f"the child to hold inside {name}")
        assert marker.read_text() == f"proof_fault_{name}"
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()


def child_main(marker: str, payload: str) -> None:
    """Make a transition in this (child) process as the test's store client, holding at the fault.

    The store gets the test store's owner id: it is the same client, in a process of its own.
    """
    register_hold(marker)
    _register_retried()
    data = pickle.loads(base64.b64decode(payload))
    store = DurableJobStore(actor="worker-a", lease_seconds=LEASE, clock=FakeClock(data["now"]))
    store.owner_id = data["owner_id"]
    TRANSITIONS[data["name"]].call(store, data["scene"])
    raise SystemExit(f"{data['name']} returned: the fault never held it")


def test_the_holding_trigger_is_only_reachable_through_the_control_row(faults, store, clock):
    # Control: a holding trigger that is not armed never holds (and a kill test's hold is the
    # fault's, not a lock of the store's own).
    transition = TRANSITIONS["record_outcomes"]
    scene = transition.prepare(store, store, clock)
    faults.holding("proof_fault_unarmed", transition.at)
    transition.check(store, scene, transition.call(store, scene))
    assert connections["default"].is_usable()


# -- lock order ---------------------------------------------------------------------------------


@pytest.mark.skipif(TEST_DB == "sqlite", reason="SQLite locks the whole database, not rows")
def test_a_renewal_takes_row_locks_in_the_order_a_flush_does(faults, store, clock):
    # A worker's completer locks the rows of a flush in id order (record_outcomes); its heartbeat
    # renews every lease at once. Were the renewal to lock in another order (the order of the
    # leases it is given), the two would deadlock: the database aborts one of them, the
    # renewal fails, and with short leases the attempts lose them. Here a second connection
    # stands in for the flush: it locks the lower id, the renewal starts with the leases in
    # the other order, then the flush locks the higher id.
    low, high = uuid.UUID(int=1 << 78 | 1), uuid.UUID(int=(1 << 128) - 1 - (1 << 76))
    leases = {
        job_id: store.insert(OP, submission=submission({"n": n}, key=f"o{n}"), job_id=job_id)
        for n, job_id in enumerate([high, low])
    }
    assert list(Job.objects.order_by("pk").values_list("pk", flat=True)) == [low, high]
    clock.advance(3)
    renewed: dict[str, Any] = {}

    def renew() -> None:
        try:
            renewed["rows"] = store.renew_leases([leases[high], leases[low]])
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            renewed["error"] = exc
        finally:
            connections.close_all()

    with SecondConnection() as flush:
        flush.lock_rows(low)
        renewal = threading.Thread(target=renew, name="proof-renewal")
        renewal.start()
        wait_for(
            lambda: flush.lock_waiters() == 1,
            "the renewal to wait for the flush's lock",
            diagnose=lambda: f"{renewed!r}, {flush.lock_waiters()} waiting: {flush.activity()}",
        )
        flush.lock_rows(high)  # a deadlock is reported here or in the renewal
        flush.commit()
        renewal.join(10)

    assert "error" not in renewed, renewed
    rows = renewed["rows"]
    assert [row.pk for row in rows] == [high, low]
    assert {row.lease_expires_at for row in rows} == {clock() + timedelta(seconds=LEASE)}
