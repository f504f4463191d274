"""The words of the job table and the rules spoken in them, with no database in sight.

Every state a job, an attempt, an ownership assessment, a worker or a request can be in is named
here once, as an enum; every other module (models, querysets, the store, the worker, the admin,
the CLI and the API) imports the name instead of spelling the string. The rules that decide on
those words are plain functions of a row read earlier, tested without a database:

- :func:`assess_ownership`: who may change a job now (the five answers of ``Ownership``);
- :func:`claim_refusal`, :func:`retry_refusal`: why a job cannot get a new attempt, or None;
- :func:`cancel_answer`, :func:`retry_answer`: what a cancellation or retry request does.

``TextChoices`` is Django's enum type; it brings no ORM with it, and lets the model fields use
these enums as their ``choices``.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Protocol

from django.db.models.enums import TextChoices

from .validation import JsonTooDeep, loads_strict

__all__ = [
    "OWNERSHIP_STATES",
    "PARKED_STATUSES",
    "TERMINAL_STATUSES",
    "UpstreamFailure",
    "AttemptOutcomeChoice",
    "JobRow",
    "JobStatus",
    "Ownership",
    "RequestAnswer",
    "WorkerState",
    "assess_ownership",
    "cancel_answer",
    "claim_refusal",
    "diagnose",
    "is_authentic_pending",
    "is_json",
    "is_parked",
    "is_takeable",
    "json_defect",
    "proposal_defect",
    "proposal_sha256",
    "retry_answer",
    "retry_refusal",
    "worker_state",
]


class JobStatus(TextChoices):
    """Where a job is in its life; ``orphaned`` exists only on rows imported from elsewhere."""

    PENDING = "pending", "pending"
    # A workflow's job whose parents have not all completed: no claim takes it; the completion
    # of its last parent makes it pending in the same fenced transaction (store/workflows.py).
    WAITING = "waiting", "waiting"
    # An attempt called ctx.sleep(): no owner, no lease, due again at ``run_after``
    # (``sleep_until``); steps and checkpoint kept, no attempt consumed.
    SLEEPING = "sleeping", "sleeping"
    RUNNING = "running", "running"
    COMPLETE = "complete", "complete"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"
    ORPHANED = "orphaned", "orphaned"


TERMINAL_STATUSES = frozenset(
    {JobStatus.COMPLETE, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.ORPHANED}
)
# A person may ask for a new attempt of these (and of an expired lease).
RETRYABLE_STATUSES = (JobStatus.FAILED, JobStatus.CANCELLED)
# Not ended, yet held by nobody and not claimable as fresh pending work: a waiting job starts
# once its parents completed, a sleeping one when its sleep is over.
PARKED_STATUSES = (JobStatus.WAITING, JobStatus.SLEEPING)


class Ownership(TextChoices):
    """Who may change a job now: the assessment made whenever a row is read, in this order."""

    TERMINAL = "terminal", "terminal"
    UNCLAIMED = "unclaimed", "unclaimed"
    LEGACY_UNKNOWN = "legacy-unknown", "legacy-unknown"
    EXPIRED = "expired", "expired"
    CURRENT = "current", "current"


OWNERSHIP_STATES = tuple(Ownership)


class AttemptOutcomeChoice(TextChoices):
    """How an attempt ended, as its history row (``JobAttempt.outcome``) records it."""

    COMPLETE = "complete", "complete"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"
    INTERRUPTED = "interrupted", "interrupted"
    # A stopping worker handed back a claim it never started; not counted in ``Job.attempts``.
    RELEASED = "released", "released"
    # The attempt called ctx.sleep(): ended without failing, not counted in ``Job.attempts``.
    SLEPT = "slept", "slept"


class UpstreamFailure(TextChoices):
    """What a workflow job does when a parent fails for good or is cancelled."""

    CANCEL = "cancel", "cancel"  # it is cancelled, with a reason naming the parent
    RUN = "run", "run"  # it runs once its other parents ended (the parent's result is None)


class WorkerState(TextChoices):
    """What a ``runjobs`` process's row says of it."""

    ALIVE = "alive", "alive"
    STALE = "stale", "stale"  # no heartbeat for longer than its lease: it vanished
    STOPPED = "stopped", "stopped"


class RequestAnswer(TextChoices):
    """What a cancellation or retry request did; the first three mean it was accepted."""

    CANCELLED_NOW = "cancelled-now", "cancelled at once (it had not started)"
    REQUESTED = "requested", "requested"
    ALREADY_REQUESTED = "already-requested", "already requested"
    ALREADY_ENDED = "already-ended", "already ended (its result is kept)"
    NOT_ENDED = "not-ended", "not ended (nothing to retry yet)"
    NOT_FOUND = "not-found", "no such job"

    @property
    def accepted(self) -> bool:
        return self in ACCEPTED_ANSWERS


ACCEPTED_ANSWERS = frozenset(
    {RequestAnswer.CANCELLED_NOW, RequestAnswer.REQUESTED, RequestAnswer.ALREADY_REQUESTED}
)


class JobRow(Protocol):
    """The columns the rules read; a ``Job`` is one, and so is any object with these fields."""

    pk: Any
    status: str
    owner_id: str | None
    lease_expires_at: datetime | None
    attempts: int
    proposal: str | None
    proposal_hash: str
    proposal_checked: bool | None
    result: str | None
    cancellation_requested_at: datetime | None
    retry_requested_at: datetime | None


# -- the proposal ---------------------------------------------------------------------------------


def proposal_sha256(text: str) -> str:
    """Return the lowercase hex SHA-256 of the UTF-8 bytes of ``text``."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def is_json(text: str | None) -> bool:
    """Return True when ``text`` is strict JSON (no NaN or Infinity) within the depth limit.

    The depth is measured on the text before parsing, so a stored value nested a million
    levels deep is answered False, never a ``RecursionError``.
    """
    return json_defect(text) is None


def json_defect(text: str | None) -> str | None:
    """Return why ``text`` is not JSON this app accepts, or None when it is."""
    if text is None:
        return "it is missing"
    try:
        loads_strict(text)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


NOT_CHECKED = (
    "the proposal was not written by this app (proposal_checked is not set), so its JSON "
    "was never checked"
)


def proposal_defect(row: JobRow) -> str | None:
    """Return why a row's proposal cannot be trusted, or None when it is intact.

    Intact means present, checked by this app when it wrote the row (``proposal_checked``:
    strict JSON within the size and depth limits) and unchanged since (its SHA-256 matches).
    The flag, not a parse, vouches for the JSON, so the database can judge the same rows the
    same way (``JobQuerySet.with_ownership``) on every database and Python version.
    """
    if row.proposal is None:
        return "the proposal is missing"
    if getattr(row, "proposal_checked", None) is not True:
        return NOT_CHECKED
    if row.proposal_hash != proposal_sha256(row.proposal):
        return "the proposal does not match its stored SHA-256"
    return None


def diagnose(row: JobRow) -> str | None:
    """Return a defect found while reading the row, without hiding the row.

    Never raises on what a row holds: a value nested too deeply is reported, not parsed.
    """
    if row.status not in JobStatus.values:
        return (
            f"The stored status {row.status!r} is not one this app knows (it was written "
            f"outside the app): the job is legacy-unknown and this app never claims or retries "
            f"it; triage it by hand."
        )
    if row.status == JobStatus.PENDING:
        defect = proposal_defect(row)
        if defect:
            return f"Defective pending row: {defect}; it will not be claimed."
    if getattr(row, "proposal_checked", None) is True and row.proposal is not None:
        if json_defect(row.proposal) is not None:
            return (
                "The stored proposal is no longer JSON this app accepts, although the app "
                "checked it when it wrote the row: it was changed outside the app, and an "
                "attempt of it fails."
            )
    if row.result is not None:
        try:
            loads_strict(row.result)
        except JsonTooDeep as exc:
            return f"The stored result is {exc.nesting}; see its stored text."
        except (TypeError, ValueError):
            return "The stored result is not valid JSON."
    return None


# -- ownership --------------------------------------------------------------------------------------


def is_authentic_pending(row: JobRow) -> bool:
    """Return True for a pending row this app wrote and nobody has touched since.

    No attempt of it ever ran (``attempts`` is 0). Its epoch is 0 unless a stopping worker
    released a claim it never started: the epoch never goes back, so a released row is pending
    at the epoch of that claim (its history holds a ``released`` attempt).
    """
    return (
        row.status == JobStatus.PENDING
        and not row.owner_id
        and row.lease_expires_at is None
        and row.attempts == 0
        and proposal_defect(row) is None
    )


def is_parked(row: JobRow) -> bool:
    """Return True for an intact waiting or sleeping row: not ended, and nobody holds it."""
    return (
        row.status in PARKED_STATUSES
        and not row.owner_id
        and row.lease_expires_at is None
        and proposal_defect(row) is None
    )


def assess_ownership(row: JobRow, now: datetime) -> Ownership:
    """Return who may change the row at ``now``; the first rule that applies wins.

    A waiting or sleeping row is unclaimed: nobody holds it (``claim_refusal`` still refuses to
    take it before its time).
    """
    if row.status in TERMINAL_STATUSES:
        return Ownership.TERMINAL
    if is_authentic_pending(row) or is_parked(row):
        return Ownership.UNCLAIMED
    if not row.owner_id or row.lease_expires_at is None or row.status != JobStatus.RUNNING:
        return Ownership.LEGACY_UNKNOWN
    if row.lease_expires_at <= now:
        return Ownership.EXPIRED
    return Ownership.CURRENT


# -- claims and retries ---------------------------------------------------------------------------


def is_takeable(row: JobRow) -> bool:
    """Return True unless the row is defective (only authentic pending rows start)."""
    if row.status == JobStatus.PENDING:
        return is_authentic_pending(row)
    return proposal_defect(row) is None


def claim_refusal(row: JobRow, state: Ownership) -> str | None:
    """Return why ``claim(job_id)`` must refuse a row in ``state``, or None when it may take it.

    Unclaimed pending rows and expired leases can be claimed; nothing else can (a waiting job
    starts when its parents complete, a sleeping one when its sleep ends).
    """
    if row.status == JobStatus.WAITING:
        return f"Job {row.pk} cannot be claimed: it waits for its workflow's upstream jobs."
    if row.status == JobStatus.SLEEPING:
        until = getattr(row, "run_after", None)
        return f"Job {row.pk} cannot be claimed: it sleeps until {until}."
    if state in (Ownership.UNCLAIMED, Ownership.EXPIRED):
        return None
    reasons = {
        Ownership.CURRENT: "another owner holds a live lease; wait for it to expire",
        Ownership.LEGACY_UNKNOWN: (
            "its ownership cannot be established (legacy or defective row); triage it"
        ),
        Ownership.TERMINAL: f"it is {row.status}; use retry for failed or cancelled jobs",
    }
    why = reasons[state]
    defect = proposal_defect(row) if row.status == JobStatus.PENDING else None
    if defect:
        why = f"its proposal is defective ({defect})"
    return f"Job {row.pk} cannot be claimed: {why}."


def retry_refusal(row: JobRow, now: datetime) -> str | None:
    """Return why ``row`` cannot get a new attempt, or None when it can.

    Failed, cancelled and expired jobs can; a complete job is never reopened.
    """
    state = assess_ownership(row, now)
    if row.status == JobStatus.COMPLETE:
        return f"Job {row.pk} is complete and is never reopened; submit a new job instead."
    defect = proposal_defect(row)
    if defect:
        return f"Job {row.pk} cannot be retried: {defect}."
    if row.status in RETRYABLE_STATUSES or state == Ownership.EXPIRED:
        return None
    if state == Ownership.LEGACY_UNKNOWN or row.status == JobStatus.ORPHANED:
        return f"Job {row.pk} has no trustworthy ownership (legacy row); triage it by hand."
    return f"Job {row.pk} is {row.status} and has not ended; there is nothing to retry."


# -- requests -------------------------------------------------------------------------------------


def cancel_answer(row: JobRow | None) -> RequestAnswer:
    """Return what a cancellation request does to ``row`` (None: the job does not exist).

    A pending job is cancelled at once; a running one gets a request its owner carries out
    (the first request wins); a job that ended keeps its result.
    """
    if row is None:
        return RequestAnswer.NOT_FOUND
    if row.status in TERMINAL_STATUSES:
        return RequestAnswer.ALREADY_ENDED
    if row.status in (JobStatus.PENDING, *PARKED_STATUSES):
        return RequestAnswer.CANCELLED_NOW
    if row.cancellation_requested_at is not None:
        return RequestAnswer.ALREADY_REQUESTED
    return RequestAnswer.REQUESTED


def retry_answer(row: JobRow | None, now: datetime) -> RequestAnswer:
    """Return what a retry request does to ``row``, or raise nothing and let the caller refuse.

    A job that has not ended (unclaimed, or held under a live lease) needs no retry. For the
    rest, the caller checks :func:`retry_refusal` first: a retry that cannot be carried out is
    a refusal, not an answer.
    """
    if row is None:
        return RequestAnswer.NOT_FOUND
    if assess_ownership(row, now) in (Ownership.UNCLAIMED, Ownership.CURRENT):
        return RequestAnswer.NOT_ENDED
    if row.retry_requested_at is not None:
        return RequestAnswer.ALREADY_REQUESTED
    return RequestAnswer.REQUESTED


# -- workers --------------------------------------------------------------------------------------


def worker_state(
    stopped_at: datetime | None, heartbeat_at: datetime, lease_seconds: float, now: datetime
) -> WorkerState:
    """Return ``stopped`` once it exited, ``stale`` when its heartbeat is older than its lease."""
    if stopped_at is not None:
        return WorkerState.STOPPED
    if (now - heartbeat_at).total_seconds() > lease_seconds:
        return WorkerState.STALE
    return WorkerState.ALIVE
