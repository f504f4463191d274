"""The pause endpoints: list, pause and resume queues and operations in the caller's scope.

``GET /pauses`` lists the pauses that hold the caller's scope's work (those of its scope, and
those of every scope made by an operator); ``POST /pauses`` pauses a queue or an operation in
the caller's scope; ``POST /pauses/{id}/resume`` ends a pause of that scope. Each needs the
permission ``durable_jobs.pause_work`` (403 without it, nothing written); bad input is 422. The
store does the work and records who: ``api:<user>`` (and the token's id).
"""

from datetime import datetime
from typing import Literal

from django.http import HttpRequest, JsonResponse
from ninja import Query, Schema, Status
from ninja.errors import AuthorizationError
from pydantic import Field

from ..models import JobPause
from ..rules.errors import ScopeMismatch
from ..store import PauseNotFound
from . import auth
from .errors import error_body
from .routes import READ_ERRORS, _store, refusals, router

PERMISSION = "durable_jobs.pause_work"
PAUSE_SAYS = {
    True: "Paused: workers claim none of its pending jobs until it is resumed.",
    False: "Nothing to do: it was already paused (the pause in force is returned).",
}
RESUME_SAYS = {
    True: "Resumed: its pending jobs are claimed again.",
    False: "Nothing to do: this pause had already ended.",
}


class PauseIn(Schema):
    target: Literal["queue", "operation"] = Field(description="What to pause.")
    name: str = Field(description="The queue's or the operation's name.")
    reason: str = Field(default="", description="Why: kept with the pause as evidence.")


class PauseOut(Schema):
    id: int
    target: str
    name: str
    scope: str = Field(description='The scope it holds; "" for every scope.')
    reason: str
    paused_at: datetime
    paused_by: str
    active: bool = Field(description="True while the pause is in force.")
    resumed_at: datetime | None
    resumed_by: str


class PauseActionOut(Schema):
    changed: bool = Field(description="False when there was nothing to do (see message).")
    message: str
    pause: PauseOut


def _out(row: JobPause) -> dict:
    return {
        "id": row.pk,
        "target": row.target,
        "name": row.name,
        "scope": row.scope,
        "reason": row.reason,
        "paused_at": row.paused_at,
        "paused_by": row.paused_by,
        "active": bool(row.active),
        "resumed_at": row.resumed_at,
        "resumed_by": row.resumed_by,
    }


def _require(request: HttpRequest) -> None:
    if not auth.caller(request).has_perm(PERMISSION):
        raise AuthorizationError(
            403,
            f"Permission {PERMISSION} is required to see, pause or resume queues and operations.",
        )


def _missing(pause_id: int) -> JsonResponse:
    return JsonResponse(
        error_body("E_PAUSE_NOT_FOUND", f"There is no pause {pause_id}."), status=404
    )


@router.get(
    "/pauses",
    response={200: list[PauseOut], **READ_ERRORS},
    summary="List the pauses holding your scope's work (add all=true for ended ones), newest first",
    tags=["pauses"],
)
@refusals
def list_pauses(request: HttpRequest, all: bool = Query(False)):  # noqa: A002
    _require(request)
    return [_out(row) for row in _store(request).pauses(active=None if all else True)]


@router.post(
    "/pauses",
    response={200: PauseActionOut, 201: PauseActionOut, **READ_ERRORS},
    summary="Pause a queue or an operation in your scope (201 new, 200 already paused)",
    tags=["pauses"],
)
@refusals
def pause_work(request: HttpRequest, body: PauseIn):
    _require(request)
    change = _store(request).pause(body.target, body.name, reason=body.reason)
    answer = {"changed": change.changed, "message": PAUSE_SAYS[change.changed]}
    return Status(201 if change.changed else 200, {**answer, "pause": _out(change.pause)})


@router.post(
    "/pauses/{pause_id}/resume",
    response={200: PauseActionOut, **READ_ERRORS},
    summary="Resume a pause of your scope: its pending jobs are claimed again",
    tags=["pauses"],
)
@refusals
def resume_work(request: HttpRequest, pause_id: int):
    _require(request)
    store = _store(request)
    try:
        change = store.resume(pause_id=pause_id)
    except PauseNotFound:
        return _missing(pause_id)
    except ScopeMismatch:
        row = JobPause.objects.using(store.using).filter(pk=pause_id, scope="").first()
        if row is None:  # another scope's pause: as missing as an unknown one
            return _missing(pause_id)
        raise AuthorizationError(
            403,
            f"Pause {pause_id} holds every scope; an operator resumes it (manage.py jobs "
            f"resume --id {pause_id}, or the admin's dashboard).",
        ) from None
    answer = {"changed": change.changed, "message": RESUME_SAYS[change.changed]}
    return {**answer, "pause": _out(change.pause)}
