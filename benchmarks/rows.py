"""Authentic pending job rows written straight to the table, for benchmarks that bypass submit()."""

from __future__ import annotations

import uuid
from typing import Any


def insert_pending(operation: str, payloads: list[Any]) -> list:
    """Insert one pending job per payload, as ``submit()`` would, without NOTIFY; return them."""
    from django.utils import timezone

    from django_durable_jobs.models import Job
    from django_durable_jobs.rules.values import canonical_json
    from django_durable_jobs.rules.vocabulary import JobStatus, proposal_sha256

    now = timezone.now()
    rows = []
    for payload in payloads:
        pk = uuid.uuid4()
        proposal = canonical_json(payload)
        rows.append(
            Job(
                id=pk,
                operation=operation,
                status=JobStatus.PENDING,
                scope="default",
                idempotency_key=str(pk),
                proposal=proposal,
                proposal_hash=proposal_sha256(proposal),
                proposal_checked=True,  # canonical_json's output is what the store checks
                created_at=now,
                run_after=now,
            )
        )
    return Job.objects.bulk_create(rows, batch_size=500)
