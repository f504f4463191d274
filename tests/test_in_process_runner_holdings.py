"""InProcessRunner (JobManager) on the worker's machinery: its claims are Holdings, renewed by one
Heartbeat.

Proves: one heartbeat pass renews every lease the manager holds in one statement; the heartbeat
thread runs only while an executor runs and starts again with the next one; a job resumed while
its earlier attempt still runs here is told apart by its epoch.
"""

from __future__ import annotations

import re
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.manager import JobManager
from django_durable_jobs.models import Job
from tests.support import FakeClock

pytestmark = pytest.mark.django_db(transaction=True)

OP = "tests.manager"
WAIT = 15.0


class Blocker:
    """An executor that waits for ``release`` and returns ``{"ok": true}``."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, ctx):
        self.started.set()
        assert self.release.wait(WAIT), "the test never released this executor"
        return {"ok": True}


@pytest.fixture
def manager():
    managers: list[JobManager] = []
    blockers: list[Blocker] = []

    def make(**options):
        m = JobManager(**options)
        managers.append(m)
        return m, blockers

    yield make
    for b in blockers:
        b.release.set()
    for m in managers:
        for job_id in m.running:
            m.wait(job_id, WAIT)


def start(m: JobManager, blockers: list[Blocker]) -> tuple:
    blocker = Blocker()
    blockers.append(blocker)
    job_id = m.start_job(OP, blocker)
    assert blocker.started.wait(WAIT)
    return job_id, blocker


def test_one_heartbeat_renews_every_lease_of_the_manager_in_one_statement(manager):
    clock = FakeClock()
    m, blockers = manager(lease_seconds=30, clock=clock)
    jobs = [start(m, blockers)[0] for _ in range(3)]
    clock.advance(5)
    with CaptureQueriesContext(connection) as queries:
        m.heartbeat_once()
    # On PostgreSQL the statement locks its rows in id order first: WITH locked AS (...) UPDATE
    updates = [q for q in queries if re.match(r"(WITH .*\) )?UPDATE ", q["sql"].upper())]
    assert len(updates) == 1
    expected = clock() + timedelta(seconds=30)
    assert {Job.objects.get(pk=j).lease_expires_at for j in jobs} == {expected}
    assert {entry.expires_at for entry in m.holdings.entries()} == {expected}


def test_the_heartbeat_runs_only_while_an_executor_runs(manager):
    m, blockers = manager(lease_seconds=30)
    job_id, blocker = start(m, blockers)
    first = m._heartbeat.thread
    assert first.is_alive()
    blocker.release.set()
    m.wait(job_id, WAIT)
    first.join(WAIT)
    assert not first.is_alive()  # nothing left to renew: the thread ended
    job_id, blocker = start(m, blockers)
    assert m._heartbeat.thread is not first and m._heartbeat.thread.is_alive()
    blocker.release.set()
    assert m.wait(job_id, WAIT).status == "complete"


def test_a_job_resumed_while_its_stale_attempt_still_runs_here_is_told_apart_by_epoch(manager):
    clock = FakeClock()
    m, blockers = manager(lease_seconds=0.6, clock=clock)
    job_id, stale = start(m, blockers)
    clock.advance(1)  # the first lease expires; this manager takes the job again
    fresh = Blocker()
    blockers.append(fresh)
    assert m.resume_job(job_id, fresh) == job_id
    assert fresh.started.wait(WAIT)
    assert m.running == [job_id]
    m.heartbeat_once()
    old, new = sorted(m.holdings.entries(), key=lambda entry: entry.lease.epoch)
    assert (old.lease.epoch, new.lease.epoch) == (1, 2)
    assert (old.ctx.cancelled, old.ctx.lease_lost) == (True, True)
    assert (new.ctx.cancelled, new.ctx.lease_lost) == (False, False)
    stale.release.set()  # the stale attempt returns: nothing is written
    assert old.done.wait(WAIT)
    assert m.report(job_id).outcome == "lease-lost"
    assert m.running == [job_id]  # the fresh attempt is still held, and renewed
    fresh.release.set()
    job = m.wait(job_id, WAIT)
    assert (job.status, job.fencing_epoch) == ("complete", 2)
    assert m.report(job_id).outcome == "complete"
