"""List filters of the job and worker admin: ownership computed by the database, the sets that
need a person's attention, cheap value lists, scheduled jobs, and workers by state."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.contrib import admin
from django.db.models import Q
from django.db.models.functions import Length
from django.utils import timezone

from ..models import Job, Schedule, Workflow
from ..rules import registry
from ..rules.conf import jobs_settings
from ..rules.vocabulary import (
    OWNERSHIP_STATES,
    PARKED_STATUSES,
    TERMINAL_STATUSES,
    JobStatus,
    Ownership,
    WorkerState,
)
from ..stats.attention import (
    CANCEL_UNACKNOWLEDGED,
    FAILED_FINAL,
    HOLD_EXPIRED,
    VANISHED_WORKER,
    attention_jobs,
)
from ..stats.workers import lease_values, stale_q

STATUSES_OF = {
    Ownership.TERMINAL: sorted(TERMINAL_STATUSES),
    Ownership.UNCLAIMED: [JobStatus.PENDING, *PARKED_STATUSES],
    Ownership.LEGACY_UNKNOWN: [JobStatus.PENDING, *PARKED_STATUSES, JobStatus.RUNNING],
    Ownership.EXPIRED: [JobStatus.RUNNING],
    Ownership.CURRENT: [JobStatus.RUNNING],
}


class OwnershipFilter(admin.SimpleListFilter):
    """Filter by the ownership assessment, computed by the database (``ownership_sql``).

    Each state is only possible for some statuses; filtering on those too lets the database use
    a status-led index instead of evaluating the assessment (a SHA-256) on every row.
    """

    title = "ownership"
    parameter_name = "ownership"

    def lookups(self, request, model_admin):
        return [(state, state) for state in OWNERSHIP_STATES]

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        if value not in OWNERSHIP_STATES:
            raise admin.options.IncorrectLookupParameters(f"Unknown ownership {value!r}.")
        return queryset.filter(status__in=STATUSES_OF[value], ownership_sql=value)


RECENT_ROWS = 10_000
RECENT_FIELDS = ("operation", "scope", "queue")
NULL_VALUE = "(null)"


def _recent_values(request) -> dict[str, set]:
    """Return the operation, scope and queue values of the newest rows, read once per request.

    A ``SELECT DISTINCT`` over the whole table took ~0.2 s per column at a million rows on
    PostgreSQL; the newest ``RECENT_ROWS`` rows are an index range whatever the table's size.
    """
    cached = getattr(request, "_durable_jobs_recent_values", None)
    if cached is None:
        rows = (
            Job.objects.using(jobs_settings.DATABASE)
            .order_by("-created_at", "-id")
            .values_list(*RECENT_FIELDS)
        )
        cached = {field: set() for field in RECENT_FIELDS}
        for values in rows[:RECENT_ROWS]:
            for field, value in zip(RECENT_FIELDS, values, strict=True):
                cached[field].add(value)
        request._durable_jobs_recent_values = cached
    return cached


class RecentValuesFilter(admin.SimpleListFilter):
    """Filter one column by exact value; offers the values of recent rows (and registered ones).

    Any value works in the URL (``?queue__exact=slow``); ``(null)`` selects NULL.
    """

    field = ""
    lookup = ""  # the path from the filtered model to the job's column, when not ``field``

    def __init__(self, request, params, model, model_admin):
        self.parameter_name = self.parameter_name or f"{self.field}__exact"
        self.title = self.field
        super().__init__(request, params, model, model_admin)

    def lookups(self, request, model_admin):
        values = set(_recent_values(request)[self.field])
        if self.field == "operation":
            values |= set(registry.all_operations())
        if self.value() is not None:
            values.add(None if self.value() == NULL_VALUE else self.value())
        named = sorted(v for v in values if v is not None)
        return [(v, v) for v in named] + ([(NULL_VALUE, "(none)")] if None in values else [])

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        path = self.lookup or self.field
        if value == NULL_VALUE:
            return queryset.filter(**{f"{path}__isnull": True})
        return queryset.filter(**{path: value})


class OperationFilter(RecentValuesFilter):
    field = "operation"


class ScopeFilter(RecentValuesFilter):
    field = "scope"


class QueueFilter(RecentValuesFilter):
    field = "queue"


class AttemptOperationFilter(RecentValuesFilter):
    """The attempt list's filter by its job's operation (``?job__operation=...``)."""

    field = "operation"
    lookup = "job__operation"
    parameter_name = "job__operation"  # a class attribute: the admin allows lookups by it


# The newest workflows the job list's filter offers; any workflow id works in the URL.
WORKFLOW_CHOICES = 20


class WorkflowFilter(admin.SimpleListFilter):
    """The jobs of one workflow: ``?workflow=<id>``, the workflow page's links."""

    title = "workflow"
    parameter_name = "workflow"

    def lookups(self, request, model_admin):
        rows = Workflow.objects.using(jobs_settings.DATABASE).order_by("-created_at", "-id")
        found = [
            (str(pk), f"{name} · {str(pk)[:8]}")
            for pk, name in rows.values_list("pk", "name")[:WORKFLOW_CHOICES]
        ]
        value = self.value()
        if value is not None and value not in {pk for pk, _ in found}:
            found.append((value, f"workflow {value[:8]}"))
        return found

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        try:
            workflow_id = uuid.UUID(value)
        except ValueError:
            raise admin.options.IncorrectLookupParameters(
                f"{value!r} is not a workflow id."
            ) from None
        return queryset.filter(workflow_id=workflow_id)


# ``schedule:<name>:`` then the tick in UTC, ``2026-12-01T03:00:00Z`` (always 20 characters).
SCHEDULE_KEY_PREFIX = "schedule:"
TICK_LENGTH = len("2026-12-01T03:00:00Z")


class ScheduleFilter(admin.SimpleListFilter):
    """The jobs a schedule enqueued: ``?schedule=<name>``, the schedule page's "jobs" link.

    Its jobs are the ones whose idempotency key is ``schedule:<name>:<tick>``; the key's length is
    checked too, so schedule ``a`` does not list the jobs of schedule ``a:b``.
    """

    title = "schedule"
    parameter_name = "schedule"

    def lookups(self, request, model_admin):
        names = list(
            Schedule.objects.using(jobs_settings.DATABASE)
            .order_by("name")
            .values_list("name", flat=True)[:RECENT_ROWS]
        )
        if self.value() is not None and self.value() not in names:
            names.append(self.value())
        return [(name, name) for name in names]

    def queryset(self, request, queryset):
        name = self.value()
        if name is None:
            return queryset
        prefix = f"{SCHEDULE_KEY_PREFIX}{name}:"
        return queryset.alias(key_length=Length("idempotency_key")).filter(
            idempotency_key__startswith=prefix, key_length=len(prefix) + TICK_LENGTH
        )


# -- what needs a person ---------------------------------------------------------------------------

ATTENTION = {
    HOLD_EXPIRED: "expired lease, held for a person",
    FAILED_FINAL: "failed, no retry left",
    CANCEL_UNACKNOWLEDGED: "cancellation not acknowledged",
    VANISHED_WORKER: "owner's worker vanished",
}


def stale_workers(now: datetime, using: str) -> Q:
    """Return the condition of the worker rows that are stale at ``now``.

    The rule of ``vocabulary.worker_state`` (not stopped, and the heartbeat is older than the
    row's own ``lease_seconds``), in SQL as the stats snapshot writes it: one comparison per
    distinct lease length of the workers that have not stopped, read first (a handful).
    """
    return stale_q(now, lease_values(using))


def needs_attention(kind: str, now: datetime, using: str) -> Q:
    """Return the condition of the jobs of one attention ``kind`` (``stats.attention_jobs``)."""
    if kind not in ATTENTION:
        raise admin.options.IncorrectLookupParameters(f"Unknown attention {kind!r}.")
    return Q(pk__in=attention_jobs(kind, now=now, using=using).values("pk"))


class AttentionFilter(admin.SimpleListFilter):
    """The jobs that wait for a person: ``?attention=<kind>``, the dashboard's links.

    Each kind has one definition, ``stats.attention_jobs``, which the dashboard counts too, so
    its numbers and this list agree:

    - ``hold-expired``: running, owned, the lease expired, and the operation is not registered
      with ``on_expired="resume"`` (``"hold"`` is the default): no worker takes it back;
    - ``failed-final``: failed, with no retry request. When the operation's retry policy allows
      another attempt, the failure itself records a retry request due after the backoff, so a
      failed job without one never runs again unless somebody asks;
    - ``cancel-unacknowledged``: running, and its cancellation was requested at least one lease
      length ago (``DURABLE_JOBS["LEASE_SECONDS"]``): a worker sees a request at its next
      heartbeat, a third of a lease later, so the executor did not stop when asked;
    - ``vanished-worker``: running, and its owner is a ``runjobs`` process whose row is stale
      (not stopped, no heartbeat for longer than its lease).
    """

    title = "needs attention"
    parameter_name = "attention"

    def lookups(self, request, model_admin):
        return list(ATTENTION.items())

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        return queryset.filter(needs_attention(value, timezone.now(), queryset.db))


# -- scheduled jobs --------------------------------------------------------------------------------

SCHEDULED_CHOICES = {
    "all": "all, completed ticks too",
    "only": "only scheduled",
    "hide": "none scheduled",
}
# Requests that look for particular jobs (a search, a status, a schedule's jobs): the default
# hides nothing from them, so a count that links to a status sees the list agree with it.
LOOKING_FOR = ("q", "status__exact", ScheduleFilter.parameter_name, WorkflowFilter.parameter_name)


class DefaultNamedFilter(admin.SimpleListFilter):
    """A filter whose unfiltered choice (Django's "All") is a default that hides something:
    that choice reads ``default_display``, so the list says what it leaves out."""

    default_display = "All"

    def choices(self, changelist):
        choices = super().choices(changelist)
        yield {**next(choices), "display": self.default_display}
        yield from choices


class ScheduledFilter(DefaultNamedFilter):
    """Show or hide the jobs schedules enqueued (``?scheduled=all|only|hide``).

    A schedule every 30 seconds adds 2,880 jobs a day, which would push everything else off the
    first page; once such a tick completed, nobody needs to see it to operate. So by default the
    list hides scheduled jobs that completed, and shows those that failed, run or wait like any
    other job. A search, a status and a schedule's own list (``?schedule=<name>``) hide nothing.
    """

    title = "scheduled jobs"
    parameter_name = "scheduled"

    def lookups(self, request, model_admin):
        return list(SCHEDULED_CHOICES.items())

    default_display = "completed ticks hidden"

    def queryset(self, request, queryset):
        scheduled = Q(idempotency_key__startswith=SCHEDULE_KEY_PREFIX)
        value = self.value()
        if value is None:
            if any(request.GET.get(name) for name in LOOKING_FOR):
                return queryset
            return queryset.exclude(scheduled & Q(status=JobStatus.COMPLETE))
        if value == "all":
            return queryset
        if value == "only":
            return queryset.filter(scheduled)
        if value == "hide":
            return queryset.exclude(scheduled)
        raise admin.options.IncorrectLookupParameters(f"Unknown scheduled choice {value!r}.")


# -- workers -----------------------------------------------------------------------------------------

STOPPED_KEPT_IN_VIEW = timedelta(days=1)


class WorkerStateFilter(DefaultNamedFilter):
    """Workers by state (``?state=alive|stale|stopped|all``), the rule of ``worker_state``.

    Every ``runjobs`` process leaves a row, and its rows are kept, never deleted; by default
    the list hides those stopped more than a day ago. ``stopped`` and ``all`` show them.
    """

    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [(state, state) for state in WorkerState] + [("all", "all, old stopped too")]

    default_display = "stopped over a day ago hidden"

    def queryset(self, request, queryset):
        value, now = self.value(), timezone.now()
        if value is None:
            return queryset.exclude(stopped_at__lt=now - STOPPED_KEPT_IN_VIEW)
        if value == "all":
            return queryset
        if value == WorkerState.STOPPED:
            return queryset.filter(stopped_at__isnull=False)
        stale = stale_workers(now, queryset.db)
        if value == WorkerState.STALE:
            return queryset.filter(stale)
        if value == WorkerState.ALIVE:
            return queryset.filter(stopped_at__isnull=True).exclude(stale)
        raise admin.options.IncorrectLookupParameters(f"Unknown worker state {value!r}.")
