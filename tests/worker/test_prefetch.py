"""A real ``runjobs`` with a prefetch buffer: claims wait for a job thread holding live leases.

* SIGTERM to a worker with prefetched jobs releases the buffered claims at once, while the running
  job finishes within the grace period: none is left ``running`` to expire. A released job is
  pending again at its claim's epoch, with a ``released`` attempt, and the next worker runs it at
  the next epoch.
* ``--prefetch 0`` claims nothing beyond what the job threads run.
* A cancellation requested for a job still in the buffer reaches it: its ``ctx.cancelled`` is set
  when it starts, and it ends ``cancelled``.

The job that keeps the single job thread busy is ``tests.gate``: it runs until the test creates its
``open-<id>`` marker, so nothing here depends on how long a job sleeps.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from django_durable_jobs import submit
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.rules.vocabulary import WorkerState
from django_durable_jobs.store import DurableJobStore
from tests.support import wait_for
from tests.worker_support import RunJobs, attempts, job, marker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]


def _gated(folder: Path, **payload) -> object:
    """Submit a ``tests.gate`` job that runs first (priority 10) until the test opens it."""
    return submit("tests.gate", {"markers": str(folder), **payload}, priority=10).pk


def _open(folder: Path, job_id) -> None:
    (folder / f"open-{job_id}").write_text("")


def _started(folder: Path, job_id) -> str:
    return wait_for(lambda: marker(folder, f"started-{job_id}-1"), f"{job_id} to start")


def _ends(job_id, status: str) -> Job:
    return wait_for(lambda: (row := job(job_id)).status == status and row, f"{job_id} {status}")


def _heartbeats(worker: RunJobs, count: int) -> None:
    """Wait for ``count`` more heartbeat cycles of ``worker`` (each lease/3 s).

    A cycle renews the leases (reading what their rows say) and then writes the worker row, so
    after two new worker-row heartbeats at least one whole cycle began after this call.
    """
    for _ in range(count):
        seen = worker.row().heartbeat_at
        wait_for(lambda s=seen: worker.row().heartbeat_at != s, f"a heartbeat of {worker.name}")


def test_sigterm_releases_prefetched_claims_and_leaves_none_to_expire(workers, tmp_path):
    first = _gated(tmp_path)
    prefetched = [
        submit("tests.sleep", {"seconds": 0.2, "n": n, "markers": str(tmp_path)}).pk
        for n in range(3)
    ]
    worker = workers.start("--lease", "3", "--concurrency", "1", "--prefetch", "3", "--grace", "15")
    _started(tmp_path, first)
    row = wait_for(lambda: (r := worker.row()).leases_held == 4 and r, "four leases in the row")
    owner = row.owner_id
    held = Job.objects.filter(status=JobStatus.RUNNING, owner_id=owner)
    assert set(held.values_list("pk", flat=True)) == {first, *prefetched}

    worker.send(signal.SIGTERM)
    # The buffered claims are handed back at once, while the running job still runs.
    wait_for(
        lambda: all(job(j).status == JobStatus.PENDING for j in prefetched),
        "the prefetched claims to be released",
    )
    worker.wait_for_log("released 3 claimed job(s) that never started")
    assert worker.running() and job(first).status == JobStatus.RUNNING
    _open(tmp_path, first)
    assert worker.wait() == 0, worker.logs()

    assert not Job.objects.filter(status=JobStatus.RUNNING).exists()
    done = job(first)
    assert (done.status, done.attempts, done.fencing_epoch) == (JobStatus.COMPLETE, 1, 1)
    assert json.loads(done.result) == {"opened": True, "attempt": 1}
    assert attempts(first) == [("complete", 1, owner)]
    for job_id in prefetched:
        pending = job(job_id)
        assert (pending.status, pending.attempts, pending.fencing_epoch) == ("pending", 0, 1)
        assert (pending.owner_id, pending.lease_expires_at) == (None, None)
        assert pending.ownership == "unclaimed"
        assert attempts(job_id) == [("released", 1, owner)]
        assert marker(tmp_path, f"started-{job_id}-1") is None  # no code of it ran
    stopped = worker.row()
    assert (stopped.state(), stopped.leases_held) == (WorkerState.STOPPED, 0)

    code, second = workers.run("--burst", "--concurrency", "1")
    assert code == 0, second.logs()
    successor = second.row().owner_id
    assert attempts(first) == [("complete", 1, owner)]  # finished work is not run again
    for job_id in prefetched:
        ran = job(job_id)
        assert (ran.status, ran.attempts, ran.fencing_epoch) == (JobStatus.COMPLETE, 1, 2)
        assert json.loads(ran.result) == {"slept": 0.2, "attempt": 1}
        assert attempts(job_id) == [("released", 1, owner), ("complete", 2, successor)]
        assert marker(tmp_path, f"started-{job_id}-1") is not None


def test_prefetch_zero_claims_nothing_beyond_the_running_job(workers, tmp_path):
    first = _gated(tmp_path)
    others = [submit("tests.noop", {"n": n}).pk for n in range(2)]
    worker = workers.start("--lease", "3", "--concurrency", "1", "--prefetch", "0", "--burst")
    _started(tmp_path, first)
    wait_for(lambda: worker.row().leases_held == 1, "one lease in the row")

    _heartbeats(worker, 2)  # seconds of polling every 0.2 s with a busy job thread
    assert worker.row().leases_held == 1
    assert list(Job.objects.filter(status=JobStatus.RUNNING).values_list("pk", flat=True)) == [
        first
    ]
    for job_id in others:
        waiting = job(job_id)
        assert (waiting.status, waiting.fencing_epoch, waiting.attempts) == ("pending", 0, 0)
        assert (waiting.owner_id, waiting.ownership) == (None, "unclaimed")
    _open(tmp_path, first)
    assert worker.wait() == 0, worker.logs()  # --burst: the rest ran one by one, then it exited

    owner = worker.row().owner_id
    for job_id in [first, *others]:
        ran = job(job_id)
        assert (ran.status, ran.fencing_epoch, ran.attempts) == (JobStatus.COMPLETE, 1, 1)
        assert attempts(job_id) == [("complete", 1, owner)]  # nothing was released


def test_cancellation_of_a_prefetched_job_is_set_when_it_starts(workers, tmp_path):
    first = _gated(tmp_path)
    buffered = submit("tests.gate", {"markers": str(tmp_path), "seconds": 20}).pk
    worker = workers.start("--concurrency", "1", "--prefetch", "1")
    _started(tmp_path, first)
    wait_for(lambda: job(buffered).status == JobStatus.RUNNING, "the second job to be prefetched")
    owner = worker.wait_for_row().owner_id
    assert job(buffered).owner_id == owner

    assert DurableJobStore(actor="operator").request_cancel(buffered) is True
    _heartbeats(worker, 2)  # one renewal read the request while the job waited in the buffer
    assert marker(tmp_path, f"started-{buffered}-1") is None
    _open(tmp_path, first)

    cancelled = _ends(buffered, JobStatus.CANCELLED)
    assert marker(tmp_path, f"started-{buffered}-1") == "cancelled=True"
    assert marker(tmp_path, f"cancelled-{buffered}") is not None
    assert cancelled.cancellation_requested_at is not None
    assert (cancelled.attempts, cancelled.fencing_epoch) == (1, 1)
    assert attempts(buffered) == [("cancelled", 1, owner)]
    assert job(first).status == JobStatus.COMPLETE
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.logs()
    assert not Job.objects.filter(status=JobStatus.RUNNING).exists()
