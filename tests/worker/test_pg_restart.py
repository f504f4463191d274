"""A ``runjobs`` worker survives a PostgreSQL server restart, idle or mid-job, and loses nothing.

PostgreSQL only: the point is a real server restart (``pg_ctlcluster ... restart``, fast shutdown:
every connection is terminated, the test database itself survives). The module restarts the
server exactly twice, quickly, and always leaves it running, because other test runs on the same
machine share the server.

* Idle worker: after the restart its LISTEN connection comes back (a new backend runs
  ``LISTEN``), its worker row is heartbeating again, and a job submitted afterwards is claimed
  through NOTIFY well before the (long) poll interval and completes once.
* Worker running a checkpointing ``tests.steps`` job (lease 5 s) across the restart: the job ends
  ``complete`` exactly once, with every step done, and its attempt history is consistent (one
  ``complete`` attempt; any earlier attempt ``interrupted``; one row per claim).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from django.db import DatabaseError, connection, connections
from django.utils import timezone

from django_durable_jobs import submit
from django_durable_jobs.database.dbvendor import WORK_CHANNEL
from django_durable_jobs.models import Job, JobAttempt, JobStatus, WorkerProcess
from tests.settings import TEST_DB
from tests.support import REPO_ROOT, wait_for

# Restarting the machine's PostgreSQL disturbs everything else using it: only when asked.
RESTART_ALLOWED = os.environ.get("DURABLE_JOBS_TEST_RESTART_SERVERS") == "1"

pytestmark = [
    pytest.mark.skipif(
        TEST_DB != "postgresql",
        reason="restarts the PostgreSQL server; only meaningful with DURABLE_JOBS_TEST_DB=postgresql",
    ),
    pytest.mark.skipif(
        not RESTART_ALLOWED,
        reason="restarts the PostgreSQL server: set DURABLE_JOBS_TEST_RESTART_SERVERS=1 to run it "
        "(.ci/run does)",
    ),
    pytest.mark.django_db(transaction=True),
    pytest.mark.processes,
]

LEASE = 5.0
POLL = 30.0  # long, so that only a NOTIFY can wake the worker quickly
TERMINAL = {JobStatus.COMPLETE, JobStatus.FAILED, JobStatus.CANCELLED}

T = TypeVar("T")


# -- the server ----------------------------------------------------------------------------------


def _cluster_version() -> str:
    versions = sorted(
        (v for v in os.listdir("/etc/postgresql") if Path("/etc/postgresql", v, "main").is_dir()),
        key=lambda v: [int(p) for p in v.split(".") if p.isdigit()],
    )
    assert versions, "no PostgreSQL cluster named 'main' under /etc/postgresql"
    return versions[-1]


def _pg_ready() -> bool:
    probe = ["pg_isready", "-q", "-h", "127.0.0.1", "-p", "5432"]
    return subprocess.run(probe, timeout=10).returncode == 0


def _wait_pg_ready(seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _pg_ready():
            return True
        time.sleep(0.1)
    return False


def restart_postgresql() -> float:
    """Restart the server, wait until it accepts connections; return the seconds it took.

    Whatever happens, the server is running when this returns (or the test fails saying so).
    """
    version = _cluster_version()
    started = time.monotonic()
    try:
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
            check=True,
            timeout=60,
            capture_output=True,
        )
    finally:
        if not _wait_pg_ready(30):
            subprocess.run(
                ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start"],
                timeout=60,
            )
            assert _wait_pg_ready(30), "PostgreSQL did not come back after the restart"
        # This process's connections died with the server: let Django open new ones.
        for conn in connections.all(initialized_only=True):
            conn.close()
    return time.monotonic() - started


# -- the worker ----------------------------------------------------------------------------------


class WorkerProcessUnderTest:
    """One ``runjobs`` child whose output goes to a file (read it with ``log()``)."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        argv = [sys.executable, "-m", "django", "runjobs", "--concurrency", "2"]
        argv += ["--lease", str(LEASE), "--poll", str(POLL), "--grace", "10"]
        with log_path.open("w") as out:
            self.proc = subprocess.Popen(
                argv, env={**os.environ, **env}, cwd=REPO_ROOT, stdout=out, stderr=out
            )

    def log(self) -> str:
        return self.log_path.read_text()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int:
        """SIGTERM and wait for a clean exit; return the exit code."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait(timeout=10)

    def wait_until(self, condition: Callable[[], T], what: str, *, timeout: float) -> T:
        """Poll ``condition`` until it is truthy; a database error counts as not yet.

        The server may be down or just back: a failed connection is closed so that the next poll
        opens a new one. A timeout's message carries the worker's log.
        """

        def attempt() -> T | None:
            try:
                return condition()
            except DatabaseError:
                connection.close()
                return None

        return wait_for(
            attempt,
            what,
            timeout=timeout,
            interval=0.05,
            diagnose=lambda: (
                f"worker alive={self.alive()}\n--- worker log ---\n{self.log()[-4000:]}"
            ),
        )


@pytest.fixture
def worker(db_settings_env, tmp_path) -> Iterator[WorkerProcessUnderTest]:
    child = WorkerProcessUnderTest(db_settings_env, tmp_path / "worker.log")
    try:
        child.wait_until(lambda: _listen_backends(), "the worker's LISTEN connection", timeout=30)
        child.wait_until(lambda: WorkerProcess.objects.exists(), "the worker's row", timeout=10)
        yield child
    finally:
        child.kill()


def _listen_backends() -> set[int]:
    """Return the server pids of this database's sessions that ran LISTEN on the work channel."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query = %s",
            [f"LISTEN {WORK_CHANNEL}"],
        )
        return {pid for (pid,) in cursor.fetchall()}


def _terminal(job_id) -> Job | None:
    job = Job.objects.get(pk=job_id)
    return job if job.status in TERMINAL else None


def _assert_clean_exit(child: WorkerProcessUnderTest) -> None:
    assert child.stop() == 0, child.log()[-4000:]
    row = WorkerProcess.objects.get()
    assert row.stopped_at is not None
    assert row.leases_held == 0


# -- the tests -------------------------------------------------------------------------------------


def test_idle_worker_reconnects_and_is_woken_by_notify_after_a_restart(worker):
    # Before: NOTIFY wakes the idle worker (claimed long before the 30 s poll).
    before = submit("tests.steps", {"steps": 1}, idempotency_key="before-restart")
    worker.wait_until(
        lambda: _terminal(before.pk), "the job submitted before the restart", timeout=10
    )
    listeners = _listen_backends()
    assert len(listeners) == 1

    downtime_started = timezone.now()
    took = restart_postgresql()
    assert took < 30

    # The listener reconnects on its own (a new server process runs LISTEN) ...
    new_listeners = worker.wait_until(
        lambda: _listen_backends() - listeners, "LISTEN on a new connection", timeout=20
    )
    assert len(new_listeners) == 1 and len(_listen_backends()) == 1
    # ... and so does the heartbeat loop, which keeps the worker row fresh.
    worker.wait_until(
        lambda: WorkerProcess.objects.filter(heartbeat_at__gt=downtime_started).exists(),
        "a worker-row heartbeat after the restart",
        timeout=3 * LEASE,
    )
    assert worker.alive()

    submitted = time.monotonic()
    after = submit("tests.steps", {"steps": 2}, idempotency_key="after-restart")
    job = worker.wait_until(
        lambda: _terminal(after.pk), "the job submitted after the restart", timeout=20
    )
    waited = time.monotonic() - submitted
    assert waited < POLL / 2, f"took {waited:.1f} s: woken by polling, not by NOTIFY"

    assert job.status == JobStatus.COMPLETE
    assert json.loads(job.result) == {"done": 2, "attempt": 1}
    assert (job.attempts, job.fencing_epoch) == (1, 1)
    assert list(JobAttempt.objects.filter(job=job).values_list("outcome", "epoch")) == [
        ("complete", 1)
    ]
    assert Job.objects.get(pk=before.pk).status == JobStatus.COMPLETE
    log = worker.log()
    assert "LISTEN connection lost" in log and "LISTEN connection restored" in log, log[-4000:]
    _assert_clean_exit(worker)


def test_job_running_across_a_restart_completes_exactly_once(worker, tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    steps = 12
    job = submit(
        "tests.steps",
        {"steps": steps, "delay": 0.4, "markers": str(markers)},
        idempotency_key="across-restart",
    )
    # Restart in the middle of the run: two steps done, ten to go (about four seconds).
    worker.wait_until(
        lambda: (markers / f"step-{job.pk}-1-2").exists(), "the job's second step", timeout=20
    )

    took = restart_postgresql()
    assert took < LEASE * 6

    done = worker.wait_until(lambda: _terminal(job.pk), "the job to end", timeout=60)
    assert done.status == JobStatus.COMPLETE, (
        f"the job ended {done.status} ({done.error}); a database restart shorter than the "
        f"lease must not end the attempt (restart took {took:.1f} s)\n{worker.log()[-4000:]}"
    )
    result = json.loads(done.result)
    assert result == {"done": steps, "attempt": done.attempts}
    assert json.loads(done.checkpoint) == {"done": steps}
    assert done.fencing_epoch == done.attempts
    assert 1 <= done.attempts <= 2

    # One complete attempt; anything before it was interrupted (its lease ran out in the outage).
    history = list(
        JobAttempt.objects.filter(job=done).order_by("epoch").values_list("epoch", "outcome")
    )
    assert len(history) == done.attempts
    assert history[-1] == (done.attempts, "complete")
    assert all(outcome == "interrupted" for _, outcome in history[:-1])
    assert [epoch for epoch, _ in history] == list(range(1, done.attempts + 1))

    # The worker carries on: another job completes, then it stops cleanly.
    next_job = submit("tests.steps", {"steps": 1}, idempotency_key="after-running-restart")
    worker.wait_until(lambda: _terminal(next_job.pk), "a job after the restart", timeout=20)
    assert Job.objects.get(pk=next_job.pk).status == JobStatus.COMPLETE
    assert worker.alive()
    _assert_clean_exit(worker)
