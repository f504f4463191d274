"""Workflows: jobs that wait for other jobs, submitted together (docs/workflows.md).

::

    from django_durable_jobs import Workflow

    wf = Workflow("imports.nightly", idempotency_key="nightly-2026-12-01")
    fetch = wf.job("imports.fetch", {"day": "2026-12-01"})
    parts = [wf.job("imports.parse", {"part": i}, after=[fetch]) for i in range(10)]
    wf.job("imports.merge", {}, after=parts)
    handle = wf.submit()

A job with parents waits until every parent completed; the completion of its last parent
releases it in the transaction that records that completion. ``chain``, ``group`` and
``chord`` build the same graphs the way Celery's canvas spells them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connections

from .models import Job
from .models import Workflow as WorkflowRow
from .rules import registry
from .rules.conf import jobs_settings
from .rules.errors import InputInvalid
from .rules.graph import Graph, NodeDeclaration, check_graph
from .rules.vocabulary import UpstreamFailure
from .store import DurableJobStore

__all__ = ["Node", "Signature", "Workflow", "WorkflowHandle", "chain", "chord", "group"]


@dataclass(frozen=True, eq=False)
class Node:
    """A job of a :class:`Workflow` before it is submitted: pass it in another job's ``after``."""

    workflow: Workflow
    index: int
    operation: str
    name: str | None

    def __repr__(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        return f"<Node #{self.index}{label} {self.operation} of {self.workflow.name!r}>"


class Workflow:
    """A graph of jobs, submitted all or nothing by :meth:`submit`.

    ``Workflow(name, *, scope=None, idempotency_key=None)``: submitting the same key and graph
    again returns the same workflow; the same key with another graph is an
    ``IdempotencyConflict``.
    """

    def __init__(
        self, name: str, *, scope: str | None = None, idempotency_key: str | None = None
    ) -> None:
        self.name = name
        self.scope = scope
        self.idempotency_key = idempotency_key
        self._declared: list[NodeDeclaration] = []
        self.nodes: list[Node] = []

    def __repr__(self) -> str:
        return f"<Workflow {self.name!r}: {len(self.nodes)} jobs>"

    def job(
        self,
        operation: str,
        payload: Any = None,
        *,
        after: Iterable[Node | str] | Node | str = (),
        name: str | None = None,
        queue: str | None = None,
        priority: int = 0,
        on_upstream_failure: str = UpstreamFailure.CANCEL.value,
    ) -> Node:
        """Add a job that starts once every job in ``after`` completed; return its node.

        ``after`` holds nodes of this workflow, or names of its jobs (a name may point at a
        job added later). ``on_upstream_failure`` says what a parent that fails for good (or
        is cancelled) does to this job: ``"cancel"`` it (the default) or ``"run"`` it anyway.
        """
        if isinstance(after, (Node, str)):
            after = [after]
        refs: list[int | str] = []
        for parent in after:
            if isinstance(parent, Node):
                if parent.workflow is not self:
                    raise InputInvalid(
                        f"{parent!r} belongs to workflow {parent.workflow.name!r}, not "
                        f"{self.name!r}; parents must belong to the same workflow."
                    )
                refs.append(parent.index)
            else:
                refs.append(parent)
        node = Node(self, len(self.nodes), operation, name)
        self._declared.append(
            NodeDeclaration(
                operation=operation,
                payload={} if payload is None else payload,
                after=tuple(refs),
                name=name,
                queue=queue,
                priority=priority,
                on_upstream_failure=on_upstream_failure,
            )
        )
        self.nodes.append(node)
        return node

    def add(self, signature: Signature | Canvas, after: Sequence[Node] = ()) -> list[Node]:
        """Add a canvas (``chain``, ``group``, ``chord`` or one signature) after ``after``;
        return its last nodes (what a job added after it should wait for)."""
        if isinstance(signature, Signature):
            return [signature.add_to(self, list(after))]
        return signature.add_to(self, list(after))

    def graph(self) -> Graph:
        """Return the checked graph :meth:`submit` writes, or refuse it as ``submit`` does.

        For a store of your own: ``store.workflows.submit(wf.graph(), idempotency_key=...)``.
        """
        return check_graph(
            self.name,
            self._declared,
            max_jobs=jobs_settings.WORKFLOW_MAX_JOBS,
            registered=lambda op: registry.get(op) is not None,
        )

    def submit(self, *, using: str | None = None) -> WorkflowHandle:
        """Write the workflow, all or nothing; return its handle.

        Refuses, writing nothing, a graph with a cycle, an unregistered operation, a parent
        outside the workflow or more jobs than ``DURABLE_JOBS['WORKFLOW_MAX_JOBS']``.
        Inside ``transaction.atomic()`` it joins your transaction: the workflow exists only if
        you commit.
        """
        graph = self.graph()
        alias = jobs_settings.database(using)
        store = DurableJobStore(using=alias)
        submitted = store.workflows.submit(
            graph,
            scope=self.scope,
            idempotency_key=self.idempotency_key,
            in_caller_transaction=connections[alias].in_atomic_block,
        )
        return WorkflowHandle(submitted.workflow, submitted.jobs, submitted.created, alias)


@dataclass
class WorkflowHandle:
    """A submitted workflow: its row, its jobs in declaration order, and whether this call
    created it (False when the same key and graph were submitted before)."""

    workflow: WorkflowRow
    jobs: list[Job]
    created: bool = True
    using: str = "default"
    _by_node: dict[str, Job] = field(default_factory=dict, repr=False)

    @property
    def id(self) -> Any:
        return self.workflow.pk

    def job(self, node: Node | str | int) -> Job:
        """Return the job of a node (or of a job name, or of a declaration index)."""
        if isinstance(node, Node):
            return self.jobs[node.index]
        if isinstance(node, int):
            return self.jobs[node]
        for job in self.jobs:
            if job.node == node:
                return job
        raise KeyError(node)

    @property
    def final_job(self) -> Job:
        """Return the job nothing waits for, declared last: the workflow's result."""
        edges = DurableJobStore(using=self.using).workflows.edges(self.id)
        parents = {parent for parent, _ in edges}
        return [job for job in self.jobs if job.pk not in parents][-1]

    def refresh(self) -> WorkflowHandle:
        """Read the workflow's jobs again."""
        self.jobs = DurableJobStore(using=self.using).workflows.jobs(self.id)
        return self

    def task_result(self, backend: str = "default") -> Any:
        """Return the final job as a ``django.tasks`` ``TaskResult`` of a DurableJobsBackend."""
        from django.tasks import task_backends

        return task_backends[backend].get_result(str(self.final_job.pk))


# -- Celery-style canvas --------------------------------------------------------------------------


@dataclass(frozen=True)
class Signature:
    """One job to add: an operation, its payload and its options (``Signature(op, payload)``)."""

    operation: str
    payload: Any = None
    name: str | None = None
    queue: str | None = None
    priority: int = 0
    on_upstream_failure: str = UpstreamFailure.CANCEL.value

    def add_to(self, wf: Workflow, after: list[Node]) -> Node:
        return wf.job(
            self.operation,
            self.payload,
            after=after,
            name=self.name,
            queue=self.queue,
            priority=self.priority,
            on_upstream_failure=self.on_upstream_failure,
        )


class Canvas:
    """A part of a graph built from signatures; ``add_to`` returns its last nodes."""

    def add_to(self, wf: Workflow, after: list[Node]) -> list[Node]:  # pragma: no cover
        raise NotImplementedError

    def workflow(
        self, name: str, *, scope: str | None = None, idempotency_key: str | None = None
    ) -> Workflow:
        """Return a :class:`Workflow` holding this canvas, to submit."""
        wf = Workflow(name, scope=scope, idempotency_key=idempotency_key)
        self.add_to(wf, [])
        return wf


def _parts(items: Sequence[Any]) -> list[Signature | Canvas]:
    parts: list[Signature | Canvas] = []
    for item in items:
        if isinstance(item, tuple) and item and isinstance(item[0], str):
            item = Signature(*item)
        if not isinstance(item, (Signature, Canvas)):
            raise InputInvalid(
                f"{item!r} is not a job: give Signature(operation, payload), an (operation, "
                f"payload) tuple, or a chain, group or chord."
            )
        parts.append(item)
    return parts


def _add(part: Signature | Canvas, wf: Workflow, after: list[Node]) -> list[Node]:
    if isinstance(part, Signature):
        return [part.add_to(wf, after)]
    return part.add_to(wf, after)


class chain(Canvas):  # noqa: N801 - named like Celery's canvas
    """Each part starts after the one before completed: ``chain(a, b, c)``."""

    def __init__(self, *parts: Any) -> None:
        self.parts = _parts(parts)

    def add_to(self, wf: Workflow, after: list[Node]) -> list[Node]:
        for part in self.parts:
            after = _add(part, wf, after)
        return after


class group(Canvas):  # noqa: N801
    """The parts run side by side: ``group(a, b, c)``."""

    def __init__(self, *parts: Any) -> None:
        if len(parts) == 1 and not isinstance(parts[0], (Signature, Canvas, tuple)):
            parts = tuple(parts[0])  # group([a, b]) as well as group(a, b)
        self.parts = _parts(parts)

    def add_to(self, wf: Workflow, after: list[Node]) -> list[Node]:
        ends: list[Node] = []
        for part in self.parts:
            ends.extend(_add(part, wf, after))
        return ends


class chord(Canvas):  # noqa: N801
    """A group, then a callback that starts once every part completed:
    ``chord(group(a, b), callback)``; the callback reads their results with ``ctx.upstream()``."""

    def __init__(self, header: Any, body: Any) -> None:
        self.header = header if isinstance(header, group) else group(header)
        (self.body,) = _parts([body])

    def add_to(self, wf: Workflow, after: list[Node]) -> list[Node]:
        return _add(self.body, wf, self.header.add_to(wf, after))
