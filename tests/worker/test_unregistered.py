"""A due job whose operation no alive worker runs is logged at WARNING, once per operation."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from django_durable_jobs.models import Job, WorkerProcess
from django_durable_jobs.store import DurableJobStore
from django_durable_jobs.worker import Worker, WorkerOptions
from django_durable_jobs.worker.unregistered import UnregisteredWatch
from tests.support import submission

pytestmark = pytest.mark.django_db(transaction=True)

LOGGER = "django_durable_jobs.worker"


def warnings_about(caplog, name: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER
        and r.levelno == logging.WARNING
        and f"operation {name} " in r.getMessage()
    ]


def defer(operation: str, key: str, *, scope: str | None = None, **fields) -> None:
    job = DurableJobStore(scope=scope).defer(operation, submission({"k": key}, key, scope))
    if fields:  # queue, run_after: as submit() would have set them
        Job.objects.filter(pk=job.pk).update(**fields)


def other_worker(operations: str, *, queues: str = "", alive: bool = True) -> None:
    now = timezone.now()
    WorkerProcess.objects.create(
        owner_id=f"other-{operations}-{queues}-{alive}",
        actor="worker@elsewhere:1",
        host="elsewhere",
        pid=1,
        started_at=now,
        heartbeat_at=now if alive else now - timedelta(minutes=5),
        lease_seconds=30,
        concurrency=1,
        operations=operations,
        queues=queues,
    )


def test_a_burst_worker_warns_once_per_unregistered_operation(caplog):
    defer("elsewhere.only", "a")
    defer("elsewhere.only", "b")
    defer("elsewhere.other", "c", queue="mail")
    caplog.set_level(logging.INFO, logger="django_durable_jobs")

    Worker(WorkerOptions(burst=True, poll=0.05, lease_seconds=5)).run()

    [only] = warnings_about(caplog, "elsewhere.only")
    assert "no running worker has it registered" in only and "(queue default)" in only
    assert len(warnings_about(caplog, "elsewhere.other")) == 1


def test_several_looks_warn_once_and_a_new_operation_once_more(caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    defer("elsewhere.only", "a")
    watch = UnregisteredWatch(DurableJobStore(), ["tests.noop"], None, interval=0)

    assert watch.look() == ["elsewhere.only"]
    assert [watch.look() for _ in range(4)] == [[], [], [], []]
    defer("elsewhere.later", "b")
    assert watch.look() == ["elsewhere.later"]
    assert watch.look() == []

    assert len(warnings_about(caplog, "elsewhere.only")) == 1
    assert len(warnings_about(caplog, "elsewhere.later")) == 1


def test_looks_are_spaced_by_the_interval():
    defer("elsewhere.only", "a")
    ticks = iter([100.0, 105.0, 111.0])
    watch = UnregisteredWatch(
        DurableJobStore(), [], None, interval=10, monotonic=lambda: next(ticks)
    )
    assert watch.look() == ["elsewhere.only"]
    defer("elsewhere.later", "b")
    assert watch.look() == []  # 5 s later: not looked
    assert watch.look() == ["elsewhere.later"]


def test_an_operation_an_alive_worker_declares_for_the_queue_is_not_warned_about():
    defer("elsewhere.only", "a")
    defer("elsewhere.mail", "b", queue="mail")
    defer("elsewhere.gone", "c")
    other_worker("elsewhere.x,elsewhere.only")  # every queue
    other_worker("elsewhere.mail", queues="slow")  # not the job's queue
    other_worker("elsewhere.gone", alive=False)  # stale: it runs nothing now

    watch = UnregisteredWatch(DurableJobStore(), ["tests.noop"], None, interval=0)

    assert watch.waiting() == {"elsewhere.mail": {"mail"}, "elsewhere.gone": {"default"}}


def test_only_due_jobs_in_the_workers_queues_and_scope_count():
    defer("elsewhere.later", "a", run_after=timezone.now() + timedelta(hours=1))
    defer("elsewhere.mail", "b", queue="mail")
    defer("elsewhere.tenant", "c", scope="tenant-b")

    queued = UnregisteredWatch(DurableJobStore(), [], ["mail"], interval=0)
    assert queued.waiting() == {"elsewhere.mail": {"mail"}}
    scoped = UnregisteredWatch(DurableJobStore(scope="tenant-b"), [], None, interval=0)
    assert scoped.waiting() == {"elsewhere.tenant": {"default"}}
    registered = UnregisteredWatch(
        DurableJobStore(), ["elsewhere.mail", "elsewhere.tenant"], None, interval=0
    )
    assert registered.waiting() == {}
