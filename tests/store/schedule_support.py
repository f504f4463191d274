"""Helpers of the schedule tests at the store (tests/store/test_schedules.py, test_ticks.py)."""

from __future__ import annotations

from django.test import override_settings

from django_durable_jobs.models import Job, Schedule
from django_durable_jobs.schedules import declared_schedules, tick_key
from django_durable_jobs.store import DurableJobStore
from tests.support import LEASE, FakeClock


def declare(**schedules):
    """Return the ScheduleSpecs of ``DURABLE_JOBS["SCHEDULES"] = schedules``."""
    with override_settings(DURABLE_JOBS={"SCHEDULES": schedules}):
        return declared_schedules()


def every(seconds=60, **extra):
    return {"operation": "tests.tick", "every": seconds, **extra}


def worker(clock: FakeClock, actor: str = "worker-a") -> DurableJobStore:
    """Return a store whose worker row exists (started at the clock's time)."""
    store = DurableJobStore(actor=actor, lease_seconds=LEASE, clock=clock)
    store.register_worker(concurrency=1)
    return store


def jobs_of(name: str) -> list[str]:
    """Return the idempotency keys of the schedule's jobs, oldest tick first."""
    prefix = f"schedule:{name}:"
    return sorted(
        Job.objects.filter(idempotency_key__startswith=prefix).values_list(
            "idempotency_key", flat=True
        )
    )


def keys(name: str, *ticks) -> list[str]:
    return sorted(tick_key(name, tick) for tick in ticks)


def row(name: str) -> Schedule:
    return Schedule.objects.get(name=name)
