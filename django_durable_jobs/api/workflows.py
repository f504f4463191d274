"""The workflow endpoints: submit, get, cancel and retry a workflow of the caller's scope.

A workflow is submitted all or nothing through ``store.workflows``, in the caller's scope; one of
another scope is exactly as invisible as a missing one (404). Submitting needs what submitting
a job needs (``durable_jobs.add_job``, and a token allowed every operation of the workflow);
cancelling ``durable_jobs.cancel_workflow``; retrying ``durable_jobs.retry_workflow``. A
refusal writes nothing.
"""

# No ``from __future__ import annotations``: ninja reads a view's annotations through the
# ``refusals`` wrapper, whose module (routes.py) would resolve the names of text annotations.
import uuid
from typing import Any

from django.http import HttpRequest
from ninja import Status

from ..models import Workflow
from ..rules import quotas, registry, validation
from ..rules.conf import jobs_settings
from ..rules.errors import PayloadTooLarge
from ..rules.graph import check_graph
from ..store import DurableJobStore, WorkflowNotFound
from . import auth
from . import workflow_schemas as schemas
from .errors import NoSuchWorkflow
from .routes import READ_ERRORS, E, _store, refusals, router

TAGS = ["workflows"]
# What each answer says to an API caller.
CANCEL_SAYS = {True: "Cancelled.", False: "Nothing to cancel: every job has ended or was asked."}
RETRY_SAYS = {True: "Retry requested.", False: "Nothing to retry: no job failed or was cancelled."}


def _found(store: DurableJobStore, workflow_id: uuid.UUID) -> Workflow:
    row = store.workflows.get(workflow_id)
    if row is None:
        raise NoSuchWorkflow(f"There is no workflow {workflow_id}.")
    return row


def _body(store: DurableJobStore, row: Workflow) -> dict[str, Any]:
    return schemas.workflow(row, store.workflows.jobs(row.pk), store.workflows.edges(row.pk))


@router.post(
    "/workflows",
    response={
        200: schemas.WorkflowOut,
        201: schemas.WorkflowOut,
        409: E,
        413: E,
        429: E,
        **READ_ERRORS,
    },
    summary="Submit a workflow, all or nothing (201 new, 200 the same workflow again)",
    tags=TAGS,
)
@refusals
def submit_workflow(request: HttpRequest, body: schemas.WorkflowIn):
    auth.require(request, "add")
    store = _store(request)
    most = jobs_settings.WORKFLOW_MAX_JOBS
    if len(body.jobs) > most:
        raise PayloadTooLarge(
            f"Workflow {body.name!r} has {len(body.jobs)} jobs; the most is {most} "
            f"(DURABLE_JOBS['WORKFLOW_MAX_JOBS']). Split it into smaller workflows."
        )
    for job in body.jobs:  # the token's allow-list holds for every job, before anything else
        auth.require_operation(request, validation.operation(job.operation))
    graph = check_graph(
        body.name,
        [job.declaration() for job in body.jobs],
        max_jobs=most,
        registered=lambda op: registry.get(op) is not None,
    )
    token = getattr(request, "durable_jobs_token", None)
    with quotas.counted() as taken:  # a refused submission uses up no token window
        if token is not None:  # one submission of the token, within its scope's rate
            taken += quotas.take_token_submission(token.prefix, store.scope, store.clock())
        submitted = store.workflows.submit(graph, idempotency_key=body.idempotency_key)
    row = submitted.workflow
    data = schemas.workflow(row, submitted.jobs, store.workflows.edges(row.pk))
    return Status(201 if submitted.created else 200, data)


@router.get(
    "/workflows/{workflow_id}",
    response={200: schemas.WorkflowOut, **READ_ERRORS},
    summary="Get a workflow: its state, progress and jobs with their parents",
    tags=TAGS,
)
@refusals
def get_workflow(request: HttpRequest, workflow_id: uuid.UUID):
    auth.require(request, "view")
    store = _store(request)
    return _body(store, _found(store, workflow_id))


def _act(request: HttpRequest, workflow_id: uuid.UUID, permission: str, says: dict[bool, str]):
    """Cancel or retry a workflow and answer with what the store changed."""
    auth.require(request, permission)
    store = _store(request)
    act = store.workflows.cancel if permission == "cancel_workflow" else store.workflows.retry
    try:
        answer = act(workflow_id, by=store.actor or "")
    except WorkflowNotFound:
        raise NoSuchWorkflow(f"There is no workflow {workflow_id}.") from None
    changed = {kind: list(ids) for kind, ids in answer.changed.items()}
    accepted = answer.count > 0
    return {
        "accepted": accepted,
        "message": says[accepted],
        "changed": changed,
        "workflow": _body(store, answer.workflow),
    }


@router.post(
    "/workflows/{workflow_id}/cancel",
    response={200: schemas.WorkflowActionOut, 409: E, **READ_ERRORS},
    summary="Cancel every job of a workflow not yet ended (running ones are asked to stop)",
    tags=TAGS,
)
@refusals
def cancel_workflow(request: HttpRequest, workflow_id: uuid.UUID):
    return _act(request, workflow_id, "cancel_workflow", CANCEL_SAYS)


@router.post(
    "/workflows/{workflow_id}/retry",
    response={200: schemas.WorkflowActionOut, 409: E, **READ_ERRORS},
    summary="Run again the failed and cancelled jobs of a workflow, never a completed one",
    tags=TAGS,
)
@refusals
def retry_workflow(request: HttpRequest, workflow_id: uuid.UUID):
    return _act(request, workflow_id, "retry_workflow", RETRY_SAYS)
