"""Paused and limited jobs counted by ``stats.snapshot()``, ``jobs stats`` and the metrics; and
concurrent pauses of the same thing leaving exactly one pause in force."""

from __future__ import annotations

import json
import threading
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connections

from django_durable_jobs import stats
from django_durable_jobs.metrics.collector import exposition
from django_durable_jobs.models import JobPause
from django_durable_jobs.store import DurableJobStore
from tests.support import submission

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_snapshot_the_stats_command_and_the_metrics_count_paused_jobs():
    store = DurableJobStore()
    for n in range(3):
        store.defer("demo.op", submission({"n": n}), queue="mail")
    store.defer("demo.op", submission({"n": 9}), queue="other")
    store.defer("demo.op", submission({"n": 1}, scope="acme"), queue="other")
    store.pause("queue", "mail", reason="incident", by="kim")
    store.pause("operation", "demo.op", scope="acme")

    flow = stats.snapshot().flow
    assert flow.paused_jobs == 4
    assert sorted((p.name, p.scope, p.held) for p in flow.pauses) == [
        ("demo.op", "acme", 1),
        ("mail", "", 3),
    ]
    assert stats.snapshot(scope="acme").flow.paused_jobs == 1  # its own, and every scope's

    out = StringIO()
    call_command("jobs", "stats", stdout=out)
    text = out.getvalue()
    assert "Flow control: 4 pending jobs paused, 0 held by limits" in text
    assert "paused queue mail by kim" in text and "(pause" in text and "3 held): incident" in text

    metrics = exposition().decode()
    assert "durable_jobs_paused_jobs 4.0" in metrics
    assert "durable_jobs_pauses_in_force 2.0" in metrics


def test_concurrent_pauses_of_the_same_queue_leave_one_in_force():
    barrier = threading.Barrier(4)
    changes, errors = [], []

    def pause(n: int) -> None:
        try:
            barrier.wait(10)
            changes.append(DurableJobStore(actor=f"t{n}").pause("queue", "mail").changed)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=pause, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sorted(changes) == [False, False, False, True]
    assert JobPause.objects.filter(active=True).count() == 1


def test_a_full_queue_rate_limit_counts_its_due_jobs_as_limited_and_paused_ones_as_paused():
    from datetime import timedelta

    from django.conf import settings
    from django.test import override_settings
    from django.utils import timezone

    from django_durable_jobs.models import RateBucket
    from django_durable_jobs.rules import flow

    store = DurableJobStore()
    for n in range(3):
        store.defer("demo.op", submission({"n": n}), queue="sms")
    store.defer(
        "demo.op", submission({"n": 5}), queue="sms", run_after=timezone.now() + timedelta(hours=1)
    )
    store.defer("demo.other", submission({"n": 6}), queue="sms")
    store.pause("operation", "demo.other")  # paused: counted as paused, not as limited
    now = timezone.now()
    RateBucket.objects.create(
        id=flow.bucket_id("queue", "sms"),
        target="queue",
        name="sms",
        starts=json.dumps([(now - timedelta(seconds=s)).timestamp() for s in (20, 10)]),
    )
    queues = {"sms": {"rate_limit": "2/m"}}
    with override_settings(
        DURABLE_JOBS={**getattr(settings, "DURABLE_JOBS", {}), "QUEUES": queues}
    ):
        snap = stats.snapshot().flow
        metrics = exposition().decode()
    # Other test modules may declare limits of their own: this test's is the queue's.
    (limit,) = [found for found in snap.limits if found.target == "queue"]
    assert (limit.target, limit.name, limit.kind, limit.limit) == (
        "queue",
        "sms",
        "rate_limit",
        "2/m",
    )
    assert (limit.held, snap.limited_jobs, snap.paused_jobs) == (3, 3, 1)
    (key,) = limit.keys
    assert key.detail == "2 started in the last 60 s" and key.until is not None
    assert 'durable_jobs_limited_jobs{kind="rate_limit",name="sms",target="queue"} 3.0' in metrics

    RateBucket.objects.update(starts="[]")  # the window is empty again: room for 2 of the 3
    with override_settings(
        DURABLE_JOBS={**getattr(settings, "DURABLE_JOBS", {}), "QUEUES": queues}
    ):
        assert stats.snapshot().flow.limited_jobs == 1
