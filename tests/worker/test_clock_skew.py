"""A worker whose clock is too far from the database's claims nothing, loudly, until it is fixed.

The worker runs in this process on a store clock of the test's (:class:`OffsetClock`: the real
time plus an offset the test changes while it runs), against the real database's clock.

* 20 s off with a 30 s lease (the limit is a quarter: 7.5 s), either way: nothing is claimed,
  every refusal is an ERROR naming the skew, the limit and the fix; the status line says so;
* 5 s off with a 30 s lease: under the limit, jobs run;
* the offset removed while it runs: claiming resumes by itself;
* a job it already holds keeps its lease renewed and completes while claims are refused.
"""

from __future__ import annotations

import logging
import re
import threading
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from django_durable_jobs import submit
from django_durable_jobs.models import Job, WorkerProcess
from django_durable_jobs.worker import Worker, WorkerOptions
from django_durable_jobs.worker.clock import MAX_SKEW_FRACTION
from tests.support import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


class OffsetClock:
    """The real time plus ``offset`` seconds; the test may change the offset at any time."""

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def __call__(self) -> datetime:
        return timezone.now() + timedelta(seconds=self.offset)


class Running:
    """A ``Worker`` running in a thread of this process until ``stop()``."""

    def __init__(self, clock: OffsetClock, lease_seconds: float, **options) -> None:
        options = {"concurrency": 2, "poll": 0.05, "lease_seconds": lease_seconds, **options}
        self.worker = Worker(WorkerOptions(**options), clock=clock)
        self.result: list[object] = []
        self.thread = threading.Thread(target=self._run, name="test-worker", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result.append(self.worker.run())
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.result.append(exc)

    def stop(self) -> object:
        self.worker.request_stop()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the worker did not stop"
        return self.result[0]


@pytest.fixture
def logs(caplog):
    caplog.set_level(logging.INFO, logger="django_durable_jobs")

    def at(level: int, *, thread: str | None = None) -> list[str]:
        """The messages logged at ``level`` (by the thread named ``thread``, if given)."""
        records = list(caplog.records)
        return [
            r.getMessage()
            for r in records
            if r.levelno == level and (thread is None or r.threadName == thread)
        ]

    return at


def _due(operation: str = "tests.noop", payload: dict | None = None, **options) -> Job:
    """Submit a job already due by every clock in these tests (run_after a minute ago)."""
    ago = timezone.now() - timedelta(minutes=1)
    return submit(operation, payload or {}, run_after=ago, **options)


def _status(job: Job) -> str:
    return Job.objects.get(pk=job.pk).status


@pytest.mark.parametrize("offset", [20.0, -20.0])
def test_a_clock_a_lease_fraction_off_claims_nothing_and_says_so(logs, offset):
    job = _due()
    running = Running(OffsetClock(offset), lease_seconds=30)

    errors = wait_for(lambda: len(logs(logging.ERROR)) >= 2 and logs(logging.ERROR), "refusals")
    said = re.search(r"this host's clock is ([\d.]+)s (behind|ahead of) the database's", errors[0])
    assert said, errors[0]
    assert abs(float(said[1]) - 20) < 1 and said[2] == ("ahead of" if offset > 0 else "behind")
    assert "limit 7.5s" in errors[0] and "NTP" in errors[0]
    assert 30 * MAX_SKEW_FRACTION == 7.5
    assert "NOT CLAIMING" in running.worker.status_line()
    row = WorkerProcess.objects.get(owner_id=running.worker.store.owner_id)
    assert row.state() == "alive"  # registered and heartbeating, only not claiming

    assert running.stop() == 0
    assert _status(job) == "pending"
    assert running.worker.claimed == 0


def test_a_clock_within_the_limit_claims(logs):
    jobs = [_due(payload={"n": n}) for n in range(3)]
    worker = Worker(
        WorkerOptions(burst=True, concurrency=2, poll=0.05, lease_seconds=30),
        clock=OffsetClock(5.0),  # under 7.5 s: a quarter of the lease
    )
    assert worker.run() == 0
    assert {_status(job) for job in jobs} == {"complete"}
    assert logs(logging.ERROR) == []
    assert abs(worker.clock_check.skew + 5.0) < 1.0


def test_claiming_resumes_once_the_clock_is_fixed(logs):
    clock = OffsetClock(5.0)  # lease 6 s: the limit is 1.5 s, a heartbeat every 2 s
    job = _due()
    running = Running(clock, lease_seconds=6)
    wait_for(lambda: logs(logging.ERROR), "a refusal")
    assert _status(job) == "pending"

    clock.offset = 0.0

    wait_for(lambda: _status(job) == "complete", "the job to run once the clock is fixed")
    assert any("claiming again" in line for line in logs(logging.WARNING))
    assert "NOT CLAIMING" not in running.worker.status_line()
    assert running.stop() == 0


def test_jobs_held_when_the_clock_drifts_keep_their_lease_and_finish(logs, tmp_path):
    clock = OffsetClock(0.0)
    gate = _due("tests.gate", {"markers": str(tmp_path), "seconds": 30})
    running = Running(clock, lease_seconds=6)
    wait_for(lambda: Path(tmp_path, f"started-{gate.pk}-1").exists(), "the gated job to start")

    clock.offset = -5.0  # now behind the database by more than 1.5 s
    # The heartbeat thread measures first; a claim the fetch loop began before that may still
    # be under way. Once the fetch loop itself has measured and refused, it claims nothing more.
    fetch_loop = running.thread.name  # Worker.run() runs the fetch loop in the calling thread
    wait_for(lambda: logs(logging.ERROR, thread=fetch_loop), "a refusal in the fetch loop")
    later = _due(payload={"n": 2})
    renewed = Job.objects.get(pk=gate.pk).heartbeat_at
    wait_for(
        lambda: Job.objects.get(pk=gate.pk).heartbeat_at != renewed, "a heartbeat while refusing"
    )
    Path(tmp_path, f"open-{gate.pk}").write_text("")

    wait_for(lambda: _status(gate) == "complete", "the held job to complete")
    assert _status(later) == "pending"

    clock.offset = 0.0
    wait_for(lambda: _status(later) == "complete", "the later job once the clock is fixed")
    assert running.stop() == 0
