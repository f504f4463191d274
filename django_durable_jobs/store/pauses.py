"""Pauses: a queue or an operation held back, in one scope or in all, and resumed.

A pause is a ``JobPause`` row; it is in force while ``active`` is True. The claim passes over
the work a pause in force holds (``JobQuerySet.unpaused()``), so a pause takes effect at the
next claim of every worker once :func:`pause` returns: it commits before it returns. Resuming
sets ``active`` to NULL and records when and by whom; the row is never deleted (it is the
evidence of who held the work back, when and why). On PostgreSQL a resume NOTIFYs the held
queues, so idle workers claim the released work at once instead of at their next poll.

Refusals: an unknown target, a malformed name or scope, a scope the client may not act for
(``InputInvalid`` / ``ScopeMismatch``); resuming what no pause holds (:class:`PauseNotFound`,
an ``InputInvalid``). Pausing what is already paused is no refusal: the pause in force is
returned, unchanged. Resuming a pause that already ended, by its id, is no refusal either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, connections
from django.db.models import Q

from ..database.dbvendor import lock_for_update, notify_work
from ..database.transactions import bounded_atomic
from ..models import Job, JobPause
from ..rules import validation
from ..rules.errors import InputInvalid, ScopeMismatch
from ..rules.vocabulary import JobStatus
from .client import Client, now

__all__ = ["TARGETS", "PauseChange", "PauseNotFound", "list_pauses", "pause", "resume"]

TARGETS = tuple(JobPause.Target.values)  # ("queue", "operation")
REASON_MAX = 2000
NOTIFIED_QUEUES_MAX = 50  # an operation's pending work spans a few queues; wake at most these


class PauseNotFound(InputInvalid):
    """No pause in force holds this queue or operation (or no pause has this id). Still
    ``E_JOB_INPUT_INVALID``; the subclass lets the REST API answer 404 and the CLI say so."""


@dataclass(frozen=True)
class PauseChange:
    """What a pause or resume did: the pause row as it left it, and whether it changed.

    ``changed`` is False for a pause of what was already paused (``pause`` is the one in force,
    since ``paused_at`` by ``paused_by``) and for a resume of a pause that had already ended.
    """

    pause: JobPause
    changed: bool


def pause(
    client: Client,
    target: Any,
    name: Any,
    *,
    scope: Any = None,
    reason: Any = "",
    by: Any = None,
) -> PauseChange:
    """Pause ``target`` (``"queue"`` or ``"operation"``) ``name``; commit before returning.

    ``scope`` limits the pause to one scope; ``""`` (or None on an unscoped client) pauses it in
    every scope. A scoped client pauses in its own scope only. ``by`` (default: the client's
    actor) and ``reason`` are kept on the row.
    """
    target, name, scope = _target(client, target, name, scope)
    reason = _reason(reason)
    by = _by(client, by)
    try:
        with bounded_atomic(client.using):
            existing = _in_force(client, target, name, scope).first()
            if existing is not None:
                return PauseChange(existing, False)
            row = JobPause.objects.using(client.using).create(
                target=target,
                name=name,
                scope=scope,
                reason=reason,
                paused_at=now(client),
                paused_by=by,
                active=True,
            )
            return PauseChange(row, True)
    except IntegrityError:
        # A concurrent pause of the same thing committed first (the one-pause constraint):
        # that one is in force, and this call changes nothing.
        existing = _in_force(client, target, name, scope).first()
        if existing is None:
            raise
        return PauseChange(existing, False)


def resume(
    client: Client,
    target: Any = None,
    name: Any = None,
    *,
    scope: Any = None,
    pause_id: Any = None,
    by: Any = None,
) -> PauseChange:
    """End the pause in force of ``target`` ``name`` (in ``scope``), or the pause ``pause_id``.

    Set ``active`` to NULL, ``resumed_at`` and ``resumed_by``; keep the row. On PostgreSQL
    NOTIFY the released queues when the transaction commits. Nothing in force for the target:
    :class:`PauseNotFound`; a ``pause_id`` whose pause already ended: returned unchanged.
    """
    by = _by(client, by)
    if pause_id is not None:
        pk = _pause_id(pause_id)
        rows = JobPause.objects.using(client.using).filter(pk=pk)
    else:
        target, name, scope = _target(client, target, name, scope)
        rows = _in_force(client, target, name, scope)
    with bounded_atomic(client.using):
        row = lock_for_update(rows).first()
        if row is None:
            what = f"pause {pause_id}" if pause_id is not None else f"{target} {name!r}"
            raise PauseNotFound(
                f"No pause in force holds {what}{_where(scope) if pause_id is None else ''}; "
                f"nothing was changed. List the pauses in force with `manage.py jobs pauses`."
            )
        if pause_id is not None:
            _check_scope(client, row.scope)
        if not row.active:
            return PauseChange(row, False)
        row.active = None
        row.resumed_at = now(client)
        row.resumed_by = by
        row.save(using=client.using, update_fields=["active", "resumed_at", "resumed_by"])
        for queue in _held_queues(client, row):
            notify_work(client.using, queue)
        return PauseChange(row, True)


def list_pauses(client: Client, *, active: bool | None = True, limit: int = 100) -> list[JobPause]:
    """Return pauses newest first: those in force (``active=True``), ended, or all (None).

    A scoped client sees its scope's pauses and those of every scope (they hold its work too).
    """
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1000:
        raise InputInvalid(f"limit is a whole number from 1 to 1000; got {limit!r}.")
    rows = JobPause.objects.using(client.using).all()
    if client.scope is not None:
        rows = rows.filter(Q(scope="") | Q(scope=client.scope))
    if active is True:
        rows = rows.filter(active=True)
    elif active is False:
        rows = rows.filter(active__isnull=True)
    return list(rows.order_by("-paused_at", "-id")[:limit])


# -- helpers ---------------------------------------------------------------------------------


def _target(client: Client, target: Any, name: Any, scope: Any) -> tuple[str, str, str]:
    """Return the validated (target, name, scope); ``""`` is every scope."""
    if target not in TARGETS:
        raise InputInvalid(
            f"A pause holds a 'queue' or an 'operation'; got {target!r}. Name one of them."
        )
    if target == JobPause.Target.OPERATION:
        name = validation.operation(name)
    else:
        name = validation.name(name, "queue")
    if scope is None or scope == "":
        if client.scope is not None:
            if scope == "":
                raise ScopeMismatch(
                    f"This client is scoped to {client.scope!r} and cannot pause or resume "
                    f"work of every scope; give its scope, or use an unscoped client."
                )
            return target, name, client.scope
        return target, name, ""
    scope = validation.scope(scope)
    _check_scope(client, scope)
    return target, name, scope


def _check_scope(client: Client, scope: str) -> None:
    if client.scope is not None and scope != client.scope:
        what = f"scope {scope!r}" if scope else "every scope"
        raise ScopeMismatch(
            f"This client is scoped to {client.scope!r} and cannot act on a pause of {what}."
        )


def _in_force(client: Client, target: str, name: str, scope: str):
    return JobPause.objects.using(client.using).filter(
        target=target, name=name, scope=scope, active=True
    )


def _reason(reason: Any) -> str:
    if reason is None:
        return ""
    if not isinstance(reason, str) or len(reason) > REASON_MAX:
        raise InputInvalid(f"A pause's reason is text of at most {REASON_MAX} characters.")
    if "\x00" in reason:
        raise InputInvalid("A pause's reason may not contain NUL characters.")
    validation.encodable(reason, "reason")
    return reason.strip()


def _by(client: Client, by: Any) -> str:
    if by is None or by == "":
        return client.actor or ""
    return validation.name(by, "who pauses or resumes (by)")


def _pause_id(value: Any) -> int:
    if isinstance(value, bool):
        value = None
    try:
        pk = int(value)
    except (TypeError, ValueError):
        pk = 0
    if not 1 <= pk <= 2**63 - 1:
        raise InputInvalid(f"A pause id is a positive whole number; got {value!r}.")
    return pk


def _where(scope: str) -> str:
    return f" in scope {scope!r}" if scope else " in every scope"


def _held_queues(client: Client, row: JobPause) -> list[str]:
    """Return the queues whose workers should wake now that ``row`` ended (one query at most)."""
    if connections[client.using].vendor != "postgresql":
        return []  # no NOTIFY here: workers find the released work at their next poll
    if row.target == JobPause.Target.QUEUE:
        return [row.name]
    pending = Job.objects.using(client.using).filter(operation=row.name, status=JobStatus.PENDING)
    if row.scope:
        pending = pending.filter(scope=row.scope)
    queues = pending.order_by().values_list("queue", flat=True).distinct()
    return list(queues[:NOTIFIED_QUEUES_MAX])
