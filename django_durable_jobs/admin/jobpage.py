"""The job page as a story: what the job is doing now, what went wrong, and each attempt in turn.

:func:`page_context` gathers everything the top of ``job/change_form.html`` shows, with a fixed
number of queries whatever the job holds: the summary (status, ownership, attempt ``n of max``,
progress, who holds the lease and until when, the times to the second), the error and traceback
of the last failed attempt, the attempts as a timeline (the running one included), and a notice
when no live worker has registered the job's operation.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path, reverse
from django.utils import timezone

from .. import stats
from ..formatting.humanize import relative
from ..models import Job, JobAttempt, WorkerProcess
from ..rules import registry
from ..rules.jsontext import excerpt
from ..rules.vocabulary import (
    RETRYABLE_STATUSES,
    TERMINAL_STATUSES,
    AttemptOutcomeChoice,
    JobStatus,
    assess_ownership,
)
from . import format as fmt
from . import jobflow
from .base import WIDE, confirmation
from .filters import stale_workers

# The newest attempts the timeline shows; the attempt list has every one.
TIMELINE_ATTEMPTS = 50
# An error message may be as long as a payload (1 MiB): the page shows its beginning, the failure
# more of it than each attempt of the timeline; the fields below show up to 64 KiB of it.
FAILURE_ERROR_BYTES, STEP_ERROR_BYTES = 8_192, 1_024
RUNNING = "running"  # the outcome shown for the attempt that holds the lease now

OUTCOME_NOTES = {
    AttemptOutcomeChoice.INTERRUPTED: "its lease expired before it ended: what it did is unknown",
    AttemptOutcomeChoice.RELEASED: "handed back unstarted by a stopping worker; no code ran",
    AttemptOutcomeChoice.SLEPT: "it called ctx.sleep(): ended without failing, not counted as "
    "an attempt; the next one resumes after its recorded steps",
}


@dataclass(frozen=True)
class Step:
    """One attempt of the timeline, ended (a ``JobAttempt`` row) or running (the job's lease)."""

    epoch: int
    outcome: str
    started_at: datetime | None
    ended_at: datetime | None
    claimed_by: str
    owner_id: str | None
    error: str | None
    error_class: str
    traceback: str | None

    @property
    def badge(self):
        return fmt.outcome_badge(self.outcome)

    @property
    def started(self) -> str:
        return fmt.moment(self.started_at)

    @property
    def ended(self) -> str:
        return fmt.moment(self.ended_at) if self.ended_at else "(still running)"

    @property
    def span(self) -> str:
        return fmt.between(self.started_at, self.ended_at)

    @property
    def note(self) -> str:
        return OUTCOME_NOTES.get(self.outcome, "")

    @property
    def error_shown(self) -> str:
        return cut(self.error, STEP_ERROR_BYTES)


def cut(text: str | None, cap: int) -> str:
    """Return the beginning of ``text`` (at most ``cap`` UTF-8 bytes), marked when cut."""
    if not text:
        return ""
    shown = excerpt(text, cap)
    return f"{shown.text}\n{shown.note()}" if shown.truncated else shown.text


def _step(attempt: JobAttempt) -> Step:
    return Step(
        attempt.epoch,
        attempt.outcome,
        attempt.started_at,
        attempt.ended_at,
        attempt.claimed_by,
        attempt.owner_id,
        attempt.error,
        attempt.error_class,
        attempt.traceback,
    )


def timeline(job: Job, using: str) -> tuple[list[Step], int]:
    """Return the newest attempts, newest first (the running one on top), and how many ended."""
    rows = JobAttempt.objects.using(using).filter(job=job).defer("snapshot")
    ended = [_step(a) for a in rows.order_by("-epoch", "-id")[:TIMELINE_ATTEMPTS]]
    total = len(ended) if len(ended) < TIMELINE_ATTEMPTS else rows.count()
    if job.status == JobStatus.RUNNING and job.owner_id:
        running = Step(
            job.fencing_epoch,
            RUNNING,
            job.claimed_at,
            None,
            job.claimed_by,
            job.owner_id,
            None,
            "",
            None,
        )
        ended.insert(0, running)
    return ended, total


def last_failure(job: Job, steps: list[Step]) -> dict[str, Any] | None:
    """Return the error of a failed job, with the traceback of its last failed attempt."""
    if job.status != JobStatus.FAILED:
        return None
    failed = next((s for s in steps if s.outcome == AttemptOutcomeChoice.FAILED), None)
    return {
        "error": cut(job.error or (failed.error if failed else ""), FAILURE_ERROR_BYTES)
        or "(no error message was stored)",
        "error_class": failed.error_class if failed else "",
        "traceback": failed.traceback if failed else None,
        "epoch": failed.epoch if failed else None,
    }


def attempt_of(job: Job) -> str:
    """Return ``n of max`` when the operation has a retry policy here, else ``n``."""
    spec = registry.get(job.operation)
    policy = spec.retry if spec is not None else None
    if policy is None:
        return str(job.attempts)
    return f"{job.attempts} of {policy.max_attempts}"


def holder(job: Job, worker_state: str | None, now: datetime) -> str:
    """Return who holds the job's lease and until when, in a sentence."""
    if job.status != JobStatus.RUNNING:
        if job.status == JobStatus.PENDING:
            if job.run_after and job.run_after > now:
                return f"Nobody yet: due at {fmt.moment(job.run_after)}."
            return "Nobody yet: waiting for a worker."
        if job.status == JobStatus.WAITING:
            return "Nobody yet: it waits for its parents in its workflow to complete."
        if job.status == JobStatus.SLEEPING:
            until = job.sleep_until or job.run_after
            return f"Nobody: the job sleeps until {fmt.moment(until)}."
        return "Nobody: the job has ended."
    name = job.claimed_by or job.owner_id or "an unknown owner"
    worker = f" (its worker is {worker_state})" if worker_state else ""
    if job.lease_expires_at is None:
        return f"{name}{worker}, with no lease expiry recorded."
    when = f"{fmt.moment(job.lease_expires_at)}, {relative(job.lease_expires_at, now)}"
    if job.lease_expires_at <= now:
        return f"Nobody: the lease of {name}{worker} expired at {when}."
    return f"{name}{worker}, until {when}."


def times(job: Job, now: datetime) -> list[tuple[str, str, str]]:
    """Return (label, time to the second, duration) for created, started and finished."""
    started, finished = job.claimed_at, job.completed_at
    rows = [("created", fmt.moment(job.created_at), "")]
    if started is not None:
        label = "last attempt started" if job.attempts > 1 else "started"
        rows.append((label, fmt.moment(started), f"{fmt.between(job.created_at, started)} after"))
    if finished is not None:
        ran = f"ran {fmt.between(started, finished)}" if started else ""
        total = f"{fmt.between(job.created_at, finished)} in all"
        rows.append(("finished", fmt.moment(finished), "; ".join(filter(None, [ran, total]))))
    elif job.status == JobStatus.RUNNING and started is not None:
        rows.append(("running for", fmt.between(started, now), ""))
    return rows


def unregistered_notice(job: Job, using: str, now: datetime) -> str | None:
    """Return why a pending job waits for a worker that does not exist, or None.

    A ``runjobs`` process records the operations it has registered (all of its own, or those
    ``--operation`` named) and the queues it serves (none recorded: all) in its row.
    """
    if job.status != JobStatus.PENDING:
        return None
    alive = (
        WorkerProcess.objects.using(using)
        .filter(stopped_at__isnull=True)
        .exclude(stale_workers(now, using))
        .values_list("operations", "queues")
    )
    workers = [
        (set(filter(None, ops.split(","))), set(filter(None, qs.split(",")))) for ops, qs in alive
    ]
    start = (
        f"Start a worker (manage.py runjobs) whose project imports the module that defines "
        f'@operation("{job.operation}"); each installed app\'s jobs.py is imported when the '
        f"worker starts."
    )
    if not workers:
        return f"No worker is running: this job waits until one starts. {start}"
    registered = [queues for ops, queues in workers if job.operation in ops]
    if not registered:
        return (
            f"No running worker has registered the operation {job.operation!r}: this job "
            f"waits until one does. {start}"
        )
    if not any(not queues or job.queue in queues for queues in registered):
        return (
            f"The workers that registered {job.operation!r} do not serve the queue "
            f"{job.queue!r}: start one with --queue {job.queue} (or without --queue)."
        )
    return None


def buttons(job: Job, now: datetime, *, may_cancel: bool, may_retry: bool) -> list[str]:
    """Return the requests a person may make of this job from its page: cancel, retry."""
    shown = []
    if may_cancel and job.status not in TERMINAL_STATUSES:
        shown.append("cancel")
    expired = job.status == JobStatus.RUNNING and assess_ownership(job, now) == "expired"
    if may_retry and (job.status in RETRYABLE_STATUSES or expired):
        shown.append("retry")
    return shown


def banners(job: Job) -> list[dict[str, str]]:
    """Return the warnings a person must see first on the job's page."""
    found = []
    if job.cancellation_requested_at is not None:
        at = fmt.moment(job.cancellation_requested_at)
        if job.status in TERMINAL_STATUSES:
            text = f"Cancellation requested at {at}; the job has ended ({job.status})."
        else:
            text = f"Cancellation requested at {at}; waiting for the owner to stop."
        found.append({"kind": "cancel", "text": text})
    # A sleeping job's retry request is its wake-up call: the sleeping banner says when.
    if job.retry_requested_at is not None and job.status != JobStatus.SLEEPING:
        at = fmt.moment(job.retry_requested_at)
        found.append(
            {
                "kind": "retry",
                "text": f"Retry requested at {at}; a worker will start a new attempt "
                f"from {fmt.moment(job.run_after)}.",
            }
        )
    if job.diagnostic_error:
        found.append({"kind": "diagnostic", "text": f"Row defect: {job.diagnostic_error}"})
    return found


# What each button asks the store for: (the action of ``RequestActions`` it goes through, the
# permission, the question of the confirmation step, its answer button).
REQUESTS = {
    "cancel": (
        "request_cancellation",
        "cancel_job",
        "Request the cancellation of this job? A pending job is cancelled at once; a running "
        "one stops when its owner sees the request; a finished one keeps its result.",
        "Yes, request cancellation",
    ),
    "retry": (
        "request_retry",
        "retry_job",
        "Request a retry of this job? A worker starts a new attempt (the checkpoint is kept); "
        "a complete job is never reopened.",
        "Yes, request a retry",
    ),
}


class JobPage:
    """The job page's story (``page_context``) and its Cancel and Retry buttons.

    A button posts to ``<job>/request/<cancel|retry>/``, which asks for a confirmation, then
    runs the list's action (``RequestActions``) on this one job: the same permission, the same
    call to the store, the same messages.
    """

    def request_urls(self) -> list:
        info = self.opts.app_label, self.opts.model_name
        view = self.admin_site.admin_view(self.request_view)
        return [
            path(
                "<path:object_id>/request/<str:kind>/",
                view,
                name="{}_{}_request".format(*info),
            )
        ]

    def request_view(self, request, object_id: str, kind: str) -> HttpResponse:
        """Confirm, then make a cancellation or retry request of one job; POST only."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if kind not in REQUESTS:
            raise Http404(f"No request {kind!r}; there are {', '.join(REQUESTS)}.")
        action, permission, question, answer = REQUESTS[kind]
        obj = self.get_object(request, admin.utils.unquote(object_id))
        if obj is None:
            raise Http404(f"No job {object_id}.")
        allowed = getattr(self, f"has_{permission}_permission")(request)
        if not (allowed and self.has_view_or_change_permission(request, obj)):
            raise PermissionDenied
        page = reverse(
            f"admin:{self.opts.app_label}_{self.opts.model_name}_change",
            args=[admin.utils.quote(obj.pk)],
            current_app=self.admin_site.name,
        )
        if request.POST.get("confirm") != "yes":
            return confirmation(
                self,
                request,
                question,
                answer,
                page,
                job=obj,
                status_badge=fmt.status_badge(obj.status),
            )
        getattr(self, action)(request, self.get_queryset(request).filter(pk=obj.pk))
        return HttpResponseRedirect(page)

    def page_context(self, request, obj: Job) -> dict[str, Any]:
        """Return what the top of the job's page shows, read with a fixed number of queries."""
        now = timezone.now()
        using = obj._state.db
        steps, ended = timeline(obj, using)
        state = self._owner_worker_state(obj)
        recorded, recorded_total = jobflow.steps_of(obj, using)
        site = self.admin_site.name
        return {
            "job_workflow": jobflow.workflow_facts(
                obj,
                using,
                lambda pk: reverse("admin:durable_jobs_job_change", args=[pk], current_app=site),
                lambda pk: reverse(
                    "admin:durable_jobs_workflow_change", args=[pk], current_app=site
                ),
            ),
            "job_sleeping": jobflow.sleeping_until(obj, now),
            "job_steps": recorded,
            "job_steps_total": recorded_total,
            "durable_jobs_banners": banners(obj),
            "job_summary": {
                "status": fmt.status_badge(obj.status),
                "ownership": fmt.ownership_badge(assess_ownership(obj, now)),
                "attempt": attempt_of(obj),
                "epoch": obj.fencing_epoch,
                "progress": fmt.progress_bar(obj.progress),
                "holder": holder(obj, state, now),
                "times": times(obj, now),
                "operation": obj.operation,
                "id": str(obj.pk),
            },
            "job_failure": last_failure(obj, steps),
            "job_timeline": steps,
            "job_attempts_ended": ended,
            "job_timeline_cut": ended > TIMELINE_ATTEMPTS,
            "job_waiting_notice": unregistered_notice(obj, using, now),
            "job_held_back": stats.held_back(obj, now, using),
            "job_buttons": buttons(
                obj,
                now,
                may_cancel=self.has_cancel_job_permission(request),
                may_retry=self.has_retry_job_permission(request),
            ),
        }

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = {**(extra_context or {}), **WIDE}
        obj = self.get_object(request, admin.utils.unquote(object_id))
        if obj is not None:
            extra_context.update(self.page_context(request, obj))
        return super().change_view(request, object_id, form_url, extra_context)
