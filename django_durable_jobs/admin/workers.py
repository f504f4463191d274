"""Worker processes: one row per ``runjobs`` process, alive, stale or stopped.

The leases a worker holds are counted from the jobs (running rows it owns), never read from the
row's ``leases_held``: that counter is the worker's own last report, and a process killed with
``kill -9`` never reports again, so its counter would say 1 long after its job was taken over.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, IntegerField, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.html import format_html

from ..formatting.humanize import relative
from ..models import Job, WorkerProcess
from ..rules.vocabulary import JobStatus
from . import format as fmt
from .base import WIDE, ReadOnlyAdmin
from .filters import WorkerStateFilter


def _running_jobs(lease: Q) -> Coalesce:
    """Return the number of running jobs the worker of each row owns whose lease matches."""
    owned = (
        Job.objects.filter(lease, status=JobStatus.RUNNING, owner_id=OuterRef("owner_id"))
        .order_by()
        .values("owner_id")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(owned, output_field=IntegerField()), Value(0))


@admin.register(WorkerProcess)
class WorkerProcessAdmin(ReadOnlyAdmin):
    list_display = (
        "actor",
        "host",
        "pid",
        "state_badge",
        "leases",
        "serves",
        "heartbeat_age",
        "started",
        "stopped",
    )
    list_filter = (WorkerStateFilter,)
    search_fields = ("actor", "host", "owner_id")

    def get_queryset(self, request):
        now = timezone.now()
        return (
            super()
            .get_queryset(request)
            .annotate(
                leases_live=_running_jobs(Q(lease_expires_at__gt=now)),
                leases_expired=_running_jobs(Q(lease_expires_at__lte=now)),
            )
        )

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, {**(extra_context or {}), **WIDE})

    @admin.display(description="state")
    def state_badge(self, obj: WorkerProcess):
        return fmt.worker_badge(obj.state(timezone.now()))

    @admin.display(description="leases held", ordering="leases_live")
    def leases(self, obj: WorkerProcess):
        """Return the live leases of the running jobs it owns, and any that expired."""
        expired = getattr(obj, "leases_expired", 0)
        slots = format_html(
            '<div class="durable-jobs-sub" title="jobs it runs at once (--concurrency)">'
            "{} slot{}</div>",
            obj.concurrency,
            "" if obj.concurrency == 1 else "s",
        )
        if not expired:
            return format_html("{}{}", getattr(obj, "leases_live", 0), slots)
        return format_html(
            '{}<div class="durable-jobs-sub" title="running jobs it owns whose lease ran out">'
            "+ {} expired</div>{}",
            getattr(obj, "leases_live", 0),
            expired,
            slots,
        )

    @admin.display(description="serves")
    def serves(self, obj: WorkerProcess):
        """Return its queues and how many operations it registered (each one on hover)."""
        operations = [name for name in obj.operations.split(",") if name]
        queues = ", ".join(name for name in obj.queues.split(",") if name) or "all queues"
        return format_html(
            '{}<div class="durable-jobs-sub" title="{}">{} operation{}</div>',
            queues,
            "\n".join(operations) or "none",
            len(operations),
            "" if len(operations) == 1 else "s",
        )

    @admin.display(description="heartbeat", ordering="heartbeat_at")
    def heartbeat_age(self, obj: WorkerProcess) -> str:
        return relative(obj.heartbeat_at, timezone.now())

    @admin.display(description="started", ordering="started_at")
    def started(self, obj: WorkerProcess):
        return _time_over_day(obj.started_at)

    @admin.display(description="stopped", ordering="stopped_at")
    def stopped(self, obj: WorkerProcess):
        return _time_over_day(obj.stopped_at)


def _time_over_day(when):
    """Return the time to the second with its day beneath, as the job list shows "created"."""
    if when is None:
        return "-"
    day, _, time = fmt.moment(when).partition(" ")
    return format_html('{}<div class="durable-jobs-sub">{}</div>', time, day)
