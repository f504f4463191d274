"""Pauses in the admin: their history (read-only evidence), and pausing and resuming work.

* :class:`JobPauseAdmin` lists every pause, in force or ended: who paused what, when and why,
  and who resumed it. Nobody adds, edits or deletes a row here: they are evidence.
* Its two POST views, ``pause/`` and ``<id>/resume/``, are what the dashboard's pause form and
  Resume buttons post to. Each asks for a confirmation first, then calls the store (the only
  writer) and says what it did on the dashboard.
* :class:`PauseActions` gives the job list *Pause these jobs' operations or queues*, with a
  confirmation page that names exactly what will be paused.

Every write needs the permission ``durable_jobs.pause_work`` (403 without it, nothing written).
Seeing the history needs ``view_jobpause`` or ``pause_work``.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from ..models import JobPause
from ..rules import validation
from ..rules.conf import jobs_settings
from ..rules.errors import JobError
from ..store import DurableJobStore, PauseChange
from . import format as fmt
from .base import WIDE, ReadOnlyAdmin

PERMISSION = "durable_jobs.pause_work"
TARGET_WORDS = {"queue": "queue", "operation": "operation"}


def may_pause(request) -> bool:
    return request.user.is_active and request.user.has_perm(PERMISSION)


def store_for(request) -> DurableJobStore:
    """Return an unscoped store acting as ``admin:<user>`` (the admin sees every scope)."""
    actor = f"admin:{request.user.get_username()}"[: validation.NAME_MAX]
    return DurableJobStore(actor=actor, using=jobs_settings.DATABASE)


def change_message(change: PauseChange, verb: str) -> str:
    """Return what a pause or resume did, in an operator's words."""
    p = change.pause
    where = f" in scope {p.scope}" if p.scope else " in every scope"
    what = f"{p.target} {p.name}{where}"
    if verb == "pause" and change.changed:
        return f"Paused {what}: no worker claims its pending jobs until it is resumed."
    if verb == "pause":
        by = p.paused_by or "someone unrecorded"
        return f"{what[0].upper()}{what[1:]} was already paused, by {by}; nothing changed."
    if change.changed:
        return f"Resumed {what}: its pending jobs are claimed again."
    return f"The pause of {what} had already ended; nothing changed."


class InForceFilter(admin.SimpleListFilter):
    """In force (``active`` True) or resumed (``active`` NULL)."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return (("in-force", "in force"), ("resumed", "resumed"))

    def queryset(self, request, queryset):
        if self.value() == "in-force":
            return queryset.filter(active=True)
        if self.value() == "resumed":
            return queryset.filter(active__isnull=True)
        return queryset


@admin.register(JobPause)
class JobPauseAdmin(ReadOnlyAdmin):
    """The pauses, newest first: evidence of who held what back, when, why, and who resumed it."""

    list_display = (
        "state",
        "target",
        "name",
        "scope_shown",
        "paused_at",
        "paused_by",
        "reason",
        "resumed_at",
        "resumed_by",
    )
    list_filter = ("target", InForceFilter)
    search_fields = ("name", "reason", "paused_by", "resumed_by")
    ordering = ("-paused_at", "-id")
    fields = (
        "state",
        "target",
        "name",
        "scope_shown",
        "reason",
        "paused_at",
        "paused_by",
        "resumed_at",
        "resumed_by",
    )
    readonly_fields = fields

    def has_view_permission(self, request, obj=None) -> bool:
        return may_pause(request) or super().has_view_permission(request, obj)

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, {**(extra_context or {}), **WIDE})

    @admin.display(description="state", ordering="active")
    def state(self, obj: JobPause):
        if obj.active:
            return fmt.badge("in force", "#e67e22", "Workers claim none of the work it holds.")
        return fmt.badge("resumed", "#6c757d")

    @admin.display(description="scope", ordering="scope")
    def scope_shown(self, obj: JobPause) -> str:
        return obj.scope or "(every scope)"

    # -- pause and resume (POST only, confirmed first) ---------------------------------------

    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name
        view = self.admin_site.admin_view
        return [
            path("pause/", view(self.pause_view), name="{}_{}_pause".format(*info)),
            path(
                "<int:pause_id>/resume/", view(self.resume_view), name="{}_{}_resume".format(*info)
            ),
            *super().get_urls(),
        ]

    def pause_view(self, request):
        """Confirm, then pause the queue or operation the form names; back to the dashboard."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not may_pause(request):
            raise PermissionDenied
        target = request.POST.get("target", "")
        name = request.POST.get("name", "").strip()
        scope = request.POST.get("scope", "").strip()
        reason = request.POST.get("reason", "").strip()
        if request.POST.get("confirm") != "yes":
            where = f"in scope {scope}" if scope else "in every scope"
            return self._confirm(
                request,
                f"Pause {TARGET_WORDS.get(target, target)} {name} {where}?",
                "Workers stop claiming its pending jobs at their next claim; jobs already "
                "running finish. Its jobs stay pending and are claimed again after a resume.",
                "Yes, pause it",
                fields={"target": target, "name": name, "scope": scope, "reason": reason},
            )
        return self._do(
            request, "pause", lambda s: s.pause(target, name, scope=scope, reason=reason)
        )

    def resume_view(self, request, pause_id: int):
        """Confirm, then end the pause ``pause_id``; back to the dashboard."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not may_pause(request):
            raise PermissionDenied
        row = JobPause.objects.using(jobs_settings.DATABASE).filter(pk=pause_id).first()
        if row is None:
            self.message_user(request, f"There is no pause {pause_id}.", messages.ERROR)
            return HttpResponseRedirect(self._back(request))
        if request.POST.get("confirm") != "yes":
            where = f"in scope {row.scope}" if row.scope else "in every scope"
            return self._confirm(
                request,
                f"Resume {row.target} {row.name} {where}?",
                f"Paused since {fmt.moment(row.paused_at)} by "
                f"{row.paused_by or 'someone unrecorded'}"
                + (f" because: {row.reason}" if row.reason else "")
                + ". Its pending jobs are claimed again at once.",
                "Yes, resume it",
                fields={},
            )
        return self._do(request, "resume", lambda s: s.resume(pause_id=pause_id))

    def _do(self, request, verb: str, call) -> HttpResponseRedirect:
        try:
            change = call(store_for(request))
        except JobError as exc:
            self.message_user(request, f"Not {verb}d: {exc.message}", messages.ERROR)
        else:
            level = messages.SUCCESS if change.changed else messages.WARNING
            self.message_user(request, change_message(change, verb), level)
        return HttpResponseRedirect(self._back(request))

    def _confirm(self, request, title: str, question: str, answer: str, *, fields: dict):
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": title,
            "question": question,
            "answer": answer,
            "fields": fields,
            "back_url": self._back(request),
        }
        return TemplateResponse(request, "admin/durable_jobs/jobpause/confirm.html", context)

    def _back(self, request) -> str:
        return reverse(f"{self.admin_site.name}:durable_jobs_dashboard_changelist")


class PauseActions:
    """The job list's *Pause these jobs' operations or queues* (permission ``pause_work``)."""

    def has_pause_work_permission(self, request) -> bool:
        return may_pause(request)

    @admin.action(description="Pause these jobs' operations or queues", permissions=["pause_work"])
    def pause_operations_or_queues(self, request, queryset):
        """Ask which (the operations or the queues) and why, then pause each in every scope."""
        operations = sorted(set(queryset.values_list("operation", flat=True)))
        queues = sorted(set(queryset.values_list("queue", flat=True)))
        target = request.POST.get("pause_target")
        if request.POST.get("confirm") != "yes" or target not in ("operation", "queue"):
            context = {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": "Pause these jobs' operations or queues?",
                "operations": operations,
                "queues": queues,
                "selected": queryset.values_list("pk", flat=True),
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                "action": "pause_operations_or_queues",
                "chosen": target,
            }
            template = "admin/durable_jobs/job/pause_confirmation.html"
            return TemplateResponse(request, template, context)
        reason = request.POST.get("reason", "").strip()
        store = store_for(request)
        for name in operations if target == "operation" else queues:
            try:
                change = store.pause(target, name, reason=reason)
            except JobError as exc:
                self.message_user(request, f"{target} {name}: {exc.message}", messages.ERROR)
            else:
                level = messages.SUCCESS if change.changed else messages.WARNING
                self.message_user(request, change_message(change, "pause"), level)
        return None
