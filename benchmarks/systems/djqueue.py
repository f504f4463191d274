"""dj-queue in the side-by-side benchmark (settings: ``benchmarks.systems.settings_djqueue``).

A worker is ``python -m django dj_queue`` with dj-queue's defaults: a supervisor that forks one
worker process of three threads (polling every 0.1 s, woken by LISTEN/NOTIFY on PostgreSQL) and
a dispatcher. It has no mode that exits when the queue is empty, so the harness stops the
workers with SIGTERM once every job has finished (``exits_when_drained = False``); the drain is
timed from the jobs' own rows either way.

Single enqueues are ``task.enqueue()``; the bulk path and the drain's load are the backend's
``enqueue_all`` (dj-queue's own bulk call, beside Django's API). The no-op task returns when it
started, which dj-queue stores as the job's ``return_value``.
"""

from __future__ import annotations

from argparse import Namespace
from typing import Any

from benchmarks.systems.base import DjangoSystem

LOAD_BATCH = 1000


def make(db: str, args: Namespace) -> DjQueue:
    """Return the system the harness measures on ``db``."""
    return DjQueue(db, args)


class DjQueue(DjangoSystem):
    name = "djqueue"
    bulk_unavailable = None
    exits_when_drained = False

    def __init__(self, db: str, args: Namespace) -> None:
        super().__init__(db, args)
        self.poll_seconds = None if db == "postgresql" else 0.1  # its worker polling_interval

    def tables(self) -> list[str]:
        from django.apps import apps

        models = apps.get_app_config("dj_queue").get_models()
        job_table = "dj_queue_jobs"
        tables = sorted(m._meta.db_table for m in models if m._meta.managed and not m._meta.proxy)
        return [t for t in tables if t != job_table] + [job_table]  # referencing ones first

    def enqueue(self, job_payload: dict[str, Any]) -> Any:
        from benchmarks.benchapp.tasks import noop

        return noop.enqueue(**job_payload).id

    def enqueue_many(self, payloads: list[dict[str, Any]]) -> None:
        from benchmarks.benchapp.tasks import noop

        noop.get_backend().enqueue_all([(noop, (), p) for p in payloads])

    def load(self, count: int) -> None:
        from benchmarks.systems.base import payload

        for start in range(0, count, LOAD_BATCH):
            self.enqueue_many([payload(n) for n in range(start, min(start + LOAD_BATCH, count))])

    def worker_argv(self, *, burst: bool) -> list[str]:
        return self.django_command("dj_queue")

    def finished(self) -> int:
        from dj_queue.models import Job

        return Job.objects.filter(finished_at__isnull=False).count()

    def workers_ready(self) -> bool:
        from dj_queue.models import Process

        return Process.objects.filter(kind__iexact="worker").exists()

    def drain_span(self) -> tuple[float, float, int]:
        from dj_queue.models import FailedExecution, Job

        if FailedExecution.objects.exists():
            raise RuntimeError(f"{FailedExecution.objects.count()} dj-queue jobs failed")
        rows = list(
            Job.objects.filter(finished_at__isnull=False).values_list("return_value", "finished_at")
        )
        if not rows:
            return 0.0, 0.0, 0
        first = min(float(value) for value, _ in rows)
        last = max(finished.timestamp() for _, finished in rows)
        return first, last, len(rows)

    def started_at(self, handle: Any) -> float | None:
        from dj_queue.models import FailedExecution, Job

        value, finished = Job.objects.values_list("return_value", "finished_at").get(pk=handle)
        if finished is not None:
            return float(value)
        failed = FailedExecution.objects.filter(job_id=handle).first()
        if failed is not None:
            raise RuntimeError(f"task {handle} failed: {failed.exception_class}")
        return None
