"""Real ``runjobs`` processes receiving requests and signals, and the options that end them.

* A cancellation requested from another process (this test process) reaches the running executor
  within a heartbeat interval and the job ends ``cancelled``; a job that had already completed
  stays ``complete``.
* SIGTERM: running jobs shorter than ``--grace`` finish and the worker exits 0 with its row
  ``stopped``; a job longer than the grace keeps a lease that then expires (never ``running``
  without one); a second SIGTERM requests cancellation and the worker exits 0.
* The worker row is ``alive`` with pid, host, concurrency and leases held while it works.
* ``--burst``, ``--max-jobs``, an unknown ``--operation`` and ``--processes 2``.

Every worker is a ``python -m django runjobs`` child with a 2 s lease (3 s where a heartbeat
interval is measured) and 0.2 s polling; tests wait on rows, marker files and log lines.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from django_durable_jobs import submit
from django_durable_jobs.models import Job, JobStatus, WorkerProcess
from django_durable_jobs.rules.vocabulary import Ownership, WorkerState
from django_durable_jobs.store import DurableJobStore
from tests.support import db_state, wait_for
from tests.worker_support import attempts, job, marker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]


def _started(folder: Path, *job_ids) -> None:
    for job_id in job_ids:
        wait_for(
            lambda j=job_id: marker(folder, f"started-{j}-1") is not None, f"{job_id} to start"
        )


def _ends(job_id, status: str) -> Job:
    return wait_for(lambda: (row := job(job_id)).status == status and row, f"{job_id} {status}")


def _no_running_job_without_lease() -> None:
    running = Job.objects.filter(status=JobStatus.RUNNING)
    assert not running.filter(lease_expires_at__isnull=True).exists()
    assert not running.filter(owner_id__isnull=True).exists()


# -- cancellation from another process ------------------------------------------------------------


def test_cancellation_request_reaches_running_executor_within_a_heartbeat(workers, tmp_path):
    lease = 3.0  # heartbeat every 1 s
    worker = workers.start("--lease", str(lease), "--concurrency", "2")
    finished_id = submit("tests.steps", {"steps": 1, "markers": str(tmp_path)}).pk
    finished = _ends(finished_id, JobStatus.COMPLETE)
    job_id = submit("tests.wait_cancel", {"seconds": 30, "markers": str(tmp_path)}).pk
    _started(tmp_path, job_id)
    operator = DurableJobStore(actor="operator")

    assert operator.request_cancel(job_id) is True
    requested = time.monotonic()
    wait_for(lambda: marker(tmp_path, f"cancelled-{job_id}") is not None, "the executor to stop")
    noticed = time.monotonic() - requested
    cancelled = _ends(job_id, JobStatus.CANCELLED)

    assert noticed < lease, f"the executor saw the request after {noticed:.2f} s"
    assert cancelled.cancellation_requested_at is not None
    assert cancelled.completed_at is not None and cancelled.lease_expires_at is not None
    assert attempts(job_id) == [("cancelled", 1, worker.row().owner_id)]
    worker.wait_for_log(f"job {job_id} tests.wait_cancel attempt=1 epoch=1 outcome=cancelled")

    # A job that completed before the request: the request is refused and changes nothing.
    before = db_state()
    assert operator.request_cancel(finished_id) is False
    assert db_state() == before
    kept = job(finished_id)
    assert (kept.status, kept.cancellation_requested_at) == (JobStatus.COMPLETE, None)
    assert kept.result == finished.result and json.loads(kept.result) == {"done": 1, "attempt": 1}


# -- SIGTERM ------------------------------------------------------------------------------------


def test_sigterm_lets_short_jobs_finish_and_exits_zero_with_row_stopped(workers, tmp_path):
    markers = str(tmp_path)
    first = submit("tests.sleep", {"seconds": 2, "n": 1, "markers": markers}).pk
    second = submit("tests.sleep", {"seconds": 2, "n": 2, "markers": markers}).pk
    worker = workers.start("--concurrency", "2", "--grace", "15")
    _started(tmp_path, first, second)
    # No free job thread: claimed into the prefetch buffer, never started, released at SIGTERM.
    waiting = submit("tests.noop", {"n": 3}).pk

    row = worker.row()
    assert row.state() == WorkerState.ALIVE
    assert (row.pid, row.host, row.concurrency, row.stopped_at) == (
        worker.pid,
        socket.gethostname(),
        2,
        None,
    )
    row = wait_for(lambda: (r := worker.row()).leases_held == 3 and r, "three leases in the row")
    assert row.state() == WorkerState.ALIVE
    assert job(waiting).status == JobStatus.RUNNING  # claimed, waiting for a job thread

    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.logs()

    for job_id in (first, second):
        done = job(job_id)
        assert done.status == JobStatus.COMPLETE, worker.logs()
        assert json.loads(done.result) == {"slept": 2, "attempt": 1}
        assert attempts(job_id) == [("complete", 1, row.owner_id)]
    pending = job(waiting)
    assert (pending.status, pending.attempts, pending.owner_id) == (JobStatus.PENDING, 0, None)
    assert (pending.lease_expires_at, pending.fencing_epoch) == (None, 1)
    assert attempts(waiting) == [("released", 1, row.owner_id)]
    assert pending.ownership == "unclaimed"
    stopped = worker.row()
    assert stopped.stopped_at is not None and stopped.state() == WorkerState.STOPPED
    assert (stopped.leases_held, stopped.stopping) == (0, True)
    _no_running_job_without_lease()


def test_sigterm_past_grace_leaves_the_job_with_a_lease_that_expires(workers, tmp_path):
    grace, lease = 1.0, 2.0
    job_id = submit("tests.sleep", {"seconds": 60, "markers": str(tmp_path)}).pk
    worker = workers.start("--grace", str(grace), "--concurrency", "1")
    _started(tmp_path, job_id)
    owner = worker.row().owner_id

    signalled = time.monotonic()
    worker.send(signal.SIGTERM)
    assert worker.wait(timeout=grace + 10) == 0, worker.logs()
    took = time.monotonic() - signalled
    assert grace <= took < grace + 2.5, f"exited {took:.2f} s after SIGTERM"
    exited_at = timezone.now()

    left = job(job_id)
    assert (left.status, left.owner_id, left.fencing_epoch) == (JobStatus.RUNNING, owner, 1)
    assert left.lease_expires_at is not None
    assert left.lease_expires_at <= exited_at + timedelta(seconds=lease)  # it will expire
    assert attempts(job_id) == []  # no outcome invented
    assert "grace period over" in worker.stderr()
    assert worker.row().state() == WorkerState.STOPPED
    _no_running_job_without_lease()
    operator = DurableJobStore()
    wait_for(lambda: operator.get(job_id).ownership == Ownership.EXPIRED, "the lease to expire")
    assert job(job_id).status == JobStatus.RUNNING  # uncertain, never relabelled failed


def test_second_sigterm_requests_cancellation_and_exits_zero(workers, tmp_path):
    markers = str(tmp_path)
    ids = [
        submit("tests.wait_cancel", {"seconds": 60, "n": n, "markers": markers}).pk
        for n in range(2)
    ]
    worker = workers.start("--concurrency", "2", "--grace", "60")
    _started(tmp_path, *ids)
    owner = worker.row().owner_id

    worker.send(signal.SIGTERM)
    worker.wait_for_log("stopping: 2 job(s) still running")
    assert worker.running()  # the grace period lets them run on
    signalled = time.monotonic()
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.logs()
    assert time.monotonic() - signalled < 10  # far less than the 60 s grace

    for job_id in ids:
        ended = job(job_id)
        assert ended.status == JobStatus.CANCELLED, (ended.status, ended.error, worker.logs())
        assert ended.cancellation_requested_at is not None
        assert marker(tmp_path, f"cancelled-{job_id}") is not None
        assert attempts(job_id) == [("cancelled", 1, owner)]
    assert worker.row().state() == WorkerState.STOPPED
    _no_running_job_without_lease()


# -- options ------------------------------------------------------------------------------------


def test_burst_runs_what_is_claimable_then_exits_zero(workers):
    code, worker = workers.run("--burst")  # nothing at all to do
    assert code == 0, worker.logs()
    ids = [submit("tests.noop", {"n": n}).pk for n in range(3)]
    later = submit("tests.noop", {"n": "later"}, run_after=timezone.now() + timedelta(hours=1)).pk

    code, worker = workers.run("--burst")
    assert code == 0, worker.logs()
    assert [job(i).status for i in ids] == [JobStatus.COMPLETE] * 3
    assert job(later).status == JobStatus.PENDING  # not claimable yet: not waited for
    assert worker.row().state() == WorkerState.STOPPED


def test_max_jobs_exits_after_that_many_jobs(workers):
    ids = [submit("tests.noop", {"n": n}).pk for n in range(3)]
    code, worker = workers.run("--max-jobs", "2", "--concurrency", "4")
    assert code == 0, worker.logs()
    statuses = sorted(job(i).status for i in ids)
    assert statuses == [JobStatus.COMPLETE, JobStatus.COMPLETE, JobStatus.PENDING]
    assert worker.row().state() == WorkerState.STOPPED


def test_a_job_raising_system_exit_fails_and_its_thread_runs_on(workers):
    # Raised on, SystemExit ended the only job thread and left its job held, running, for as
    # long as the worker lived: the other job never ran and --burst never ended.
    exits = submit("tests.fail", {"exit": 3}).pk
    other = submit("tests.noop", {"beside": "exit"}).pk
    code, worker = workers.run("--burst", "--concurrency", "1", "--prefetch", "0")
    assert code == 0, worker.logs()
    assert job(exits).status == JobStatus.FAILED
    assert job(exits).error.startswith("SystemExit"), job(exits).error
    assert job(other).status == JobStatus.COMPLETE


def test_unknown_operation_is_refused_before_starting(workers):
    code, worker = workers.run("--operation", "tests.noop", "--operation", "nope.missing")
    assert code != 0
    err = worker.stderr()
    assert "Unknown operation(s): nope.missing." in err
    assert "Registered operations:" in err and "tests.noop" in err
    assert not WorkerProcess.objects.exists()  # refused before it registered


def test_processes_runs_two_workers_and_sigterm_to_parent_stops_both(workers):
    parent = workers.start("--processes", "2", "--concurrency", "1")

    def two_rows() -> list[WorkerProcess] | None:
        assert parent.running(), f"the parent exited ({parent.proc.returncode})\n{parent.logs()}"
        rows = list(WorkerProcess.objects.filter(stopped_at__isnull=True))
        return rows if len(rows) == 2 else None

    rows = wait_for(two_rows, "two worker rows")
    pids = {row.pid for row in rows}
    assert len(pids) == 2 and parent.pid not in pids
    assert all(row.state() == WorkerState.ALIVE for row in rows)
    for pid in pids:
        status = Path(f"/proc/{pid}/status").read_text()
        assert f"PPid:\t{parent.pid}\n" in status  # children of the parent we started
    ids = [submit("tests.noop", {"n": n}).pk for n in range(4)]
    for job_id in ids:
        _ends(job_id, JobStatus.COMPLETE)

    parent.send(signal.SIGTERM)
    assert parent.wait() == 0, parent.logs()
    stopped = WorkerProcess.objects.filter(pid__in=pids)
    assert [row.state() for row in stopped] == [WorkerState.STOPPED] * 2
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
    assert {job(i).owner_id for i in ids} <= {row.owner_id for row in rows}


# Two children that claim one job at a time, so two jobs run one in each.
ONE_JOB_EACH = ("--processes", "2", "--concurrency", "1", "--prefetch", "0")


def _children(parent) -> list[WorkerProcess]:
    def two_rows() -> list[WorkerProcess] | None:
        assert parent.running(), f"the parent exited ({parent.proc.returncode})\n{parent.logs()}"
        rows = list(WorkerProcess.objects.filter(stopped_at__isnull=True))
        return rows if len(rows) == 2 else None

    return wait_for(two_rows, "two worker rows")


@pytest.mark.parametrize("children_first", [True, False], ids=["children-first", "parent-first"])
def test_processes_under_a_service_manager_that_signals_every_process_cancel_nothing(
    workers, tmp_path, children_first
):
    """systemd's default KillMode=control-group sends SIGTERM to the parent and every child at
    once; the parent passes its own on. Each child must stop once: its jobs finish, none is
    cancelled."""
    markers = str(tmp_path)
    ids = [submit("tests.sleep", {"seconds": 3, "n": n, "markers": markers}).pk for n in range(2)]
    parent = workers.start(*ONE_JOB_EACH, "--grace", "30")
    children = _children(parent)
    _started(tmp_path, *ids)

    pids = [row.pid for row in children]
    for pid in [*pids, parent.pid] if children_first else [parent.pid, *pids]:
        os.kill(pid, signal.SIGTERM)
    assert parent.wait() == 0, parent.logs()

    for job_id in ids:
        done = job(job_id)
        assert done.status == JobStatus.COMPLETE, (done.status, done.error, parent.logs())
        assert done.cancellation_requested_at is None
    assert "cancellation requested" not in parent.stderr()
    stopped = WorkerProcess.objects.filter(pid__in=pids)
    assert [row.state() for row in stopped] == [WorkerState.STOPPED] * 2


def test_processes_pass_a_second_signal_on_as_cancellation(workers, tmp_path):
    markers = str(tmp_path)
    ids = [
        submit("tests.wait_cancel", {"seconds": 60, "n": n, "markers": markers}).pk
        for n in range(2)
    ]
    parent = workers.start(*ONE_JOB_EACH, "--grace", "60")
    _children(parent)
    _started(tmp_path, *ids)

    parent.send(signal.SIGTERM)
    wait_for(
        lambda: parent.stderr().count("stopping: 1 job(s) still running") == 2,
        "both children to stop claiming",
    )
    assert parent.running()  # the grace period lets the jobs run on
    signalled = time.monotonic()
    parent.send(signal.SIGTERM)
    assert parent.wait() == 0, parent.logs()
    assert time.monotonic() - signalled < 10  # far less than the 60 s grace
    for job_id in ids:
        ended = job(job_id)
        assert ended.status == JobStatus.CANCELLED, (ended.status, ended.error, parent.logs())
        assert marker(tmp_path, f"cancelled-{job_id}") is not None
