"""Faults inside a real ``runjobs`` worker's transactions: it recovers without a restart.

A fault (tests/proof/faults.py) fires while the worker claims, while its completer flushes
outcomes, while a job completes itself with ``ctx.complete_atomically``, while its heartbeat
renews leases, and while its scheduler enqueues a tick: a statement that fails there, and on
PostgreSQL and MariaDB the connection killed there. Each time the worker logs the fault, does not
exit, and every job still ends exactly once: one ``complete`` attempt (no lease ran out, so no
``interrupted`` one), one domain row per job, one job per schedule tick with no tick lost. Then
it stops cleanly on SIGTERM.

Two faults last longer: renewals refused past the lease (the attempt is interrupted, recorded as
such, and the same worker resumes the job from its checkpoint), and a completion flush too large
for MariaDB's packet limit (the completer writes it in parts instead of retrying it for ever).

On SQLite a connection cannot be killed (there is no server); a process killed in a transaction
is ``test_faults.py``'s and ``tests/worker/test_crashes.py``'s subject.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest

from django_durable_jobs import submit
from django_durable_jobs.models import Job, JobAttempt, JobStatus, Schedule
from django_durable_jobs.schedules import tick_key, ticks
from django_durable_jobs.worker.connections import reset_broken_connections
from tests.proof.faults import MESSAGE, Fault, Faults, Killer, Point
from tests.settings import TEST_DB
from tests.support import wait_for
from tests.testapp.models import DomainRow
from tests.worker_support import RunJobs, WorkerPool, attempts

pytestmark = [pytest.mark.proof, pytest.mark.processes, pytest.mark.django_db(transaction=True)]

JOB = Job._meta.db_table
ATTEMPT = JobAttempt._meta.db_table
SCHEDULE = Schedule._meta.db_table
BEAT = {"operation": "tests.tick", "every": 1, "catch_up": "all", "overlap": "allow"}


@dataclass(frozen=True)
class WorkerPoint:
    """Where the fault fires in the worker, the jobs it runs meanwhile, and what it logs then
    (one of ``logged``)."""

    at: Point
    logged: tuple[str, ...]
    operation: str = "tests.noop"
    payload: dict = field(default_factory=dict)
    jobs: int = 6
    schedules: bool = False


POINTS = {
    "claim": WorkerPoint(
        Point(JOB, "UPDATE", "OLD.status = 'pending' AND NEW.status = 'running'"),
        ("claim failed: database unavailable",),
    ),
    # One outcome is retried as it is; several are then written one by one.
    "flush": WorkerPoint(
        Point(ATTEMPT, "INSERT", "NEW.outcome = 'complete'"),
        ("database unavailable; retrying", "outcomes was refused"),
    ),
    "complete_atomically": WorkerPoint(
        Point(ATTEMPT, "INSERT", "NEW.outcome = 'complete'"),
        ("database unavailable; retrying",),
        operation="tests.domain_write",
        payload={"value": "written"},
        jobs=4,
    ),
    # A 2 s lease renewed every 2/3 s: a job of 2.5 s outlives its lease unless a later renewal
    # succeeds.
    "renew": WorkerPoint(
        Point(
            JOB,
            "UPDATE",
            "OLD.status = 'running' AND NEW.status = 'running' AND NEW.fencing_epoch = "
            "OLD.fencing_epoch AND NEW.lease_expires_at > OLD.lease_expires_at",
        ),
        ("heartbeat failed: database unavailable",),
        operation="tests.sleep",
        payload={"seconds": 2.5},
        jobs=2,
    ),
    "tick": WorkerPoint(
        Point(SCHEDULE, "UPDATE", "NEW.last_job_id IS NOT NULL"),
        ("scheduler pass failed",),
        jobs=0,
        schedules=True,
    ),
}


@pytest.fixture
def faults(transactional_db) -> Iterator[Faults]:
    """Return the fault triggers of this test; all are dropped when it ends, even on failure."""
    installed = Faults()
    installed.setup()
    try:
        yield installed
    finally:
        reset_broken_connections()
        installed.drop_all()


@pytest.fixture
def start(faults, db_settings_env, tmp_path) -> Iterator[Callable[..., RunJobs]]:
    """Return ``start(point)``: a runjobs child for ``point``; killed before the faults drop."""
    pools: list[WorkerPool] = []

    def start_worker(point: WorkerPoint, *args: str) -> RunJobs:
        env = dict(db_settings_env)
        if point.schedules:
            env["DJANGO_SETTINGS_MODULE"] = "tests.settings_schedules"
            env["DURABLE_JOBS_TEST_SETTINGS"] = json.dumps({"SCHEDULES": {"beat": BEAT}})
        pool = WorkerPool(env, Path(tmp_path))
        pools.append(pool)
        return pool.start(*(args or ("--concurrency", "2")))

    yield start_worker
    for pool in pools:
        pool.__exit__(None, None, None)


def _submit(point: WorkerPoint) -> list:
    return [submit(point.operation, {**point.payload, "n": n}).pk for n in range(point.jobs)]


def _fire(faults: Faults, fault: Fault, worker: RunJobs, point: WorkerPoint, *, kill: bool) -> str:
    """Wait for the fault to fire in ``worker`` (killing its connection with ``kill``) and for
    the worker to log it; return the log line."""
    if kill:
        with Killer(faults) as killer:
            killer.kill_waiter(timeout=30)
    line = wait_for(
        lambda: _logged(worker, point.logged), f"{point.logged} in the log", diagnose=worker.logs
    )
    fault.disarm()  # on SQLite it fires until now; elsewhere it fired once and stays spent
    return line


def _logged(worker: RunJobs, texts: tuple[str, ...]) -> str | None:
    """Return the first line of the worker's log holding one of ``texts`` (None: none yet)."""
    for line in worker.stderr().splitlines():
        if any(text in line for text in texts):
            return line
    assert worker.running(), f"{worker!r} exited\n{worker.logs()}"
    return None


def _assert_every_job_ended_once(worker: RunJobs, jobs: list, point: WorkerPoint) -> None:
    def done() -> bool:
        return Job.objects.filter(pk__in=jobs, status=JobStatus.COMPLETE).count() == len(jobs)

    wait_for(done, f"the {len(jobs)} jobs to complete", diagnose=worker.logs)
    owner = worker.row().owner_id
    for job_id in jobs:
        assert attempts(job_id) == [("complete", 1, owner)], worker.logs()
    if point.operation == "tests.domain_write":
        rows = dict(DomainRow.objects.values_list("job_id", "value"))
        assert rows == dict.fromkeys(jobs, "written")
        for job_id in jobs:
            row = Job.objects.get(pk=job_id)
            assert json.loads(row.result) == {"row": DomainRow.objects.get(job_id=job_id).pk}


def _assert_no_tick_lost(worker: RunJobs) -> None:
    """Wait for three ticks' jobs; each tick since the row's creation has one job, done once."""
    row = Schedule.objects.get(name="beat")
    expected = list(ticks(row, row.created_at, row.created_at + timedelta(seconds=3)))[:3]
    keys = [tick_key("beat", tick) for tick in expected]

    def enqueued() -> bool:
        return Job.objects.filter(idempotency_key__in=keys, status=JobStatus.COMPLETE).count() == 3

    wait_for(enqueued, "the first three ticks' jobs to complete", diagnose=worker.logs)
    owner = worker.row().owner_id
    for key in keys:
        (job,) = Job.objects.filter(idempotency_key=key)  # exactly one job per tick
        assert attempts(job.pk) == [("complete", 1, owner)], worker.logs()


def _run(name: str, faults: Faults, start, *, kill: bool) -> None:
    point = POINTS[name]
    install = faults.holding if kill else faults.raising
    fault = install(f"proof_wfault_{name}", point.at)
    fault.arm()
    jobs = _submit(point)
    worker = start(point)

    line = _fire(faults, fault, worker, point, kill=kill)

    if not kill:
        assert f"{MESSAGE} proof_wfault_{name}" in worker.stderr()
    if point.schedules:
        _assert_no_tick_lost(worker)
    else:
        _assert_every_job_ended_once(worker, jobs, point)
    assert worker.running(), f"the worker exited after {line!r}\n{worker.logs()}"
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.logs()


@pytest.mark.parametrize("name", POINTS)
def test_the_worker_recovers_from_a_statement_failing_inside_a_transaction(name, faults, start):
    _run(name, faults, start, kill=False)


@pytest.mark.skipif(TEST_DB == "sqlite", reason="SQLite has no server connection to kill")
@pytest.mark.parametrize("name", POINTS)
def test_the_worker_recovers_from_its_connection_killed_inside_a_transaction(name, faults, start):
    _run(name, faults, start, kill=True)


def test_renewals_refused_past_the_lease_cost_one_interrupted_attempt_and_nothing_more(
    faults, start, tmp_path
):
    # The database refuses every renewal for longer than the lease (a fault that keeps firing):
    # the attempt's lease runs out, its fenced writes and its outcome are refused, and the same
    # worker, still running, resumes the job from its checkpoint once renewals work again.
    fault = faults.raising("proof_wfault_renewals", POINTS["renew"].at, once=False)
    fault.arm()
    job_id = submit("tests.steps", {"steps": 15, "delay": 0.2, "markers": str(tmp_path)}).pk
    worker = start(POINTS["renew"])

    lost = worker.wait_for_log(f"job {job_id} tests.steps attempt=1 epoch=1 outcome=")
    fault.disarm()

    assert "outcome=lease-lost" in lost, worker.logs()
    (refused,) = POINTS["renew"].logged
    assert worker.stderr().count(refused) >= 2  # refused past the 2 s lease
    wait_for(
        lambda: Job.objects.get(pk=job_id).status == JobStatus.COMPLETE,
        "the resumed attempt to complete the job",
        diagnose=worker.logs,
    )
    owner = worker.row().owner_id
    assert attempts(job_id) == [("interrupted", 1, owner), ("complete", 2, owner)]
    row = Job.objects.get(pk=job_id)
    assert json.loads(row.result) == {"done": 15, "attempt": 2}
    interrupted = JobAttempt.objects.get(job_id=job_id, outcome="interrupted")
    checkpoint = json.loads(interrupted.snapshot["checkpoint"])["done"]
    resumed_from = int((tmp_path / f"started-{job_id}-2").read_text())
    assert 0 < resumed_from == checkpoint < 15  # resumed from the first attempt's checkpoint
    assert worker.running(), worker.logs()
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.logs()


def test_a_flush_the_server_refuses_as_a_whole_is_written_in_parts(faults, start, tmp_path):
    # Ten attempts end together, each with a 1 MB proposal, checkpoint and result (within the
    # payload cap): one flush of them is one statement of about 30 MB, more than MariaDB takes
    # by default (max_allowed_packet, 16 MiB), which drops the connection. The completer must
    # still record every outcome, not retry that statement for ever.
    blob = "x" * 1_000_000
    jobs = [
        submit("tests.large", {"blob": blob, "markers": str(tmp_path), "n": n}).pk
        for n in range(10)
    ]
    worker = start(POINTS["flush"], "--concurrency", "10")
    wait_for(
        lambda: len(list(tmp_path.glob("started-*"))) == len(jobs),
        "every attempt to start",
        diagnose=worker.logs,
    )
    (tmp_path / "open-all").touch()

    def done() -> bool:
        return Job.objects.filter(pk__in=jobs, status=JobStatus.COMPLETE).count() == len(jobs)

    wait_for(done, "the ten outcomes to be recorded", diagnose=worker.logs)
    owner = worker.row().owner_id
    for job_id in jobs:
        assert attempts(job_id) == [("complete", 1, owner)], worker.logs()
    results = Job.objects.filter(pk__in=jobs).values_list("result", flat=True)
    assert all(json.loads(result) == {"blob": blob} for result in results)
    assert worker.running(), worker.logs()
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.logs()
