"""The job list and job page: ownership, lease and worker state at a glance; payloads on demand.

Everything is read-only; the two actions (:mod:`.actions`) ask the store for requests.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Case, Exists, OuterRef, Subquery, Value, When
from django.db.models.functions import Substr
from django.http import Http404, HttpResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from ..models import Job, WorkerProcess
from ..rules.vocabulary import JobStatus, assess_ownership
from . import format as fmt
from .actions import RequestActions
from .base import LARGE_TEXT, WIDE, ReadOnlyAdmin
from .columns import JobColumns
from .filters import (
    AttentionFilter,
    OperationFilter,
    OwnershipFilter,
    QueueFilter,
    ScheduledFilter,
    ScheduleFilter,
    ScopeFilter,
    WorkflowFilter,
)
from .jobpage import JobPage
from .paginator import EstimatedCountPaginator
from .pauses import PauseActions

# The payload columns the raw view serves, as stored.
RAW_FIELDS = ("proposal", "checkpoint", "result")
# The fieldset shown only for a workflow's job or a job that slept.
WORKFLOW_FIELDSET = "Workflow and sleep"
# What the list reads of a failed job's error: enough for its first line, cut for display.
ERROR_HEAD_CHARS = 200


class JobChangeList(ChangeList):
    """The job list reads no payload columns: a page of 100 rows stays small however big they are.

    The ownership assessment still reads the proposal inside the database (``ownership_sql``);
    of a failed job's error only the first ``ERROR_HEAD_CHARS`` characters are read, for the
    error column.
    """

    def get_queryset(self, request, exclude_parameters=None):
        head = Substr("error", 1, ERROR_HEAD_CHARS)
        return (
            super()
            .get_queryset(request, exclude_parameters)
            .defer(*LARGE_TEXT)
            .annotate(
                error_head=Case(When(status=JobStatus.FAILED, then=head), default=Value(None))
            )
        )


def _shown(field: str, render: Callable[..., object], description: str, *, raw: bool = False):
    """Return a read-only admin column showing ``render(job.<field>)``.

    With ``raw``, ``render`` also gets the URL of the field's raw view, for a display it cuts.
    """

    @admin.display(description=description)
    def show(self, obj: Job):
        text = getattr(obj, field)
        shown = render(text, self.raw_url(obj, field)) if raw else render(text)
        return fmt.collapsed(shown, text)

    return show


def _moment(field: str, description: str):
    """Return a read-only field showing the time ``job.<field>`` to the second."""

    @admin.display(description=description)
    def show(self, obj: Job) -> str:
        return fmt.moment(getattr(obj, field))

    return show


def _worker_column(field: str) -> Subquery:
    rows = WorkerProcess.objects.filter(owner_id=OuterRef("owner_id")).values(field)[:1]
    return Subquery(rows)


@admin.register(Job)
class JobAdmin(JobColumns, JobPage, RequestActions, PauseActions, ReadOnlyAdmin):
    list_display = (
        "short_id",
        "state",
        "operation_shown",
        "created",
        "duration",
        "lease",
        "last_error",
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
        WorkflowFilter,
    )
    search_fields = ("id", "idempotency_key")  # see get_search_results: exact matches only
    search_help_text = "A job id (exact UUID) or an idempotency key (exact)."
    ordering = ("-created_at", "-id")
    list_per_page = 100
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    actions = ["request_cancellation", "request_retry", "pause_operations_or_queues"]
    # The attempts are the page's timeline (``jobpage.timeline``), above the fields.
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
                    "claimed_at_shown",
                    "fencing_epoch",
                    "attempts",
                    "heartbeat_at_shown",
                    "heartbeat_age",
                    "lease_expires_at_shown",
                    "lease_expiry",
                )
            },
        ),
        (
            "Times",
            {
                "fields": (
                    "created_at_shown",
                    "run_after_shown",
                    "completed_at_shown",
                    "cancellation_requested_at_shown",
                    "retry_requested_at_shown",
                    "checkpoint_at_shown",
                    "progress_bar",
                )
            },
        ),
        (
            WORKFLOW_FIELDSET,
            {
                "fields": (
                    "workflow_link",
                    "node",
                    "waiting_on",
                    "on_upstream_failure",
                    "released_at_shown",
                    "sleep_until_shown",
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
                # True for a pending job a pause in force holds (the claim's rule, querysets).
                paused_now=Exists(
                    Job.objects.filter(pk=OuterRef("pk"), status=JobStatus.PENDING).paused()
                ),
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
            return fmt.moment(expires)
        return (
            f"- (no lease is held: the job is {obj.status}; "
            f"the last one ran to {fmt.moment(expires)})"
        )

    @admin.display(description="row defect")
    def diagnostic(self, obj: Job) -> str:
        """Return what is wrong with the stored row (shown only when something is)."""
        return obj.diagnostic_error or "-"

    @admin.display(description="workflow")
    def workflow_link(self, obj: Job):
        if obj.workflow_id is None:
            return "-"
        url = reverse(
            "admin:durable_jobs_workflow_change",
            args=[obj.workflow_id],
            current_app=self.admin_site.name,
        )
        return format_html('<a href="{}">{}</a>', url, obj.workflow_id)

    def get_fieldsets(self, request, obj=None):
        """Return the page's fields: the row defect only when there is one, the workflow and
        sleep fields only for a workflow's job or one that slept."""
        flow = obj is not None and (obj.workflow_id is not None or obj.sleep_until is not None)
        return [
            (name, {**options, "fields": [f for f in options["fields"] if f != "diagnostic"]})
            if name is None and not (obj is not None and obj.diagnostic_error)
            else (name, options)
            for name, options in self.fieldsets
            if flow or name != WORKFLOW_FIELDSET
        ]

    claimed_at_shown = _moment("claimed_at", "claimed at")
    heartbeat_at_shown = _moment("heartbeat_at", "heartbeat at")
    created_at_shown = _moment("created_at", "created at")
    run_after_shown = _moment("run_after", "run after")
    completed_at_shown = _moment("completed_at", "completed at")
    cancellation_requested_at_shown = _moment(
        "cancellation_requested_at", "cancellation requested at"
    )
    retry_requested_at_shown = _moment("retry_requested_at", "retry requested at")
    checkpoint_at_shown = _moment("checkpoint_at", "checkpoint at")
    released_at_shown = _moment("released_at", "released at (its parents completed)")
    sleep_until_shown = _moment("sleep_until", "sleep until")

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
        return [raw, *self.request_urls(), *super().get_urls()]

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

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, {**(extra_context or {}), **WIDE})
