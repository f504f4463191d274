"""An idle worker wakes for a submission without waiting for its poll, on every database.

PostgreSQL's NOTIFY, SQLite's data_version with an index probe, MariaDB's index probe
(``worker/watch.py``), and a submission in the worker's own process (``database/wakeups.py``).
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from django_durable_jobs import submit
from django_durable_jobs.database import wakeups
from django_durable_jobs.models import Job
from django_durable_jobs.worker import Worker, WorkerOptions
from django_durable_jobs.worker.listener import NotifyListener
from django_durable_jobs.worker.watch import SubmissionWatch
from tests.support import wait_for
from tests.worker_support import WorkerPool

pytestmark = pytest.mark.django_db(transaction=True)

POLL = 60  # far longer than any wait below: only a wake-up can start the jobs in time
WOKEN_WITHIN = 10.0  # generous for a loaded machine, and still a sixth of the poll


@pytest.fixture
def workers(transactional_db, db_settings_env, tmp_path):
    with WorkerPool(db_settings_env, tmp_path) as pool:
        yield pool


def completed(job: Job) -> bool:
    return Job.objects.get(pk=job.pk).status == "complete"


def test_an_idle_worker_starts_each_submission_without_waiting_for_its_poll(workers):
    worker = workers.start("--concurrency", "2", "--lease", "5", "--poll", str(POLL), fast=False)
    first = submit("tests.noop", {"n": 0})
    wait_for(lambda: completed(first), "the first job (claimed at start or woken)")
    # After each job the worker claims once more, finds nothing and sleeps for the poll: each
    # of these submissions finds it asleep.
    for n in range(1, 4):
        time.sleep(0.3)
        asked = time.monotonic()
        job = submit("tests.noop", {"n": n})
        wait_for(lambda job=job: completed(job), f"job {n} to be woken for", timeout=WOKEN_WITHIN)
        assert time.monotonic() - asked < WOKEN_WITHIN
    assert worker.running()


@pytest.mark.skipif(connection.vendor == "postgresql", reason="PostgreSQL's NOTIFY needs no watch")
def test_watch_0_leaves_new_work_to_the_poll(workers):
    first = submit("tests.noop", {"n": 0})  # there at the start: claimed by the first claim
    worker = workers.start("--lease", "5", "--poll", str(POLL), "--watch", "0", fast=False)
    wait_for(lambda: completed(first), "the job submitted before the start")
    time.sleep(1)  # the claim after it ended is over: the worker sleeps for the poll
    job = submit("tests.noop", {"n": 1})
    time.sleep(2)  # a watch would have started it a hundred times over
    assert Job.objects.get(pk=job.pk).status == "pending"
    assert worker.running()


def test_a_submission_wakes_this_process_workers_when_it_commits():
    woken = threading.Event()
    stop = wakeups.listen("default", woken)
    try:
        with transaction.atomic():
            submit("tests.noop", {"n": 1})
            assert not woken.is_set()  # not before the job is there to claim
        assert woken.is_set()
        woken.clear()
        with pytest.raises(RuntimeError), transaction.atomic():
            submit("tests.noop", {"n": 2})
            raise RuntimeError("rolled back")
        assert not woken.is_set()  # nothing was written
    finally:
        stop()
    submit("tests.noop", {"n": 3})
    assert not woken.is_set()  # no longer listening


def test_a_worker_is_woken_by_a_submission_of_its_own_process(monkeypatch):
    # Neither NOTIFY nor the watch: only the in-process wake-up can beat the minute's poll.
    monkeypatch.setattr(NotifyListener, "supported", staticmethod(lambda using: False))
    monkeypatch.setattr(SubmissionWatch, "supported", staticmethod(lambda using: False))
    worker = Worker(WorkerOptions(concurrency=1, poll=POLL, lease_seconds=5))
    thread = threading.Thread(target=worker.run, name="test-worker", daemon=True)
    thread.start()
    try:
        assert worker.idle.wait(WOKEN_WITHIN), "the worker's first claim"
        job = submit("tests.noop", {"n": 1})
        wait_for(lambda: completed(job), "the job to be woken for", timeout=WOKEN_WITHIN)
    finally:
        worker.request_stop()
        thread.join(timeout=30)
    assert not thread.is_alive(), "the worker did not stop"
