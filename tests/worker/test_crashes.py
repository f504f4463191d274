"""Real ``runjobs`` processes that crash or freeze: the job survives, the stale worker cannot lie.

* SIGKILL mid-job: once the lease expires another worker resumes the ``on_expired="resume"`` job
  from its last checkpoint; the killed attempt is recorded ``interrupted``; the job completes once.
* SIGSTOP past the lease: another worker takes the job over and finishes it; after SIGCONT the
  frozen worker's completion is refused (the result stays the new attempt's, nothing is written)
  and that worker goes on serving other jobs.
* A killed worker's row turns ``stale`` once its heartbeat is older than its lease.

Every worker is a ``python -m django runjobs`` child with a 2 s lease and 0.2 s polling; tests
wait on database rows, marker files and log lines with deadlines, never on blind sleeps.
"""

from __future__ import annotations

import json
import signal
import socket

import pytest

from django_durable_jobs import submit
from django_durable_jobs.models import JobAttempt, JobStatus
from django_durable_jobs.rules.vocabulary import Ownership, WorkerState
from django_durable_jobs.store import DurableJobStore
from tests.support import db_state, wait_for
from tests.worker_support import attempts, checkpoint_done, job, marker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

SIGKILLED = -signal.SIGKILL


def test_sigkill_mid_job_resumes_from_last_checkpoint_and_completes_once(workers, tmp_path):
    steps = 20
    job_id = submit("tests.steps", {"steps": steps, "delay": 0.1, "markers": str(tmp_path)}).pk
    first = workers.start("--concurrency", "1")
    wait_for(lambda: checkpoint_done(job_id) >= 3, "three checkpoints of the first attempt")
    seen_before_kill = checkpoint_done(job_id)
    first_owner = first.row().owner_id

    first.send(signal.SIGKILL)
    assert first.wait() == SIGKILLED
    assert job(job_id).status == JobStatus.RUNNING  # nobody finished it: it waits for a reclaim

    second = workers.start("--concurrency", "1")
    done = wait_for(
        lambda: job(job_id).status == JobStatus.COMPLETE and job(job_id),
        "the second worker to finish the job",
    )
    second_owner = second.row().owner_id

    resumed_from = int(marker(tmp_path, f"started-{job_id}-2"))
    interrupted = JobAttempt.objects.get(job_id=job_id, outcome="interrupted")
    checkpoint_at_reclaim = json.loads(interrupted.snapshot["checkpoint"])["done"]
    assert resumed_from >= seen_before_kill >= 3
    assert resumed_from == checkpoint_at_reclaim  # exactly the last checkpoint, no step lost
    assert marker(tmp_path, f"started-{job_id}-1") == "0"
    assert marker(tmp_path, f"started-{job_id}-3") is None
    second_steps = sorted(
        int(p.name.rsplit("-", 1)[1]) for p in tmp_path.glob(f"step-{job_id}-2-*")
    )
    assert second_steps == list(range(resumed_from + 1, steps + 1))  # nothing redone

    assert attempts(job_id) == [
        ("interrupted", 1, first_owner),
        ("complete", 2, second_owner),
    ]
    assert interrupted.claimed_by == f"worker@{socket.gethostname()}:{first.pid}"
    assert json.loads(done.result) == {"done": steps, "attempt": 2}
    assert (done.attempts, done.fencing_epoch, done.owner_id) == (2, 2, second_owner)
    assert done.progress == 100
    second.wait_for_log(f"job {job_id} tests.steps attempt=2 epoch=2 outcome=complete")


def test_sigstopped_worker_is_refused_after_takeover_and_keeps_serving(workers, tmp_path):
    markers = str(tmp_path)
    job_id = submit("tests.sleep", {"seconds": 1.0, "markers": markers}).pk
    stale = workers.start("--concurrency", "1")
    wait_for(lambda: marker(tmp_path, f"started-{job_id}-1") is not None, "attempt 1 to start")
    stale_row = stale.row()

    stale.stop_between_heartbeats()
    operator = DurableJobStore()
    wait_for(
        lambda: operator.get(job_id).ownership == Ownership.EXPIRED,
        "the frozen worker's lease to expire",
    )
    # tests.sleep holds expired leases for a person: the person asks, a live worker reclaims it.
    assert operator.request_retry(job_id) is True
    rescuer = workers.start("--concurrency", "1")
    finished = wait_for(
        lambda: job(job_id).status == JobStatus.COMPLETE and job(job_id),
        "the second worker to finish the job",
    )
    rescuer_owner = rescuer.row().owner_id
    assert json.loads(finished.result) == {"slept": 1.0, "attempt": 2}
    before = db_state()

    frozen_beat = stale.row().heartbeat_at  # its last beat before SIGSTOP
    stale.send(signal.SIGCONT)
    refused = stale.wait_for_log(f"job {job_id} tests.sleep attempt=1 epoch=1 outcome=")
    assert "outcome=lease-lost" in refused
    assert db_state() == before  # the stale completion wrote nothing
    assert attempts(job_id) == [
        ("interrupted", 1, stale_row.owner_id),
        ("complete", 2, rescuer_owner),
    ]
    assert json.loads(job(job_id).result) == {"slept": 1.0, "attempt": 2}

    # The stale worker is alive again and goes on serving: with the rescuer gone, it runs new work.
    # A beat since SIGCONT: the row read before the stop (stale_row) is older than the last beat
    # before it, so comparing with that passed before the woken worker had written anything.
    wait_for(lambda: stale.row().heartbeat_at > frozen_beat, "a heartbeat after SIGCONT")
    rescuer.send(signal.SIGTERM)
    assert rescuer.wait() == 0
    assert stale.row().state() == WorkerState.ALIVE
    next_id = submit("tests.sleep", {"seconds": 0, "markers": markers}).pk
    served = wait_for(
        lambda: job(next_id).status == JobStatus.COMPLETE and job(next_id),
        "the formerly stale worker to finish a new job",
    )
    assert (served.owner_id, served.claimed_by) == (stale_row.owner_id, stale_row.actor)
    assert attempts(next_id) == [("complete", 1, stale_row.owner_id)]
    assert json.loads(served.result) == {"slept": 0, "attempt": 1}
    assert attempts(job_id)[-1] == ("complete", 2, rescuer_owner)  # still nothing after


def test_sigkilled_worker_row_turns_stale_once_heartbeat_is_older_than_lease(workers, tmp_path):
    job_id = submit("tests.sleep", {"seconds": 30, "markers": str(tmp_path)}).pk
    worker = workers.start("--concurrency", "3")
    row = wait_for(lambda: (r := worker.row()) and r.leases_held > 0 and r, "a lease held")
    assert row.state() == WorkerState.ALIVE
    assert (row.pid, row.host, row.concurrency, row.lease_seconds) == (
        worker.pid,
        socket.gethostname(),
        3,
        2.0,
    )
    assert job(job_id).owner_id == row.owner_id

    worker.send(signal.SIGKILL)
    assert worker.wait() == SIGKILLED
    stale = wait_for(
        lambda: (r := worker.row()).state() == WorkerState.STALE and r, "the row to turn stale"
    )
    assert stale.stopped_at is None  # it never signed off: stale, not stopped
    assert stale.leases_held == 1  # what it held when it vanished: triage can tell
    # Its job is still running with a lease that has run out (renewed with that last heartbeat).
    left = DurableJobStore().get(job_id)
    assert (left.status, left.ownership, left.owner_id) == (
        JobStatus.RUNNING,
        Ownership.EXPIRED,
        row.owner_id,
    )
