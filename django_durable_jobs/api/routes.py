"""The endpoints: submit, list, stats, get, attempts, cancel, retry. Every write goes through the store.

Each view resolves the caller's scope and works through a ``DurableJobStore`` of that scope, so a
job of another scope is exactly as invisible as a missing one (404, absent from lists).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import Any

from django.http import Http404, HttpRequest, JsonResponse
from ninja import Query, Router, Status
from ninja.errors import AuthorizationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError

from .. import stats
from ..models import Job, JobAttempt
from ..rules import quotas, registry, validation
from ..rules.conf import jobs_settings
from ..rules.errors import InputInvalid, JobError, ScopeMismatch
from ..rules.vocabulary import RequestAnswer
from ..store import DurableJobStore, RequestResult, Submission
from . import auth, schemas
from .errors import JobNotFound, error_body, error_response, internal_error
from .stats_schemas import StatsOut

CURSOR_SALT = "django_durable_jobs.api.list"
LIMIT_MAX = 100

E = schemas.ErrorOut
READ_ERRORS = {401: E, 403: E, 404: E, 422: E}
REQUEST_RESPONSES = {200: schemas.ActionOut, 409: E, **READ_ERRORS}

router = Router(auth=auth.AUTH, tags=["jobs"])


def refusals(view):
    """Answer JobError and permission refusals as ``{"code", "message"}`` wherever mounted, and
    any unexpected exception as a logged 500 ``E_API_INTERNAL`` that shows nothing of it."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any):
        try:
            return view(request, *args, **kwargs)
        except JobError as exc:
            return error_response(exc)
        except AuthorizationError as exc:
            return JsonResponse(error_body("E_API_FORBIDDEN", str(exc)), status=403)
        except (HttpError, NinjaValidationError, Http404):
            raise  # the API's own handlers answer these
        except Exception as exc:  # noqa: BLE001 - answered as a logged 500
            return internal_error(request, exc)

    return wrapper


def _store(request: HttpRequest) -> DurableJobStore:
    return DurableJobStore(
        scope=auth.scope_of(request), actor=auth.actor_of(request), using=jobs_settings.DATABASE
    )


def _job(store: DurableJobStore, job_id: uuid.UUID) -> Job:
    job = store.get(job_id)
    if job is None:
        raise JobNotFound(f"There is no job {job_id}.")
    return job


def _proposal_text(body: schemas.SubmitIn) -> str:
    given = body.model_fields_set
    if "proposal" in given and body.proposal is not None and "payload" in given:
        raise InputInvalid("Give the input as `payload` (JSON) or `proposal` (text), not both.")
    if body.proposal is not None:
        text = body.proposal
    elif "payload" in given:
        text = Submission.of(None, None, body.payload).proposal
    else:
        text = "{}"
    return text  # the store checks it: JSON, UTF-8, the size cap (PayloadTooLarge → 413)


@router.post(
    "/jobs",
    response={200: schemas.JobOut, 201: schemas.JobOut, 409: E, 413: E, 429: E, **READ_ERRORS},
    summary="Submit a job (201 new, 200 the same job again)",
)
@refusals
def submit_job(request: HttpRequest, body: schemas.SubmitIn):
    auth.require(request, "add")
    store = _store(request)
    operation = validation.operation(body.operation)
    auth.require_operation(request, operation)
    if registry.get(operation) is None:
        raise InputInvalid(f"Unknown operation {operation!r}; no @operation registered it.")
    text = _proposal_text(body)
    key = body.idempotency_key
    token = getattr(request, "durable_jobs_token", None)
    new_id = uuid.uuid4()
    with quotas.counted() as taken:  # a refused submission uses up no token window
        if token is not None:  # the token's own rate, within its scope's
            taken += quotas.take_token_submission(token.prefix, store.scope, store.clock())
        job = store.defer(
            operation,
            Submission(scope=store.scope, idempotency_key=key, proposal=text),
            job_id=new_id,
            queue=body.queue,
            priority=body.priority,
            run_after=body.run_after,
        )
    return Status(201 if job.pk == new_id else 200, schemas.detail(job))


@router.get(
    "/jobs",
    response={200: schemas.JobPageOut, **READ_ERRORS},
    summary="List jobs of your scope, oldest first, in cursor pages",
)
@refusals
def list_jobs(
    request: HttpRequest,
    operation: str | None = None,
    status: schemas.Status | None = None,
    ownership: schemas.Ownership | None = None,
    limit: int = Query(25, ge=1, le=LIMIT_MAX),
    cursor: str | None = None,
):
    auth.require(request, "view")
    try:
        page = _store(request).page(
            operation=operation, status=status, ownership=ownership, limit=limit, after=cursor
        )
    except ScopeMismatch as exc:  # a foreign or altered cursor is bad input here, not a 404
        raise InputInvalid(
            "This cursor was not issued for this caller and these filters (or was altered); "
            "start again without `cursor`."
        ) from exc
    return {
        "items": [schemas.summary(row) for row in page.candidates],
        "next_cursor": page.next_cursor,
    }


# Declared before ``/jobs/{job_id}``, which would otherwise take "stats" for a job id.
@router.get(
    "/jobs/stats",
    response={200: StatsOut, **READ_ERRORS},
    summary="The overview of your scope: queues and lag, jobs by ownership, recent outcomes",
)
@refusals
def job_stats(request: HttpRequest):
    auth.require(request, "view")
    return stats.snapshot(scope=auth.scope_of(request), using=jobs_settings.DATABASE)


@router.get("/jobs/{job_id}", response={200: schemas.JobOut, **READ_ERRORS}, summary="Get a job")
@refusals
def get_job(request: HttpRequest, job_id: uuid.UUID):
    auth.require(request, "view")
    return schemas.detail(_job(_store(request), job_id))


@router.get(
    "/jobs/{job_id}/attempts",
    response={200: list[schemas.AttemptOut], **READ_ERRORS},
    summary="The ended attempts of a job, oldest first",
)
@refusals
def job_attempts(request: HttpRequest, job_id: uuid.UUID):
    auth.require(request, "view")
    store = _store(request)
    job = _job(store, job_id)
    rows = JobAttempt.objects.using(store.using).filter(job_id=job.pk).order_by("epoch", "id")
    return [schemas.attempt(row) for row in rows]


# What each answer of the store says to an API caller; ``{status}`` is the job's after the request.
CANCEL_SAYS = {
    RequestAnswer.CANCELLED_NOW: "Cancelled.",
    RequestAnswer.REQUESTED: "Cancellation requested.",
    RequestAnswer.ALREADY_REQUESTED: "Cancellation requested.",
    RequestAnswer.ALREADY_ENDED: "Nothing to cancel: the job is already {status}.",
}
RETRY_SAYS = {
    RequestAnswer.REQUESTED: "Retry requested; a worker will start a new attempt.",
    RequestAnswer.ALREADY_REQUESTED: "Retry requested; a worker will start a new attempt.",
    RequestAnswer.NOT_ENDED: "Nothing to retry: the job has not ended (it is {status}).",
}


def _request(
    request: HttpRequest,
    job_id: uuid.UUID,
    permission: str,
    ask: Callable[[DurableJobStore, uuid.UUID], RequestResult],
    says: dict[RequestAnswer, str],
):
    """Make a cancellation or retry request and answer with what the store says it did."""
    auth.require(request, permission)
    result = ask(_store(request), job_id)
    if result.job is None:  # a missing or foreign job is a 404, not "nothing to do"
        raise JobNotFound(f"There is no job {job_id}.")
    return schemas.action(result, says[result.answer].format(status=result.job.status))


@router.post(
    "/jobs/{job_id}/cancel",
    response=REQUEST_RESPONSES,
    summary="Request cancellation (a pending job ends now; a running one is asked to stop)",
)
@refusals
def cancel_job(request: HttpRequest, job_id: uuid.UUID):
    return _request(request, job_id, "cancel", DurableJobStore.request_cancel_result, CANCEL_SAYS)


@router.post(
    "/jobs/{job_id}/retry",
    response=REQUEST_RESPONSES,
    summary="Request a new attempt of a failed, cancelled or expired job",
)
@refusals
def retry_job(request: HttpRequest, job_id: uuid.UUID):
    return _request(request, job_id, "retry", DurableJobStore.request_retry_result, RETRY_SAYS)
