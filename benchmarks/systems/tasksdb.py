"""django-tasks-db in the side-by-side benchmark (settings: ``benchmarks.systems.settings_tasksdb``).

Workers are ``python -m django db_worker --no-startup-delay [--batch]``: one task at a time per
process, ``--batch`` exits when the queue is empty, and ``--no-startup-delay`` skips the random
sleep of up to 1 s each worker takes at start (a guard against a thundering herd of restarts that
would otherwise stagger the processes of a drain). The idle worker polls every second, its default
``--interval``. The drain runs twice: with Django's default ``CONN_MAX_AGE = 0``, under which
``db_worker`` opens a new connection for every task, and with persistent connections.

It has no bulk enqueue; drains are loaded by copying one row ``task.enqueue()`` wrote.
"""

from __future__ import annotations

import copy
import os
import uuid
from argparse import Namespace
from typing import Any

from benchmarks.systems.base import DjangoSystem, payload

LOAD_BATCH = 1000


def make(db: str, args: Namespace) -> TasksDb:
    """Return the system the harness measures on ``db``."""
    return TasksDb(db, args)


class TasksDb(DjangoSystem):
    name = "tasksdb"
    poll_seconds = 1.0  # db_worker --interval default
    bulk_unavailable = "no bulk enqueue in django-tasks-db"

    def series(self) -> dict[str, str]:
        return {"default": self.label, "persistent": f"{self.label}, CONN_MAX_AGE=None"}

    def worker_env(self, series: str) -> dict[str, str]:
        return dict(os.environ, BENCH_CMP_CONN_MAX_AGE="none" if series == "persistent" else "0")

    def tables(self) -> list[str]:
        from django_tasks_db.models import DBTaskResult

        return [DBTaskResult._meta.db_table]

    def enqueue(self, job_payload: dict[str, Any]) -> Any:
        from benchmarks.benchapp.tasks import noop

        return noop.enqueue(**job_payload).id

    def load(self, count: int) -> None:
        from django_tasks_db.models import DBTaskResult

        template = DBTaskResult.objects.get(pk=self.enqueue(payload(0)))
        rows = []
        for _ in range(count - 1):
            row = copy.copy(template)
            row.pk = uuid.uuid4()
            rows.append(row)
        DBTaskResult.objects.bulk_create(rows, batch_size=LOAD_BATCH)

    def worker_argv(self, *, burst: bool) -> list[str]:
        argv = self.django_command("db_worker", "--no-startup-delay")
        return [*argv, "--batch"] if burst else argv

    def drain_span(self) -> tuple[float, float, int]:
        from django.db.models import Max, Min
        from django_tasks_db.models import DBTaskResult

        done = DBTaskResult.objects.successful()
        span = done.aggregate(first=Min("started_at"), last=Max("finished_at"))
        if span["first"] is None:
            return 0.0, 0.0, 0
        return span["first"].timestamp(), span["last"].timestamp(), done.count()

    def started_at(self, handle: Any) -> float | None:
        from django_tasks_db.compat import TaskResultStatus
        from django_tasks_db.models import DBTaskResult

        status, value, trace = DBTaskResult.objects.values_list(
            "status", "return_value", "traceback"
        ).get(pk=handle)
        if status == TaskResultStatus.SUCCESSFUL:
            return float(value)
        if status == TaskResultStatus.FAILED:
            raise RuntimeError(f"task {handle} failed: {trace}")
        return None
