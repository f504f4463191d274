"""The job table and its append-only attempt history.

Models hold fields, constraints and indexes; the words they use (statuses, ownership, outcomes)
and the rules spoken in them live in :mod:`django_durable_jobs.vocabulary`. Every write of a job
goes through :mod:`django_durable_jobs.store`; the REST API's tokens are minted and revoked by
:mod:`django_durable_jobs.models.tokens`.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from django.conf import settings
from django.db import models
from django.utils import timezone

from ..rules.validation import KEY_MAX, NAME_MAX
from ..rules.vocabulary import (
    TERMINAL_STATUSES,
    AttemptOutcomeChoice,
    JobStatus,
    Ownership,
    UpstreamFailure,
    WorkerState,
    assess_ownership,
    diagnose,
    worker_state,
)
from .querysets import JobQuerySet

__all__ = [
    "ApiToken",
    "CapacityGate",
    "Dashboard",
    "Job",
    "JobAttempt",
    "JobDependency",
    "JobPause",
    "JobStatus",
    "JobStep",
    "RateBucket",
    "Schedule",
    "WorkerProcess",
    "Workflow",
]


class Job(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    operation = models.CharField(max_length=NAME_MAX)
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.PENDING)
    scope = models.CharField(max_length=NAME_MAX, null=True, blank=True)
    idempotency_key = models.CharField(max_length=KEY_MAX)
    proposal = models.TextField(null=True)
    proposal_hash = models.CharField(max_length=64, blank=True, default="")
    # True when this app checked the proposal (strict JSON within the depth and size limits) as
    # it wrote the row; NULL on rows written any other way, which are never trusted as unclaimed.
    proposal_checked = models.BooleanField(null=True, default=None)
    created_at = models.DateTimeField()
    completed_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=NAME_MAX, blank=True, default="")
    owner_id = models.CharField(max_length=64, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    fencing_epoch = models.BigIntegerField(default=0)
    attempts = models.PositiveIntegerField(default=0)
    cancellation_requested_at = models.DateTimeField(null=True, blank=True)
    retry_requested_at = models.DateTimeField(null=True, blank=True)
    checkpoint = models.TextField(null=True, blank=True)
    checkpoint_at = models.DateTimeField(null=True, blank=True)
    progress = models.FloatField(default=0.0)
    result = models.TextField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    queue = models.CharField(max_length=NAME_MAX, default="default")
    priority = models.SmallIntegerField(default=0)
    run_after = models.DateTimeField()
    # W3C trace context (JSON {"traceparent": ..., "tracestate": ...}) of the span that enqueued
    # the job, when OpenTelemetry is installed: kept beside the input, never part of its hash.
    trace_context = models.TextField(null=True, blank=True)
    # A workflow's job (docs/workflows.md): its workflow, its name there (may be empty: its
    # parents' results are then keyed by its id), how many parents have not completed, and
    # what a parent's failure does to it. ``released_at`` is when its last parent released it.
    workflow = models.ForeignKey(
        "Workflow", null=True, blank=True, on_delete=models.PROTECT, related_name="jobs"
    )
    node = models.CharField(max_length=NAME_MAX, blank=True, default="")
    waiting_on = models.PositiveIntegerField(default=0)
    on_upstream_failure = models.CharField(
        max_length=8, choices=UpstreamFailure.choices, default=UpstreamFailure.CANCEL.value
    )
    released_at = models.DateTimeField(null=True, blank=True)
    # Set by ctx.sleep(): the time the job is due again (kept after it woke, as evidence).
    sleep_until = models.DateTimeField(null=True, blank=True)
    # Flow control (docs/flow-control.md), computed from the input when the job is submitted:
    # the key its operation's rate limit and concurrency limit count it under ("" for none),
    # and, for an operation unique for a window, the key that window is about (its stored
    # ``idempotency_key`` is then its own id, so an ended job never blocks a new one).
    rate_key = models.CharField(max_length=KEY_MAX, blank=True, default="")
    concurrency_key = models.CharField(max_length=KEY_MAX, blank=True, default="")
    unique_key = models.CharField(max_length=KEY_MAX, null=True, blank=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["scope", "operation", "idempotency_key"],
                name="durable_jobs_unique_submission",
            ),
        ]
        indexes = [
            # Status leads every scan index, so the pending and running ranges stay as small as
            # the live work however many terminal rows pile up (on all three databases).
            # Scope second: a claim takes the best rows of one scope at a time, in turns.
            models.Index(
                fields=["status", "scope", "-priority", "run_after", "created_at", "id"],
                name="durable_jobs_scope_claim_idx",
            ),
            # Status first here too: on SQLite a bare retry_requested_at index lost to the lease
            # index and the retry scan read every failed row (benchmarks/, 1M terminal rows).
            # Whole, not partial: the overview counts the failed jobs without a retry from it.
            models.Index(
                fields=["status", "retry_requested_at"], name="durable_jobs_retry_status_idx"
            ),
            models.Index(
                fields=["scope", "operation", "created_at", "id"], name="durable_jobs_page_idx"
            ),
            models.Index(fields=["created_at", "id"], name="durable_jobs_created_idx"),
            # Not declared here: durable_jobs_completed_idx on (completed_at, status, operation,
            # queue), the overview's recent outcomes (docs/stats.md), is made by migration 0015,
            # partial (ended rows only, so a claim never writes to it; a full index cost the
            # drain about 8 %) where the database has partial indexes, plain on MariaDB, which
            # Django would otherwise warn about on every command (models.W037). Nor is
            # durable_jobs_operation_claim_idx, one operation's pending rows in claim order (the
            # claim of rate-limited work, a worker's --operations), made by migration 0018.
            # Nor are two indexes made partial by migration 0019 where the database has partial
            # indexes (plain on MariaDB): durable_jobs_lease_idx on (status, lease_expires_at),
            # the jobs ever claimed (an ended job keeps its last lease expiry), for the
            # expired-lease scan; and
            # durable_jobs_unique_key_idx on (unique_key, scope, operation, created_at), the
            # window of an operation unique for a while: its latest job of a key.
        ]
        permissions = [
            ("cancel_job", "Can request cancellation of a job"),
            ("retry_job", "Can request a retry of a job"),
        ]

    def __str__(self) -> str:
        return f"{self.operation} {self.id} ({self.status})"

    @property
    def ownership(self) -> Ownership:
        """Return the ownership assessment; the store sets it with its own clock when reading."""
        cached = self.__dict__.get("_ownership")
        return cached if cached is not None else assess_ownership(self, timezone.now())

    @ownership.setter
    def ownership(self, value: Ownership) -> None:
        self.__dict__["_ownership"] = value

    @property
    def diagnostic_error(self) -> str | None:
        return diagnose(self)

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class Dashboard(Job):
    """The operator's overview in the admin: a proxy of :class:`Job`, so the admin index and the
    app's section link to it, shown to whoever may view jobs. It adds no table and no field."""

    class Meta:
        proxy = True
        verbose_name = "dashboard"
        verbose_name_plural = "dashboard"


class CapacityGate(models.Model):
    """One row per operation with a ``max_running`` limit, locked while capacity is checked.

    Counting running rows cannot stop a concurrent insert (a phantom); locking this row first makes
    the count and the insert or claim one atomic step on every database.
    """

    operation = models.CharField(max_length=NAME_MAX, primary_key=True)

    def __str__(self) -> str:
        return self.operation


class JobPause(models.Model):
    """A pause of a queue or an operation (in one scope, or in every scope): kept as evidence.

    A pause is in force while ``active`` is True; resuming sets ``resumed_at``/``resumed_by``
    and ``active`` to NULL, and the row stays. The unique constraint over ``active`` allows
    one pause in force per target (NULLs are distinct on every database) and any number of
    ended ones, without a partial index. ``scope`` is ``""`` for every scope.
    """

    class Target(models.TextChoices):
        QUEUE = "queue"
        OPERATION = "operation"

    id = models.BigAutoField(primary_key=True)
    target = models.CharField(max_length=16, choices=Target.choices)
    name = models.CharField(max_length=NAME_MAX)
    scope = models.CharField(max_length=NAME_MAX, blank=True, default="")
    reason = models.TextField(blank=True, default="")
    paused_at = models.DateTimeField()
    paused_by = models.CharField(max_length=NAME_MAX, blank=True, default="")
    resumed_at = models.DateTimeField(null=True, blank=True)
    resumed_by = models.CharField(max_length=NAME_MAX, blank=True, default="")
    active = models.BooleanField(null=True, default=True)

    class Meta:
        ordering = ["-paused_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["target", "name", "scope", "active"], name="durable_jobs_one_pause"
            ),
        ]
        permissions = [("pause_work", "Can pause and resume queues and operations")]

    def __str__(self) -> str:
        where = f" in scope {self.scope}" if self.scope else ""
        return f"{self.target} {self.name}{where}"


class RateBucket(models.Model):
    """The sliding log of one rate limit's bucket: its recent starts, locked by each claim.

    ``id`` is the SHA-256 of (``target``, ``name``, ``key``); ``starts`` the JSON list of the
    start times (seconds since the epoch, ascending) still inside the window, at most N of
    them (``rules.flow``). It holds bookkeeping, not evidence: the attempts are the evidence.
    """

    id = models.CharField(max_length=64, primary_key=True)
    target = models.CharField(max_length=16)
    name = models.CharField(max_length=NAME_MAX)
    key = models.CharField(max_length=KEY_MAX, blank=True, default="")
    starts = models.TextField(default="[]")
    updated_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.target} {self.name} {self.key}".strip()


class JobAttempt(models.Model):
    """One row per ended attempt; written in the transaction that ends it, never changed."""

    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="attempt_history")
    epoch = models.BigIntegerField()
    owner_id = models.CharField(max_length=64, null=True, blank=True)
    claimed_by = models.CharField(max_length=NAME_MAX, blank=True, default="")
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=AttemptOutcomeChoice.choices)
    error = models.TextField(null=True, blank=True)
    # A failure caused by an exception: its class path (``builtins.ValueError``) and its
    # traceback, bounded in size (the store keeps the head and the tail); empty and None otherwise.
    error_class = models.CharField(max_length=255, blank=True, default="")
    traceback = models.TextField(null=True, blank=True)
    snapshot = models.JSONField()

    class Meta:
        ordering = ["job", "epoch", "id"]
        indexes = [
            models.Index(fields=["job", "epoch"], name="durable_jobs_attempt_idx"),
            # The overview's durations read the newest attempts of the last hour from here.
            models.Index(fields=["ended_at"], name="durable_jobs_attempt_ended_idx"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.epoch} of {self.job_id}: {self.outcome}"


class Workflow(models.Model):
    """A graph of jobs submitted together, all or nothing (docs/workflows.md).

    ``graph`` is the canonical JSON of what was submitted (nodes, operations, input hashes,
    edges); its SHA-256, ``graph_hash``, tells a repeat of the same key and graph (the same
    workflow) from a conflicting one. Its jobs are ordinary jobs; its state is theirs.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=NAME_MAX)
    scope = models.CharField(max_length=NAME_MAX)
    idempotency_key = models.CharField(max_length=KEY_MAX)
    graph = models.TextField()
    graph_hash = models.CharField(max_length=64)
    job_count = models.PositiveIntegerField()
    created_at = models.DateTimeField()
    # Who asked, and when, to cancel or retry the whole workflow (the latest request).
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    retry_requested_at = models.DateTimeField(null=True, blank=True)
    requested_by = models.CharField(max_length=NAME_MAX, blank=True, default="")

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["scope", "name", "idempotency_key"], name="durable_jobs_unique_workflow"
            ),
        ]
        indexes = [models.Index(fields=["created_at", "id"], name="durable_jobs_workflow_idx")]
        permissions = [
            ("cancel_workflow", "Can cancel a workflow"),
            ("retry_workflow", "Can retry a workflow"),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.id}"


class JobDependency(models.Model):
    """An edge of a workflow: ``child`` waits for ``parent`` to complete. Written at submit."""

    workflow = models.ForeignKey(Workflow, on_delete=models.PROTECT, related_name="edges")
    parent = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="child_links")
    child = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="parent_links")

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "job dependencies"
        constraints = [
            models.UniqueConstraint(fields=["parent", "child"], name="durable_jobs_unique_edge"),
        ]

    def __str__(self) -> str:
        return f"{self.parent_id} -> {self.child_id}"


class JobStep(models.Model):
    """A step's recorded result (``ctx.step``): written under the attempt's fence, never changed.

    ``position`` is the step's place in the job's sequence of steps; ``epoch`` the attempt that
    recorded it.
    """

    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="steps")
    position = models.PositiveIntegerField()
    name = models.CharField(max_length=NAME_MAX)
    result = models.TextField()
    epoch = models.BigIntegerField()
    recorded_at = models.DateTimeField()

    class Meta:
        ordering = ["job", "position"]
        constraints = [
            models.UniqueConstraint(fields=["job", "position"], name="durable_jobs_step_position"),
            models.UniqueConstraint(fields=["job", "name"], name="durable_jobs_step_name"),
        ]

    def __str__(self) -> str:
        return f"step {self.position} {self.name!r} of {self.job_id}"


class WorkerProcess(models.Model):
    """One row per ``runjobs`` process, refreshed with its heartbeat.

    Triage reads it to tell a running job whose worker is alive from one whose worker vanished.
    A row whose worker exited cleanly has ``stopped_at``; one that did not goes stale once its
    heartbeat is older than its lease.
    """

    owner_id = models.CharField(max_length=64, primary_key=True)
    actor = models.CharField(max_length=NAME_MAX)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)
    lease_seconds = models.FloatField()
    concurrency = models.PositiveIntegerField()
    leases_held = models.PositiveIntegerField(default=0)
    stopping = models.BooleanField(default=False)
    queues = models.TextField(blank=True, default="")
    operations = models.TextField(blank=True, default="")
    # The schedules this process declares, as JSON {name: definition hash}: reconciliation marks a
    # schedule removed only when no live process declares it.
    schedules = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-started_at"]
        verbose_name_plural = "worker processes"
        indexes = [
            models.Index(fields=["stopped_at", "heartbeat_at"], name="durable_jobs_worker_idx")
        ]

    def __str__(self) -> str:
        return f"{self.actor} ({self.state()})"

    def state(self, now: datetime | None = None) -> WorkerState:
        """Return ``alive``, ``stale`` (heartbeat older than its lease) or ``stopped``."""
        return worker_state(
            self.stopped_at, self.heartbeat_at, self.lease_seconds, now or timezone.now()
        )


class ApiToken(models.Model):
    """A bearer token of the REST API, bound to one user and one scope.

    Only the SHA-256 of the secret is stored; the full token (``djt_<prefix>_<secret>``) is shown
    once, when ``manage.py jobs token create`` makes it. ``prefix`` is public and finds the row;
    the secret's hash is then compared in constant time.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="durable_jobs_api_tokens",
    )
    scope = models.CharField(max_length=NAME_MAX)
    name = models.CharField(max_length=NAME_MAX, blank=True, default="")
    prefix = models.CharField(max_length=16, unique=True)
    token_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # The operations this token may submit; empty means every registered operation.
    operations = models.JSONField(default=list, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        verbose_name = "API token"
        # add_apitoken makes tokens that act as oneself; this one, tokens for another user (never
        # one who holds a permission the maker lacks; see admin/tokens.py).
        permissions = [("add_apitoken_for_others", "Can add API token for another user")]

    def __str__(self) -> str:
        state = "revoked" if self.revoked_at else "active"
        return f"{self.name or self.prefix} ({self.scope}, {state})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class Schedule(models.Model):
    """A recurring job declared in code, kept as a row that operators can see, pause and resume.

    Its definition (operation, cron expression or interval, payload, …) is written by the workers
    that declare it when they start; ``paused_at`` by people; ``last_tick_at`` and ``last_job`` by the
    scheduler. A schedule no live worker declares any more is marked ``removed_at``, never deleted.
    """

    name = models.CharField(max_length=NAME_MAX, unique=True)
    operation = models.CharField(max_length=NAME_MAX)
    cron = models.CharField(max_length=255, blank=True, default="")
    interval_seconds = models.PositiveIntegerField(null=True, blank=True)  # whole seconds, >= 1
    # Interval ticks are anchor + k * interval, the same in every process.
    anchor = models.DateTimeField()
    timezone = models.CharField(max_length=64, default="UTC")
    payload = models.TextField(default="{}")
    scope = models.CharField(max_length=NAME_MAX, null=True, blank=True)
    queue = models.CharField(max_length=NAME_MAX, default="default")
    priority = models.SmallIntegerField(default=0)
    overlap = models.CharField(
        max_length=8, choices=[("skip", "skip"), ("allow", "allow")], default="skip"
    )
    catch_up = models.CharField(
        max_length=8,
        choices=[("latest", "latest"), ("all", "all"), ("none", "none")],
        default="latest",
    )
    catch_up_limit = models.PositiveIntegerField(default=100)
    definition_hash = models.CharField(max_length=64)
    declared_at = models.DateTimeField()
    removed_at = models.DateTimeField(null=True, blank=True)
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=NAME_MAX, blank=True, default="")
    last_tick_at = models.DateTimeField(null=True, blank=True)
    last_job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
