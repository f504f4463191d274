"""The gauges read from the database when Prometheus scrapes: one ``stats.snapshot()`` per scrape.

``DatabaseCollector`` is a prometheus-client custom collector: nothing is stored between scrapes,
so every process that serves it (the web app, a lone ``runjobs``, or the parent of
``runjobs --processes``) reports what the job table says now, the same numbers the dashboard,
``manage.py jobs stats`` and ``GET /jobs/stats`` show.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from django.db import DatabaseError, connections
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from ..stats import snapshot
from .recorder import PREFIX

logger = logging.getLogger("django_durable_jobs.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class DatabaseCollector:
    """Yield the job table's gauges from one snapshot (of ``scope``; None: every scope).

    ``close_connection`` closes the thread's database connection after each scrape: the
    HTTP server of ``runjobs --metrics-port`` answers each scrape in a new thread, whose
    connection nobody else would close. A database that cannot be read yields
    ``durable_jobs_stats_up 0`` and no other gauge, so that an alert can tell "no data" from 0.
    """

    def __init__(
        self,
        *,
        scope: str | None = None,
        using: str | None = None,
        close_connection: bool = False,
        take: Callable[..., Any] = snapshot,
    ) -> None:
        self.scope = scope
        self.using = using
        self.close_connection = close_connection
        self.take = take

    def describe(self) -> list:
        return []  # not collected at registration: the database may not be up yet

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily(
            f"{PREFIX}_stats_up", "1 when the job tables could be read at this scrape, else 0."
        )
        try:
            taken = self.take(scope=self.scope, using=self.using)
        except DatabaseError as exc:
            logger.warning("metrics: the job tables could not be read: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        finally:
            if self.close_connection:
                connections.close_all()
        up.add_metric([], 1)
        yield up
        yield from gauges(taken)


def gauges(taken: Any) -> Iterator[GaugeMetricFamily]:
    """Yield the gauges of one ``stats.snapshot()``."""
    jobs = GaugeMetricFamily(
        f"{PREFIX}_jobs",
        "Jobs not ended now (pending, running, waiting, sleeping), by status, queue and operation.",
        labels=["status", "queue", "operation"],
    )
    live: dict[tuple[str, str, str], int] = defaultdict(int)
    for count in taken.jobs:
        live[(count.status, count.queue, count.operation)] += count.count
    for labels, value in sorted(live.items()):
        jobs.add_metric(list(labels), value)
    yield jobs

    ownership = GaugeMetricFamily(
        f"{PREFIX}_running_jobs_by_ownership",
        "Running jobs now, by what their lease says (current, expired, legacy-unknown).",
        labels=["ownership", "operation"],
    )
    owned: dict[tuple[str, str], int] = defaultdict(int)
    for count in taken.jobs:
        if count.status == "running":
            owned[(count.ownership, count.operation)] += count.count
    for labels, value in sorted(owned.items()):
        ownership.add_metric(list(labels), value)
    yield ownership

    ended = GaugeMetricFamily(
        f"{PREFIX}_jobs_ended_last_24h",
        "Jobs that ended in the last 24 hours, by terminal status, queue and operation.",
        labels=["status", "queue", "operation"],
    )
    for count in taken.terminal_last_24h:
        ended.add_metric([count.status, count.queue, count.operation], count.count)
    yield ended

    lag = GaugeMetricFamily(
        f"{PREFIX}_queue_lag_seconds",
        "Age of the oldest due job per queue (pending, or sleeping past its wake-up time), in "
        "seconds (0 when none is due).",
        labels=["queue"],
    )
    due = GaugeMetricFamily(
        f"{PREFIX}_queue_due_jobs",
        "Pending jobs whose time has come, and sleeping ones whose sleep is over, per queue.",
        labels=["queue"],
    )
    for queue in taken.queues:
        lag.add_metric([queue.queue], queue.lag_seconds)
        due.add_metric([queue.queue], queue.due)
    yield lag
    yield due

    workers = GaugeMetricFamily(
        f"{PREFIX}_workers",
        "runjobs processes by state: alive (heartbeat within its lease), stale, stopped.",
        labels=["state"],
    )
    for state in ("alive", "stale", "stopped"):
        workers.add_metric([state], getattr(taken.workers, state))
    yield workers
    yield GaugeMetricFamily(
        f"{PREFIX}_workers_vanished",
        "Workers that stopped heartbeating while the job rows say they still hold leases.",
        value=taken.workers.vanished,
    )
    yield GaugeMetricFamily(
        f"{PREFIX}_schedules_paused", "Schedules paused now.", value=taken.schedules.paused
    )

    if taken.flow is not None:
        yield from _flow_gauges(taken.flow)

    attention = GaugeMetricFamily(
        f"{PREFIX}_attention_jobs",
        "Jobs that need a person, by kind (the dashboard's list).",
        labels=["kind"],
    )
    for item in taken.attention:
        attention.add_metric([item.kind], item.count)
    yield attention


def _flow_gauges(flow: Any) -> Iterator[GaugeMetricFamily]:
    """Yield the flow-control gauges: paused and limited pending jobs, pauses in force."""
    yield GaugeMetricFamily(
        f"{PREFIX}_paused_jobs",
        "Pending jobs that a pause in force holds (of a paused queue or operation).",
        value=flow.paused_jobs,
    )
    yield GaugeMetricFamily(
        f"{PREFIX}_pauses_in_force", "Queues and operations paused now.", value=len(flow.pauses)
    )
    limited = GaugeMetricFamily(
        f"{PREFIX}_limited_jobs",
        "Due, unpaused pending jobs that a rate limit or a concurrency-per-key limit holds back "
        "now, by limit (kind, target and name).",
        labels=["kind", "target", "name"],
    )
    for limit in flow.limits:
        limited.add_metric([limit.kind, limit.target, limit.name], limit.held)
    yield limited


def exposition(*, scope: str | None = None, using: str | None = None) -> bytes:
    """Return the text exposition of the job table's gauges, for the web view."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(scope=scope, using=using))
    return generate_latest(registry)
