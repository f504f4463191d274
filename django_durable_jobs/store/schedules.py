"""Schedule rows: pause and resume, reconciliation with the code, and the scheduler's pass.

The definition of a schedule comes from code (``django_durable_jobs.schedules``); its row is
what operators see and what every ``runjobs`` process works from. Three writers, three sets of
columns: reconciliation writes the definition, people write ``paused_at`` (through
:meth:`~ScheduleMixin.pause_schedule` and :meth:`~ScheduleMixin.resume_schedule`), and the
scheduler's pass writes ``last_tick_at`` and ``last_job``.

**Exactly once without a leader.** Every process may run the pass at the same moment. Each tick
is enqueued in a transaction of its own that locks the schedule's row, checks that no one
handled the tick yet (``last_tick_at < tick``), submits the job through :meth:`defer` (quotas,
the NOTIFY wake-up and idempotency apply as to any submission) with the key
``tick_key(name, tick)``, and advances ``last_tick_at``. The lock serialises the processes on
one schedule for one tick, never across submissions; the idempotency key makes a second job for
the tick impossible even without it.

**Missed ticks and catch-up.** A tick is *on time* while fewer than ``missed_after`` seconds
(``MISSED_AFTER``, 10 s, or twice the scheduler's pass interval when that is longer) have passed
since it became due; after that it is *missed*: no process was there to enqueue it (workers were
down, the schedule was paused or removed). On-time ticks are always enqueued, oldest first. Of
the missed ones, the catch-up policy decides: ``latest`` enqueues only the newest missed tick,
``all`` the newest ``catch_up_limit`` of them (oldest first), ``none`` none. Ticks that are not
enqueued are passed over: ``last_tick_at`` moves past them.

**Overlap.** With ``overlap="skip"`` (the default) a tick is skipped, and ``last_tick_at`` moves
past it, while the schedule's last job is pending or running; this holds for caught-up ticks too,
so catch-up ``all`` enqueues several ticks in one pass only with ``overlap="allow"``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError
from django.db.models import Q

from ..conf import jobs_settings
from ..dbvendor import lock_for_update
from ..errors import CapacityReached, InputInvalid, JobError
from ..models import Job, Schedule, WorkerProcess
from ..schedules import ScheduleSpec, latest_tick, newest_ticks, tick_key, ticks
from ..terminal import printable
from ..transactions import bounded_atomic
from ..values import Submission
from ..vocabulary import JobStatus, WorkerState, worker_state
from .base import StoreBase

logger = logging.getLogger("django_durable_jobs.worker")

__all__ = [
    "MISSED_AFTER",
    "Reconciliation",
    "ScheduleMixin",
    "ScheduleNotFound",
    "TickPass",
]

MISSED_AFTER = 10.0  # seconds after which a due tick no process enqueued counts as missed
UNFINISHED = (JobStatus.PENDING, JobStatus.RUNNING)


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

    def __str__(self) -> str:
        parts = [
            f"{what} {', '.join(names)}"
            for what, names in (
                ("inserted", self.inserted),
                ("updated", self.updated),
                ("restored", self.restored),
                ("marked removed", self.removed),
                ("left to a newer worker", self.left),
            )
            if names
        ]
        return "; ".join(parts) or "nothing to change"


@dataclass
class TickPass:
    """What one scheduler pass did: counts, and per schedule the refusals that stopped it."""

    enqueued: int = 0  # ticks this pass submitted (not those another process handled first)
    skipped: int = 0  # ticks passed over because the previous job still ran (overlap "skip")
    passed_over: int = 0  # missed ticks the catch-up policy did not enqueue
    refused: dict[str, str] = field(default_factory=dict)  # schedule name → the refusal

    def __str__(self) -> str:
        text = f"enqueued {self.enqueued}, skipped {self.skipped}, passed over {self.passed_over}"
        if self.refused:
            text += f", refused: {', '.join(sorted(self.refused))}"
        return text


class ScheduleMixin(StoreBase):
    """Write schedule rows: pause, resume, reconcile with the code, enqueue due ticks."""

    # -- people ----------------------------------------------------------------------------------

    def pause_schedule(self, name: str) -> Schedule:
        """Pause the schedule ``name``: it enqueues nothing until resumed. Return its row.

        Pausing a paused schedule changes nothing. The returned row's ``changed`` attribute says
        whether this call paused it (False: it already was, since ``paused_at`` by
        ``paused_by``). A name no row has raises :class:`ScheduleNotFound`.
        """
        return self._set_paused(name, paused=True)

    def resume_schedule(self, name: str) -> Schedule:
        """Resume the schedule ``name`` and return its row (``changed``: whether it was paused).

        The ticks that fell due while it was paused are missed ticks: its catch-up policy
        decides which of them are still enqueued.
        """
        return self._set_paused(name, paused=False)

    def _set_paused(self, name: str, *, paused: bool) -> Schedule:
        if not isinstance(name, str) or not name:
            raise InputInvalid(f"A schedule name is a non-empty string; got {name!r}.")
        with bounded_atomic(self.using):
            now = self._now()
            row = lock_for_update(Schedule.objects.using(self.using).filter(name=name)).first()
            if row is None:
                known = list(
                    Schedule.objects.using(self.using)
                    .order_by("name")
                    .values_list("name", flat=True)
                )
                raise ScheduleNotFound(
                    f"There is no schedule {name!r}; schedules: {', '.join(known) or 'none'}. "
                    f"Schedules are declared in code and appear once a worker started."
                )
            changed = (row.paused_at is None) == paused
            if changed:
                row.paused_at = now if paused else None
                row.paused_by = (self.actor or "") if paused else ""
                row.updated_at = now
                row.save(using=self.using, update_fields=["paused_at", "paused_by", "updated_at"])
        row.changed = changed
        return row

    # -- reconciliation --------------------------------------------------------------------------

    def reconcile_schedules(
        self, declared: Mapping[str, ScheduleSpec], owner_id: str | None = None
    ) -> Reconciliation:
        """Bring the schedule rows in line with the schedules this process declares.

        ``owner_id`` is this process's worker row (default: this store's owner id; the row must
        exist, see ``register_worker``). Its ``schedules`` column gets ``{name: definition
        hash}`` first, so that other processes see what it declares. Then:

        * a declared schedule without a row gets one (an interval's anchor: the spec's, or now
          truncated to the whole second);
        * a row whose definition differs is updated (pause, last tick, last job and anchor are
          kept, unless the spec gives an anchor), unless a live worker that started *later*
          than this one declares another definition: this one is then an old worker of a
          rolling deploy, and the row is left to the newer one;
        * a row no live worker declares (this one included) is marked removed, never deleted.

        Each row is written in a transaction of its own. Return what changed.
        """
        owner_id = owner_id or self.owner_id
        now = self._now()
        hashes = {name: spec.definition_hash for name, spec in declared.items()}
        with bounded_atomic(self.using):
            WorkerProcess.objects.using(self.using).filter(owner_id=owner_id).update(
                schedules=json.dumps(hashes, sort_keys=True)
            )
        me, others = self._live_declarations(owner_id, now)
        started = me.started_at if me is not None else now
        done: dict[str, list[str]] = {
            "inserted": [],
            "updated": [],
            "restored": [],
            "removed": [],
            "left": [],
        }
        for name in sorted(declared):
            spec = declared[name]
            newer = [
                declares[name]
                for worker_started, declares in others
                if worker_started > started and name in declares
            ]
            yields = any(other != spec.definition_hash for other in newer)
            outcome = self._reconcile_one(spec, now, yields_to_newer=yields)
            if outcome:
                done[outcome].append(name)
        everyone = set(hashes).union(*(declares for _, declares in others))
        with bounded_atomic(self.using):
            gone = list(
                lock_for_update(
                    Schedule.objects.using(self.using)
                    .filter(removed_at__isnull=True)
                    .exclude(name__in=everyone)
                ).values_list("name", flat=True)
            )
            if gone:
                Schedule.objects.using(self.using).filter(name__in=gone).update(
                    removed_at=now, updated_at=now
                )
        done["removed"] = sorted(gone)
        return Reconciliation(**{key: tuple(names) for key, names in done.items()})

    def _live_declarations(
        self, owner_id: str, now: datetime
    ) -> tuple[WorkerProcess | None, list[tuple[datetime, dict[str, str]]]]:
        """Return this process's worker row and (started_at, declared hashes) of the live others."""
        me = None
        others = []
        rows = WorkerProcess.objects.using(self.using).filter(stopped_at__isnull=True)
        for row in rows:
            if row.owner_id == owner_id:
                me = row
                continue
            if worker_state(row.stopped_at, row.heartbeat_at, row.lease_seconds, now) != (
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

    def _reconcile_one(self, spec: ScheduleSpec, now: datetime, *, yields_to_newer: bool) -> str:
        """Insert, update or restore the row of ``spec``; return which ("" for nothing)."""
        definition = spec.row_fields()
        definition.pop("anchor", None)  # a row keeps its anchor unless the code gives one
        for _ in range(2):  # a second round when another process inserted the row meanwhile
            try:
                with bounded_atomic(self.using):
                    rows = Schedule.objects.using(self.using).filter(name=spec.name)
                    row = lock_for_update(rows).first()
                    if row is None:
                        anchor = spec.anchor or now.replace(microsecond=0)
                        Schedule.objects.using(self.using).create(
                            name=spec.name,
                            anchor=anchor,
                            declared_at=now,
                            created_at=now,
                            updated_at=now,
                            **definition,
                        )
                        return "inserted"
                    if row.definition_hash != spec.definition_hash:
                        if yields_to_newer:
                            return "left"
                        changes = {**definition, "declared_at": now, "updated_at": now}
                        changes["removed_at"] = None
                        if spec.anchor is not None:
                            changes["anchor"] = spec.anchor
                        rows.update(**changes)
                        return "updated"
                    if row.removed_at is not None:
                        rows.update(removed_at=None, declared_at=now, updated_at=now)
                        return "restored"
                    return ""
            except IntegrityError:  # inserted by another process between our read and insert
                continue
        return ""

    # -- the scheduler's pass ----------------------------------------------------------------------

    def enqueue_due_ticks(
        self, now: datetime | None = None, *, missed_after: float = MISSED_AFTER
    ) -> TickPass:
        """Enqueue the due ticks of every active schedule (not paused, not removed); one pass.

        For each schedule: the ticks after its ``last_tick_at`` (or, before its first, after the
        row was created) up to ``now`` (default: the store's clock), less the missed ones its
        catch-up policy drops (see the module's docstring, ``missed_after`` in seconds). Each is
        enqueued in a transaction of its own with the idempotency key ``tick_key(name, tick)``;
        with overlap ``skip`` a tick is skipped (logged at INFO) while the schedule's last job is
        pending or running. ``last_tick_at`` only moves forward.

        A quota's refusal (``CapacityReached``) is logged at WARNING and ends that schedule's
        pass without advancing ``last_tick_at``: the tick is tried again on the next pass, not
        lost. Any other refusal (``JobError``, e.g. an operation this process does not know) is
        logged at ERROR, the same way. A scoped store only serves its scope's schedules.
        Database errors propagate: the caller retries the whole pass later.
        """
        now = now or self._now()
        rows = Schedule.objects.using(self.using).filter(
            paused_at__isnull=True, removed_at__isnull=True
        )
        summary = TickPass()
        for row in rows.order_by("name"):
            if self.scope is not None and (row.scope or self._default_scope()) != self.scope:
                continue
            self._enqueue_schedule(row, now, missed_after, summary)
        return summary

    def _enqueue_schedule(
        self, row: Schedule, now: datetime, missed_after: float, summary: TickPass
    ) -> None:
        after = row.last_tick_at or row.created_at
        cutoff = now - timedelta(seconds=missed_after)
        # Missed ticks: (after, cutoff]; only the newest few can be enqueued.
        keep = {"latest": 1, "all": row.catch_up_limit, "none": 0}.get(row.catch_up, 1)
        missed = list(newest_ticks(row, after, cutoff, keep)) if cutoff > after else []
        # The newest missed tick the policy drops (None when it drops none).
        older = missed[0] - timedelta(microseconds=1) if missed else cutoff
        newest_missed = _newest_tick(row, after, older) if cutoff > after else None
        passed_over = newest_missed is not None
        on_time = _on_time_ticks(row, max(after, cutoff), now)
        due = [*missed, *on_time]
        name = printable(row.name, keep_newlines=False)
        if not due:
            if passed_over:  # catch-up "none": move past the missed ticks
                self._advance(row, newest_missed)
                summary.passed_over += 1
                logger.info(
                    "schedule %s: missed tick(s) up to %s passed over (catch-up %s)",
                    name,
                    _iso(newest_missed),
                    row.catch_up,
                )
            return
        if passed_over:
            summary.passed_over += 1
            logger.info(
                "schedule %s: older missed ticks passed over (catch-up %s, limit %d)",
                name,
                row.catch_up,
                row.catch_up_limit,
            )
        for tick in due:
            try:
                outcome = self._enqueue_tick(row.pk, tick)
            except CapacityReached as exc:
                summary.refused[row.name] = exc.message
                logger.warning(
                    "schedule %s: tick %s refused, tried again next pass: %s",
                    name,
                    _iso(tick),
                    printable(exc.message, keep_newlines=False),
                )
                return
            except JobError as exc:
                summary.refused[row.name] = exc.message
                logger.error(
                    "schedule %s: tick %s refused (%s), tried again next pass: %s",
                    name,
                    _iso(tick),
                    exc.code,
                    printable(exc.message, keep_newlines=False),
                )
                return
            if outcome is None:  # paused or removed meanwhile
                return
            if outcome == "skipped":
                summary.skipped += 1
                logger.info(
                    "schedule %s: tick %s skipped, the previous job still runs (overlap skip)",
                    name,
                    _iso(tick),
                )
            elif outcome != "handled":
                summary.enqueued += 1
                logger.info("schedule %s: tick %s enqueued as job %s", name, _iso(tick), outcome)

    def _enqueue_tick(self, pk: Any, tick: datetime) -> str | None:
        """Enqueue one tick under the schedule row's lock; return the job id or what happened.

        ``"handled"``: another process enqueued (or skipped) it already; ``"skipped"``: overlap;
        None: the schedule was paused or removed meanwhile.
        """
        with bounded_atomic(self.using):
            row = lock_for_update(Schedule.objects.using(self.using).filter(pk=pk)).first()
            if row is None or row.paused_at is not None or row.removed_at is not None:
                return None
            if row.last_tick_at is not None and row.last_tick_at >= tick:
                return "handled"
            if row.overlap == "skip" and row.last_job_id is not None:
                running = (
                    Job.objects.using(self.using)
                    .filter(pk=row.last_job_id, status__in=UNFINISHED)
                    .exists()
                )
                if running:
                    self._advance_locked(row, tick)
                    return "skipped"
            job = self.defer(
                row.operation,
                Submission(row.scope, tick_key(row.name, tick), row.payload),
                queue=row.queue,
                priority=row.priority,
                in_caller_transaction=True,
            )
            self._advance_locked(row, tick, job)
            return str(job.pk)

    def _advance(self, row: Schedule, tick: datetime) -> None:
        with bounded_atomic(self.using):
            _monotonic(Schedule.objects.using(self.using).filter(pk=row.pk), tick).update(
                last_tick_at=tick
            )

    def _advance_locked(self, row: Schedule, tick: datetime, job: Job | None = None) -> None:
        changes: dict[str, Any] = {"last_tick_at": tick}
        if job is not None:
            changes["last_job"] = job
        _monotonic(Schedule.objects.using(self.using).filter(pk=row.pk), tick).update(**changes)

    def _default_scope(self) -> str:
        return jobs_settings.DEFAULT_SCOPE


def _monotonic(rows, tick: datetime):
    """Return ``rows`` whose last tick is before ``tick``: ``last_tick_at`` never goes back."""
    return rows.filter(Q(last_tick_at__isnull=True) | Q(last_tick_at__lt=tick))


def _on_time_ticks(row: Schedule, after: datetime, until: datetime) -> list[datetime]:
    return list(ticks(row, after, until)) if until > after else []


def _newest_tick(row: Schedule, after: datetime, until: datetime) -> datetime | None:
    return latest_tick(row, until, after=after)


def _iso(tick: datetime) -> str:
    return tick.isoformat().replace("+00:00", "Z")
