"""Schedule rows: pause and resume, and reconciliation with the code.

The definition of a schedule comes from code (``django_durable_jobs.schedules``); its row is
what operators see and what every ``runjobs`` process works from. Three writers, three sets of
columns: reconciliation writes the definition, people write ``paused_at`` (through :func:`pause`
and :func:`resume`), and the scheduler's pass writes ``last_tick_at`` and ``last_job``.

The scheduler's pass (``last_tick_at``, ``last_job``, exactly once, catch-up, overlap, broken
rows skipped) is in ``ticks.py``.

**Repair.** Reconciliation rewrites a row whose stored definition differs from the code's, also
when its definition hash still matches (a row changed by hand, or one this host cannot read):
a broken row whose declaration is valid is repaired by the next worker that reconciles.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError

from ..database.dbvendor import lock_for_update
from ..database.transactions import bounded_atomic
from ..models import Schedule, WorkerProcess
from ..rules.errors import InputInvalid
from ..rules.vocabulary import WorkerState, worker_state
from ..schedules import ScheduleSpec, could_be_name
from .client import Client, now

__all__ = ["Reconciliation", "ScheduleNotFound", "pause", "reconcile", "resume"]


class ScheduleNotFound(InputInvalid):
    """No schedule row has this name. Still ``E_JOB_INPUT_INVALID``; the subclass lets an HTTP
    API answer 404 and a CLI say "no such schedule"."""


@dataclass(frozen=True)
class Reconciliation:
    """What reconciling the declared schedules with their rows did, by schedule name."""

    inserted: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    restored: tuple[str, ...] = ()  # declared again after they had been marked removed
    removed: tuple[str, ...] = ()
    left: tuple[str, ...] = ()  # a newer live worker declares another definition: not ours
    repaired: tuple[str, ...] = ()  # the stored fields were not the declaration's: rewritten

    def __str__(self) -> str:
        parts = [
            f"{what} {', '.join(names)}"
            for what, names in (
                ("inserted", self.inserted),
                ("updated", self.updated),
                ("repaired", self.repaired),
                ("restored", self.restored),
                ("marked removed", self.removed),
                ("left to a newer worker", self.left),
            )
            if names
        ]
        return "; ".join(parts) or "nothing to change"


# -- people ------------------------------------------------------------------------------------


def pause(client: Client, name: str) -> Schedule:
    """Pause the schedule ``name``: it submits nothing until resumed. Return its row.

    Pausing a paused schedule changes nothing. The returned row's ``changed`` attribute says
    whether this call paused it (False: it already was, since ``paused_at`` by
    ``paused_by``). A name no row has raises :class:`ScheduleNotFound`.
    """
    return _set_paused(client, name, paused=True)


def resume(client: Client, name: str) -> Schedule:
    """Resume the schedule ``name`` and return its row (``changed``: whether it was paused).

    The ticks that fell due while it was paused are missed ticks: its catch-up policy
    decides which of them are still submitted.
    """
    return _set_paused(client, name, paused=False)


def _set_paused(client: Client, name: str, *, paused: bool) -> Schedule:
    if not isinstance(name, str) or not name:
        raise InputInvalid(f"A schedule name is a non-empty string; got {name!r}.")
    using = client.using
    with bounded_atomic(using):
        at = now(client)
        row = None
        if could_be_name(name):  # else no row has it, and PostgreSQL refuses a NUL byte
            rows = Schedule.objects.using(using).filter(name=name)
            row = lock_for_update(rows).first()
        if row is None:
            known = list(
                Schedule.objects.using(using).order_by("name").values_list("name", flat=True)
            )
            raise ScheduleNotFound(
                f"There is no schedule {name!r}; schedules: {', '.join(known) or 'none'}. "
                f"Schedules are declared in code and appear once a worker started."
            )
        changed = (row.paused_at is None) == paused
        if changed:
            row.paused_at = at if paused else None
            row.paused_by = (client.actor or "") if paused else ""
            row.updated_at = at
            row.save(using=using, update_fields=["paused_at", "paused_by", "updated_at"])
    row.changed = changed
    return row


# -- reconciliation ----------------------------------------------------------------------------


def reconcile(
    client: Client, declared: Mapping[str, ScheduleSpec], owner_id: str | None = None
) -> Reconciliation:
    """Bring the schedule rows in line with the schedules this process declares.

    ``owner_id`` is this process's worker row (default: the client's owner id; the row must
    exist, see ``workers.register``). Its ``schedules`` column gets ``{name: definition
    hash}`` first, so that other processes see what it declares. Then:

    * a declared schedule without a row gets one (an interval's anchor: the spec's, or now
      truncated to the whole second);
    * a row whose definition differs is updated (pause, last tick, last job and anchor are
      kept, unless the spec gives an anchor), unless a live worker that started *later*
      than this one declares another definition: this one is then an old worker of a
      rolling deploy, and the row is left to the newer one;
    * a row whose hash is the declaration's but whose stored fields are not (edited by
      hand, or broken: a cron expression or time zone this host cannot read) is rewritten
      from the declaration: *repaired*;
    * a row no live worker declares (this one included) is marked removed, never deleted.

    Each row is written in a transaction of its own. Return what changed.
    """
    using = client.using
    owner_id = owner_id or client.owner_id
    at = now(client)
    hashes = {name: spec.definition_hash for name, spec in declared.items()}
    with bounded_atomic(using):
        WorkerProcess.objects.using(using).filter(owner_id=owner_id).update(
            schedules=json.dumps(hashes, sort_keys=True)
        )
    me, others = _live_declarations(using, owner_id, at)
    started = me.started_at if me is not None else at
    done: dict[str, list[str]] = {
        "inserted": [],
        "updated": [],
        "restored": [],
        "removed": [],
        "left": [],
        "repaired": [],
    }
    for name in sorted(declared):
        spec = declared[name]
        newer = [
            declares[name]
            for worker_started, declares in others
            if worker_started > started and name in declares
        ]
        yields = any(other != spec.definition_hash for other in newer)
        outcome = _reconcile_one(using, spec, at, yields_to_newer=yields)
        if outcome:
            done[outcome].append(name)
    everyone = set(hashes).union(*(declares for _, declares in others))
    with bounded_atomic(using):
        gone = list(
            lock_for_update(
                Schedule.objects.using(using)
                .filter(removed_at__isnull=True)
                .exclude(name__in=everyone)
            ).values_list("name", flat=True)
        )
        if gone:
            Schedule.objects.using(using).filter(name__in=gone).update(removed_at=at, updated_at=at)
    done["removed"] = sorted(gone)
    return Reconciliation(**{key: tuple(names) for key, names in done.items()})


def _live_declarations(
    using: str, owner_id: str, at: datetime
) -> tuple[WorkerProcess | None, list[tuple[datetime, dict[str, str]]]]:
    """Return this process's worker row and (started_at, declared hashes) of the live others."""
    me = None
    others = []
    rows = WorkerProcess.objects.using(using).filter(stopped_at__isnull=True)
    for row in rows:
        if row.owner_id == owner_id:
            me = row
            continue
        if worker_state(row.stopped_at, row.heartbeat_at, row.lease_seconds, at) != (
            WorkerState.ALIVE
        ):
            continue
        try:
            declares = json.loads(row.schedules or "{}")
        except ValueError:
            declares = {}
        if isinstance(declares, dict):
            others.append((row.started_at, declares))
    return me, others


def _reconcile_one(using: str, spec: ScheduleSpec, at: datetime, *, yields_to_newer: bool) -> str:
    """Insert, update, repair or restore the row of ``spec``; return which ("" for nothing).

    *Repair*: the row's hash is the declaration's but a stored field is not what the
    declaration says (a row edited by hand; a time zone or cron expression changed so that
    the row is broken): the row is rewritten from the declaration.
    """
    definition = spec.row_fields()
    definition.pop("anchor", None)  # a row keeps its anchor unless the code gives one
    for _ in range(2):  # a second round when another process inserted the row meanwhile
        try:
            with bounded_atomic(using):
                rows = Schedule.objects.using(using).filter(name=spec.name)
                row = lock_for_update(rows).first()
                if row is None:
                    anchor = spec.anchor or at.replace(microsecond=0)
                    Schedule.objects.using(using).create(
                        name=spec.name,
                        anchor=anchor,
                        declared_at=at,
                        created_at=at,
                        updated_at=at,
                        **definition,
                    )
                    return "inserted"
                if row.definition_hash != spec.definition_hash:
                    if yields_to_newer:
                        return "left"
                    rows.update(**_rewritten(definition, spec, at))
                    return "updated"
                if _differs(row, definition, spec):  # changed by hand, or unreadable
                    rows.update(**_rewritten(definition, spec, at))
                    return "repaired"
                if row.removed_at is not None:
                    rows.update(removed_at=None, declared_at=at, updated_at=at)
                    return "restored"
                return ""
        except IntegrityError:  # inserted by another process between our read and insert
            continue
    return ""


def _rewritten(definition: dict[str, Any], spec: ScheduleSpec, at: datetime) -> dict[str, Any]:
    """Return the changes that make a row the declaration ``spec`` again (declared ``at``)."""
    changes = {**definition, "declared_at": at, "updated_at": at, "removed_at": None}
    if spec.anchor is not None:
        changes["anchor"] = spec.anchor
    return changes


def _differs(row: Schedule, definition: dict[str, Any], spec: ScheduleSpec) -> bool:
    """Return whether a stored field of ``row`` is not what the declaration ``spec`` says."""
    if spec.anchor is not None and row.anchor != spec.anchor:
        return True
    return any(getattr(row, key) != value for key, value in definition.items())
