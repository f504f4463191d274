"""Workflows: graphs of jobs submitted together, and the fenced hand-offs between them.

* :func:`submit` writes a checked graph (``rules/graph.py``) in one transaction: the workflow
  row, one job per node (``pending`` without parents, ``waiting`` with), one edge per parent.
  The same key and graph return the same workflow; the same key and another graph is an
  ``IdempotencyConflict``.
* :func:`hand_off` runs in the transaction that ended some jobs (``ending.end_rows``, a
  cancellation): a completed parent lowers its waiting children's count of unfinished
  parents, and the one that brings it to zero releases the child (``waiting`` → ``pending``).
  The ending was fenced and the children are locked, so a child is released exactly once:
  a stale worker's completion is refused before it reaches here, and of two parents ending at
  once the second waits for the first's lock and sees its count. A parent that failed for good
  or was cancelled cancels its waiting children (``on_upstream_failure="cancel"``) and theirs,
  or counts as ended for them (``"run"``).
* :func:`cancel` and :func:`retry` act on every job of a workflow at once. They lock its jobs
  without waiting for any (a completion holds a parent while it locks the children) and try
  again shortly when one is held, so they never deadlock with a hand-off.
* :func:`retrying` checks a single job's retry request: not before its parents completed.

Releasing costs a few statements per transaction, whatever the number of children.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from django.db import DatabaseError, IntegrityError, connections, transaction
from django.db.models import F

from ..database.dbvendor import is_lock_timeout, notify_work
from ..database.transactions import bounded_atomic, refuse_caller_transaction
from ..models import Job, JobDependency, Workflow
from ..observability import tracing
from ..rules import flow as flows
from ..rules import quotas, validation
from ..rules.errors import DeadlineExceeded, IdempotencyConflict, InputInvalid, NotReclaimable
from ..rules.graph import Graph, retry_to_come
from ..rules.validation import loads_strict
from ..rules.vocabulary import JobStatus, Ownership, UpstreamFailure, assess_ownership
from . import capacity
from . import client as client_room
from .client import Client, require_caller_transaction, resolve_scope
from .sql.rows import lock_by_ids, update_by_ids

T = TypeVar("T")
CANCELLED_WITH_WORKFLOW = "Cancelled with its workflow{by}."
# Ended for good: what a waiting child hears from a parent that will not complete.
_NOT_COMPLETED = (JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.ORPHANED)


class WorkflowNotFound(InputInvalid):
    """No workflow has this id in the caller's scope. Still ``E_JOB_INPUT_INVALID``; the subclass
    lets an HTTP API answer 404 and a CLI say "no such workflow"."""


@dataclass(frozen=True)
class Submitted:
    """What :func:`submit` wrote, or found: the workflow, its jobs by node index, and whether
    this call made it (False for a repeat of the same key and graph)."""

    workflow: Workflow
    jobs: list[Job]
    created: bool


@dataclass(frozen=True)
class WorkflowAnswer:
    """What a workflow cancel or retry did: the jobs it changed, by what happened to them."""

    workflow: Workflow
    changed: dict[str, list[Any]]

    @property
    def count(self) -> int:
        return sum(len(ids) for ids in self.changed.values())


# -- submitting -----------------------------------------------------------------------------------


def submit(
    client: Client,
    graph: Graph,
    *,
    scope: str | None,
    idempotency_key: str | None,
    in_caller_transaction: bool,
) -> Submitted:
    """Write ``graph`` as a new workflow, all or nothing, or return the identical earlier one."""
    scope = resolve_scope(client, scope)
    key = None if idempotency_key is None else validation.idempotency_key(idempotency_key)
    if in_caller_transaction:
        require_caller_transaction(client, "submit_workflow")
    else:
        refuse_caller_transaction(client.using)
    text = graph.text()
    digest = graph.sha256()
    keys = [node_keys(node.operation, node.proposal) for node in graph.nodes]
    if key is not None and (earlier := _existing(client, graph, scope, key, digest)) is not None:
        return earlier
    workflow_id = uuid.uuid4()
    top = max(node.priority for node in graph.nodes)
    queues = sorted({node.queue for node in graph.nodes if not node.parents})
    with (
        tracing.producer(
            graph.nodes[0].operation, queue=queues[0], scope=scope, count=len(graph.nodes)
        ) as sending,
        quotas.counted() as taken,
    ):
        at = client_room.now(client)
        taken += capacity.admit(client, scope, len(graph.nodes), top, at)
        block = (
            transaction.atomic(using=client.using)
            if in_caller_transaction
            else bounded_atomic(client.using)
        )
        with block:
            workflow = Workflow(
                id=workflow_id,
                name=graph.name,
                scope=scope,
                idempotency_key=key or str(workflow_id),
                graph=text,
                graph_hash=digest,
                job_count=len(graph.nodes),
                created_at=at,
            )
            try:
                with transaction.atomic(using=client.using):  # a savepoint: a taken key undoes it
                    workflow.save(using=client.using, force_insert=True)
            except IntegrityError:
                earlier = _existing(client, graph, scope, workflow.idempotency_key, digest)
                if earlier is None:
                    raise
                return earlier
            jobs = [
                _job(workflow, node, at, sending.carrier, *node_keys)
                for node, node_keys in zip(graph.nodes, keys, strict=True)
            ]
            Job.objects.using(client.using).bulk_create(jobs, batch_size=500)
            edges = [
                JobDependency(workflow=workflow, parent_id=jobs[parent].pk, child_id=job.pk)
                for node, job in zip(graph.nodes, jobs, strict=True)
                for parent in node.parents
            ]
            JobDependency.objects.using(client.using).bulk_create(edges, batch_size=500)
            for queue in queues:
                notify_work(client.using, queue)
        sending.sent_many(job.trace_context for job in jobs)
    for job in jobs:
        client_room.annotate(client, job, at)
    return Submitted(workflow, jobs, True)


def node_keys(operation: str, proposal: str) -> tuple[str, str]:
    """Return a node's rate and concurrency keys; refuse an operation declared badly.

    A node is never coalesced by a window (``unique_while``/``unique_for``): it belongs to its
    workflow, whose idempotency key coalesces the whole graph. Its ``unique_key`` stays NULL.
    """
    flow = flows.of_operation(operation)
    flow.require(operation)
    return flow.keys(loads_strict(proposal)) if flow.keyed else ("", "")


def _job(
    workflow: Workflow,
    node: Any,
    at: datetime,
    carrier: str | None,
    rate_key: str = "",
    concurrency_key: str = "",
) -> Job:
    return Job(
        id=uuid.uuid4(),
        operation=node.operation,
        status=JobStatus.WAITING if node.parents else JobStatus.PENDING,
        scope=workflow.scope,
        idempotency_key=f"workflow:{workflow.pk}:{node.index}",
        proposal=node.proposal,
        proposal_hash=node.proposal_hash,
        proposal_checked=True,
        created_at=at,
        run_after=at,
        queue=node.queue,
        priority=node.priority,
        trace_context=carrier,
        workflow_id=workflow.pk,
        node=node.name,
        waiting_on=len(node.parents),
        on_upstream_failure=node.on_upstream_failure,
        released_at=None if node.parents else at,
        rate_key=rate_key,
        concurrency_key=concurrency_key,
    )


def _existing(client: Client, graph: Graph, scope: str, key: str, digest: str) -> Submitted | None:
    """Return the workflow submitted earlier with this key, refuse a different graph, or None."""
    found = Workflow.objects.using(client.using).filter(
        scope=scope, name=graph.name, idempotency_key=key
    )
    workflow = next(iter(found.order_by()[:1]), None)
    if workflow is None:
        return None
    if workflow.graph_hash != digest:
        raise IdempotencyConflict(
            f"Workflow {graph.name!r} with key {key!r} in scope {scope!r} was already submitted "
            f"with a different graph (workflow {workflow.pk}); use a new idempotency key for a "
            f"new graph."
        )
    return Submitted(workflow, jobs_of(client, workflow.pk), False)


# -- reading --------------------------------------------------------------------------------------


def get(client: Client, workflow_id: Any) -> Workflow | None:
    """Return the workflow in this client's scope, or None."""
    validation.job_id(workflow_id)
    found = Workflow.objects.using(client.using).filter(pk=workflow_id)
    if client.scope is not None:
        found = found.filter(scope=client.scope)
    return found.first()


def jobs_of(client: Client, workflow_id: Any) -> list[Job]:
    """Return the jobs of a workflow in the order they were declared."""
    found = Job.objects.using(client.using).filter(workflow_id=workflow_id)
    if client.scope is not None:
        found = found.filter(scope=client.scope)
    rows = list(found)
    rows.sort(key=lambda job: int(job.idempotency_key.rsplit(":", 1)[1]))
    now = client_room.now(client)
    for row in rows:
        client_room.annotate(client, row, now)
    return rows


def edges_of(client: Client, workflow_id: Any) -> list[tuple[Any, Any]]:
    """Return the (parent id, child id) pairs of a workflow."""
    found = JobDependency.objects.using(client.using).filter(workflow_id=workflow_id)
    if client.scope is not None:
        found = found.filter(workflow__scope=client.scope)
    return list(found.order_by("id").values_list("parent_id", "child_id"))


def upstream(client: Client, job_id: Any) -> dict[str, Any]:
    """Return the results of a job's parents, keyed by each parent's name (or id).

    A scoped client reads only its scope's jobs: another scope's job has no parents here.
    """
    parents = (
        Job.objects.using(client.using)
        .filter(child_links__child_id=job_id)
        .only("id", "node", "result", "status")
        .order_by()
    )
    if client.scope is not None:
        parents = parents.filter(scope=client.scope)
    found: dict[str, Any] = {}
    for parent in parents:
        value = None
        if parent.status == JobStatus.COMPLETE and parent.result is not None:
            value = loads_strict(parent.result)
        found[parent.node or str(parent.pk)] = value
    return found


# -- hand-offs ------------------------------------------------------------------------------------


def hand_off(
    client: Client, ended: Iterable[Job], now: datetime, *, retrying: Iterable = ()
) -> None:
    """Tell the waiting children of jobs that ended in this transaction; cascade cancellations.

    ``ended`` are rows whose new status this transaction wrote; those in ``retrying`` (failed
    with an automatic retry to come) have not ended for good and change nothing.
    """
    again = set(retrying)
    finished: dict[Any, Job] = {
        row.pk: row
        for row in ended
        if row.workflow_id is not None
        and row.pk not in again
        and (row.status == JobStatus.COMPLETE or row.status in _NOT_COMPLETED)
    }
    while finished:
        finished = _tell_children(client, finished, now)


# What the hand-off reads of a waiting child (and of a cancelled one, as the next level's parent).
_CHILD_FIELDS = (
    "id",
    "status",
    "waiting_on",
    "attempts",
    "queue",
    "on_upstream_failure",
    "node",
    "operation",
)


def _tell_children(client: Client, parents: dict[Any, Job], now: datetime) -> dict[Any, Job]:
    """Lower the counts of ``parents``' waiting children and release or cancel them.

    Return the children this cancelled: their own children hear of it next.
    """
    # One locked read of the waiting children joined to their edges from these parents: a
    # child appears once per such edge. Locked in id order, so two hand-offs never deadlock.
    found = (
        Job.objects.using(client.using)
        .select_for_update()
        .filter(parent_links__parent_id__in=list(parents), status=JobStatus.WAITING)
        .only(*_CHILD_FIELDS)
        .annotate(edge_parent=F("parent_links__parent_id"))
        .order_by("pk")
    )
    children: dict[Any, Job] = {}
    edges: list[tuple[Any, Any]] = []
    for row in found:
        children.setdefault(row.pk, row)
        edges.append((row.edge_parent, row.pk))
    if not edges:
        return {}
    lowered: Counter = Counter()
    cancelled: dict[Any, Job] = {}
    for parent_id, child_id in edges:
        child = children.get(child_id)
        if child is None or child_id in cancelled:
            continue
        parent = parents[parent_id]
        if parent.status == JobStatus.COMPLETE or child.on_upstream_failure == UpstreamFailure.RUN:
            lowered[child_id] += 1
        else:
            child.status, child.completed_at = JobStatus.CANCELLED, now
            child.error = _upstream_reason(parent)
            cancelled[child_id] = child
    jobs = Job.objects.using(client.using)
    for child in cancelled.values():
        lowered.pop(child.pk, None)
        jobs.filter(pk=child.pk, status=JobStatus.WAITING).update(
            status=JobStatus.CANCELLED, completed_at=now, error=child.error
        )
    released = [pk for pk, count in lowered.items() if children[pk].waiting_on <= count]
    by_count: dict[int, list[Any]] = {}
    for pk, count in lowered.items():
        if children[pk].waiting_on > count:
            by_count.setdefault(count, []).append(pk)
    for count, pks in by_count.items():
        waiting = jobs.filter(pk__in=pks, status=JobStatus.WAITING)
        update_by_ids(waiting, waiting_on=F("waiting_on") - count)
    release(client, [children[pk] for pk in released], now)
    return cancelled


def release(client: Client, rows: Sequence[Job], now: datetime) -> None:
    """Make locked waiting ``rows`` claimable now: pending, or due again if they ran before."""
    if not rows:
        return
    jobs = Job.objects.using(client.using)
    fresh = [row.pk for row in rows if row.attempts == 0]
    rerun = [row.pk for row in rows if row.attempts > 0]
    common = {"waiting_on": 0, "released_at": now, "run_after": now}
    if fresh:
        waiting = jobs.filter(pk__in=fresh, status=JobStatus.WAITING)
        update_by_ids(waiting, status=JobStatus.PENDING, **common)
    if rerun:  # a retried workflow's job that ran before: claimed like a retry request
        waiting = jobs.filter(pk__in=rerun, status=JobStatus.WAITING)
        update_by_ids(
            waiting, status=JobStatus.SLEEPING, retry_requested_at=now, sleep_until=None, **common
        )
    for queue in sorted({row.queue for row in rows}):
        notify_work(client.using, queue)


def retrying(client: Client, row: Job) -> None:
    """Prepare a workflow job's retry request, in the transaction that records it on ``row``.

    ``row`` is locked, with no retry to come before: ended, or running under an expired lease
    (whose children still wait for it, counting nothing to undo). Refuses, with
    ``NotReclaimable``, a job whose parents did not all complete: it would run before them
    (retrying the workflow runs them in order). A parent that ended for good counts as done
    for a child that runs after a failure (``on_upstream_failure="run"``).

    When ``row`` itself ended for good, its waiting children counted it as ended (they run
    after a failure); they wait for its new run now, or its completion would release them
    before their other parents completed.
    """
    if row.workflow_id is None:
        return
    jobs = Job.objects.using(client.using)
    for parent in jobs.filter(child_links__child_id=row.pk).order_by("pk"):
        ended_for_good = parent.status in _NOT_COMPLETED and parent.retry_requested_at is None
        if parent.status == JobStatus.COMPLETE or (
            ended_for_good and row.on_upstream_failure == UpstreamFailure.RUN
        ):
            continue
        name = f"{parent.node!r} " if parent.node else ""
        raise NotReclaimable(
            f"Job {row.pk} cannot run again yet: its upstream job {name}({parent.pk}) is "
            f"{parent.status}. Complete it first, or retry the workflow, which runs them in "
            f"order."
        )
    if row.status not in _NOT_COMPLETED:
        return
    children = list(
        JobDependency.objects.using(client.using)
        .filter(parent_id=row.pk)
        .values_list("child_id", flat=True)
    )
    waiting = [
        child.pk
        for child in lock_by_ids(
            jobs.filter(pk__in=sorted(children, key=str), status=JobStatus.WAITING).order_by("pk")
        )
    ]
    if waiting:
        waiting_rows = jobs.filter(pk__in=waiting, status=JobStatus.WAITING)
        update_by_ids(waiting_rows, waiting_on=F("waiting_on") + 1)


def _upstream_reason(parent: Job) -> str:
    what = "failed" if parent.status == JobStatus.FAILED else f"was {parent.status}"
    name = f"{parent.node!r} " if parent.node else ""
    return f"Cancelled because its upstream job {name}({parent.pk}, {parent.operation}) {what}."


# -- cancelling and retrying a whole workflow -----------------------------------------------------


def cancel(client: Client, workflow_id: Any, *, by: str = "") -> WorkflowAnswer:
    """Cancel every job of the workflow not yet ended.

    Jobs nobody holds (pending, waiting, sleeping) are cancelled at once; running ones get a
    cancellation request their owners carry out. Ended jobs keep their outcome.
    """
    return _without_waiting(client, lambda: _cancel(client, workflow_id, by))


def _cancel(client: Client, workflow_id: Any, by: str) -> WorkflowAnswer:
    now = client_room.now(client)
    workflow = _locked_workflow(client, workflow_id)
    rows = _locked_jobs(client, workflow.pk)
    now_cancelled = [r for r in rows if r.status in _UNHELD or retry_to_come(r)]
    requested = [
        r for r in rows if r.status == JobStatus.RUNNING and r.cancellation_requested_at is None
    ]
    reason = CANCELLED_WITH_WORKFLOW.format(by=f" by {by}" if by else "")
    jobs = Job.objects.using(client.using)
    for row in now_cancelled:
        jobs.filter(pk=row.pk, status=row.status).update(
            status=JobStatus.CANCELLED,
            completed_at=now,
            cancellation_requested_at=now,
            error=reason,
            owner_id=None,
            lease_expires_at=None,
            retry_requested_at=None,  # a sleeping job must not wake up
        )
        row.status = JobStatus.CANCELLED
    if requested:
        running = jobs.filter(pk__in=[r.pk for r in requested], status=JobStatus.RUNNING)
        update_by_ids(running, cancellation_requested_at=now)
    Workflow.objects.using(client.using).filter(pk=workflow.pk).update(
        cancel_requested_at=now, requested_by=by
    )
    workflow.cancel_requested_at, workflow.requested_by = now, by
    return WorkflowAnswer(
        workflow,
        {
            "cancelled": [r.pk for r in now_cancelled],
            "requested": [r.pk for r in requested],
        },
    )


_UNHELD = (JobStatus.PENDING, JobStatus.WAITING, JobStatus.SLEEPING)


def _expired(row: Job, now: datetime) -> bool:
    """True for a job whose owner's lease ran out with nobody to resume it yet."""
    return assess_ownership(row, now) == Ownership.EXPIRED and row.retry_requested_at is None


def retry(client: Client, workflow_id: Any, *, by: str = "") -> WorkflowAnswer:
    """Run again what did not complete: failed and cancelled jobs, never a completed one.

    A job whose parents all completed is due at once (a retry request when it ran before);
    one with a parent to be run again waits for it, as at submit.
    """
    return _without_waiting(client, lambda: _retry(client, workflow_id, by))


def _retry(client: Client, workflow_id: Any, by: str) -> WorkflowAnswer:
    now = client_room.now(client)
    workflow = _locked_workflow(client, workflow_id)
    rows = {row.pk: row for row in _locked_jobs(client, workflow.pk)}
    again = {
        pk for pk, row in rows.items() if row.status in (JobStatus.FAILED, JobStatus.CANCELLED)
    }
    unfinished: Counter = Counter()
    for parent, child in edges_of(client, workflow.pk):
        if rows[parent].status != JobStatus.COMPLETE:
            unfinished[child] += 1
    jobs = Job.objects.using(client.using)
    changed: dict[str, list[Any]] = {"retried": [], "pending": [], "waiting": []}
    for pk, row in sorted(rows.items(), key=lambda item: str(item[0])):
        if _expired(row, now):  # its owner is gone: a new attempt, like a retry request
            jobs.filter(pk=pk, status=JobStatus.RUNNING).update(
                retry_requested_at=now, run_after=now
            )
            changed["retried"].append(pk)
            notify_work(client.using, row.queue)
    for pk in sorted(again, key=str):
        row = rows[pk]
        waiting = unfinished[pk]
        reset: dict[str, Any] = {
            "completed_at": None,
            "cancellation_requested_at": None,
            "waiting_on": waiting,
        }
        if waiting:
            reset.update(
                status=JobStatus.WAITING,
                error=None,
                released_at=None,
                owner_id=None,
                lease_expires_at=None,
                retry_requested_at=None,
            )
            changed["waiting"].append(pk)
        elif row.attempts == 0:
            reset.update(status=JobStatus.PENDING, error=None, released_at=now, run_after=now)
            changed["pending"].append(pk)
        else:
            reset.update(retry_requested_at=now, run_after=now)
            changed["retried"].append(pk)
        jobs.filter(pk=pk, status=row.status).update(**reset)
        notify_work(client.using, row.queue)
    # A waiting child that runs after a failure ("run") counted that parent as done; the
    # parent runs again now, so its completion must find it still counted.
    for pk, row in rows.items():
        if row.status == JobStatus.WAITING and row.waiting_on != unfinished[pk]:
            jobs.filter(pk=pk, status=JobStatus.WAITING).update(waiting_on=unfinished[pk])
    Workflow.objects.using(client.using).filter(pk=workflow.pk).update(
        retry_requested_at=now, requested_by=by
    )
    workflow.retry_requested_at, workflow.requested_by = now, by
    return WorkflowAnswer(workflow, changed)


# How long cancel and retry try again while workers hold some of a workflow's jobs.
LOCKED_JOBS_SECONDS = 10.0


def _without_waiting(client: Client, work: Callable[[], T]) -> T:
    """Return ``work()`` run in a transaction of its own, tried again while rows are held.

    ``work`` locks every job of a workflow (in id order) without waiting for one. A worker's
    completion locks its job first and then that job's children, whose ids may be smaller:
    had this transaction waited for the parent while holding such a child, each would wait
    for the other (a deadlock). It rolls back instead, having written nothing, and tries again
    a moment later, until ``LOCKED_JOBS_SECONDS`` have passed (``DeadlineExceeded``).
    """
    deadline = time.monotonic() + LOCKED_JOBS_SECONDS
    pause = 0.005
    while True:
        try:
            with bounded_atomic(client.using):
                return work()
        except DatabaseError as exc:
            if not is_lock_timeout(connections[client.using], exc):
                raise
            if time.monotonic() >= deadline:
                raise DeadlineExceeded(
                    f"Workers kept some of the workflow's jobs locked for "
                    f"{LOCKED_JOBS_SECONDS:g} s; nothing was written. Try again."
                ) from exc
        time.sleep(pause * (1 + random.random()))
        pause = min(pause * 2, 0.1)


def _locked_workflow(client: Client, workflow_id: Any) -> Workflow:
    validation.job_id(workflow_id)
    found = Workflow.objects.using(client.using).select_for_update().filter(pk=workflow_id)
    if client.scope is not None:
        found = found.filter(scope=client.scope)
    workflow = found.first()
    if workflow is None:
        raise WorkflowNotFound(f"There is no workflow {workflow_id} in this store's scope.")
    return workflow


def _locked_jobs(client: Client, workflow_id: Any) -> list[Job]:
    """Lock every job of the workflow without waiting (see :func:`_without_waiting`)."""
    return list(
        Job.objects.using(client.using)
        .select_for_update(nowait=True)
        .filter(workflow_id=workflow_id)
        .order_by("pk")
    )
