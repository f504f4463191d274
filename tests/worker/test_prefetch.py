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
import re
import signal
import statistics
from collections import Counter
from pathlib import Path

import pytest

from django_durable_jobs import submit
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.rules.vocabulary import WorkerState
from django_durable_jobs.store import DurableJobStore
from django_durable_jobs.worker.pace import RECENT, SHORT_SECONDS, Pace
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


# -- the buffer grows for short jobs (pace.py) --------------------------------------------------


@pytest.mark.parametrize(
    ("prefetch", "held"),
    [
        # More than 2 + 2, up to all 20 (as many as its threads run in 50 ms at the pace seen).
        pytest.param((), range(2 + 2 + 1, 2 + 20 + 1), id="grows-for-short-jobs"),
        # Up to 2 + 2; 3 when the last claim left one buffered (it waits for half the room).
        pytest.param(("--prefetch", "2"), range(2 + 1, 2 + 2 + 1), id="prefetch-given-is-kept"),
    ],
)
def test_a_backlog_of_short_jobs_grows_the_buffer_whose_leases_live_until_sigterm_releases_it(
    workers, tmp_path, prefetch, held
):
    """Thirty ``tests.gate`` jobs already open run first and teach the worker that the operation
    runs short; two closed ones then keep both job threads busy while twenty open ones wait.

    Without ``--prefetch`` the worker holds more of the twenty in its buffer than its two
    threads plus the default prefetch of two, their leases are renewed past their first expiry,
    and SIGTERM releases every one; with ``--prefetch 2`` it holds two at most.
    """

    def opened(priority: int) -> object:
        job_id = submit("tests.gate", {"markers": str(tmp_path)}, priority=priority).pk
        _open(tmp_path, job_id)
        return job_id

    quick = [opened(10) for _ in range(30)]
    busy = [_gated(tmp_path, seconds=60) for _ in range(2)]
    Job.objects.filter(pk__in=busy).update(priority=5)  # after the quick ones, before the rest
    backlog = [opened(1) for _ in range(20)]
    worker = workers.start("--lease", "3", "--concurrency", "2", "--grace", "15", *prefetch)
    for job_id in busy:
        _started(tmp_path, job_id)
    owner = worker.wait_for_row().owner_id
    mine = Job.objects.filter(status=JobStatus.RUNNING, owner_id=owner)
    grows = not prefetch  # only then does the test's premise need tests.gate seen short
    try:
        wait_for(lambda: mine.count() >= held.start, f"{held.start} jobs held", timeout=15)
    except AssertionError:
        if grows:
            _skip_unless_short(worker, quick, held.start)
        raise
    _heartbeats(worker, 2)  # seconds of polling with both job threads busy: nothing more held
    if grows and mine.count() < held.start:
        _skip_unless_short(worker, quick, held.start)
    assert mine.count() in held
    assert all(job(j).status == JobStatus.COMPLETE for j in quick)
    buffered = set(mine.values_list("pk", flat=True)) - set(busy)
    assert buffered <= set(backlog) and len(buffered) == mine.count() - 2
    assert not any(marker(tmp_path, f"started-{j}-1") for j in buffered)

    # Buffered past the lease of their claim: renewed with the rest, still this worker's.
    claimed_until = max(mine.values_list("lease_expires_at", flat=True))
    wait_for(lambda: DurableJobStore().clock() > claimed_until, "the claim's lease to pass")
    _heartbeats(worker, 1)
    assert set(mine.values_list("pk", flat=True)) == {*busy, *buffered}
    assert all(row.lease_expires_at > claimed_until for row in mine)

    worker.send(signal.SIGTERM)
    worker.wait_for_log(f"released {len(buffered)} claimed job(s) that never started")
    for job_id in busy:
        _open(tmp_path, job_id)
    assert worker.wait() == 0, worker.logs()
    for job_id in buffered:
        released = job(job_id)
        assert (released.status, released.attempts, released.owner_id) == ("pending", 0, None)
        assert attempts(job_id) == [("released", 1, owner)]
    assert [job(j).status for j in busy] == [JobStatus.COMPLETE] * 2
    assert not Job.objects.filter(status=JobStatus.RUNNING).exists()


def _skip_unless_short(worker: RunJobs, quick: list, wanted: int) -> None:
    """Skip when the pace this worker saw ``tests.gate`` run at holds fewer than ``wanted`` jobs:
    its buffer then rightly kept to the slot count. The worker logs each run's duration (to the
    millisecond); fed to a ``Pace`` like the worker's, they give the same decision. On a machine
    loaded enough (CI runs four suites on two cores), a run of a few file operations can take
    longer than the 5 ms that makes an operation short, or one stalled run can raise the mean
    that sizes the buffer. Otherwise the buffer should have grown: return, and the caller's
    assertion fails."""
    pattern = re.compile(
        r"job (\S+) tests\.gate attempt=1 epoch=1 outcome=complete duration=([\d.]+)s"
    )
    ids = {str(job_id) for job_id in quick}
    runs = [float(d) for j, d in pattern.findall(worker.stderr()) if j in ids]
    if not runs:  # no run logged as expected: not a matter of load
        return
    pace = Pace(concurrency=2, prefetch=None)
    for seconds in runs:
        pace.ran("tests.gate", seconds)
    _, hold = pace.short(["tests.gate"])
    if hold < wanted:
        recent = runs[-RECENT:]
        pytest.skip(
            f"tests.gate's last {len(recent)} runs took {statistics.median(recent) * 1000:.0f} ms "
            f"(median) and {statistics.fmean(recent) * 1000:.0f} ms (mean): at that pace the "
            f"worker holds {hold} jobs, fewer than the {wanted} this test needs (short is "
            f"{SHORT_SECONDS * 1000:g} ms at most); the machine was too loaded for this worker "
            "to see it run short"
        )


def test_jobs_that_run_longer_than_short_are_claimed_no_more_than_the_threads_and_prefetch(
    workers, tmp_path
):
    """Jobs of 20 ms (short is 5 ms at most) keep the default buffer: no claim took more than
    the two job threads plus the prefetch of two (each claim stamps its jobs' ``claimed_at``)."""
    ids = [submit("tests.sleep", {"seconds": 0.02, "n": n}).pk for n in range(40)]
    code, worker = workers.run("--burst", "--concurrency", "2")
    assert code == 0, worker.logs()
    rows = Job.objects.filter(pk__in=ids)
    assert {row.status for row in rows} == {JobStatus.COMPLETE}
    per_claim = Counter(rows.values_list("claimed_at", flat=True))
    assert max(per_claim.values()) <= 4, per_claim
