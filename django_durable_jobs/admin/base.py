"""What every admin page of the app shares: rows are evidence, never added, changed or deleted,
and they are read from the database the app's tables live in (``DURABLE_JOBS['DATABASE']``)."""

from __future__ import annotations

from django.contrib import admin

from ..conf import jobs_settings

# Payload columns: a list never reads them, however big they are.
LARGE_TEXT = ("proposal", "checkpoint", "result", "error")


class OnJobsDatabase:
    """Rows read from ``DURABLE_JOBS['DATABASE']``, the alias the app's tables live in."""

    def get_queryset(self, request):
        """Read from ``DURABLE_JOBS['DATABASE']``: the list, its filters, each page and inline,
        and the rows an action is given."""
        return super().get_queryset(request).using(jobs_settings.DATABASE)


class ReadOnly(OnJobsDatabase):
    """No add, change or delete for anybody (superusers included); viewing as Django decides."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class ReadOnlyAdmin(ReadOnly, admin.ModelAdmin):
    """A read-only admin page."""
