"""``submit()`` and ``submit_many()``: enqueue pending work for a registered operation."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.db import connections

from .models import Job
from .rules import registry, validation
from .rules.conf import jobs_settings
from .rules.errors import InputInvalid, JobError
from .rules.validation import listed
from .store import MAX_SUBMISSIONS, DurableJobStore, Submission


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
    _require_registered(operation)
    alias = jobs_settings.database(using)
    store = DurableJobStore(using=alias)
    return store.defer(
        operation,
        Submission.of(scope, idempotency_key, payload),
        queue=queue,
        priority=priority,
        run_after=run_after,
        in_caller_transaction=connections[alias].in_atomic_block,
    )


def submit_many(
    operation: str,
    payloads: Iterable[Any],
    *,
    scope: str | None = None,
    idempotency_keys: Sequence[str | None] | None = None,
    queue: str | None = None,
    priority: int = 0,
    run_after: datetime | None = None,
    using: str | None = None,
) -> list[Job]:
    """Persist one pending job per payload and return the jobs in the same order.

    The bulk ``submit()``: a few multi-row statements instead of one round trip per job.
    ``idempotency_keys`` is None or one key (or None, for a fresh key) per payload. Each job
    follows ``submit()``'s rules: an identical earlier submission returns its job unchanged,
    and a key given twice in one call with the same payload returns one job twice. A single
    payload that differs from its key's earlier one refuses the whole call with
    ``IdempotencyConflict`` naming it, and nothing is written. At most 10,000 payloads a call.

    Inside ``transaction.atomic()`` the jobs are written in your transaction, like ``submit()``.
    """
    _require_registered(operation)
    payloads = listed(payloads, "payloads")
    if len(payloads) > MAX_SUBMISSIONS:  # before serialising any of them
        raise InputInvalid(
            f"{len(payloads)} payloads in one call; the most is {MAX_SUBMISSIONS}. Split them."
        )
    if idempotency_keys is None:
        keys: list[str | None] = [None] * len(payloads)
    else:
        keys = listed(idempotency_keys, "idempotency_keys")
        if len(keys) != len(payloads):
            raise InputInvalid(
                f"idempotency_keys has {len(keys)} entries for {len(payloads)} payloads; give "
                f"one per payload (None for a fresh key), or pass None."
            )
    submissions = []
    for index, (key, payload) in enumerate(zip(keys, payloads, strict=True)):
        try:
            submissions.append(Submission.of(scope, key, payload))
        except JobError as exc:
            raise type(exc)(f"Payload {index}: {exc.message}", code=exc.code) from None
    alias = jobs_settings.database(using)
    store = DurableJobStore(using=alias)
    return store.defer_many(
        operation,
        submissions,
        queue=queue,
        priority=priority,
        run_after=run_after,
        in_caller_transaction=connections[alias].in_atomic_block,
    )


def _require_registered(operation: str) -> None:
    validation.operation(operation)  # a name, before it is looked up (a list is no dict key)
    if registry.get(operation) is None:
        known = ", ".join(sorted(registry.all_operations())) or "none"
        raise InputInvalid(
            f"Unknown operation {operation!r}; register it with @operation in a jobs.py module. "
            f"Registered: {known}."
        )
