"""The workflow list and page: progress and state at a glance, the graph, Cancel and Retry.

Read-only like every page of the app: a workflow is evidence. Its page draws the graph on the
server (:mod:`.graph`), lists its jobs, and offers *Cancel workflow* and *Retry workflow* to
whoever holds ``durable_jobs.cancel_workflow`` / ``durable_jobs.retry_workflow``; both ask
``store.workflows`` (the only writer) and say what it did.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.http import Http404, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import ngettext

from ..models import Job, JobDependency, Workflow
from ..rules import validation
from ..rules.conf import jobs_settings
from ..rules.errors import JobError
from ..rules.graph import workflow_state as rules_workflow_state
from ..rules.vocabulary import TERMINAL_STATUSES, JobStatus
from ..store import DurableJobStore
from . import format as fmt
from . import graph, jobflow
from .base import WIDE, ReadOnlyAdmin, confirmation

# The jobs a workflow's page lists (the job list, filtered to the workflow, has every one).
JOB_ROWS = 200
# A workflow of more jobs than this is not drawn: its page says so and links to its jobs.
GRAPH_MAX_JOBS = 5_000
STATE_COLOURS = {
    "running": fmt.STATUS_COLOURS[JobStatus.RUNNING],
    "complete": fmt.STATUS_COLOURS[JobStatus.COMPLETE],
    "failed": fmt.STATUS_COLOURS[JobStatus.FAILED],
    "cancelled": fmt.STATUS_COLOURS[JobStatus.CANCELLED],
}
_COUNTED = {status: f"jobs_{status}" for status in JobStatus.values}


def workflow_state(statuses: Counter, retries_to_come: int = 0) -> str:
    """Return a workflow's state from how many of its jobs are in each status (``rules.graph``)."""
    present = [status for status, count in statuses.items() if count]
    return rules_workflow_state(present, retries_to_come=bool(retries_to_come))


def statuses_of(obj: Workflow) -> Counter:
    """Return how many of the workflow's jobs are in each status (the list's annotations)."""
    return Counter({s: getattr(obj, name, 0) or 0 for s, name in _COUNTED.items()})


def state_badge(state: str):
    return fmt.badge(state, STATE_COLOURS.get(state, "#333"))


def plural(count: int, singular: str, many: str) -> str:
    return ngettext(singular, many, count) % {"count": count}


# What each button asks: (permission, question, answer button).
REQUESTS = {
    "cancel": (
        "cancel_workflow",
        "Cancel this workflow? Its pending, waiting and sleeping jobs are cancelled at once; "
        "running ones stop when their owners see the request. Completed jobs keep their results.",
        "Yes, cancel the workflow",
    ),
    "retry": (
        "retry_workflow",
        "Retry this workflow? Its failed and cancelled jobs run again, each once its parents "
        "completed; completed jobs are never run again.",
        "Yes, retry the workflow",
    ),
}


def answer_message(kind: str, answer: Any) -> tuple[int, str]:
    """Return what a Cancel or Retry of a workflow did (``store.workflows.cancel`` or
    ``retry``'s answer: the workflow, and the jobs it changed by what happened to them), as a
    message level and text."""
    workflow = answer.workflow
    who = f"Workflow {workflow.name} ({workflow.pk})"
    changed = answer.changed
    if kind == "cancel":
        parts = [
            plural(
                len(changed["cancelled"]),
                "%(count)d job cancelled at once",
                "%(count)d jobs cancelled at once",
            ),
            plural(
                len(changed["requested"]),
                "%(count)d running job asked to stop (it stops when its owner sees the request)",
                "%(count)d running jobs asked to stop (they stop when their owners see the "
                "request)",
            ),
        ]
        if not answer.count:
            return messages.WARNING, f"{who}: nothing to cancel; every job had already ended."
        counts = (len(changed["cancelled"]), len(changed["requested"]))
        said = "; ".join(part for part, n in zip(parts, counts, strict=True) if n)
        return messages.SUCCESS, f"{who}: {said}."
    if not answer.count:
        return messages.WARNING, f"{who}: nothing to retry; no job failed or was cancelled."
    clauses = [
        plural(
            len(changed["retried"]), "%(count)d by a retry request", "%(count)d by retry requests"
        ),
        plural(len(changed["pending"]), "%(count)d pending at once", "%(count)d pending at once"),
        plural(
            len(changed["waiting"]),
            "%(count)d waiting for its parents",
            "%(count)d waiting for their parents",
        ),
    ]
    counts = (len(changed["retried"]), len(changed["pending"]), len(changed["waiting"]))
    said = ", ".join(clause for clause, n in zip(clauses, counts, strict=True) if n)
    head = plural(answer.count, "%(count)d job will run again", "%(count)d jobs will run again")
    return messages.SUCCESS, f"{who}: {head} ({said})."


@admin.register(Workflow)
class WorkflowAdmin(ReadOnlyAdmin):
    list_display = (
        "short_id",
        "name",
        "scope",
        "key",
        "created",
        "job_count",
        "progress",
        "state",
    )
    list_display_links = ("short_id", "name")
    list_filter = ("scope",)
    search_fields = ("id", "name", "idempotency_key")  # see get_search_results
    search_help_text = (
        "A workflow id (exact UUID), a name (part of it) or an idempotency key (exact)."
    )
    ordering = ("-created_at", "-id")
    list_per_page = 100
    show_full_result_count = False
    actions = ["cancel_workflows", "retry_workflows"]
    fields = (
        "id",
        "name",
        "scope",
        "idempotency_key",
        "job_count",
        "created_at_shown",
        "cancel_requested_at_shown",
        "retry_requested_at_shown",
        "requested_by",
        "graph_hash",
        "graph_pretty",
    )
    readonly_fields = fields

    def get_queryset(self, request):
        counts = {
            name: Count("jobs", filter=Q(jobs__status=status)) for status, name in _COUNTED.items()
        }
        again = Q(
            jobs__status__in=[JobStatus.FAILED, JobStatus.CANCELLED],
            jobs__retry_requested_at__isnull=False,
        )
        return (
            super().get_queryset(request).annotate(**counts, jobs_again=Count("jobs", filter=again))
        )

    def get_search_results(self, request, queryset, search_term):
        """Match an exact id (when the term is a UUID), a part of a name, or an exact key."""
        term = search_term.strip()
        if not term:
            return queryset, False
        found = Q(name__icontains=term) | Q(idempotency_key=term)
        try:
            found |= Q(pk=uuid.UUID(term))
        except ValueError:
            pass
        return queryset.filter(found), False

    # -- columns ----------------------------------------------------------------------------------

    @admin.display(description="id")
    def short_id(self, obj: Workflow):
        return fmt.short_id(obj.pk)

    @admin.display(description="idempotency key", ordering="idempotency_key")
    def key(self, obj: Workflow) -> str:
        return "-" if obj.idempotency_key == str(obj.pk) else obj.idempotency_key

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: Workflow):
        day, _, time = fmt.moment(obj.created_at).partition(" ")
        return format_html('{}<div class="durable-jobs-sub">{}</div>', time, day)

    @admin.display(description="progress")
    def progress(self, obj: Workflow):
        statuses = statuses_of(obj)
        total = sum(statuses.values())
        done = statuses[JobStatus.COMPLETE]
        return format_html(
            '{} / {} complete<div class="durable-jobs-sub">{}</div>',
            done,
            total,
            graph.counted(Counter({s: n for s, n in statuses.items() if s != "complete"})) or "-",
        )

    @admin.display(description="state")
    def state(self, obj: Workflow):
        statuses = statuses_of(obj)
        return state_badge(workflow_state(statuses, getattr(obj, "jobs_again", 0)))

    created_at_shown = admin.display(description="created at")(
        lambda self, obj: fmt.moment(obj.created_at)
    )
    cancel_requested_at_shown = admin.display(description="cancel requested at")(
        lambda self, obj: fmt.moment(obj.cancel_requested_at)
    )
    retry_requested_at_shown = admin.display(description="retry requested at")(
        lambda self, obj: fmt.moment(obj.retry_requested_at)
    )

    @admin.display(description="graph (as submitted)")
    def graph_pretty(self, obj: Workflow):
        return fmt.collapsed(fmt.pretty_json(obj.graph), obj.graph)

    # -- the page ---------------------------------------------------------------------------------

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, {**(extra_context or {}), **WIDE})

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = {**(extra_context or {}), **WIDE}
        obj = self.get_object(request, admin.utils.unquote(object_id))
        if obj is not None:
            extra_context.update(self.page_context(request, obj))
        return super().change_view(request, object_id, form_url, extra_context)

    def _url(self, name: str, *args) -> str:
        return reverse(f"admin:durable_jobs_{name}", args=args, current_app=self.admin_site.name)

    def jobs_url(self, obj: Workflow, **params: str) -> str:
        """Return the job list filtered to the workflow (and to ``params``)."""
        query = {"workflow": str(obj.pk), "scheduled": "all", **params}
        return f"{self._url('job_changelist')}?{urlencode(query)}"

    def page_context(self, request, obj: Workflow) -> dict[str, Any]:
        """Return the graph, the legend, the progress, the jobs and the buttons of the page."""
        using = obj._state.db
        rows = list(
            Job.objects.using(using)
            .filter(workflow_id=obj.pk)
            .only("id", "node", "operation", "status", "attempts", "idempotency_key", "waiting_on")
            .order_by()[: GRAPH_MAX_JOBS + 1]
        )
        rows.sort(key=jobflow.declared)
        statuses = statuses_of(obj)
        total = sum(statuses.values())
        drawn = None
        if len(rows) <= GRAPH_MAX_JOBS:
            parents: dict[Any, list[Any]] = {row.pk: [] for row in rows}
            edges = (
                JobDependency.objects.using(using)
                .filter(workflow_id=obj.pk)
                .order_by("id")
                .values_list("parent_id", "child_id")
            )
            for parent, child in edges:
                parents.setdefault(child, []).append(parent)
            jobs = [
                graph.GraphJob(
                    row.pk,
                    row.node,
                    row.operation,
                    row.status,
                    row.attempts,
                    tuple(parents[row.pk]),
                    row.waiting_on,
                )
                for row in rows
            ]
            drawing = graph.layout(
                jobs,
                lambda pk: self._url("job_change", admin.utils.quote(pk)),
                lambda operation: self.jobs_url(
                    obj, **({"operation__exact": operation} if operation else {})
                ),
            )
            drawn = graph.svg(drawing)
        state = workflow_state(statuses, getattr(obj, "jobs_again", 0))
        unfinished = any(statuses[s] for s in statuses if s not in TERMINAL_STATUSES)
        again = statuses[JobStatus.FAILED] + statuses[JobStatus.CANCELLED]
        shown = []
        pressing = {status: n for n, status in enumerate(graph.STATUS_ORDER)}
        for row in sorted(rows, key=lambda row: pressing.get(row.status, 0))[:JOB_ROWS]:
            shown.append(
                {
                    "url": self._url("job_change", admin.utils.quote(row.pk)),
                    "name": row.node or "-",
                    "operation": row.operation,
                    "status": fmt.status_badge(row.status),
                    "attempts": row.attempts,
                    "id": fmt.short_id(row.pk),
                }
            )
        return {
            "workflow_graph": drawn,
            "workflow_graph_max": GRAPH_MAX_JOBS,
            "workflow_legend": [
                {
                    "status": status,
                    "colour": fmt.STATUS_COLOURS.get(status, "#333"),
                    "count": statuses[status],
                    "url": self.jobs_url(obj, status__exact=status),
                }
                for status in graph.STATUS_ORDER
                if statuses[status]
            ],
            "workflow_state": state_badge(state),
            "workflow_done": statuses[JobStatus.COMPLETE],
            "workflow_total": total,
            "workflow_progress": fmt.progress_bar(
                100 * statuses[JobStatus.COMPLETE] / total if total else 0
            ),
            "workflow_jobs": shown,
            "workflow_jobs_cut": total > len(shown),
            "workflow_jobs_url": self.jobs_url(obj),
            "workflow_banners": _banners(obj),
            "workflow_buttons": [
                kind
                for kind, allowed in (
                    ("cancel", unfinished and self.has_cancel_workflow_permission(request)),
                    ("retry", again and self.has_retry_workflow_permission(request)),
                )
                if allowed
            ],
        }

    # -- Cancel and Retry -------------------------------------------------------------------------

    def has_cancel_workflow_permission(self, request) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.cancel_workflow")

    def has_retry_workflow_permission(self, request) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.retry_workflow")

    def get_urls(self):
        view = self.admin_site.admin_view(self.request_view)
        request = path(
            "<path:object_id>/request/<str:kind>/", view, name="durable_jobs_workflow_request"
        )
        return [request, *super().get_urls()]

    def request_view(self, request, object_id: str, kind: str) -> HttpResponse:
        """Confirm, then cancel or retry one workflow through the store; POST only."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if kind not in REQUESTS:
            raise Http404(f"No request {kind!r}; there are {', '.join(REQUESTS)}.")
        permission, question, answer = REQUESTS[kind]
        obj = self.get_object(request, admin.utils.unquote(object_id))
        if obj is None:
            raise Http404(f"No workflow {object_id}.")
        allowed = getattr(self, f"has_{permission}_permission")(request)
        if not (allowed and self.has_view_or_change_permission(request, obj)):
            raise PermissionDenied
        page = self._url("workflow_change", admin.utils.quote(obj.pk))
        if request.POST.get("confirm") != "yes":
            return confirmation(self, request, question, answer, page, workflow=obj)
        self._ask(request, kind, [obj.pk])
        return HttpResponseRedirect(page)

    def _ask(self, request, kind: str, ids: list[Any]) -> None:
        """Cancel or retry each workflow through the store, and say what each answer was."""
        by = request.user.get_username()[: validation.NAME_MAX]
        actor = f"admin:{by}"[: validation.NAME_MAX]
        workflows = DurableJobStore(actor=actor, using=jobs_settings.DATABASE).workflows
        for pk in ids:
            try:
                answer = getattr(workflows, kind)(pk, by=by)
            except JobError as exc:
                self.message_user(request, f"Workflow {pk}: {exc}", messages.ERROR)
                continue
            level, text = answer_message(kind, answer)
            self.message_user(request, text, level)

    @admin.action(description="Cancel workflow", permissions=["cancel_workflow"])
    def cancel_workflows(self, request, queryset) -> None:
        self._ask(
            request,
            "cancel",
            list(queryset.order_by("created_at", "id").values_list("pk", flat=True)),
        )

    @admin.action(description="Retry workflow", permissions=["retry_workflow"])
    def retry_workflows(self, request, queryset) -> None:
        self._ask(
            request,
            "retry",
            list(queryset.order_by("created_at", "id").values_list("pk", flat=True)),
        )


def _banners(obj: Workflow) -> list[dict[str, str]]:
    """Return the workflow's cancel and retry requests; ``requested_by`` is the latest one's."""
    asked = [
        (kind, at)
        for kind, at in (("cancel", obj.cancel_requested_at), ("retry", obj.retry_requested_at))
        if at is not None
    ]
    latest = max((at for _, at in asked), default=None)
    found = []
    for kind, at in asked:
        by = f" by {obj.requested_by}" if obj.requested_by and at == latest else ""
        what = "Cancellation" if kind == "cancel" else "A retry"
        found.append(
            {"kind": kind, "text": f"{what} of the workflow was requested at {fmt.moment(at)}{by}."}
        )
    return found
