"""django-durable-jobs in the side-by-side benchmark (settings: ``benchmarks.systems.settings_ours``).

Workers are ``python -m django runjobs --concurrency 4 [--burst]`` with every other option at its
default; N of them are one ``runjobs --processes N`` (a parent that forks N workers), as the docs
say to run several processes on one machine. The no-op operation ``bench.noop`` (``benchmarks/benchapp/jobs.py``) returns when it
started. After every drain each job must be ``complete`` with ``attempts = 1``, ``fencing_epoch = 1``
and exactly one ``JobAttempt`` row; anything else is reported as a violation.
"""

from __future__ import annotations

import json
from argparse import Namespace
from typing import Any

from benchmarks.systems.base import DjangoSystem, payload

OPERATION = "bench.noop"
CONCURRENCY = "4"
LOAD_BATCH = 1000


def make(db: str, args: Namespace) -> Ours:
    """Return the system the harness measures on ``db``."""
    return Ours(db, args)


class Ours(DjangoSystem):
    name = "ours"

    def __init__(self, db: str, args: Namespace) -> None:
        super().__init__(db, args)
        # runjobs listens for NOTIFY on PostgreSQL and watches for new rows elsewhere: woken
        # either way, never left to its 1 s poll.
        self.poll_seconds = None

    @property
    def wakeup(self) -> str:
        if self.db == "postgresql":
            return "NOTIFY"
        from django_durable_jobs.worker.watch import LOOK_SECONDS

        return f"watch {LOOK_SECONDS['sqlite' if self.db == 'sqlite' else 'mysql']:g} s"

    def open(self) -> None:
        super().open()
        import django_durable_jobs

        if not hasattr(django_durable_jobs, "submit_many"):
            self.bulk_unavailable = "submit_many() does not exist yet"
        else:
            self.bulk_unavailable = None

    def tables(self) -> list[str]:
        from django_durable_jobs.models import Job, JobAttempt, WorkerProcess

        return [JobAttempt._meta.db_table, Job._meta.db_table, WorkerProcess._meta.db_table]

    def enqueue(self, job_payload: dict[str, Any]) -> Any:
        from django_durable_jobs import submit

        return submit(OPERATION, job_payload).pk

    def enqueue_many(self, payloads: list[dict[str, Any]]) -> None:
        from django_durable_jobs import submit_many

        submit_many(OPERATION, payloads)

    def load(self, count: int) -> None:
        """Insert the jobs with ``submit_many()``, or as authentic pending rows without it."""
        for start in range(0, count, LOAD_BATCH):
            payloads = [payload(n) for n in range(start, min(start + LOAD_BATCH, count))]
            if self.bulk_unavailable:
                self._insert_rows(payloads)
            else:
                self.enqueue_many(payloads)

    def _insert_rows(self, payloads: list[dict[str, Any]]) -> None:
        from benchmarks.rows import insert_pending

        insert_pending(OPERATION, payloads)

    def worker_argv(self, *, burst: bool) -> list[str]:
        argv = self.django_command("runjobs", "--concurrency", CONCURRENCY)
        return [*argv, "--burst"] if burst else argv

    def workers_argv(self, processes: int, *, burst: bool) -> tuple[list[str], int]:
        # As the docs say to run N processes on one machine: one ``runjobs --processes N``,
        # whose parent sets Django up once and forks the N workers.
        argv = self.worker_argv(burst=burst)
        return ([*argv, "--processes", str(processes)], 1) if processes > 1 else (argv, 1)

    def drain_span(self) -> tuple[float, float, int]:
        from django.db.models import Max, Min

        from django_durable_jobs.models import Job, JobStatus

        done = Job.objects.filter(status=JobStatus.COMPLETE)
        span = done.aggregate(first=Min("claimed_at"), last=Max("completed_at"))
        if span["first"] is None:
            return 0.0, 0.0, 0
        return span["first"].timestamp(), span["last"].timestamp(), done.count()

    def verify(self, jobs: int) -> list[str]:
        from django.db.models import Count

        from django_durable_jobs.models import Job, JobAttempt, JobStatus

        problems = []
        total = Job.objects.count()
        if total != jobs:
            problems.append(f"{total} job rows, expected {jobs}")
        checks = {
            "not complete": Job.objects.exclude(status=JobStatus.COMPLETE),
            "attempts != 1": Job.objects.exclude(attempts=1),
            "fencing_epoch != 1": Job.objects.exclude(fencing_epoch=1),
            "without a JobAttempt row": Job.objects.filter(attempt_history__isnull=True),
        }
        for what, queryset in checks.items():
            if count := queryset.count():
                problems.append(f"{count} job(s) {what}")
        several = JobAttempt.objects.values("job_id").annotate(rows=Count("id")).filter(rows__gt=1)
        if count := several.count():
            problems.append(f"{count} job(s) with more than one JobAttempt row")
        if (attempts := JobAttempt.objects.count()) != jobs:
            problems.append(f"{attempts} JobAttempt rows for {jobs} jobs")
        return problems

    def started_at(self, handle: Any) -> float | None:
        from django_durable_jobs.models import Job, JobStatus

        status, result, error = Job.objects.values_list("status", "result", "error").get(pk=handle)
        if status == JobStatus.COMPLETE:
            return json.loads(result)["started"]
        if status not in (JobStatus.PENDING, JobStatus.RUNNING):
            raise RuntimeError(f"job {handle} ended {status}: {error}")
        return None
