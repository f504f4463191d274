"""The schedule endpoints: list, get, pause and resume the recurring jobs of the caller's scope.

A schedule belongs to the scope its jobs are enqueued in: its ``scope``, or
``DURABLE_JOBS['DEFAULT_SCOPE']`` when it names none. A schedule of another scope is exactly as
invisible as a missing one (404, absent from the list). Pausing and resuming go through the store.

A row this server cannot read (a time zone it does not know, a cron expression changed by hand)
is listed and shown with ``state`` ``broken`` and its ``problem``; it can be paused and resumed
like any other. A name no schedule could have (a NUL byte, a control character, too long) is a
404 like any unknown name, on every database, without a query by it.
"""

from __future__ import annotations

from django.db.models import F, Q
from django.http import HttpRequest
from django.utils import timezone

from ..models import Schedule
from ..rules.conf import jobs_settings
from ..schedules import could_be_name
from ..store import ScheduleNotFound
from . import auth, schemas
from .errors import NoSuchSchedule
from .routes import READ_ERRORS, _store, refusals, router

# What the store's answer says to an API caller.
PAUSE_SAYS = {True: "Paused.", False: "Nothing to do: the schedule was already paused."}
RESUME_SAYS = {True: "Resumed.", False: "Nothing to do: the schedule was not paused."}


def in_scope(scope: str):
    """Return the schedules whose jobs are enqueued in ``scope``."""
    rows = Schedule.objects.using(jobs_settings.DATABASE)
    mine = Q(scope=scope)
    if scope == jobs_settings.DEFAULT_SCOPE:
        mine |= Q(scope__isnull=True)
    return rows.filter(mine).annotate(last_job_status=F("last_job__status"))


def _schedule(request: HttpRequest, name: str) -> Schedule:
    scope = auth.scope_of(request)
    row = in_scope(scope).filter(name=name).first() if could_be_name(name) else None
    if row is None:
        raise NoSuchSchedule(f"There is no schedule {name!r}.")
    return row


@router.get(
    "/schedules",
    response={200: list[schemas.ScheduleOut], **READ_ERRORS},
    summary="List the schedules of your scope, by name",
    tags=["schedules"],
)
@refusals
def list_schedules(request: HttpRequest):
    auth.require(request, "view_schedule")
    now = timezone.now()
    rows = in_scope(auth.scope_of(request)).order_by("name")
    return [schemas.schedule(row, now) for row in rows]


@router.get(
    "/schedules/{name}",
    response={200: schemas.ScheduleOut, **READ_ERRORS},
    summary="Get a schedule: its definition, state, next tick and last job",
    tags=["schedules"],
)
@refusals
def get_schedule(request: HttpRequest, name: str):
    auth.require(request, "view_schedule")
    return schemas.schedule(_schedule(request, name), timezone.now())


def _pause(request: HttpRequest, name: str, *, pause: bool):
    """Pause or resume a schedule of the caller's scope and answer with what the store did."""
    auth.require(request, "change_schedule")
    row = _schedule(request, name)
    store = _store(request)
    try:
        answer = store.pause_schedule(row.name) if pause else store.resume_schedule(row.name)
    except ScheduleNotFound:  # its row is gone since we read it
        raise NoSuchSchedule(f"There is no schedule {name!r}.") from None
    says = PAUSE_SAYS if pause else RESUME_SAYS
    return {
        "changed": answer.changed,
        "message": says[answer.changed],
        "schedule": schemas.schedule(_schedule(request, name), timezone.now()),
    }


@router.post(
    "/schedules/{name}/pause",
    response={200: schemas.ScheduleActionOut, **READ_ERRORS},
    summary="Pause a schedule: it enqueues no tick until resumed",
    tags=["schedules"],
)
@refusals
def pause_schedule(request: HttpRequest, name: str):
    return _pause(request, name, pause=True)


@router.post(
    "/schedules/{name}/resume",
    response={200: schemas.ScheduleActionOut, **READ_ERRORS},
    summary="Resume a paused schedule: it enqueues its next tick",
    tags=["schedules"],
)
@refusals
def resume_schedule(request: HttpRequest, name: str):
    return _pause(request, name, pause=False)
