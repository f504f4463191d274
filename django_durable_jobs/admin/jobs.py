"""The job list and job page: ownership, lease and worker state at a glance; payloads on demand.

Everything is read-only; the two actions (:mod:`.actions`) ask the store for requests.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, Subquery
from django.http import Http404, HttpResponse
from django.urls import path, reverse
from django.utils import timezone

from ..conf import jobs_settings
from ..humanize import relative
from ..models import Job, WorkerProcess
from ..vocabulary import TERMINAL_STATUSES, JobStatus, assess_ownership
from . import format as fmt
from .actions import RequestActions
from .attempts import JobAttemptInline
from .base import LARGE_TEXT, ReadOnlyAdmin
from .filters import (
    AttentionFilter,
    OperationFilter,
    OwnershipFilter,
    QueueFilter,
    ScheduledFilter,
    ScheduleFilter,
    ScopeFilter,
)
from .paginator import EstimatedCountPaginator

# The payload columns the raw view serves, as stored.
RAW_FIELDS = ("proposal", "checkpoint", "result")


class JobChangeList(ChangeList):
    """The job list reads no payload columns: a page of 100 rows stays small however big they are.

    The ownership assessment still reads the proposal inside the database (``ownership_sql``).
    """

    def get_queryset(self, request, exclude_parameters=None):
        return super().get_queryset(request, exclude_parameters).defer(*LARGE_TEXT)


def _shown(field: str, render: Callable[..., object], description: str, *, raw: bool = False):
    """Return a read-only admin column showing ``render(job.<field>)``.

    With ``raw``, ``render`` also gets the URL of the field's raw view, for a display it cuts.
    """

    @admin.display(description=description)
    def show(self, obj: Job):
        if raw:
            return render(getattr(obj, field), self.raw_url(obj, field))
        return render(getattr(obj, field))

    return show


def _worker_column(field: str) -> Subquery:
    rows = WorkerProcess.objects.filter(owner_id=OuterRef("owner_id")).values(field)[:1]
    return Subquery(rows)


@admin.register(Job)
class JobAdmin(RequestActions, ReadOnlyAdmin):
    list_display = (
        "id",
        "status",
        "operation",
        "scope",
        "ownership_badge",
        "attempts",
        "epoch",
        "progress_bar",
        "heartbeat_age",
        "lease_expiry",
        "claimed_by",
        "owner_worker",
    )
    list_filter = (
        "status",
        AttentionFilter,
        OwnershipFilter,
        OperationFilter,
        ScopeFilter,
        QueueFilter,
        ScheduledFilter,
        ScheduleFilter,
    )
    search_fields = ("id", "idempotency_key")  # see get_search_results: exact matches only
    search_help_text = "A job id (exact UUID) or an idempotency key (exact)."
    ordering = ("-created_at", "-id")
    list_per_page = 100
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    actions = ["request_cancellation", "request_retry"]
    inlines = [JobAttemptInline]
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "operation",
                    "status",
                    "ownership_now",
                    "owner_worker_detail",
                    "scope",
                    "queue",
                    "priority",
                    "idempotency_key",
                    "diagnostic",
                )
            },
        ),
        (
            "Lease",
            {
                "fields": (
                    "owner_id",
                    "claimed_by",
                    "claimed_at",
                    "fencing_epoch",
                    "attempts",
                    "heartbeat_at",
                    "heartbeat_age",
                    "lease_expires_at_shown",
                    "lease_expiry",
                )
            },
        ),
        (
            "Timeline",
            {
                "fields": (
                    "created_at",
                    "run_after",
                    "completed_at",
                    "cancellation_requested_at",
                    "retry_requested_at",
                    "checkpoint_at",
                    "progress_bar",
                )
            },
        ),
        (
            "Payloads",
            {
                "fields": (
                    "proposal_pretty",
                    "proposal_stored",
                    "proposal_hash",
                    "checkpoint_pretty",
                    "checkpoint_stored",
                    "result_pretty",
                    "result_stored",
                    "error_text",
                )
            },
        ),
    )
    readonly_fields = tuple(name for _, options in fieldsets for name in options["fields"])

    # -- queryset ---------------------------------------------------------------------------------

    def get_changelist(self, request, **kwargs):
        return JobChangeList

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .with_ownership(timezone.now())
            .annotate(
                worker_heartbeat_at=_worker_column("heartbeat_at"),
                worker_stopped_at=_worker_column("stopped_at"),
                worker_lease_seconds=_worker_column("lease_seconds"),
            )
        )

    def get_search_results(self, request, queryset, search_term):
        """Match an exact job id (when the term is a UUID) or an exact idempotency key."""
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            job_id = uuid.UUID(term)
        except ValueError:
            return queryset.filter(idempotency_key=term), False
        return queryset.filter(pk=job_id) | queryset.filter(idempotency_key=term), False

    # -- columns ----------------------------------------------------------------------------------

    @admin.display(description="ownership")
    def ownership_badge(self, obj: Job):
        state = getattr(obj, "ownership_sql", None) or assess_ownership(obj, timezone.now())
        return fmt.ownership_badge(state)

    @admin.display(description="epoch", ordering="fencing_epoch")
    def epoch(self, obj: Job) -> int:
        return obj.fencing_epoch

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

    @admin.display(description="owner worker")
    def owner_worker(self, obj: Job):
        state = self._owner_worker_state(obj)
        return "-" if state is None else fmt.worker_badge(state)

    # -- detail fields ----------------------------------------------------------------------------

    @admin.display(description="ownership (now)")
    def ownership_now(self, obj: Job):
        return fmt.ownership_badge(assess_ownership(obj, timezone.now()))

    @admin.display(description="owner's worker")
    def owner_worker_detail(self, obj: Job):
        state = self._owner_worker_state(obj)
        if state is None:
            return "- (only running jobs have an owner at work)"
        return fmt.worker_badge(state)

    @admin.display(description="lease expires at")
    def lease_expires_at_shown(self, obj: Job) -> str:
        """Return the stored expiry, said to be no longer held when the job is not running."""
        expires = obj.lease_expires_at
        if expires is None:
            return "-"
        if obj.status == JobStatus.RUNNING:
            return expires.isoformat()
        return (
            f"- (no lease is held: the job is {obj.status}; "
            f"the last one ran to {expires.isoformat()})"
        )

    @admin.display(description="diagnostic error")
    def diagnostic(self, obj: Job) -> str:
        return obj.diagnostic_error or "-"

    # The payload columns, each shown pretty-printed and as the exact stored text, both capped;
    # a cut display links to the raw view.
    proposal_pretty = _shown("proposal", fmt.pretty_json, "proposal (pretty)", raw=True)
    proposal_stored = _shown("proposal", fmt.stored_text, "proposal (stored text)", raw=True)
    checkpoint_pretty = _shown("checkpoint", fmt.pretty_json, "checkpoint (pretty)", raw=True)
    checkpoint_stored = _shown("checkpoint", fmt.stored_text, "checkpoint (stored text)", raw=True)
    result_pretty = _shown("result", fmt.pretty_json, "result (pretty)", raw=True)
    result_stored = _shown("result", fmt.stored_text, "result (stored text)", raw=True)
    error_text = _shown("error", fmt.stored_text, "error")

    # -- the raw view -----------------------------------------------------------------------------

    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name
        raw = path(
            "<path:object_id>/raw/<str:field>/",
            self.admin_site.admin_view(self.raw_view),
            name="{}_{}_raw".format(*info),
        )
        return [raw, *super().get_urls()]

    def raw_url(self, obj: Job, field: str) -> str:
        """Return the URL of the raw view of ``obj``'s stored ``field``."""
        info = self.opts.app_label, self.opts.model_name
        return reverse(
            "admin:{}_{}_raw".format(*info),
            args=[admin.utils.quote(obj.pk), field],
            current_app=self.admin_site.name,
        )

    def raw_view(self, request, object_id: str, field: str) -> HttpResponse:
        """Return the exact stored text of a payload column as ``text/plain``, whole.

        Whoever may see the job's page may read it; nothing is parsed or re-encoded.
        """
        if field not in RAW_FIELDS:
            raise Http404(f"No raw view of {field!r}; there are {', '.join(RAW_FIELDS)}.")
        obj = self.get_object(request, admin.utils.unquote(object_id))
        if obj is None:
            raise Http404(f"No job {object_id}.")
        if not self.has_view_or_change_permission(request, obj):
            raise PermissionDenied
        text = getattr(obj, field)
        if text is None:
            raise Http404(f"Job {obj.pk} has no stored {field}.")
        response = HttpResponse(
            text.encode("utf-8", "surrogatepass"), content_type="text/plain; charset=utf-8"
        )
        response["X-Content-Type-Options"] = "nosniff"
        response["Content-Disposition"] = f'inline; filename="{obj.pk}-{field}.json"'
        return response

    def banners(self, obj: Job) -> list[dict[str, str]]:
        """Return the warnings a person must see first on the detail page."""
        found = []
        if obj.cancellation_requested_at is not None:
            at = obj.cancellation_requested_at.isoformat()
            if obj.status in TERMINAL_STATUSES:
                text = f"Cancellation requested at {at}; the job has ended ({obj.status})."
            else:
                text = f"Cancellation requested at {at}; waiting for the owner to stop."
            found.append({"kind": "cancel", "text": text})
        if obj.retry_requested_at is not None:
            at = obj.retry_requested_at.isoformat()
            found.append(
                {
                    "kind": "retry",
                    "text": f"Retry requested at {at}; a worker will start a new attempt "
                    f"from {obj.run_after.isoformat()}.",
                }
            )
        diagnostic = obj.diagnostic_error
        if diagnostic:
            found.append({"kind": "diagnostic", "text": f"Diagnostic error: {diagnostic}"})
        return found

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = dict(extra_context or {})
        obj = self.get_object(request, admin.utils.unquote(object_id))
        extra_context["durable_jobs_banners"] = self.banners(obj) if obj is not None else []
        return super().change_view(request, object_id, form_url, extra_context)
