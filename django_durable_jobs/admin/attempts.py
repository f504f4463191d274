"""Attempts: one row per ended attempt, inline on the job page and as a list of their own."""

from __future__ import annotations

from django.contrib import admin

from ..models import JobAttempt
from .base import LARGE_TEXT, ReadOnly, ReadOnlyAdmin
from .paginator import EstimatedCountPaginator


class JobAttemptInline(ReadOnly, admin.TabularInline):
    model = JobAttempt
    fields = ("epoch", "outcome", "claimed_by", "owner_id", "started_at", "ended_at", "error")
    readonly_fields = fields
    ordering = ("-epoch", "-id")
    extra = 0
    can_delete = False
    show_change_link = False


@admin.register(JobAttempt)
class JobAttemptAdmin(ReadOnlyAdmin):
    list_display = ("job", "operation", "epoch", "outcome", "claimed_by", "started_at", "ended_at")
    list_filter = ("outcome", "job__operation")
    list_select_related = ("job",)
    ordering = ("-ended_at", "-id")
    show_full_result_count = False
    paginator = EstimatedCountPaginator

    def get_queryset(self, request):
        large = ("snapshot", "error", *(f"job__{name}" for name in LARGE_TEXT))
        return super().get_queryset(request).defer(*large)

    @admin.display(description="operation", ordering="job__operation")
    def operation(self, obj: JobAttempt) -> str:
        return obj.job.operation
