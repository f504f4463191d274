"""Schedule rows for the tests of the schedule surfaces (admin, ``jobs schedules``, REST API).

The rows are made directly, as a worker's reconciliation leaves them, so that these tests need no
worker; the jobs of a tick are submitted through the store with the tick's idempotency key, as
the scheduler submits them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from django_durable_jobs.models import Job, Schedule
from django_durable_jobs.schedules import tick_key
from django_durable_jobs.store import DurableJobStore
from tests.support import db_state, submission

ANCHOR = datetime(2026, 1, 1, tzinfo=UTC)


def make_schedule(name: str, **fields: Any) -> Schedule:
    """Return a new schedule row: a daily cron at 03:00 UTC unless ``fields`` say otherwise."""
    now = timezone.now()
    values: dict[str, Any] = {
        "operation": "tests.noop",
        "cron": "0 3 * * *",
        "interval_seconds": None,
        "anchor": ANCHOR,
        "timezone": "UTC",
        "payload": '{"kind": "full"}',
        "definition_hash": "0" * 64,
        "declared_at": now,
        "created_at": now - timedelta(days=1),
        "updated_at": now,
        **fields,
    }
    if values["interval_seconds"]:
        values["cron"] = ""
    return Schedule.objects.create(name=name, **values)


def tick_job(row: Schedule, tick: datetime, store: DurableJobStore | None = None) -> Job:
    """Submit the job of ``row``'s ``tick`` as the scheduler does, and make it the last job."""
    store = store or DurableJobStore(actor="scheduler")
    job = store.defer(
        row.operation,
        submission(json.loads(row.payload), key=tick_key(row.name, tick), scope=row.scope),
    )
    Schedule.objects.filter(pk=row.pk).update(last_tick_at=tick, last_job=job)
    row.refresh_from_db()
    return job


def schedules_state() -> str:
    """Return a canonical dump of every schedule row."""
    rows = list(Schedule.objects.order_by("name").values())
    return json.dumps(rows, cls=DjangoJSONEncoder, sort_keys=True)


def everything() -> str:
    """Return a canonical dump of the job, attempt, gate and schedule rows."""
    return db_state() + schedules_state()
