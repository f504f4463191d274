"""Faults inside a real ``runjobs`` worker's transactions: it recovers without a restart.

A fault (tests/proof/faults.py) fires while the worker claims, while its completer flushes
outcomes, while a job completes itself with ``ctx.complete_atomically``, while its heartbeat
renews leases, and while its scheduler enqueues a tick: a statement that fails there, and on
PostgreSQL and MariaDB the connection killed there. All five points are armed for one worker
run (a worker's start costs more than the faults): the worker logs each fault, does not exit,
and every job still ends exactly once: one ``complete`` attempt (no lease ran out, so no
``interrupted`` one), one domain row per job, one job per schedule tick with no tick lost. Then
it stops cleanly on SIGTERM.

Three faults last longer: renewals refused past the lease (the attempt is interrupted, recorded
as such, and the same worker resumes the job from its checkpoint), and a completion flush and a
release of unstarted claims too large for MariaDB's packet limit (written in parts instead of
retried for ever).

On SQLite a connection cannot be killed (there is no server); a process killed in a transaction
is ``test_faults.py``'s and ``tests/worker/test_crashes.py``'s subject.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from django_durable_jobs import submit
from django_durable_jobs.models import Job, JobAttempt, JobStatus, Schedule, WorkerProcess
from django_durable_jobs.schedules import tick_key, ticks
from django_durable_jobs.worker.connections import reset_broken_connections
from tests.proof.faults import MESSAGE, Faults, Killer, Point
from tests.settings import TEST_DB
from tests.support import wait_for
from tests.testapp.models import DomainRow
from tests.worker_support import RunJobs, WorkerPool, attempts

pytestmark = [pytest.mark.proof, pytest.mark.processes, pytest.mark.django_db(transaction=True)]

JOB = Job._meta.db_table
ATTEMPT = JobAttempt._meta.db_table
SCHEDULE = Schedule._meta.db_table
BEAT = {"operation": "tests.tick", "every": 1, "catch_up": "all", "overlap": "allow"}


# The operation of the job an attempt row belongs to (a trigger's condition).
OPERATION_OF = f"(SELECT operation FROM {JOB} WHERE id = NEW.job_id)"
RENEWED = (
    "OLD.status = 'running' AND NEW.status = 'running' AND NEW.fencing_epoch = "
    "OLD.fencing_epoch AND NEW.lease_expires_at > OLD.lease_expires_at"
)


@dataclass(frozen=True)
class WorkerPoint:
    """Where a fault fires in the worker, and what the worker logs then (one of ``logged``)."""

    at: Point
    logged: tuple[str, ...]


POINTS = {
    "claim": WorkerPoint(
        Point(JOB, "UPDATE", "OLD.status = 'pending' AND NEW.status = 'running'"),
        ("claim failed: database unavailable",),
    ),
    # One outcome is retried as it is; several are then written one by one.
    "flush": WorkerPoint(
        Point(ATTEMPT, "INSERT", f"NEW.outcome = 'complete' AND {OPERATION_OF} = 'tests.noop'"),
        ("database unavailable; retrying", "outcomes was refused"),
    ),
    "complete_atomically": WorkerPoint(
        Point(
            ATTEMPT,
            "INSERT",
            f"NEW.outcome = 'complete' AND {OPERATION_OF} = 'tests.domain_write'",
        ),
        ("database unavailable; retrying",),
    ),
    "renew": WorkerPoint(
        Point(JOB, "UPDATE", RENEWED), ("heartbeat failed: database unavailable",)
    ),
    "tick": WorkerPoint(
        Point(SCHEDULE, "UPDATE", "NEW.last_job_id IS NOT NULL"), ("scheduler pass failed",)
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
    """Return ``start(*args)``: a runjobs child (with the ``beat`` schedule declared, and
    ``--concurrency 2`` unless ``args`` say otherwise); killed before the faults are dropped."""
    env = {
        **db_settings_env,
        "DJANGO_SETTINGS_MODULE": "tests.settings_schedules",
        "DURABLE_JOBS_TEST_SETTINGS": json.dumps({"SCHEDULES": {"beat": BEAT}}),
    }
    with WorkerPool(env, Path(tmp_path)) as pool:
        yield lambda *args: pool.start(*(args or ("--concurrency", "2")))


def _logged(worker: RunJobs, texts: tuple[str, ...]) -> str | None:
    """Return the first line of the worker's log holding one of ``texts`` (None: none yet)."""
    for line in worker.stderr().splitlines():
        if any(text in line for text in texts):
            return line
    assert worker.running(), f"{worker!r} exited\n{worker.logs()}"
    return None


def _submit_work() -> dict[str, list]:
    """Submit the jobs every point's fault meets: quick ones, domain writes and a long one.

    A ``tests.sleep`` of 2.5 s outlives its 2 s lease unless a renewal after the fault succeeds.
    """
    return {
        "tests.noop": [submit("tests.noop", {"n": n}).pk for n in range(4)],
        "tests.domain_write": [
            submit("tests.domain_write", {"value": "written", "n": n}).pk for n in range(2)
        ],
        "tests.sleep": [submit("tests.sleep", {"seconds": 2.5}).pk],
    }


def _assert_every_job_ended_once(worker: RunJobs, work: dict[str, list]) -> None:
    jobs = [job_id for ids in work.values() for job_id in ids]

    def done() -> bool:
        return Job.objects.filter(pk__in=jobs, status=JobStatus.COMPLETE).count() == len(jobs)

    wait_for(done, f"the {len(jobs)} jobs to complete", diagnose=worker.logs)
    owner = worker.row().owner_id
    for job_id in jobs:
        assert attempts(job_id) == [("complete", 1, owner)], worker.logs()
    written = work["tests.domain_write"]
    assert dict(DomainRow.objects.values_list("job_id", "value")) == dict.fromkeys(
        written, "written"
    )
    for job_id in written:
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


def _recovered(worker: RunJobs, work: dict[str, list]) -> None:
    """Prove every job and tick ended exactly once, the worker still runs and stops cleanly."""
    _assert_every_job_ended_once(worker, work)
    _assert_no_tick_lost(worker)
    assert worker.running(), worker.logs()
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.logs()


def test_the_worker_recovers_from_a_statement_failing_at_each_point(faults, start):
    # Every point's fault is armed at once; each fires at its first row (on SQLite, until the
    # worker logged it and the test disarmed it).
    armed = {
        name: faults.raising(f"proof_wfault_{name}", point.at) for name, point in POINTS.items()
    }
    for fault in armed.values():
        fault.arm()
    work = _submit_work()
    worker = start()

    unseen = dict(armed)

    def disarm_what_was_logged() -> bool:
        log = worker.stderr()
        for name, fault in list(unseen.items()):
            if f"{MESSAGE} {fault.name}" in log:
                fault.disarm()  # on SQLite it fired until now; elsewhere it is spent
                del unseen[name]
        return not unseen

    wait_for(disarm_what_was_logged, "the worker to log every fault", diagnose=worker.logs)
    for point in POINTS.values():
        assert _logged(worker, point.logged), worker.logs()

    _recovered(worker, work)


@pytest.mark.skipif(TEST_DB == "sqlite", reason="SQLite has no server connection to kill")
def test_the_worker_recovers_from_its_connections_killed_at_each_point(faults, start):
    # Every point holds its transaction once; the test kills each connection held there.
    armed = {
        name: faults.holding(f"proof_wfault_{name}", point.at) for name, point in POINTS.items()
    }
    for fault in armed.values():
        fault.arm()
    work = _submit_work()
    with Killer(faults) as killer:
        worker = start()
        killed = killer.kill_until(lambda: all(fault.fired() for fault in armed.values()))

    assert len(killed) == len(POINTS)  # one connection per point
    for name in ("claim", "renew", "tick"):
        assert _logged(worker, POINTS[name].logged), worker.logs()
    log = worker.stderr()  # the completer's and the job thread's, the same words either way
    assert sum(log.count(text) for text in POINTS["flush"].logged) >= 2, worker.logs()
    _recovered(worker, work)


def test_renewals_refused_past_the_lease_cost_one_interrupted_attempt_and_nothing_more(
    faults, start, tmp_path
):
    # The database refuses every renewal for longer than the lease (a fault that keeps firing):
    # the attempt's lease runs out, its fenced writes and its outcome are refused, and the same
    # worker, still running, resumes the job from its checkpoint once renewals work again.
    fault = faults.raising("proof_wfault_renewals", POINTS["renew"].at, once=False)
    fault.arm()
    job_id = submit("tests.steps", {"steps": 15, "delay": 0.2, "markers": str(tmp_path)}).pk
    worker = start()

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
    # Leases of 10 s: writing 30 MB on a loaded machine may take longer than the usual 2 s.
    worker = start("--concurrency", "10", "--lease", "10")
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


def test_unstarted_claims_the_server_refuses_to_release_together_are_released_one_by_one(
    faults, start, tmp_path
):
    # A stopping worker hands back the claims no job thread started, in one statement. With
    # large rows (19 claims of 1 MB proposals) that statement is over MariaDB's default
    # max_allowed_packet: released one at a time, they are pending again at once instead of
    # held until the grace period ends and then left to expire as interrupted attempts.
    blob = "x" * 1_000_000
    jobs = [
        submit("tests.large", {"blob": blob, "markers": str(tmp_path), "n": n}).pk
        for n in range(20)
    ]
    worker = start("--concurrency", "1", "--prefetch", "20", "--grace", "10", "--lease", "10")
    wait_for(
        lambda: (
            Job.objects.filter(status=JobStatus.RUNNING).count() == len(jobs)
            and len(list(tmp_path.glob("started-*"))) == 1
        ),
        "every job claimed and one started",
        diagnose=worker.logs,
    )
    (running,) = [job_id for job_id in jobs if (tmp_path / f"started-{job_id}-1").exists()]

    worker.send(signal.SIGTERM)
    worker.wait_for_log("released 19 claimed job(s) that never started")
    (tmp_path / "open-all").touch()

    assert worker.wait() == 0, worker.logs()
    owner = WorkerProcess.objects.get(pid=worker.pid).owner_id
    assert attempts(running) == [("complete", 1, owner)]
    for job_id in jobs:
        if job_id != running:
            row = Job.objects.get(pk=job_id)
            assert (row.status, row.attempts, row.owner_id) == (JobStatus.PENDING, 0, None)
            assert attempts(job_id) == [("released", 1, owner)]
