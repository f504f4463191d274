"""Submitting: the one way a job is made (``defer``, ``defer_many``, ``insert``) and lookups.

Every path writes through one statement (:mod:`.sql.submit`) that skips a row whose idempotency
key is taken instead of failing on it, so no savepoint is needed; the rows holding taken keys are
then read and judged: the same proposal bytes return the earlier job unchanged, different bytes
are an ``IdempotencyConflict``.

An operation's flow control (``rules.flow``) applies on every path: a bad declaration refuses
the submission before any SQL; its rate and concurrency keys are computed from each input; and
an operation unique for a window coalesces a submission with the job holding its unique key
(:mod:`.uniqueness`) instead of by idempotency key.

``defer`` and ``defer_many`` submit pending work. ``insert`` is *submit and claim at once*: the
job is created running, owned by this client (epoch 1, attempt 1), for callers that run it now.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from ..database.transactions import bounded_atomic, check_execution, refuse_caller_transaction
from ..models import Job
from ..observability import tracing
from ..rules import flow as flows
from ..rules import quotas, validation
from ..rules.errors import CapacityReached, IdempotencyConflict, InputInvalid, JobError
from ..rules.execution import Execution
from ..rules.flow import NO_FLOW, Flow
from ..rules.values import Lease, Submission
from ..rules.vocabulary import JobStatus, Ownership, proposal_sha256
from . import capacity, limits, uniqueness
from .client import Client, annotate, check_identity, now, require_caller_transaction, resolve_scope
from .sql.submit import NewJob, submit

EMPTY_PROPOSAL = "{}"
MAX_SUBMISSIONS = 10_000  # jobs per defer_many() / submit_many() call


def insert(
    client: Client,
    operation: str,
    *,
    submission: Submission | None = None,
    max_running: int | None = None,
    job_id: Any = None,
) -> Lease | None:
    """Submit and claim at once: the job is created running, owned by this client.

    Return its lease (epoch 1, attempt 1), or None for a repeat of an identical earlier
    submission: nothing is claimed or run then. Capacity is checked after coalescing, atomically.
    """
    op = validation.operation(operation)
    flow = _flow(op)
    scope, new = _new_job(client, submission, job_id, flow=flow)
    cap = capacity.operation_cap(op, max_running)
    # The rate counted is given back if anything refuses or fails, the COMMIT included.
    with (
        tracing.producer(op, queue="default", scope=scope) as sending,
        quotas.counted() as taken,
        bounded_atomic(client.using),
    ):
        at = now(client)
        if new.unique_key is not None:
            earlier = uniqueness.held_one(client.using, op, flow, scope, new, at)
        else:
            earlier = _existing(client, op, scope, new.key, new.proposal)
        if earlier is not None:
            sending.sent(earlier.pk, earlier.trace_context)
            return None
        capacity.require_operation_room(client, op, cap)
        capacity.require_scope_room(client, scope)
        # Created running, it starts now: a pause in force, a used-up rate limit or a
        # concurrency key at its limit refuses it, as they would its claim, and the start is
        # recorded in the rate limits over it.
        limits.require_flow_room(client, _starting(op, scope, new), at, created=True)
        taken += capacity.admit(client, scope, 1, 0, at, pending=False)
        expires = at + timedelta(seconds=client.lease_seconds)
        fields = {
            "operation": op,
            "scope": scope,
            "status": JobStatus.RUNNING.value,
            "created_at": at,
            "run_after": at,
            "owner_id": client.owner_id,
            "fencing_epoch": 1,
            "attempts": 1,
            "lease_expires_at": expires,
            "heartbeat_at": at,
            "claimed_at": at,
            "claimed_by": client.actor or "",
            "trace_context": sending.carrier,
        }
        ((held, _),) = submit(client.using, fields, [new])
        job = _held(op, scope, new, held)
        sending.sent(job.pk, job.trace_context)
        if job.pk != new.pk or job.owner_id != client.owner_id:
            # An identical submission committed first: nothing started, so no start is kept
            # in a rate limit either.
            transaction.set_rollback(True, using=client.using)
            return None
    return Lease(job_id=new.pk, owner_id=client.owner_id, epoch=1, expires_at=expires)


def _starting(operation: str, scope: str, new: NewJob) -> Job:
    """Return the unsaved row of a job ``insert`` creates running, as the flow limits read it."""
    return Job(
        pk=new.pk,
        operation=operation,
        scope=scope,
        rate_key=new.rate_key,
        concurrency_key=new.concurrency_key,
        status=JobStatus.PENDING,
    )


def find_submission(client: Client, operation: str, submission: Submission) -> Job | None:
    """Return the job of an identical earlier submission, or None (read-only)."""
    op = validation.operation(operation)
    flow = _flow(op)
    scope, new = _new_job(client, submission, flow=flow)
    if new.unique_key is not None:  # the job holding the key in its window
        found = uniqueness.holders(
            client.using, op, scope, [new.unique_key], flow, now(client), locking=False
        )
        earlier = found.get(new.unique_key)
        if earlier is not None:
            uniqueness.judge(op, scope, new.unique_key, new.proposal, new.proposal_hash, earlier)
        return annotate(client, earlier)
    if submission is None or submission.idempotency_key is None:
        return None  # a fresh key (the new job's id) matches nothing
    return annotate(client, _existing(client, op, scope, new.key, new.proposal))


def defer(
    client: Client,
    operation: str,
    submission: Submission,
    *,
    job_id: Any = None,
    execution: Execution | None = None,
    in_caller_transaction: bool = False,
    queue: str | None = None,
    priority: int = 0,
    run_after: datetime | None = None,
    unique_by_input: bool = False,
) -> Job:
    """Submit pending work, or return the identical earlier job unchanged. Start nothing.

    With ``in_caller_transaction=True`` the row is written in the caller's open atomic block
    and exists only if the caller commits. Without an execution a new job is one statement
    (its NOTIFY included on PostgreSQL) and a repeat one two, each atomic on its own.

    For an operation unique for a window, the submission coalesces with the job holding its
    unique key instead (a transaction: the key's gate, a locking read, the insert).
    ``unique_by_input=True`` makes the unique key the input's hash even when the submission
    has an idempotency key: a schedule's tick key names the tick, not the work.
    """
    op = validation.operation(operation)
    flow = _flow(op)
    scope, new = _new_job(client, submission, job_id, flow=flow, by_input=unique_by_input)
    queue, priority = _schedule(queue, priority, run_after)
    if execution is not None:
        check_identity(client, execution)
        check_execution(execution)  # a spent budget refuses before the quota's count
    # A refusal of the caller's transaction, too, comes before any SQL.
    if in_caller_transaction:
        require_caller_transaction(client, "defer")
    else:
        refuse_caller_transaction(client.using)

    def write() -> Job:
        at = now(client)
        fields = _pending(op, scope, at, queue, priority, run_after, sending.carrier)
        ((held, built),) = submit(client.using, fields, [new], notify=queue)
        job = _owned(client, _held(op, scope, new, held), built, at)
        sending.sent(job.pk, job.trace_context)
        return job

    with (
        tracing.producer(op, queue=queue, scope=scope) as sending,
        quotas.counted() as taken,  # given back if the write is refused or fails
    ):
        if new.unique_key is not None:
            with _transaction(client, execution, in_caller_transaction):
                at = now(client)
                if (
                    earlier := uniqueness.held_one(client.using, op, flow, scope, new, at)
                ) is not None:
                    sending.sent(earlier.pk, earlier.trace_context)
                    return annotate(client, earlier, at)
                taken += capacity.admit(client, scope, 1, priority, at)
                return write()
        try:
            taken += capacity.admit(client, scope, 1, priority, now(client))
        except CapacityReached:
            # A repeat of an earlier submission adds nothing: it is answered, not refused.
            earlier = None
            if submission.idempotency_key is not None:
                earlier = _existing(client, op, scope, new.key, new.proposal)
            if earlier is None:
                raise
            sending.sent(earlier.pk, earlier.trace_context)
            return annotate(client, earlier)
        if in_caller_transaction:
            if execution is not None:
                check_execution(execution)
            return write()
        if execution is not None:
            with bounded_atomic(client.using, execution):
                return write()
        # The insert commits on its own and the read of a taken key changes nothing, so
        # there is no transaction to open: it would only add BEGIN and COMMIT round trips.
        return write()


def defer_many(
    client: Client,
    operation: str,
    submissions: Iterable[Submission],
    *,
    queue: str | None = None,
    priority: int = 0,
    run_after: datetime | None = None,
    in_caller_transaction: bool = False,
) -> list[Job]:
    """Submit pending work for each submission; return their jobs in the same order.

    Each follows ``defer``'s rules: an identical earlier submission returns its job
    unchanged (a key given twice with the same proposal returns one job twice). One proposal
    that differs from its key's earlier one refuses the whole call with
    ``IdempotencyConflict`` and writes nothing. The rows go in a few multi-row statements
    in one transaction (a savepoint in the caller's, with ``in_caller_transaction=True``).
    """
    op = validation.operation(operation)
    flow = _flow(op)
    queue, priority = _schedule(queue, priority, run_after)
    items = validation.listed(submissions, "submissions")
    news = _distinct_jobs(client, items, flow)
    if in_caller_transaction:
        require_caller_transaction(client, "defer_many")
    if not items:
        return []
    if not in_caller_transaction:
        refuse_caller_transaction(client.using)  # before the quotas' counts: no SQL at all
    at = now(client)

    def write() -> list[Job]:
        at = now(client)
        held = uniqueness.held_many(client.using, op, flow, news, at) if flow.unique else {}
        for scope, group in _by_scope(news).items():
            group = [new for new in group if (scope, new.key) not in held]
            if not group:
                continue
            fields = _pending(op, scope, at, queue, priority, run_after, sending.carrier)
            found = submit(client.using, fields, group, notify=queue)
            held.update(((scope, new.key), pair) for new, pair in zip(group, found, strict=True))
        jobs = []
        for index, (scope, new) in enumerate(news):
            job, built = held[scope, new.key]
            try:
                if new.unique_key is not None and job is not None and job.pk != new.pk:
                    job = uniqueness.judge(
                        op, scope, new.unique_key, new.proposal, new.proposal_hash, job
                    )
                jobs.append(_owned(client, _held(op, scope, new, job), built, at))
            except JobError as exc:
                raise _of_row(exc, index, new.key) from None
        sending.sent_many(job.trace_context for job in jobs)
        return jobs

    # One producer span for the call: its jobs share its context.
    span_scope = ",".join(sorted({scope for scope, _ in news})) if tracing.installed() else ""
    with (
        tracing.producer(op, queue=queue, scope=span_scope, count=len(items)) as sending,
        quotas.counted() as taken,  # given back if the write is refused or fails
    ):
        for scope, group in _by_scope(news).items():
            taken += capacity.admit(client, scope, len(group), priority, at)
        if in_caller_transaction:
            with transaction.atomic(using=client.using):  # a savepoint: a refusal undoes it
                return write()
        with bounded_atomic(client.using):
            return write()


# -- what a submission becomes ---------------------------------------------------------------


def _flow(operation: str) -> Flow:
    """Return ``operation``'s flow control; refuse one whose declaration has a problem."""
    flow = flows.of_operation(operation)
    flow.require(operation)
    return flow


def _new_job(
    client: Client,
    submission: Submission | None,
    job_id: Any = None,
    scopes: dict | None = None,
    *,
    flow: Flow = NO_FLOW,
    by_input: bool = False,
) -> tuple[str, NewJob]:
    """Return the resolved scope and the new job of ``submission`` (validated).

    ``scopes`` remembers scopes already resolved, for a call of many submissions. ``flow``'s
    key functions are called with the input; an operation unique for a window gets its unique
    key (the idempotency key given, else, or with ``by_input``, the input's hash) and its own
    id as idempotency key.
    """
    if submission is None:
        submission = Submission(scope=None, idempotency_key=None, proposal=EMPTY_PROPOSAL)
    if not isinstance(submission, Submission):
        raise InputInvalid("Pass a Submission (Submission.of(scope, key, payload)).")
    given = submission.scope
    if scopes is None or not (given is None or isinstance(given, str)):
        scope = resolve_scope(client, given)
    elif (scope := scopes.get(given)) is None:
        scope = scopes[given] = resolve_scope(client, given)
    pk = uuid.uuid4() if job_id is None else validation.job_id(job_id)
    key = submission.idempotency_key
    key = str(pk) if key is None else validation.idempotency_key(key)
    proposal = validation.json_text(submission.proposal, "proposal")
    digest = proposal_sha256(proposal)
    if flow is NO_FLOW:
        return scope, NewJob(pk, key, proposal, digest)
    rate_key, concurrency_key = (
        flow.keys(validation.loads_strict(proposal)) if flow.keyed else ("", "")
    )
    unique_key = None
    if flow.unique:
        given = submission.idempotency_key is not None and not by_input
        unique_key, key = (key if given else digest), str(pk)
    return scope, NewJob(pk, key, proposal, digest, rate_key, concurrency_key, unique_key)


def _distinct_jobs(client: Client, items: list, flow: Flow = NO_FLOW) -> list[tuple[str, NewJob]]:
    """Return each submission's scope and new job, a repeated key sharing its first job.

    For an operation unique for a window the key is the unique key.
    """
    if len(items) > MAX_SUBMISSIONS:
        raise InputInvalid(
            f"{len(items)} submissions in one call; the most is {MAX_SUBMISSIONS}. Split them."
        )
    news: list[tuple[str, NewJob]] = []
    first: dict[tuple[str, str], tuple[int, NewJob]] = {}
    scopes: dict[str | None, str] = {}
    for index, submission in enumerate(items):
        try:
            scope, new = _new_job(client, submission, scopes=scopes, flow=flow)
        except JobError as exc:
            raise _of_row(exc, index, getattr(submission, "idempotency_key", None)) from None
        key = new.key if new.unique_key is None else new.unique_key
        earlier = first.setdefault((scope, key), (index, new))
        if earlier[1].proposal != new.proposal:
            raise IdempotencyConflict(
                f"Submissions {earlier[0]} and {index} of this call share the key {key!r} "
                f"(scope {scope!r}) with different proposals; nothing was written. Give "
                f"different input different idempotency keys."
            )
        news.append((scope, earlier[1]))
    return news


def _pending(
    operation: str,
    scope: str,
    at: datetime,
    queue: str,
    priority: int,
    run_after: datetime | None,
    trace_context: str | None,
) -> dict[str, Any]:
    """Return the columns a call's pending rows share (one producer span's context too)."""
    return {
        "operation": operation,
        "scope": scope,
        "status": JobStatus.PENDING.value,
        "created_at": at,
        "run_after": at if run_after is None else run_after,
        "queue": queue,
        "priority": priority,
        "trace_context": trace_context,
    }


def _schedule(queue: Any, priority: Any, run_after: Any) -> tuple[str, int]:
    """Validate the scheduling options; return the queue and priority."""
    queue = "default" if queue is None else validation.name(queue, "queue")
    priority = validation.priority(priority)
    if run_after is not None:
        validation.aware(run_after, "run_after")
    return queue, priority


def _by_scope(news: list[tuple[str, NewJob]]) -> dict[str, list[NewJob]]:
    """Group the distinct new jobs by scope, in order (one submit statement per scope)."""
    groups: dict[str, dict[str, NewJob]] = {}
    for scope, new in news:
        groups.setdefault(scope, {}).setdefault(new.key, new)
    return {scope: list(group.values()) for scope, group in groups.items()}


def _transaction(
    client: Client, execution: Execution | None, in_caller_transaction: bool
) -> AbstractContextManager:
    """Return the transaction a unique submission runs in: the caller's, or its own."""
    if in_caller_transaction:
        if execution is not None:
            check_execution(execution)
        return nullcontext()  # nothing is written before the last statement: no savepoint
    return bounded_atomic(client.using, execution)


# -- judging the rows that hold the keys -----------------------------------------------------


def _existing(client: Client, operation: str, scope: str, key: str, proposal: str) -> Job | None:
    """Return the earlier identical submission, refuse a different one, or None."""
    # No ORDER BY (``first()`` would add one): the unique key holds at most one row.
    rows = Job.objects.using(client.using).filter(
        scope=scope, operation=operation, idempotency_key=key
    )
    row = next(iter(rows.order_by()[:1]), None)
    if row is not None and (
        row.proposal_hash != proposal_sha256(proposal) or row.proposal != proposal
    ):
        raise _conflict(operation, scope, key, row)
    return row


def _conflict(operation: str, scope: str, key: str, row: Job) -> IdempotencyConflict:
    return IdempotencyConflict(
        f"{operation!r} with key {key!r} in scope {scope!r} was already submitted with a "
        f"different proposal (job {row.pk}); use a new idempotency key for new input."
    )


def _held(operation: str, scope: str, new: NewJob, held: Job | None) -> Job:
    """Return the job holding ``new``'s key when its proposal is the same; refuse otherwise."""
    if held is None:  # the insert skipped the row, yet no job holds its key: its id is taken
        raise InputInvalid(f"Job id {new.pk} is already in use; omit job_id.")
    if held.proposal_hash != new.proposal_hash or held.proposal != new.proposal:
        raise _conflict(operation, scope, new.key, held)
    return held


def _owned(client: Client, job: Job, built: bool, at: datetime) -> Job:
    """Set ``job.ownership``; a pending job built from what was just inserted is unclaimed."""
    if built and job.status == JobStatus.PENDING:
        # Authentic by construction: validated JSON, its own SHA-256, no owner, no lease.
        job.ownership = Ownership.UNCLAIMED
        return job
    return annotate(client, job, at)


def _of_row(exc: JobError, index: int, key: Any) -> JobError:
    """Return ``exc`` with a message naming the submission it is about."""
    where = f"Submission {index}" + (f" (key {key!r})" if key is not None else "")
    return type(exc)(f"{where}: {exc.message} Nothing from this call was written.", code=exc.code)
