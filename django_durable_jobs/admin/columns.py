"""The job list's columns: status and ownership, operation, times, the lease, the last error.

Each reads only the row and its annotations (``ownership_sql``, the owner worker's columns,
``error_head``), so a page of 100 jobs costs the same queries as a page of one.
"""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from ..formatting.humanize import relative
from ..models import Job, WorkerProcess
from ..rules.conf import jobs_settings
from ..rules.vocabulary import JobStatus, Ownership, assess_ownership
from . import format as fmt
from .jobpage import attempt_of

# A lease holder's name is cut in the list (the whole name is on hover).
NAME_CHARS = 24


PAUSED_COLOUR = "#e67e22"
PAUSED_TITLE = "A pause in force holds its queue or operation: no worker claims it until resumed."


class JobColumns:
    """The columns of the job list, and the few fields the job page shares with it."""

    @admin.display(description="id")
    def short_id(self, obj: Job):
        return fmt.short_id(obj.pk)

    @admin.display(description="status", ordering="status")
    def state(self, obj: Job):
        """Return the status badge (with the ownership badge when it says more), the attempt
        and epoch, and the progress of a running job (or of one that ended short of done).

        A terminal job's ownership is always ``terminal``; a pending one is normally
        ``unclaimed`` and a running one ``current``: those go without saying.
        """
        ownership = getattr(obj, "ownership_sql", None) or assess_ownership(obj, timezone.now())
        badges = fmt.status_badge(obj.status)
        if ownership not in (Ownership.TERMINAL, Ownership.UNCLAIMED, Ownership.CURRENT):
            badges = format_html("{} {}", badges, fmt.ownership_badge(ownership))
        if getattr(obj, "paused_now", False):
            badges = format_html("{} {}", badges, fmt.badge("paused", PAUSED_COLOUR, PAUSED_TITLE))
        progress = ""
        if obj.status == JobStatus.RUNNING or (obj.progress and obj.status != JobStatus.COMPLETE):
            progress = format_html(
                '<div class="durable-jobs-sub">{}</div>', fmt.progress_bar(obj.progress)
            )
        return format_html(
            '{}<div class="durable-jobs-sub" title="attempts (of the retry policy\'s maximum) '
            'and fencing epoch">attempt {} · epoch {}</div>{}',
            badges,
            attempt_of(obj),
            obj.fencing_epoch,
            progress,
        )

    @admin.display(description="operation", ordering="operation")
    def operation_shown(self, obj: Job):
        """Return the operation (it may wrap after a dot), and under it the scope and queue,
        and for a workflow's job its name there, linked to the workflow's page."""
        shown = format_html(
            '{}<div class="durable-jobs-sub">{} · {}</div>',
            fmt.breakable(obj.operation),
            obj.scope if obj.scope is not None else "(no scope)",
            obj.queue,
        )
        if obj.workflow_id is None:
            return shown
        url = reverse(
            "admin:durable_jobs_workflow_change",
            args=[obj.workflow_id],
            current_app=self.admin_site.name,
        )
        return format_html(
            '{}<div class="durable-jobs-sub">in <a href="{}" title="its workflow">workflow'
            " {}</a>{}</div>",
            shown,
            url,
            str(obj.workflow_id)[: fmt.SHORT_ID],
            format_html(" as {}", obj.node) if obj.node else "",
        )

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: Job):
        day, _, time = fmt.moment(obj.created_at).partition(" ")
        return format_html('{}<div class="durable-jobs-sub">{}</div>', time, day)

    @admin.display(description="duration")
    def duration(self, obj: Job):
        """Return how long the last attempt ran (or runs), or how long a pending job waits."""
        now = timezone.now()
        if obj.status == JobStatus.PENDING:
            if obj.run_after and obj.run_after > now:
                shown, what = fmt.duration((obj.run_after - now).total_seconds()), "due in"
            else:
                shown, what = fmt.between(max(obj.created_at, obj.run_after), now), "waiting"
        elif obj.status == JobStatus.RUNNING:
            shown, what = fmt.between(obj.claimed_at, now), "running"
        elif obj.status == JobStatus.WAITING:
            shown, what = fmt.between(obj.created_at, now), "waiting for parents"
        elif obj.status == JobStatus.SLEEPING:
            until = obj.sleep_until or obj.run_after
            shown = fmt.duration((until - now).total_seconds()) if until else "-"
            what = "sleeps; due in" if until and until > now else "slept; due now"
        else:
            shown, what = fmt.between(obj.claimed_at or obj.created_at, obj.completed_at), "ran"
        return format_html('{}<div class="durable-jobs-sub">{}</div>', shown, what)

    @admin.display(description="lease")
    def lease(self, obj: Job):
        """Return who holds a running job's lease: its worker's state, name, heartbeat, expiry."""
        state = self._owner_worker_state(obj)
        if state is None:
            return "-"
        name = obj.claimed_by or "(no name)"
        cut = name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…"
        now = timezone.now()
        expiry = relative(obj.lease_expires_at, now)
        return format_html(
            '{} <span class="durable-jobs-name" title="{}">{}</span><div class="durable-jobs-sub">heartbeat {}</div>'
            '<div class="durable-jobs-sub">{} {}</div>',
            fmt.worker_badge(state),
            name,
            cut,
            relative(obj.heartbeat_at, now),
            "expired" if obj.lease_expires_at and obj.lease_expires_at <= now else "expires",
            expiry,
        )

    @admin.display(description="error")
    def last_error(self, obj: Job) -> str:
        """Return the first line of a failed job's error (the list reads only its start)."""
        head = getattr(obj, "error_head", None)
        if (
            head is None
            and obj.status == JobStatus.FAILED
            and "error" not in obj.get_deferred_fields()
        ):
            head = obj.error
        return fmt.first_line(head) or "-"

    @admin.display(description="progress", ordering="progress")
    def progress_bar(self, obj: Job):
        return fmt.progress_bar(obj.progress)

    @admin.display(description="heartbeat", ordering="heartbeat_at")
    def heartbeat_age(self, obj: Job) -> str:
        return relative(obj.heartbeat_at, timezone.now())

    @admin.display(description="lease expires", ordering="lease_expires_at")
    def lease_expiry(self, obj: Job) -> str:
        """Return when the lease ends, relative to now; ``-`` unless the job is running.

        A finished job keeps the expiry of its last lease as evidence, but nobody holds that
        lease any more: "in 6 s" would read as a live one.
        """
        if obj.status != JobStatus.RUNNING:
            return "-"
        return relative(obj.lease_expires_at, timezone.now())

    def _owner_worker_state(self, obj: Job) -> str | None:
        if obj.status != JobStatus.RUNNING or not obj.owner_id:
            return None
        if hasattr(obj, "worker_heartbeat_at"):  # annotated by get_queryset
            columns = (obj.worker_heartbeat_at, obj.worker_stopped_at, obj.worker_lease_seconds)
        else:
            rows = WorkerProcess.objects.using(jobs_settings.DATABASE).filter(owner_id=obj.owner_id)
            columns = rows.values_list("heartbeat_at", "stopped_at", "lease_seconds").first()
        return fmt.owner_worker_state(*(columns or (None, None, None)), timezone.now())
