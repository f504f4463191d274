"""Shared pieces of the flow-control claim tests: operations with limits, rows, a state dump."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

from django_durable_jobs.models import Job, JobPause, RateBucket
from django_durable_jobs.rules import registry
from django_durable_jobs.store import DurableJobStore
from tests.support import db_state, submission


@contextmanager
def declared(name: str, **flow: Any) -> Iterator[str]:
    """Register operation ``name`` with the flow control ``flow`` for the block."""
    registry.operation(name, **flow)(lambda ctx, payload: None)
    try:
        yield name
    finally:
        registry.unregister(name)


def pending(
    store: DurableJobStore,
    operation: str,
    count: int,
    *,
    queue: str = "default",
    rate_key: str = "",
    concurrency_key: str = "",
    priority: int = 0,
    prefix: str = "",
) -> list[Job]:
    """Defer ``count`` jobs, then write their flow keys, queue and priority on the rows."""
    jobs = []
    for i in range(count):
        key = f"{operation}-{prefix}{rate_key}{concurrency_key}-{i}"
        # The input names the keys, so an operation's key functions find them at submit.
        payload = {"i": i, "provider": rate_key or "-", "customer": concurrency_key or "-"}
        job = store.defer(operation, submission(payload, key=key))
        Job.objects.filter(pk=job.pk).update(
            queue=queue, rate_key=rate_key, concurrency_key=concurrency_key, priority=priority
        )
        jobs.append(job)
    return jobs


def flow_state() -> str:
    """Return ``db_state()`` plus the rate buckets and pauses: equal dumps, nothing written."""
    buckets = list(RateBucket.objects.order_by("id").values())
    pauses = list(JobPause.objects.order_by("id").values())
    return db_state() + json.dumps([buckets, pauses], cls=DjangoJSONEncoder, sort_keys=True)


def most_in_window(starts: list[datetime], window: timedelta) -> int:
    """Return the most ``starts`` that fall in any half-open window ``(t - window, t]``."""
    ordered = sorted(starts)
    most = first = 0
    for last, at in enumerate(ordered):
        while ordered[first] <= at - window:
            first += 1
        most = max(most, last - first + 1)
    return most
