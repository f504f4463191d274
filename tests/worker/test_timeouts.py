"""Operation timeouts in the real ``runjobs``: cancel at the deadline, abandon after the grace.

The operations (tests/testapp/jobs.py) time out after 0.5 s: ``tests.polite`` stops when
cancelled, ``tests.stubborn`` ignores ``ctx`` until the test opens its gate.
"""

from __future__ import annotations

import signal

import pytest

from django_durable_jobs import submit
from django_durable_jobs.worker import Worker, WorkerOptions
from tests.support import wait_for
from tests.worker_support import attempts, job, marker

pytestmark = pytest.mark.django_db(transaction=True)


def ended(job_id, worker):
    """Wait until the job left ``running``/``pending``; return its row."""
    return wait_for(
        lambda: (row := job(job_id)).status not in ("pending", "running") and row,
        f"job {job_id} to end",
        diagnose=worker.logs,
    )


def test_a_timed_out_job_that_stops_when_cancelled_fails_with_the_timeout(workers, tmp_path):
    polite = submit("tests.polite", {"markers": str(tmp_path)})
    quick = submit("tests.polite", {"markers": str(tmp_path), "seconds": 0})
    worker = workers.start("--timeout-grace", "30")

    row = ended(polite.pk, worker)
    assert (row.status, row.error) == (
        "failed",
        "The attempt timed out after 0.5 s; it stopped when cancelled.",
    )
    assert [outcome for outcome, _, _ in attempts(polite.pk)] == ["failed"]
    assert ended(quick.pk, worker).status == "complete"  # returned before its deadline
    assert "timed out after 0.5s; cancelling it" in worker.wait_for_log(f"job {polite.pk}")
    assert f"job {polite.pk} tests.polite abandoned" not in worker.stderr()


def test_a_timed_out_job_that_returns_within_the_grace_fails_and_its_result_is_discarded(
    workers, tmp_path
):
    stubborn = submit("tests.stubborn", {"markers": str(tmp_path)})
    worker = workers.start("--timeout-grace", "30")
    worker.wait_for_log(f"job {stubborn.pk} tests.stubborn timed out")

    (tmp_path / f"open-{stubborn.pk}").touch()

    row = ended(stubborn.pk, worker)
    assert (row.status, row.error, row.result) == (
        "failed",
        "The attempt timed out after 0.5 s; it returned later, and its result was discarded.",
        None,
    )
    # Until the failure is written the job is still the attempt's: its writes are accepted.
    assert marker(tmp_path, f"returned-{stubborn.pk}") == "accepted"


def test_a_job_that_runs_on_is_failed_its_slot_freed_and_its_late_writes_refused(workers, tmp_path):
    stubborn = submit("tests.stubborn", {"markers": str(tmp_path)})
    worker = workers.start("--concurrency", "1", "--prefetch", "0", "--timeout-grace", "0.2")
    abandoned = worker.wait_for_log(f"job {stubborn.pk} tests.stubborn abandoned")
    assert "abandoned threads still running: 1" in abandoned

    row = ended(stubborn.pk, worker)
    assert (row.status, row.error) == (
        "failed",
        "The attempt timed out after 0.5 s and had not stopped 0.2 s after it was cancelled; it "
        "was abandoned (its thread may still run, but nothing it writes to the job is accepted).",
    )
    # The only job thread is still stuck in the executor, yet the next job runs.
    after = submit("tests.noop", {"n": 1})
    assert ended(after.pk, worker).status == "complete"
    assert marker(tmp_path, f"returned-{stubborn.pk}") is None

    (tmp_path / f"open-{stubborn.pk}").touch()
    returned = worker.wait_for_log("the abandoned attempt returned")
    assert "abandoned threads still running: 0" in returned
    assert marker(tmp_path, f"returned-{stubborn.pk}") == "refused: LeaseLost"
    assert job(stubborn.pk).error == row.error  # nothing of the late attempt was written
    assert [outcome for outcome, _, _ in attempts(stubborn.pk)] == ["failed"]
    wait_for(lambda: worker.row().leases_held == 0, "no lease held", diagnose=worker.logs)

    worker.send(signal.SIGTERM)
    assert worker.wait() == 0
    assert "stopped with 1 abandoned job thread(s), 0 still running" in worker.stderr()


def test_a_stopping_worker_does_not_wait_for_an_abandoned_thread(workers, tmp_path):
    stubborn = submit("tests.stubborn", {"markers": str(tmp_path)})
    worker = workers.start("--timeout-grace", "0", "--grace", "30")
    worker.wait_for_log(f"job {stubborn.pk} tests.stubborn abandoned")
    assert ended(stubborn.pk, worker).status == "failed"

    worker.send(signal.SIGTERM)

    assert worker.wait() == 0  # well before --grace: the abandoned job is no longer held
    assert "1 abandoned job thread(s) still running" in worker.stderr()
    assert "stopped with 1 abandoned job thread(s), 1 still running" in worker.stderr()


def test_a_negative_timeout_grace_is_refused():
    with pytest.raises(ValueError, match="--timeout-grace"):
        Worker(WorkerOptions(timeout_grace=-1))


def test_an_executor_that_raises_after_its_deadline_keeps_its_traceback():
    """The timeout message replaces the error; the exception's evidence stays with it."""
    import threading
    import time
    import uuid
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from django_durable_jobs.rules.outcome import failure_details
    from django_durable_jobs.rules.values import Claimed, Lease, Outcome
    from django_durable_jobs.worker.held import Held
    from django_durable_jobs.worker.timeouts import Timeouts

    lease = Lease(uuid.uuid4(), "owner", 1, datetime(2026, 1, 1, tzinfo=UTC))
    entry = Held(Claimed(lease, SimpleNamespace(operation="tests.slow")))
    entry.timeout, entry.deadline = 0.5, time.monotonic() - 1
    timeouts = Timeouts(1.0, None, fail=print, replace_thread=print, wake=threading.Event())
    try:
        raise KeyError("late")
    except KeyError as exc:
        raised = Outcome.failed(lease, "KeyError: 'late'", **failure_details(exc))
    recorded = timeouts.timed_out(entry, raised)
    assert recorded.error.startswith("The attempt timed out after 0.5 s; then it failed")
    assert recorded.error_class == "builtins.KeyError"
    assert recorded.traceback == raised.traceback and "KeyError: 'late'" in recorded.traceback
