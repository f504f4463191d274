"""The dashboard: an overview that answers an incident's first questions, in the admin.

Its numbers all come from one call, :func:`django_durable_jobs.stats.snapshot`, the function
``manage.py jobs stats`` and ``GET /jobs/stats`` read too; this module only arranges them. The
page is the changelist of the :class:`~django_durable_jobs.models.Dashboard` proxy, so the
admin index and the app's section link to it for whoever may view jobs. Everything else a model
admin offers (add, change, history, delete) is no page here: an object URL leads to the job's own
page, or is a 404.

``?fragment=1`` answers the panels alone: the page's script fetches them every
``refresh_seconds`` and swaps them in. Without the script the page is complete, only still.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from urllib.parse import urlencode

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone

from .. import stats
from ..models import Dashboard, Job
from ..rules.conf import jobs_settings
from ..rules.vocabulary import JobStatus, Ownership
from . import charts
from .base import ReadOnlyAdmin
from .flowpanels import flow_panels
from .pauses import may_pause

# The cells of a row of the "now" tables, in order: (heading, status, ownership). Live rows
# (pending, a workflow's waiting jobs, sleeping, running) are counted now, by their ownership;
# ended ones over the last 24 hours.
NOW_COLUMNS = (
    ("pending", JobStatus.PENDING, Ownership.UNCLAIMED),
    ("waiting", JobStatus.WAITING, Ownership.UNCLAIMED),
    ("sleeping", JobStatus.SLEEPING, Ownership.UNCLAIMED),
    ("running", JobStatus.RUNNING, Ownership.CURRENT),
    ("lease expired", JobStatus.RUNNING, Ownership.EXPIRED),
    ("legacy", None, Ownership.LEGACY_UNKNOWN),
)
ENDED_COLUMNS = (JobStatus.COMPLETE, JobStatus.FAILED, JobStatus.CANCELLED)
# The charts sit two abreast at 1,280 px, each about 430 px wide: text keeps its size.
CHART_WIDTH = 460
OUTCOME_SERIES = (
    ("complete", "dj-s-complete"),
    ("failed", "dj-s-failed"),
    ("cancelled", "dj-s-cancelled"),
)


@admin.register(Dashboard)
class DashboardAdmin(ReadOnlyAdmin):
    """The dashboard page: shown to whoever may view jobs, with nothing to add, change or delete."""

    # How often the page fetches fresh panels, in seconds (the page's ``data-refresh``).
    refresh_seconds = 5

    def has_view_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.has_perm("durable_jobs.view_job")

    def get_urls(self):
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        view = self.admin_site.admin_view
        return [
            path("", view(self.changelist_view), name=f"{name}_changelist"),
            path("<path:object_id>/", view(self.job_view), name=f"{name}_change"),
        ]

    def changelist_view(self, request, extra_context=None):
        """Render the dashboard, or with ``?fragment=1`` its panels alone."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            **panels(stats.snapshot(scope=None), self.admin_site.name, may_pause(request)),
            "opts": self.opts,
            "title": "Dashboard",
            "refresh_seconds": self.refresh_seconds,
            **(extra_context or {}),
        }
        if request.GET.get("fragment"):
            template = "admin/durable_jobs/dashboard/panels.html"
        else:
            template = "admin/durable_jobs/dashboard/dashboard.html"
        return TemplateResponse(request, template, context)  # never cached: admin_view says so

    def job_view(self, request, object_id: str):
        """Send an object URL of the dashboard (``<id>/change/``…) to the job's own page."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        first = object_id.split("/", 1)[0]
        try:
            job_id = uuid.UUID(first)
        except ValueError:
            raise Http404("The dashboard has no pages of its own; see the job list.") from None
        if not Job.objects.using(jobs_settings.DATABASE).filter(pk=job_id).exists():
            raise Http404("No job has this id.")
        return HttpResponseRedirect(
            reverse(f"{self.admin_site.name}:durable_jobs_job_change", args=[job_id])
        )


def panels(snapshot: stats.Snapshot, site: str = "admin", pauser: bool = False) -> dict:
    """Return the template context of the dashboard's panels for ``snapshot``.

    ``pauser``: the user may pause and resume (``durable_jobs.pause_work``): show the buttons.
    """
    jobs_url = reverse(f"{site}:durable_jobs_job_changelist")
    workers_url = reverse(f"{site}:durable_jobs_workerprocess_changelist")
    return {
        "snapshot": snapshot,
        "taken_at": timezone.localtime(snapshot.taken_at),
        "jobs_url": jobs_url,
        "workers_url": workers_url,
        "schedules_url": reverse(f"{site}:durable_jobs_schedule_changelist"),
        "attention": [
            {"item": item, "url": _link(jobs_url, item.params)} for item in snapshot.attention
        ],
        "now_headings": [heading for heading, _, _ in NOW_COLUMNS],
        "ended_headings": [str(status) for status in ENDED_COLUMNS],
        "by_operation": _table(snapshot, "operation", jobs_url),
        "by_queue": _table(snapshot, "queue", jobs_url),
        "queues": snapshot.queues,
        "workers": snapshot.workers,
        "workers_states": _worker_states(snapshot.workers, workers_url),
        "paused": snapshot.schedules.paused_schedules,
        "charts": _charts(snapshot),
        **flow_panels(snapshot, site, jobs_url, pauser),
    }


def _link(base: str, params: dict) -> str:
    return f"{base}?{urlencode(params)}" if params else base


def _table(snapshot: stats.Snapshot, key: str, jobs_url: str) -> list[dict]:
    """Return one row per operation (or queue): counts now, and ended in the last 24 hours."""
    now = defaultdict(int)
    ended = defaultdict(int)
    names = set()
    for row in snapshot.jobs:
        name = getattr(row, key)
        names.add(name)
        for i, (_, status, ownership) in enumerate(NOW_COLUMNS):
            if row.ownership == ownership and status in (None, row.status):
                now[name, i] += row.count
    for row in snapshot.terminal_last_24h:
        name = getattr(row, key)
        names.add(name)
        ended[name, row.status] += row.count
    rows = []
    for name in sorted(names):
        cells = []
        for i, (heading, status, ownership) in enumerate(NOW_COLUMNS):
            params = {f"{key}__exact": name, "ownership": ownership}
            if status:
                params["status__exact"] = status
            cells.append(_cell(now[name, i], _link(jobs_url, params), f"{heading} now"))
        for status in ENDED_COLUMNS:
            params = {f"{key}__exact": name, "status__exact": status, "scheduled": "all"}
            cells.append(
                _cell(
                    ended[name, status],
                    _link(jobs_url, params),
                    f"{status} in the last 24 h (the list shows every one)",
                    css=f"dj-n-{status}",
                )
            )
        rows.append({"name": name, "cells": cells})
    return rows


def _cell(count: int, url: str, what: str, css: str = "") -> dict:
    return {"count": count, "url": url, "title": f"{count} {what}", "css": css}


def _worker_states(workers, workers_url: str) -> list[dict]:
    leases = defaultdict(int)
    for row in workers.active:
        leases[row.state] += row.leases_held
    return [
        {
            "state": state,
            "count": getattr(workers, state),
            "leases": leases[state] if state != "stopped" else None,
            "url": _link(workers_url, {"state": state}),
        }
        for state in ("alive", "stale", "stopped")
    ]


def _charts(snapshot: stats.Snapshot) -> dict:
    """Return the dashboard's charts, drawn from the snapshot's history and operations."""
    return {
        "per_minute": _history(
            "Ended per minute, last hour", snapshot.history_per_minute, "%H:%M", every=10
        ),
        "per_hour": _history(
            "Ended per hour, last 24 hours", snapshot.history_per_hour, "%H:00", every=4
        ),
        "failure_rate": charts.bars(
            "Failure rate per operation, last hour",
            [
                charts.Bar(
                    op.operation,
                    op.failure_rate,
                    charts.percent(op.failure_rate),
                    f"{op.failed} failed of {op.finished} ended",
                )
                for op in snapshot.operations_last_hour
                if op.failure_rate is not None
            ],
            maximum=1.0,
            axis=charts.percent,
            width=CHART_WIDTH,
        ),
        "enqueue_to_start": _spreads(
            "Enqueue to start per operation, last hour", snapshot, "enqueue_to_start"
        ),
        "run_time": _spreads("Run time per operation, last hour", snapshot, "run_time"),
    }


def _history(title: str, buckets, fmt: str, every: int):
    labels = [timezone.localtime(b.start).strftime(fmt) for b in buckets]
    series = [
        charts.Series(name, css, [getattr(b, name) for b in buckets])
        for name, css in OUTCOME_SERIES
    ]
    return charts.stacked_columns(title, labels, series, label_every=every, width=CHART_WIDTH)


def _spreads(title: str, snapshot: stats.Snapshot, field: str):
    rows = []
    for op in snapshot.operations_last_hour:
        p = getattr(op, field)
        if p.count:
            rows.append(
                charts.Spread(
                    op.operation,
                    (("p50", p.p50), ("p95", p.p95), ("p99", p.p99)),
                    f"{p.count} sampled",
                )
            )
    return charts.spreads(title, rows, width=CHART_WIDTH)
