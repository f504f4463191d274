"""The schedule page: recurring jobs declared in code, their next tick, last job, pause and resume.

A schedule's definition comes from code (``@operation(..., schedule=...)`` or
``DURABLE_JOBS["SCHEDULES"]``) and is written by the workers that declare it: nobody adds,
edits or deletes one here. What a person may do is *pause* and *resume* it, through the store
(``pause_schedule`` / ``resume_schedule``), the list's actions or the buttons of its page.

Permissions: ``view_schedule`` (or ``change_schedule``) to see the pages; ``change_schedule``
to pause and resume.

A row this server cannot read (a time zone it does not know, a cron expression changed by hand)
is listed with a red *broken* badge and the reason, which says how to fix it; its page shows
the reason too, and it can be paused and resumed like any other.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import F
from django.http import Http404, HttpResponseRedirect
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST

from .. import schedules
from ..formatting.humanize import relative
from ..models import Schedule, rows
from ..rules import validation
from ..rules.conf import jobs_settings
from ..rules.errors import JobError
from ..store import DurableJobStore
from . import format as fmt
from .base import ReadOnlyAdmin
from .filters import ScheduleFilter

STATE_WORDS = {
    rows.SCHEDULE_ACTIVE: "active",
    rows.SCHEDULE_PAUSED: "paused",
    rows.SCHEDULE_REMOVED: "removed from code",
    rows.SCHEDULE_BROKEN: "broken",
}
STATE_COLOURS = {
    rows.SCHEDULE_ACTIVE: "#1e7e34",
    rows.SCHEDULE_PAUSED: "#e67e22",
    rows.SCHEDULE_REMOVED: "#6c757d",
    rows.SCHEDULE_BROKEN: "#c0392b",
}
LISTED_NAMES = 10


def local_time(moment, now) -> str:
    """Return ``moment`` in the admin's time zone with its distance from ``now``:
    ``2026-12-01 04:00:00 CET (in 3 h)``; ``-`` for None."""
    if moment is None:
        return "-"
    shown = timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S %Z")
    return f"{shown} ({relative(moment, now)})"


@admin.register(Schedule)
class ScheduleAdmin(ReadOnlyAdmin):
    list_display = (
        "name",
        "operation",
        "timing",
        "timezone",
        "state_badge",
        "next_tick",
        "last_tick",
        "last_job_link",
        "last_job_outcome",
        "jobs_link",
    )
    list_filter = ("operation", "scope")
    search_fields = ("name", "operation")
    ordering = ("name",)
    actions = ["pause_schedules", "resume_schedules"]
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "name",
                    "state_and_reason",
                    "operation",
                    "timing",
                    "timezone",
                    "anchor",
                    "scope",
                    "queue",
                    "priority",
                    "payload_pretty",
                    "overlap",
                    "catch_up",
                    "catch_up_limit",
                    "definition_hash",
                )
            },
        ),
        (
            "Ticks",
            {
                "fields": (
                    "next_tick",
                    "last_tick",
                    "last_job_link",
                    "last_job_outcome",
                    "jobs_link",
                )
            },
        ),
        (
            "History",
            {
                "fields": (
                    "paused_at",
                    "paused_by",
                    "removed_at",
                    "declared_at",
                    "created_at",
                    "updated_at",
                )
            },
        ),
    )
    readonly_fields = tuple(name for _, options in fieldsets for name in options["fields"])

    # -- permissions: definitions come from code --------------------------------------------------

    # Read-only for everybody (ReadOnlyAdmin): no form saves a definition. ``change_schedule``
    # is the permission to pause and resume (has_pause_permission).

    def has_pause_permission(self, request) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.change_schedule")

    # -- queryset and columns ---------------------------------------------------------------------

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(last_job_status=F("last_job__status"))

    @admin.display(description="cron or interval")
    def timing(self, obj: Schedule) -> str:
        return rows.schedule_timing(obj)

    @admin.display(description="state")
    def state_badge(self, obj: Schedule):
        """Return the state's badge; for a row this server cannot read, what is wrong under it
        (the whole reason, with its fix, on hover and on the schedule's page)."""
        return self._state(obj, short=True)

    @admin.display(description="state")
    def state_and_reason(self, obj: Schedule):
        """Return the state's badge; for a row this server cannot read, the reason and its fix."""
        return self._state(obj, short=False)

    def _state(self, obj: Schedule, *, short: bool):
        state, problem = rows.schedule_health(obj)
        badge = fmt.badge(STATE_WORDS[state], STATE_COLOURS[state])
        if problem is None:
            return badge
        if not short:
            return format_html('{}<div class="durable-jobs-problem">{}</div>', badge, problem)
        return format_html(
            '{}<div class="durable-jobs-problem" title="{}" style="max-width:24em">{}</div>',
            badge,
            problem,
            schedules.problem_summary(obj.name, problem),
        )

    @admin.display(description="next tick")
    def next_tick(self, obj: Schedule) -> str:
        state = rows.schedule_state(obj)
        if state != rows.SCHEDULE_ACTIVE:
            return f"- ({STATE_WORDS[state]})"
        now = timezone.now()
        return local_time(schedules.next_tick(obj, now), now)

    @admin.display(description="last tick", ordering="last_tick_at")
    def last_tick(self, obj: Schedule) -> str:
        return local_time(obj.last_tick_at, timezone.now())

    @admin.display(description="last job")
    def last_job_link(self, obj: Schedule):
        if obj.last_job_id is None:
            return "-"
        url = reverse(
            "admin:durable_jobs_job_change",
            args=[admin.utils.quote(obj.last_job_id)],
            current_app=self.admin_site.name,
        )
        return format_html('<a href="{}">{}</a>', url, obj.last_job_id)

    @admin.display(description="last job's outcome")
    def last_job_outcome(self, obj: Schedule) -> str:
        """Return the last job's status now, read with the row (``get_queryset``)."""
        return getattr(obj, "last_job_status", None) or "-"

    @admin.display(description="jobs")
    def jobs_link(self, obj: Schedule):
        url = reverse("admin:durable_jobs_job_changelist", current_app=self.admin_site.name)
        query = urlencode({ScheduleFilter.parameter_name: obj.name})
        return format_html('<a href="{}?{}">jobs</a>', url, query)

    @admin.display(description="payload")
    def payload_pretty(self, obj: Schedule):
        return fmt.pretty_json(obj.payload)

    # -- pause and resume -------------------------------------------------------------------------

    @admin.action(description="Pause selected schedules", permissions=["pause"])
    def pause_schedules(self, request, queryset) -> None:
        names = list(queryset.order_by("name").values_list("name", flat=True))
        self._each(request, names, pause=True)

    @admin.action(description="Resume selected schedules", permissions=["pause"])
    def resume_schedules(self, request, queryset) -> None:
        names = list(queryset.order_by("name").values_list("name", flat=True))
        self._each(request, names, pause=False)

    def _each(self, request, names: list[str], *, pause: bool) -> None:
        """Ask the store once per schedule and say what it answered."""
        store = _store(request)
        ask: Callable[[str], Schedule] = store.pause_schedule if pause else store.resume_schedule
        changed, unchanged, failed = [], [], []
        for name in names:
            try:
                answer = ask(name)
            except JobError as exc:
                failed.append((name, exc))
                continue
            (changed if answer.changed else unchanged).append(name)
        for level, text in request_messages(changed, unchanged, failed, pause=pause):
            self.message_user(request, text, level)

    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name
        urls = [
            path(
                f"<path:object_id>/{verb}/",
                self.admin_site.admin_view(require_POST(view)),
                name=f"{info[0]}_{info[1]}_{verb}",
            )
            for verb, view in (("pause", self.pause_view), ("resume", self.resume_view))
        ]
        return [*urls, *super().get_urls()]

    def pause_view(self, request, object_id: str):
        """Pause one schedule (POST, from its page's button) and go back to its page."""
        return self._button(request, object_id, pause=True)

    def resume_view(self, request, object_id: str):
        """Resume one schedule (POST, from its page's button) and go back to its page."""
        return self._button(request, object_id, pause=False)

    def _button(self, request, object_id: str, *, pause: bool):
        obj = self.get_object(request, admin.utils.unquote(object_id))
        if obj is None:
            raise Http404(f"No schedule {object_id}.")
        if not self.has_pause_permission(request):
            raise PermissionDenied
        self._each(request, [obj.name], pause=pause)
        return HttpResponseRedirect(self._url("change", obj.pk))

    def _url(self, view: str, *args) -> str:
        info = self.opts.app_label, self.opts.model_name, view
        return reverse("admin:{}_{}_{}".format(*info), args=args, current_app=self.admin_site.name)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        obj = self.get_object(request, admin.utils.unquote(object_id))
        can = obj is not None and self.has_pause_permission(request)
        context = {
            "durable_jobs_can_pause": can and obj.paused_at is None,
            "durable_jobs_can_resume": can and obj.paused_at is not None,
            "durable_jobs_pause_url": self._url("pause", object_id) if obj else "",
            "durable_jobs_resume_url": self._url("resume", object_id) if obj else "",
        }
        return super().change_view(
            request, object_id, form_url, {**context, **(extra_context or {})}
        )


def _store(request) -> DurableJobStore:
    actor = f"admin:{request.user.get_username()}"[: validation.NAME_MAX]
    return DurableJobStore(actor=actor, using=jobs_settings.DATABASE)


def request_messages(
    changed: list[str], unchanged: list[str], failed: list[tuple[str, JobError]], *, pause: bool
) -> list[tuple[int, str]]:
    """Return what *Pause* or *Resume* says: a summary, then one error per refused schedule."""
    if pause:
        done = ("%(count)d schedule paused", "%(count)d schedules paused")
        same = (
            "%(count)d schedule was already paused",
            "%(count)d schedules were already paused",
        )
    else:
        done = ("%(count)d schedule resumed", "%(count)d schedules resumed")
        same = (
            "%(count)d schedule was not paused",
            "%(count)d schedules were not paused",
        )
    parts = [_n(len(changed), *done) + (f" ({_names(changed)})" if changed else "")]
    if unchanged:
        parts.append(f"{_n(len(unchanged), *same)} ({_names(unchanged)})")
    level = messages.SUCCESS if changed else messages.WARNING
    refusals = [(messages.ERROR, f"Schedule {name}: {exc.message}") for name, exc in failed]
    return [(level, "; ".join(parts) + "."), *refusals]


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:LISTED_NAMES])
    more = len(names) - LISTED_NAMES
    return shown + (f" and {more} more" if more > 0 else "")


def _n(count: int, singular: str, plural: str) -> str:
    return ngettext(singular, plural, count) % {"count": count}
