"""A claim the database aborts to break a deadlock is run again, not raised.

On MariaDB two claimers each lock the index entries their locking read passes through, and the
planner reads different claims through different indexes: now and then one holds an entry of the
other's row while waiting for a capacity gate the other holds, and MariaDB aborts one (1213). The
whole transaction is rolled back, so the claim runs again. Here the deadlock is made on purpose:
a second connection holds the scope's capacity gate, waits until the claim (whose locking read
holds the first job) waits for that gate, then asks for the first job. The second connection has
written more (rows of its own), so the database aborts the claim's transaction, not its own
(MariaDB aborts the smaller; PostgreSQL the one whose wait found the cycle: the claim's, which
began waiting first). SQLite has one writer at a time: no deadlock to break.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import OperationalError, connection, connections, transaction
from django.test import override_settings

from django_durable_jobs.database.dbvendor import lock_gate
from django_durable_jobs.models import CapacityGate, Job, JobStatus
from django_durable_jobs.store import DurableJobStore, capacity, claiming
from tests.flow.support import declared
from tests.support import FakeClock, second_alias, submission

OTHER = "durable_jobs_deadlocker"
OPERATION = "deadlock.op"
QUOTAS = {"SCOPE_QUOTAS": {"default": {"MAX_RUNNING": 10}}}  # claims lock the scope's gate

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", OTHER])


@pytest.fixture(scope="module", autouse=True)
def _second_alias(django_db_setup):
    with second_alias(OTHER):
        yield


def _claim_waits(other) -> bool:
    """Return True when another connection than ``other`` waits for the scope's gate."""
    with other.cursor() as cursor:
        if other.vendor == "mysql":
            cursor.execute(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                "WHERE id <> CONNECTION_ID() AND info LIKE %s",
                [f"%{CapacityGate._meta.db_table}%"],
            )
        else:
            cursor.execute(
                "SELECT COUNT(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
        return cursor.fetchone()[0] > 0


def _deadlock_the_claim(first_job, events: dict) -> None:
    """In a transaction of its own: hold the scope's gate, wait for the claim to wait for it,
    then ask for ``first_job``, which the claim's locking read holds."""
    try:
        other = connections[OTHER]
        with transaction.atomic(using=OTHER):
            CapacityGate.objects.using(OTHER).bulk_create(  # written more: not the victim
                [CapacityGate(operation=f"#deadlock filler {i}") for i in range(200)]
            )
            lock_gate(OTHER, capacity._gate_name("default"))
            events["gate held"].set()
            deadline = time.monotonic() + 10
            while not _claim_waits(other):
                if time.monotonic() > deadline:
                    raise AssertionError("the claim never waited for the scope's gate")
                time.sleep(0.01)
            Job.objects.using(OTHER).select_for_update().get(pk=first_job)
            events["took the job"].set()
            time.sleep(0.2)  # the claim, run again, waits for the gate meanwhile
            transaction.set_rollback(True, using=OTHER)
    except BaseException as exc:  # reported to the test
        events["error"] = exc
    finally:
        connections[OTHER].close()


def _race(monkeypatch, retries: int) -> tuple[list, dict, list[Job]]:
    monkeypatch.setattr(claiming, "DEADLOCK_RETRIES", retries)
    clock = FakeClock()
    store = DurableJobStore(actor="claimer", clock=clock)
    jobs = [store.defer(OPERATION, submission({"i": i}, key=f"d-{i}")) for i in range(4)]
    for n, job in enumerate(jobs):  # claim order: jobs[0] first, so the claim locks it
        Job.objects.filter(pk=job.pk).update(priority=10 - n)
    events = {"gate held": threading.Event(), "took the job": threading.Event()}
    other = threading.Thread(target=_deadlock_the_claim, args=(jobs[0].pk, events))
    other.start()
    try:
        assert events["gate held"].wait(10)
        with override_settings(DURABLE_JOBS=QUOTAS):
            try:
                leases = store.claim_next(limit=2)
            except OperationalError as exc:
                leases = exc
    finally:
        other.join(30)
    assert "error" not in events, events.get("error")
    assert events["took the job"].is_set(), "the second connection never got the job"
    return leases, events, jobs


@pytest.fixture
def operation():
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has one writer at a time: claims never deadlock")
    with declared(OPERATION):
        yield


def test_a_claim_aborted_to_break_a_deadlock_runs_again(operation, monkeypatch):
    leases, _, jobs = _race(monkeypatch, retries=claiming.DEADLOCK_RETRIES)
    assert not isinstance(leases, Exception), leases
    assert len(leases) == 2
    running = Job.objects.filter(status=JobStatus.RUNNING)
    assert sorted(str(pk) for pk in running.values_list("pk", flat=True)) == sorted(
        str(lease.job_id) for lease in leases
    )
    assert set(running.values_list("fencing_epoch", flat=True)) == {1}
    assert Job.objects.filter(status=JobStatus.PENDING).count() == 2
    assert not CapacityGate.objects.filter(operation__startswith="#deadlock").exists()


def test_without_running_again_the_deadlock_reaches_the_caller(operation, monkeypatch):
    # The race above really deadlocks: with no retry, the database's error comes through, and
    # the aborted claim wrote nothing.
    leases, _, jobs = _race(monkeypatch, retries=0)
    assert isinstance(leases, OperationalError), leases
    assert Job.objects.filter(status=JobStatus.PENDING).count() == 4
