"""Request and response bodies of the workflow endpoints (``api/workflows.py``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from ninja import Schema
from pydantic import Field

from ..models import Job, Workflow
from ..rules import vocabulary
from ..rules.graph import NodeDeclaration
from ..stats.workflows import WORKFLOW_STATES, progress, state_of
from .schemas import JobSummaryOut, summary

UpstreamPolicy = Literal[tuple(vocabulary.UpstreamFailure.values)]
WorkflowState = Literal[WORKFLOW_STATES]


class WorkflowJobIn(Schema):
    name: str | None = Field(
        default=None,
        max_length=200,
        description="The job's name in the workflow, unique in it: what `after` refers to and "
        "what ctx.upstream() keys its result by.",
    )
    operation: str = Field(min_length=1, max_length=200, description="A registered operation.")
    payload: Any = Field(default=None, description="The job's input as JSON ({} when omitted).")
    after: list[str | int] = Field(
        default_factory=list,
        description="The jobs this one waits for: their names, or their places in `jobs` "
        "(from 0). It starts once every one of them completed.",
    )
    queue: str | None = Field(default=None, max_length=200)
    priority: int = Field(default=0, ge=-100, le=100)
    on_upstream_failure: UpstreamPolicy = Field(
        default="cancel",
        description="What a parent that fails for good (or is cancelled) does to this job: "
        "cancel it, or run it anyway.",
    )

    def declaration(self) -> NodeDeclaration:
        return NodeDeclaration(
            operation=self.operation,
            payload={} if self.payload is None else self.payload,
            after=tuple(self.after),
            name=self.name,
            queue=self.queue,
            priority=self.priority,
            on_upstream_failure=self.on_upstream_failure,
        )


class WorkflowIn(Schema):
    name: str = Field(min_length=1, max_length=200, description="What the workflow is.")
    idempotency_key: str | None = Field(
        default=None,
        max_length=255,
        description="Same name, key and graph: the same workflow (200). Another graph: 409.",
    )
    jobs: list[WorkflowJobIn] = Field(
        description="The workflow's jobs, submitted all or nothing; a job without `after` "
        "starts at once."
    )


class ProgressOut(Schema):
    total: int
    complete: int
    by_status: dict[str, int] = Field(description="The workflow's jobs counted by status.")


class WorkflowJobOut(JobSummaryOut):
    index: int = Field(description="The job's place in the workflow's `jobs`, from 0.")
    parents: list[UUID] = Field(description="The jobs this one waits for (or waited for).")


class WorkflowOut(Schema):
    id: UUID
    name: str
    scope: str
    idempotency_key: str
    state: WorkflowState = Field(
        description="complete when every job completed; failed or cancelled when a job did not "
        "complete and nothing is left to run; running otherwise."
    )
    progress: ProgressOut
    created_at: datetime
    cancel_requested_at: datetime | None
    retry_requested_at: datetime | None
    requested_by: str | None = Field(description="Who last cancelled or retried it.")
    jobs: list[WorkflowJobOut] = Field(description="Its jobs, in the order they were declared.")


class WorkflowActionOut(Schema):
    accepted: bool = Field(description="False when there was nothing to do (see message).")
    message: str
    changed: dict[str, list[UUID]] = Field(
        description="The jobs this request changed, by what happened to them. Cancel: "
        "cancelled (not running), requested (running: asked to stop). Retry: retried (ran "
        "before), pending (never ran), waiting (waits again for parents run again)."
    )
    workflow: WorkflowOut


def workflow(row: Workflow, jobs: list[Job], edges: list[tuple[Any, Any]]) -> dict[str, Any]:
    """Return the body of a workflow: its row, state, progress and jobs with their parents."""
    parents: dict[Any, list[Any]] = {}
    for parent, child in edges:
        parents.setdefault(child, []).append(parent)
    order = {job.pk: index for index, job in enumerate(jobs)}
    return {
        "id": row.pk,
        "name": row.name,
        "scope": row.scope,
        "idempotency_key": row.idempotency_key,
        "state": state_of(jobs),
        "progress": progress(job.status for job in jobs),
        "created_at": row.created_at,
        "cancel_requested_at": row.cancel_requested_at,
        "retry_requested_at": row.retry_requested_at,
        "requested_by": row.requested_by or None,
        "jobs": [
            {
                **summary(job),
                "index": index,
                "parents": sorted(parents.get(job.pk, []), key=order.__getitem__),
            }
            for index, job in enumerate(jobs)
        ],
    }
