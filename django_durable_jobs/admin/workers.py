"""Worker processes: one row per ``runjobs`` process, alive, stale or stopped."""

from __future__ import annotations

from django.contrib import admin
from django.utils import timezone

from ..humanize import relative
from ..models import WorkerProcess
from . import format as fmt
from .base import ReadOnlyAdmin


@admin.register(WorkerProcess)
class WorkerProcessAdmin(ReadOnlyAdmin):
    list_display = (
        "actor",
        "host",
        "pid",
        "state_badge",
        "leases_held",
        "concurrency",
        "heartbeat_age",
        "started_at",
        "stopped_at",
        "owner_id",
    )
    search_fields = ("actor", "host", "owner_id")

    @admin.display(description="state")
    def state_badge(self, obj: WorkerProcess):
        return fmt.worker_badge(obj.state(timezone.now()))

    @admin.display(description="heartbeat", ordering="heartbeat_at")
    def heartbeat_age(self, obj: WorkerProcess) -> str:
        return relative(obj.heartbeat_at, timezone.now())
