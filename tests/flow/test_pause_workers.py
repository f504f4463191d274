"""Pause and resume with real ``runjobs`` processes: no claim of paused work after the pause
commits, running jobs finish, resume releases the work (at once on PostgreSQL's NOTIFY)."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from django_durable_jobs import submit
from django_durable_jobs.models import Job
from django_durable_jobs.store import DurableJobStore
from tests.support import wait_for
from tests.worker_support import WorkerPool, marker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def workers(transactional_db, db_settings_env, tmp_path):
    with WorkerPool(db_settings_env, tmp_path) as pool:
        yield pool


def status(job) -> str:
    return Job.objects.get(pk=job.pk).status


def drained(jobs) -> bool:
    return all(status(j) == "complete" for j in jobs)


def test_workers_stop_claiming_a_paused_queue_running_jobs_finish_and_resume_releases(
    workers, tmp_path
):
    markers = str(tmp_path)
    for _ in range(2):
        workers.start("--concurrency", "2", "--queue", "mail", "--queue", "other")
    running = submit("tests.gate", {"markers": markers, "seconds": 60}, queue="mail")
    wait_for(
        lambda: marker(tmp_path, f"started-{running.pk}-1") is not None, "the gate job to start"
    )

    paused = DurableJobStore(actor="test").pause("queue", "mail", reason="incident").pause
    held = [submit("tests.noop", {"n": n}, queue="mail") for n in range(6)]
    # Work of another queue submitted after the held jobs is claimed: the workers are polling
    # and passing over the paused queue, twice over (two rounds of every worker's poll).
    for round_ in range(2):
        other = [submit("tests.noop", {"round": round_, "n": n}, queue="other") for n in range(4)]
        wait_for(lambda other=other: drained(other), "the other queue's jobs to run")
    assert {status(j) for j in held} == {"pending"}
    late = Job.objects.filter(queue="mail", claimed_at__gte=paused.paused_at)
    assert not late.exists(), "a paused queue's job was claimed after the pause committed"

    (tmp_path / f"open-{running.pk}").write_text("")  # the job running at the pause finishes
    wait_for(lambda: status(running) == "complete", "the running job to finish")
    assert {status(j) for j in held} == {"pending"}

    DurableJobStore(actor="test").resume("queue", "mail")
    wait_for(lambda: drained(held), "the resumed queue's jobs to run")


@pytest.mark.skipif(connection.vendor != "postgresql", reason="NOTIFY is PostgreSQL's")
def test_on_postgresql_resume_wakes_idle_workers_at_once(workers):
    worker = workers.start("--concurrency", "2", "--lease", "5", "--poll", "30", fast=False)
    worker.wait_for_row()
    store = DurableJobStore(actor="test")
    store.pause("operation", "tests.noop", reason="incident")
    held = [submit("tests.noop", {"n": n}) for n in range(3)]  # its NOTIFY finds only paused work
    probe = submit("tests.sleep", {"seconds": 0})
    wait_for(lambda: status(probe) == "complete", "the unpaused job to run (NOTIFY)")
    assert {status(j) for j in held} == {"pending"}

    resumed_at = time.monotonic()
    store.resume("operation", "tests.noop")
    # With a 30 s poll only the resume's NOTIFY can wake the worker within 5 s.
    wait_for(lambda: drained(held), "the resumed jobs to run", timeout=5)
    assert time.monotonic() - resumed_at < 5
