"""``async def`` operations on a real ``runjobs``' event loop (``runjobs --async-slots``).

* Many waiting jobs share the loop: a worker with one job thread, held by a sync job, runs dozens
  of ``await asyncio.sleep()`` jobs at once beside it, and their results say where they ran.
* Cancellation arrives as ``CancelledError`` at the next ``await``: a cancellation request ends
  the job ``cancelled``; the operation's timeout ends it ``failed`` with the timeout's message.
* The fence holds as for threads: a worker SIGSTOPped past its lease, whose job another worker
  resumed and finished, writes nothing after SIGCONT (``outcome=lease-lost``), and its task was
  told so (``CancelledError`` or ``LeaseLost`` at its next write).

The operations (``tests/worker/asyncops``) are installed only in these workers
(``tests.settings_async``).
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from datetime import timedelta

import pytest

from django_durable_jobs import submit, submit_many
from django_durable_jobs.models import Job, JobAttempt, JobStatus, JobStep
from django_durable_jobs.rules.vocabulary import Ownership
from django_durable_jobs.store import DurableJobStore
from tests.support import db_state, wait_for
from tests.testapp.models import DomainRow
from tests.worker.asyncops import ops
from tests.worker_support import WorkerPool, attempts, checkpoint_done, job, marker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

LOOP_THREAD = "durable-jobs-loop"


@pytest.fixture
def workers(transactional_db, db_settings_env, tmp_path):
    """Start ``runjobs`` children that have the ``async def`` operations."""
    env = {**db_settings_env, "DJANGO_SETTINGS_MODULE": "tests.settings_async"}
    with ops.registered(), WorkerPool(env, tmp_path) as pool:
        yield pool


def _ended(job_id) -> Job | None:
    row = job(job_id)
    return (
        row if row.status in (JobStatus.COMPLETE, JobStatus.FAILED, JobStatus.CANCELLED) else None
    )


def most_at_once(results: list[dict]) -> int:
    """Return the most of the sleep jobs whose ``results`` these are that ran at the same time."""
    ran = [result["ran"] for result in results]
    # At the same instant an end comes before a start: (t, -1) sorts before (t, 1).
    events = sorted([(start, 1) for start, _ in ran] + [(end, -1) for _, end in ran])
    running = most = 0
    for _, change in events:
        running += change
        most = max(most, running)
    return most


def test_waiting_async_jobs_share_the_loop_beside_a_sync_job_holding_the_only_thread(
    workers, tmp_path
):
    gate = submit("tests.gate", {"markers": str(tmp_path), "seconds": 120}).pk
    worker = workers.start("--concurrency", "1", "--async-slots", "50")
    wait_for(lambda: marker(tmp_path, f"started-{gate}-1") is not None, "the sync job to start")
    sleepers = [j.pk for j in submit_many(ops.SLEEP, [{"seconds": 1, "n": n} for n in range(40)])]
    rows = Job.objects.filter(pk__in=sleepers)
    wait_for(
        lambda: rows.filter(status=JobStatus.COMPLETE).count() == len(sleepers),
        "every async job to complete while the sync job holds the thread",
        diagnose=lambda: worker.logs()[-3000:],
    )
    assert job(gate).status == JobStatus.RUNNING  # the only job thread was busy throughout
    results = [json.loads(row.result) for row in rows]
    assert {result["thread"] for result in results} == {LOOP_THREAD}
    # One at a time they would take 40 s; on the loop they wait together.
    assert most_at_once(results) >= 10

    (tmp_path / f"open-{gate}").write_text("")
    wait_for(lambda: job(gate).status == JobStatus.COMPLETE, "the sync job to complete")
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_cancellation_request_arrives_as_cancelled_error_at_the_next_await(workers, tmp_path):
    job_id = submit(ops.WAIT, {"markers": str(tmp_path)}).pk
    worker = workers.start("--concurrency", "1")
    wait_for(lambda: marker(tmp_path, f"started-{job_id}") is not None, "the job to start")
    owner = worker.wait_for_row().owner_id
    assert DurableJobStore().request_cancel(job_id)

    ended = wait_for(lambda: _ended(job_id), "the job to end")
    assert ended.status == JobStatus.CANCELLED
    assert marker(tmp_path, f"cancelled-{job_id}") is not None  # its except CancelledError ran
    assert attempts(job_id) == [("cancelled", 1, owner)]
    worker.wait_for_log(f"job {job_id} {ops.WAIT} attempt=1 epoch=1 outcome=cancelled")


def test_the_awaitable_writes_of_ctx_record_steps_progress_a_sleep_and_a_completion(
    workers, tmp_path
):
    job_id = submit(ops.WRITES, {"markers": str(tmp_path)}).pk
    worker = workers.start("--concurrency", "1")
    done = wait_for(
        lambda: job(job_id).status == JobStatus.COMPLETE and job(job_id),
        "the job to sleep, then complete",
        diagnose=lambda: f"{job(job_id).status} {job(job_id).error}\n{worker.logs()}",
    )
    assert json.loads(done.result) == {"steps": [1, 2], "epoch": 2}
    assert [(o, e) for o, e, _ in attempts(job_id)] == [("slept", 1), ("complete", 2)]
    # Each step ran once, in the first attempt; the second got their recorded results back.
    assert sorted(
        p.name for p in tmp_path.iterdir() if p.name.startswith(("plain", "awaited"))
    ) == [
        "awaited-1",
        "plain-1",
    ]
    steps = JobStep.objects.filter(job_id=job_id).order_by("position")
    assert list(steps.values_list("name", "result", "epoch")) == [
        ("plain", "1", 1),
        ("awaited", "2", 1),
    ]
    assert list(DomainRow.objects.values_list("job_id", "value")) == [(job_id, "written")]


def test_a_system_exit_in_an_async_job_fails_it_and_the_loop_runs_on(workers):
    exits = submit(ops.EXITS, {}).pk
    worker = workers.start("--concurrency", "1")
    failed = wait_for(lambda: _ended(exits), "the job to end", diagnose=worker.logs)
    assert failed.status == JobStatus.FAILED
    assert "SystemExit" in failed.error
    after = submit(ops.SLEEP, {"seconds": 0}).pk
    done = wait_for(lambda: _ended(after), "a later async job to end", diagnose=worker.logs)
    assert done.status == JobStatus.COMPLETE


def test_a_timeout_cancels_the_task_and_fails_the_job(workers, tmp_path):
    job_id = submit(ops.TIMED, {"markers": str(tmp_path)}).pk
    workers.start("--concurrency", "1")
    ended = wait_for(lambda: _ended(job_id), "the timeout")
    assert ended.status == JobStatus.FAILED
    assert (
        ended.error == f"The attempt timed out after {ops.TIMEOUT:g} s; it stopped when cancelled."
    )
    assert marker(tmp_path, f"cancelled-{job_id}") is not None
    attempt = JobAttempt.objects.get(job_id=job_id)
    assert (attempt.outcome, attempt.error_class) == ("failed", "")
    assert attempt.ended_at - attempt.started_at >= timedelta(seconds=ops.TIMEOUT)


def test_a_worker_that_lost_its_lease_writes_nothing_from_its_async_job(workers, tmp_path):
    steps = 10
    payload = {"steps": steps, "pause_after": 3, "markers": str(tmp_path)}
    job_id = submit(ops.CHECKPOINTS, payload).pk
    stale = workers.start("--concurrency", "1")
    # Frozen while its task awaits a sleep: no write of it is in flight (a transaction frozen
    # open would hold the row's lock from the rescuer).
    wait_for(lambda: marker(tmp_path, f"paused-{job_id}"), "three checkpoints, then the pause")
    assert checkpoint_done(job_id) == 3
    stale_owner = stale.wait_for_row().owner_id

    stale.stop_between_heartbeats()
    operator = DurableJobStore()
    wait_for(
        lambda: operator.get(job_id).ownership == Ownership.EXPIRED,
        "the frozen worker's lease to expire",
    )
    rescuer = workers.start("--concurrency", "1")  # on_expired="resume": it takes the job over
    finished = wait_for(
        lambda: job(job_id).status == JobStatus.COMPLETE and job(job_id),
        "the second worker to finish the job",
    )
    rescuer_owner = rescuer.wait_for_row().owner_id
    assert json.loads(finished.result) == {"done": steps, "attempt": 2}
    before = db_state()

    stale.send(signal.SIGCONT)
    refused = stale.wait_for_log(f"job {job_id} {ops.CHECKPOINTS} attempt=1 epoch=1 outcome=")
    assert "outcome=lease-lost" in refused
    # Told at its next await: cancelled by the heartbeat, or its checkpoint refused.
    ended = wait_for(lambda: marker(tmp_path, f"ended-{job_id}-1"), "the stale task to end")
    assert ended in ("CancelledError", "LeaseLost")
    assert db_state() == before  # the stale attempt wrote nothing
    assert attempts(job_id) == [
        ("interrupted", 1, stale_owner),
        ("complete", 2, rescuer_owner),
    ]


def test_max_jobs_counts_the_jobs_of_the_loop_and_of_the_threads_together(workers):
    # The worker claims for its two sides apart; --max-jobs still bounds them together, and
    # neither side's share keeps the other from its jobs.
    ids = [submit(ops.SLEEP, {"seconds": 0, "n": n}).pk for n in range(3)]
    ids += [submit("tests.noop", {"n": n}).pk for n in range(3)]
    code, worker = workers.run("--max-jobs", "4", "--concurrency", "2")
    assert code == 0, worker.logs()
    statuses = Counter(Job.objects.filter(pk__in=ids).values_list("operation", "status"))
    assert sum(n for (_, status), n in statuses.items() if status == JobStatus.COMPLETE) == 4
    assert sum(n for (_, status), n in statuses.items() if status == JobStatus.PENDING) == 2
    assert statuses[("tests.noop", JobStatus.COMPLETE)] >= 1, statuses
