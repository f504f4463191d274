"""Attempts: one row per ended attempt, inline on the job page and as a list of their own."""

from __future__ import annotations

from django.contrib import admin

from ..models import JobAttempt
from .base import LARGE_TEXT, ReadOnly, ReadOnlyAdmin
from .filters import AttemptOperationFilter
from .format import stored_text
from .paginator import EstimatedCountPaginator


@admin.display(description="traceback")
def traceback_shown(obj: JobAttempt):
    """Return the traceback of a failure an exception caused, escaped in a ``<pre>``."""
    return stored_text(obj.traceback)


# What an attempt shows of itself, on the job page (inline) and on its own page.
ATTEMPT_FIELDS = (
    "epoch",
    "outcome",
    "claimed_by",
    "owner_id",
    "started_at",
    "ended_at",
    "error",
    "error_class",
    traceback_shown,
)


class JobAttemptInline(ReadOnly, admin.TabularInline):
    model = JobAttempt
    fields = ATTEMPT_FIELDS
    readonly_fields = fields
    ordering = ("-epoch", "-id")
    extra = 0
    can_delete = False
    show_change_link = False

    def get_queryset(self, request):
        # Each snapshot holds a copy of the job's payloads (up to megabytes, or JSON written
        # elsewhere that no parser should walk); the inline shows none of it.
        return super().get_queryset(request).defer("snapshot")


@admin.register(JobAttempt)
class JobAttemptAdmin(ReadOnlyAdmin):
    list_display = (
        "job",
        "operation",
        "epoch",
        "outcome",
        "error_class",
        "claimed_by",
        "started_at",
        "ended_at",
    )
    list_filter = ("outcome", AttemptOperationFilter)
    list_select_related = ("job",)
    ordering = ("-ended_at", "-id")
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    fields = ("job", *ATTEMPT_FIELDS, "snapshot")
    readonly_fields = fields

    def get_queryset(self, request):
        large = ("snapshot", "error", "traceback", *(f"job__{name}" for name in LARGE_TEXT))
        return super().get_queryset(request).defer(*large)

    @admin.display(description="operation", ordering="job__operation")
    def operation(self, obj: JobAttempt) -> str:
        return obj.job.operation
