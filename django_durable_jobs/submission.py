"""``submit()``: enqueue pending work for a registered operation."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connections

from . import conf, registry
from .errors import InputInvalid
from .models import Job
from .store import DurableJobStore, Submission


def submit(
    operation: str,
    payload: Any,
    *,
    scope: str | None = None,
    idempotency_key: str | None = None,
    queue: str | None = None,
    priority: int = 0,
    run_after: datetime | None = None,
    using: str | None = None,
) -> Job:
    """Persist pending work for ``operation`` and return its job (an identical one coalesces).

    Refuses an operation no ``@operation`` registered, so a typo fails here rather than in a
    worker. Starts nothing: ``manage.py runjobs`` picks the job up.

    Called inside ``transaction.atomic()`` (or a view under ``ATOMIC_REQUESTS``), the job is
    written in your transaction: it exists only if you commit, and workers see it after COMMIT.
    """
    if registry.get(operation) is None:
        known = ", ".join(sorted(registry.all_operations())) or "none"
        raise InputInvalid(
            f"Unknown operation {operation!r}; register it with @operation in a jobs.py module. "
            f"Registered: {known}."
        )
    alias = using or conf.get("DATABASE")
    store = DurableJobStore(using=alias)
    return store.defer(
        operation,
        Submission.of(scope, idempotency_key, payload),
        queue=queue,
        priority=priority,
        run_after=run_after,
        in_caller_transaction=connections[alias].in_atomic_block,
    )
