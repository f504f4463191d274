"""snapshot() reads a fixed number of queries, whatever the number of operations and queues."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.models import Job, JobAttempt, WorkerProcess
from django_durable_jobs.rules.vocabulary import JobStatus
from django_durable_jobs.stats import snapshot
from django_durable_jobs.stats.flow import declared_limits
from tests.support import T0

pytestmark = pytest.mark.django_db


def _rows(operations: int) -> None:
    """Write, per operation and queue, one pending, one running and one finished job with its
    attempt, and a worker holding the running ones."""
    jobs, attempts = [], []
    for i in range(operations):
        for status in (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.COMPLETE):
            pk = uuid.uuid4()
            ended = status == JobStatus.COMPLETE
            jobs.append(
                Job(
                    id=pk,
                    operation=f"ops.op{i}",
                    queue=f"queue{i}",
                    status=status,
                    scope="default",
                    idempotency_key=str(pk),
                    proposal="{}",
                    created_at=T0 - timedelta(minutes=5),
                    run_after=T0 - timedelta(minutes=5),
                    claimed_at=None if status == JobStatus.PENDING else T0 - timedelta(minutes=4),
                    completed_at=T0 - timedelta(minutes=1) if ended else None,
                    owner_id=None if status == JobStatus.PENDING else f"owner{i % 3}",
                    lease_expires_at=T0 + timedelta(seconds=30)
                    if status == JobStatus.RUNNING
                    else None,
                )
            )
            if ended:
                attempts.append(
                    JobAttempt(
                        job_id=pk,
                        epoch=1,
                        started_at=T0 - timedelta(minutes=4),
                        ended_at=T0 - timedelta(minutes=1),
                        outcome="complete",
                        snapshot={},
                    )
                )
    Job.objects.bulk_create(jobs)
    JobAttempt.objects.bulk_create(attempts)
    WorkerProcess.objects.bulk_create(
        WorkerProcess(
            owner_id=f"owner{i}",
            actor=f"w{i}",
            host="h",
            pid=i,
            started_at=T0,
            heartbeat_at=T0 - timedelta(seconds=60 * i),
            lease_seconds=30.0 + i,
            concurrency=1,
        )
        for i in range(3)
    )


def _queries(operations: int) -> int:
    _rows(operations)
    with CaptureQueriesContext(connection) as captured:
        snap = snapshot(now=T0)
    assert len({c.operation for c in snap.jobs}) == operations
    assert len(snap.queues) == operations and len(snap.operations_last_hour) == operations
    return len(captured)


def test_the_query_count_does_not_grow_with_operations():
    few = _queries(5)
    for model in (JobAttempt, Job, WorkerProcess):
        model.objects.all().delete()
    # 17: the 16 of the overview and the pauses in force (stats/flow.py). With a pause in force
    # one more; each declared limit (rate_limit, max_running_per_key) costs at most two, and
    # which limits are declared depends on the test modules loaded with this one.
    limits = sum(
        (f.rate_limit is not None) + (f.max_running_per_key is not None)
        for _, _, f in declared_limits()
    )
    assert _queries(50) == few <= 17 + 2 * limits
