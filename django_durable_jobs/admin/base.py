"""What every admin page of the app shares: rows are evidence, never added, changed or deleted."""

from __future__ import annotations

from django.contrib import admin

# Payload columns: a list never reads them, however big they are.
LARGE_TEXT = ("proposal", "checkpoint", "result", "error")


class ReadOnly:
    """No add, change or delete for anybody (superusers included); viewing as Django decides."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class ReadOnlyAdmin(ReadOnly, admin.ModelAdmin):
    """A read-only admin page."""
