"""Four real ``runjobs`` processes drain 2,000 jobs, each completed exactly once.

Every job runs ``tests.domain_write``, which writes one ``DomainRow`` and completes the job in the
same fenced transaction (``ctx.complete_atomically``). The jobs are submitted with ``submit()``
before the workers start; the workers run with ``--burst`` so they exit when nothing is left.
Afterwards:

* there are exactly 2,000 domain rows, one per job (same set of job ids, no duplicates);
* every job is ``complete`` at epoch 1 after one attempt, and has exactly one ``JobAttempt``,
  whose outcome is ``complete``;
* every worker exited 0, claimed some of the work, and marked its worker row stopped;
* no worker logged an error (a "database is locked" on SQLite, a deadlock elsewhere).

This is the contention test of the suite: on SQLite every write serialises on the database lock
(IMMEDIATE transactions, WAL, a 20 s busy timeout), on PostgreSQL and MariaDB the claims collide on
``SKIP LOCKED``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from django_durable_jobs import submit
from django_durable_jobs.models import Job, JobAttempt, JobStatus, WorkerProcess
from tests.settings import REPO_ROOT
from tests.testapp.models import DomainRow

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

JOBS = 2000
WORKERS = 4
CONCURRENCY = 4  # threads per worker (the default): 16 in all, on purpose more than cores
OVERALL_TIMEOUT = 150.0
ERROR_MARKERS = ("Traceback", "ERROR", "database is locked", "Deadlock", "deadlock")


def _start_worker(env: dict[str, str], log: Path) -> subprocess.Popen:
    argv = [
        sys.executable,
        "-m",
        "django",
        "runjobs",
        "--burst",
        "--concurrency",
        str(CONCURRENCY),
        "--lease",
        "30",
        "--poll",
        "0.2",
    ]
    with log.open("w") as out:  # a file, not a pipe: 4,000 log lines must never block a worker
        return subprocess.Popen(
            argv,
            env={**os.environ, **env},
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _wait_all(procs: list[subprocess.Popen], deadline: float) -> list[int | None]:
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.1)
    return [p.poll() for p in procs]


def _kill_all(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_four_workers_complete_two_thousand_domain_writes_exactly_once(db_settings_env, tmp_path):
    job_ids = {
        submit("tests.domain_write", {"value": f"v{i}"}, idempotency_key=f"load-{i}").pk
        for i in range(JOBS)
    }
    assert len(job_ids) == JOBS
    assert Job.objects.filter(status=JobStatus.PENDING).count() == JOBS

    logs = [tmp_path / f"worker-{i}.log" for i in range(WORKERS)]
    procs: list[subprocess.Popen] = []
    started = time.monotonic()
    try:
        procs = [_start_worker(db_settings_env, log) for log in logs]
        codes = _wait_all(procs, started + OVERALL_TIMEOUT)
    finally:
        _kill_all(procs)
    elapsed = time.monotonic() - started
    output = {log.name: log.read_text() for log in logs}

    left = Counter(Job.objects.values_list("status", flat=True))
    assert codes == [0] * WORKERS, (
        f"workers did not all exit 0 within {OVERALL_TIMEOUT:.0f} s (codes {codes}, after "
        f"{elapsed:.1f} s, job statuses {dict(left)}):\n" + _tails(output)
    )

    # Exactly one domain row per job, and no other.
    rows = list(DomainRow.objects.values_list("job_id", flat=True))
    assert len(rows) == JOBS
    assert len(set(rows)) == JOBS
    assert set(rows) == job_ids
    assert {r.value for r in DomainRow.objects.all()} == {f"v{i}" for i in range(JOBS)}

    # Every job complete after one claim, with the receipt of its own row.
    assert left == {JobStatus.COMPLETE: JOBS}
    jobs = list(Job.objects.all())
    assert {j.fencing_epoch for j in jobs} == {1}
    assert {j.attempts for j in jobs} == {1}
    assert all(j.completed_at is not None and j.result for j in jobs)
    assert all(j.owner_id and j.claimed_by.startswith("worker@") for j in jobs)

    # One complete attempt per job, nothing interrupted.
    attempts = list(JobAttempt.objects.values_list("job_id", "outcome", "epoch"))
    assert len(attempts) == JOBS
    assert Counter(job_id for job_id, _, _ in attempts) == Counter(dict.fromkeys(job_ids, 1))
    assert {(outcome, epoch) for _, outcome, epoch in attempts} == {("complete", 1)}

    # Four workers shared the work and signed off cleanly.
    workers = list(WorkerProcess.objects.all())
    assert len(workers) == WORKERS
    assert all(w.stopped_at is not None and w.leases_held == 0 for w in workers)
    per_owner = Counter(j.owner_id for j in jobs)
    assert set(per_owner) == {w.owner_id for w in workers}, per_owner
    assert sum(per_owner.values()) == JOBS

    for name, text in output.items():
        bad = [line for line in text.splitlines() if any(m in line for m in ERROR_MARKERS)]
        assert not bad, f"{name} logged errors:\n" + "\n".join(bad[:20])
        assert text.count(" outcome=complete ") == per_owner[_owner_of(text)]


def _owner_of(log_text: str) -> str:
    """Return the owner id a worker announced in its ``worker ... started (owner X)`` line."""
    for line in log_text.splitlines():
        if " started (owner " in line:
            return line.rsplit("(owner ", 1)[1].rstrip(")")
    raise AssertionError("the worker never logged its start line:\n" + log_text[-2000:])


def _tails(output: dict[str, str], lines: int = 15) -> str:
    return "\n".join(
        f"--- {name} ---\n" + "\n".join(text.splitlines()[-lines:]) for name, text in output.items()
    )
