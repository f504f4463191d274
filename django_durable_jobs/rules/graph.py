"""A workflow's graph checked before anything is written: its nodes, their edges, no cycle.

The public ``Workflow`` (``django_durable_jobs.workflows``) and the REST API both describe a
graph as a list of :class:`NodeDeclaration`; :func:`check_graph` turns it into a
:class:`Graph` of validated nodes or refuses it with an ``InputInvalid`` naming the node at
fault (an unknown operation, an unknown or duplicated name, a cycle, too many jobs);
:func:`workflow_state` says where a workflow is from its jobs' statuses. No database here: the store writes a checked graph (``store/workflows.py``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from . import validation
from .errors import InputInvalid
from .jsontext import canonical_json
from .vocabulary import TERMINAL_STATUSES, JobStatus, UpstreamFailure, proposal_sha256

__all__ = [
    "WORKFLOW_STATES",
    "Graph",
    "Node",
    "NodeDeclaration",
    "check_graph",
    "find_cycle",
    "retry_to_come",
    "state_of",
    "workflow_state",
]


@dataclass(frozen=True)
class NodeDeclaration:
    """One job of a workflow as its author declared it.

    ``after`` holds the node's parents: indexes of earlier declarations or names of any node of
    the same workflow (a name may point forward, so a graph can be declared in any order).
    """

    operation: Any
    payload: Any
    after: tuple[Any, ...] = ()
    name: Any = None
    queue: Any = None
    priority: Any = 0
    on_upstream_failure: Any = UpstreamFailure.CANCEL.value


@dataclass(frozen=True)
class Node:
    """A checked node: what its job row will hold, and the indexes of its parents."""

    index: int
    name: str
    operation: str
    proposal: str
    proposal_hash: str
    queue: str
    priority: int
    parents: tuple[int, ...]
    on_upstream_failure: str

    @property
    def label(self) -> str:
        """Return how messages name the node: its name, or its place and operation."""
        return repr(self.name) if self.name else f"#{self.index} ({self.operation})"


@dataclass(frozen=True)
class Graph:
    """A checked workflow graph: its name and nodes, in declaration order."""

    name: str
    nodes: tuple[Node, ...]

    def text(self) -> str:
        """Return the canonical JSON of the graph: what a repeat of its key must match."""
        return json.dumps(
            {
                "name": self.name,
                "nodes": [
                    {
                        "name": node.name,
                        "operation": node.operation,
                        "proposal_sha256": node.proposal_hash,
                        "queue": node.queue,
                        "priority": node.priority,
                        "after": sorted(node.parents),
                        "on_upstream_failure": node.on_upstream_failure,
                    }
                    for node in self.nodes
                ],
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    def sha256(self) -> str:
        return hashlib.sha256(self.text().encode("utf-8")).hexdigest()

    def children(self) -> dict[int, list[int]]:
        """Return each node's children, by index."""
        found: dict[int, list[int]] = {node.index: [] for node in self.nodes}
        for node in self.nodes:
            for parent in node.parents:
                found[parent].append(node.index)
        return found


def check_graph(
    name: Any,
    declarations: Sequence[NodeDeclaration],
    *,
    max_jobs: int,
    registered: Callable[[str], bool],
) -> Graph:
    """Return the checked graph of ``declarations``, or refuse it naming what is wrong."""
    workflow_name = validation.name(name, "workflow name")
    declared = validation.listed(declarations, "workflow jobs")
    if not declared:
        raise InputInvalid(f"Workflow {workflow_name!r} has no jobs; add one with wf.job(...).")
    if len(declared) > max_jobs:
        raise InputInvalid(
            f"Workflow {workflow_name!r} has {len(declared)} jobs; the most is {max_jobs} "
            f"(DURABLE_JOBS['WORKFLOW_MAX_JOBS']). Split it into smaller workflows."
        )
    names: dict[str, int] = {}
    for index, node in enumerate(declared):
        if not isinstance(node, NodeDeclaration):
            raise InputInvalid(f"Workflow job #{index} is not a NodeDeclaration.")
        if node.name is not None:
            label = validation.name(node.name, f"name of workflow job #{index}")
            if label in names:
                raise InputInvalid(
                    f"Two jobs of workflow {workflow_name!r} are named {label!r} (#{names[label]} "
                    f"and #{index}); names are unique within a workflow."
                )
            names[label] = index
    nodes = [
        _node(index, node, names, len(declared), registered) for index, node in enumerate(declared)
    ]
    cycle = find_cycle(nodes)
    if cycle:
        path = " → ".join(nodes[index].label for index in cycle)
        raise InputInvalid(
            f"Workflow {workflow_name!r} has a cycle: {path}. A job cannot wait, directly or "
            f"not, for itself; remove one of these edges."
        )
    return Graph(workflow_name, tuple(nodes))


def _node(
    index: int,
    node: NodeDeclaration,
    names: dict[str, int],
    count: int,
    registered: Callable[[str], bool],
) -> Node:
    where = f"workflow job #{index}" + (f" ({node.name!r})" if node.name else "")
    operation = validation.operation(node.operation)
    if not registered(operation):
        raise InputInvalid(
            f"The operation {operation!r} of {where} is not registered; register it with "
            f"@operation (or fix the name)."
        )
    try:
        text = canonical_json(node.payload)
    except (TypeError, ValueError) as exc:
        raise InputInvalid(f"The payload of {where} cannot be stored as JSON: {exc}.") from exc
    proposal = validation.json_text(text, f"payload of {where}")
    queue = "default" if node.queue is None else validation.name(node.queue, "queue")
    policy = node.on_upstream_failure
    if policy not in UpstreamFailure.values:
        raise InputInvalid(
            f"on_upstream_failure of {where} is {policy!r}; use 'cancel' (the default) or 'run'."
        )
    after = node.after
    if isinstance(after, (str, int)):
        after = [after]
    after = validation.listed(after, "after")
    parents: list[int] = []
    for ref in after:
        parent = _parent(ref, names, count, where)
        if parent == index:
            raise InputInvalid(f"{where.capitalize()} waits for itself; remove it from after=.")
        if parent not in parents:
            parents.append(parent)
    return Node(
        index=index,
        name="" if node.name is None else node.name,
        operation=operation,
        proposal=proposal,
        proposal_hash=proposal_sha256(proposal),
        queue=queue,
        priority=validation.priority(node.priority),
        parents=tuple(parents),
        on_upstream_failure=str(policy),
    )


def _parent(ref: Any, names: dict[str, int], count: int, where: str) -> int:
    """Return the index a parent reference points at, or refuse it."""
    if isinstance(ref, bool) or not isinstance(ref, (int, str)):
        raise InputInvalid(
            f"after= of {where} holds {ref!r}; give nodes of the same workflow (or their names)."
        )
    if isinstance(ref, int):
        if not 0 <= ref < count:
            raise InputInvalid(f"after= of {where} points at job #{ref}, which does not exist.")
        return ref
    if ref not in names:
        raise InputInvalid(
            f"after= of {where} names {ref!r}, which is no job of this workflow; parents must "
            f"belong to the same workflow."
        )
    return names[ref]


def find_cycle(nodes: Sequence[Node]) -> list[int]:
    """Return one cycle of the graph as indexes (first repeated at the end), or ``[]``."""
    state: dict[int, int] = {}  # 1: on the current path, 2: done
    for start in range(len(nodes)):
        if state.get(start):
            continue
        path: list[int] = []
        stack: list[tuple[int, int]] = [(start, 0)]
        while stack:
            index, next_parent = stack.pop()
            if next_parent == 0:
                state[index] = 1
                path.append(index)
            parents = nodes[index].parents
            if next_parent < len(parents):
                stack.append((index, next_parent + 1))
                parent = parents[next_parent]
                if state.get(parent) == 1:
                    cycle = path[path.index(parent) :]
                    # Edges point from parent to child: read the cycle in that direction.
                    cycle.reverse()
                    return [*cycle, cycle[0]]
                if not state.get(parent):
                    stack.append((parent, 0))
            else:
                state[index] = 2
                path.pop()
    return []


# -- a workflow's state, from its jobs ------------------------------------------------------------

WORKFLOW_STATES = ("running", "complete", "failed", "cancelled")


def retry_to_come(job: Any) -> bool:
    """True for a failed or cancelled job due to run again (a retry policy's or a request)."""
    return job.status in (JobStatus.FAILED, JobStatus.CANCELLED) and (
        job.retry_requested_at is not None
    )


def workflow_state(statuses: Iterable[str], *, retries_to_come: bool = False) -> str:
    """Return a workflow's state from its jobs' statuses (one per job, in any order).

    ``complete`` when every job completed; ``running`` while any job is not ended (pending,
    waiting, sleeping, running) or one that ended has a retry to come (``retries_to_come``);
    else ``failed`` when one failed (or is an orphan), and ``cancelled`` when one was cancelled.
    """
    found = set(statuses)
    if found <= {JobStatus.COMPLETE}:
        return "complete"
    if retries_to_come or not found <= set(TERMINAL_STATUSES):
        return "running"
    if JobStatus.FAILED in found or JobStatus.ORPHANED in found:
        return "failed"
    return "cancelled"


def state_of(jobs: Sequence[Any]) -> str:
    """Return the state of a workflow whose jobs (rows, with status and retry request) are given."""
    return workflow_state(
        (job.status for job in jobs), retries_to_come=any(retry_to_come(job) for job in jobs)
    )
