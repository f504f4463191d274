"""Read-only admin views of jobs and their attempts: rows are evidence, never edited here."""

from __future__ import annotations

from django.contrib import admin

from .models import Job, JobAttempt, WorkerProcess


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class JobAttemptInline(admin.TabularInline):
    model = JobAttempt
    fields = ("epoch", "outcome", "claimed_by", "started_at", "ended_at", "error")
    readonly_fields = fields
    ordering = ("-epoch",)
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "operation",
        "status",
        "ownership",
        "claimed_by",
        "fencing_epoch",
        "attempts",
        "progress",
        "created_at",
    )
    list_filter = ("status", "operation", "queue")
    search_fields = ("id", "idempotency_key")
    show_full_result_count = False
    inlines = [JobAttemptInline]


@admin.register(JobAttempt)
class JobAttemptAdmin(ReadOnlyAdmin):
    list_display = ("job", "epoch", "outcome", "claimed_by", "started_at", "ended_at")
    list_filter = ("outcome",)


@admin.register(WorkerProcess)
class WorkerProcessAdmin(ReadOnlyAdmin):
    list_display = ("actor", "host", "pid", "state", "leases_held", "heartbeat_at", "stopped_at")

    @admin.display(description="state")
    def state(self, obj: WorkerProcess) -> str:
        return obj.state()
