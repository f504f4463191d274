"""The face of the workflows room: ``store.workflows``, bound to the store's client."""

from __future__ import annotations

from typing import Any

from ..models import Job, Workflow
from ..rules.graph import Graph
from . import workflows
from .client import Client
from .workflows import Submitted, WorkflowAnswer


class WorkflowFace:
    """Submit, read, cancel and retry workflows as one store client (``store.workflows``)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def submit(
        self,
        graph: Graph,
        *,
        scope: str | None = None,
        idempotency_key: str | None = None,
        in_caller_transaction: bool = False,
    ) -> Submitted:
        """Write a checked graph (``rules.graph.check_graph``) as a workflow, all or nothing.

        The same key and graph return the earlier workflow (``created`` False); the same key
        with another graph is an ``IdempotencyConflict``.
        """
        return workflows.submit(
            self._client,
            graph,
            scope=scope,
            idempotency_key=idempotency_key,
            in_caller_transaction=in_caller_transaction,
        )

    def get(self, workflow_id: Any) -> Workflow | None:
        """Return the workflow in this client's scope, or None."""
        return workflows.get(self._client, workflow_id)

    def jobs(self, workflow_id: Any) -> list[Job]:
        """Return the workflow's jobs in the order they were declared."""
        return workflows.jobs_of(self._client, workflow_id)

    def edges(self, workflow_id: Any) -> list[tuple[Any, Any]]:
        """Return the workflow's (parent id, child id) pairs."""
        return workflows.edges_of(self._client, workflow_id)

    def cancel(self, workflow_id: Any, *, by: str = "") -> WorkflowAnswer:
        """Cancel every job of the workflow not yet ended (running ones by request)."""
        return workflows.cancel(self._client, workflow_id, by=by)

    def retry(self, workflow_id: Any, *, by: str = "") -> WorkflowAnswer:
        """Run again the failed and cancelled jobs; completed jobs are never run again."""
        return workflows.retry(self._client, workflow_id, by=by)
