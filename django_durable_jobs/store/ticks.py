"""Schedule ticks: the scheduler's pass submits the due ticks of every active schedule, once.

**Exactly once without a leader.** Every process may run the pass at the same moment. Each tick
is submitted in a transaction of its own that locks the schedule's row, checks that no one
handled the tick yet (``last_tick_at < tick``), submits the job through ``submitting.defer``
(quotas, the NOTIFY wake-up and idempotency apply as to any submission) with the key
``tick_key(name, tick)``, and advances ``last_tick_at``. The lock serialises the processes on
one schedule for one tick, never across submissions; the idempotency key makes a second job for
the tick impossible even without it.

**Missed ticks and catch-up.** A tick is *on time* while fewer than ``missed_after`` seconds
(``MISSED_AFTER``, 10 s, or twice the scheduler's pass interval when that is longer) have passed
since it became due; after that it is *missed*: no process was there to submit it (workers were
down, the schedule was paused or removed). On-time ticks are always submitted, oldest first. Of
the missed ones, the catch-up policy decides: ``latest`` submits only the newest missed tick,
``all`` the newest ``catch_up_limit`` of them (oldest first), ``none`` none. Ticks that are not
submitted are passed over: ``last_tick_at`` moves past them.

**Overlap.** With ``overlap="skip"`` (the default) a tick is skipped, and ``last_tick_at`` moves
past it, while the schedule's last job is pending or running; this holds for caught-up ticks too,
so catch-up ``all`` submits several ticks in one pass only with ``overlap="allow"``.

**Broken rows.** A row this host cannot read (``schedules.row_problem``: a time zone it does not
know, a cron expression changed by hand) is skipped and reported in ``TickPass.broken``; every
other schedule is submitted as usual. Nothing of the broken row is written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError
from django.db.models import Q

from ..database.dbvendor import lock_for_update
from ..database.transactions import bounded_atomic
from ..formatting.terminal import printable
from ..models import Job, Schedule
from ..rules.conf import jobs_settings
from ..rules.errors import CapacityReached, JobError
from ..rules.values import Submission
from ..rules.vocabulary import JobStatus
from ..schedules import latest_tick, newest_ticks, row_problem, tick_failure, tick_key, ticks
from . import submitting
from .client import Client, now

logger = logging.getLogger("django_durable_jobs.worker")

__all__ = ["MISSED_AFTER", "TickPass", "submit_due"]

MISSED_AFTER = 10.0  # seconds after which a due tick no process submitted counts as missed
UNFINISHED = (JobStatus.PENDING, JobStatus.RUNNING)


@dataclass
class TickPass:
    """What one scheduler pass did: counts, per schedule the refusals that stopped it, and the
    broken rows it skipped."""

    enqueued: int = 0  # ticks this pass submitted (not those another process handled first)
    skipped: int = 0  # ticks passed over because the previous job still ran (overlap "skip")
    passed_over: int = 0  # missed ticks the catch-up policy did not enqueue
    refused: dict[str, str] = field(default_factory=dict)  # schedule name → the refusal
    broken: dict[str, str] = field(default_factory=dict)  # schedule name → why it is unreadable

    def __str__(self) -> str:
        text = f"enqueued {self.enqueued}, skipped {self.skipped}, passed over {self.passed_over}"
        if self.refused:
            text += f", refused: {', '.join(sorted(self.refused))}"
        if self.broken:
            text += f", broken: {', '.join(sorted(self.broken))}"
        return text


def submit_due(
    client: Client, at: datetime | None = None, *, missed_after: float = MISSED_AFTER
) -> TickPass:
    """Submit the due ticks of every active schedule (not paused, not removed); one pass.

    For each schedule: the ticks after its ``last_tick_at`` (or, before its first, after the
    row was created) up to ``at`` (default: the client's clock), less the missed ones its
    catch-up policy drops (see the module's docstring, ``missed_after`` in seconds). Each is
    submitted in a transaction of its own with the idempotency key ``tick_key(name, tick)``;
    with overlap ``skip`` a tick is skipped (logged at INFO) while the schedule's last job is
    pending or running. ``last_tick_at`` only moves forward.

    A quota's refusal (``CapacityReached``) is logged at WARNING and ends that schedule's
    pass without advancing ``last_tick_at``: the tick is tried again on the next pass, not
    lost. Any other refusal (``JobError``, e.g. an operation this process does not know) is
    logged at ERROR, the same way. A scoped client only serves its scope's schedules.

    A row this host cannot read (``row_problem``), or whose ticks fail to compute, is
    skipped and named in the summary's ``broken`` with the reason and the fix; it is not
    logged here, so that a caller running a pass every second reports it once (the
    scheduler does). The other schedules are submitted as usual. Database errors propagate:
    the caller retries the whole pass later.
    """
    at = at or now(client)
    rows = Schedule.objects.using(client.using).filter(
        paused_at__isnull=True, removed_at__isnull=True
    )
    summary = TickPass()
    for row in rows.order_by("name"):
        if client.scope is not None and (row.scope or jobs_settings.DEFAULT_SCOPE) != client.scope:
            continue
        problem = row_problem(row)
        if problem is not None:
            summary.broken[row.name] = problem
            continue
        try:
            _submit_schedule(client, row, at, missed_after, summary)
        except DatabaseError:
            raise
        except Exception as exc:  # noqa: BLE001 - one row never stops the others
            logger.debug("schedule %r: ticks failed", row.name, exc_info=True)
            summary.broken[row.name] = tick_failure(row.name, exc)
    return summary


def _submit_schedule(
    client: Client, row: Schedule, at: datetime, missed_after: float, summary: TickPass
) -> None:
    after = row.last_tick_at or row.created_at
    cutoff = at - timedelta(seconds=missed_after)
    # Missed ticks: (after, cutoff]; only the newest few can be submitted.
    keep = {"latest": 1, "all": row.catch_up_limit, "none": 0}.get(row.catch_up, 1)
    missed = list(newest_ticks(row, after, cutoff, keep)) if cutoff > after else []
    # The newest missed tick the policy drops (None when it drops none).
    older = missed[0] - timedelta(microseconds=1) if missed else cutoff
    newest_missed = _newest_tick(row, after, older) if cutoff > after else None
    passed_over = newest_missed is not None
    on_time = _on_time_ticks(row, max(after, cutoff), at)
    due = [*missed, *on_time]
    name = printable(row.name, keep_newlines=False)
    if not due:
        if passed_over:  # catch-up "none": move past the missed ticks
            _advance(client.using, row, newest_missed)
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
            outcome = _submit_tick(client, row.pk, tick)
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


def _submit_tick(client: Client, pk: Any, tick: datetime) -> str | None:
    """Submit one tick under the schedule row's lock; return the job id or what happened.

    ``"handled"``: another process submitted (or skipped) it already; ``"skipped"``: overlap;
    None: the schedule was paused or removed meanwhile.
    """
    using = client.using
    with bounded_atomic(using):
        row = lock_for_update(Schedule.objects.using(using).filter(pk=pk)).first()
        if row is None or row.paused_at is not None or row.removed_at is not None:
            return None
        if row.last_tick_at is not None and row.last_tick_at >= tick:
            return "handled"
        if row.overlap == "skip" and row.last_job_id is not None:
            running = (
                Job.objects.using(using).filter(pk=row.last_job_id, status__in=UNFINISHED).exists()
            )
            if running:
                _advance_locked(using, row, tick)
                return "skipped"
        job = submitting.defer(
            client,
            row.operation,
            Submission(row.scope, tick_key(row.name, tick), row.payload),
            queue=row.queue,
            priority=row.priority,
            in_caller_transaction=True,
            unique_by_input=True,  # under unique_while/unique_for a tick coalesces by its input
        )
        _advance_locked(using, row, tick, job)
        return str(job.pk)


def _advance(using: str, row: Schedule, tick: datetime) -> None:
    with bounded_atomic(using):
        _monotonic(Schedule.objects.using(using).filter(pk=row.pk), tick).update(last_tick_at=tick)


def _advance_locked(using: str, row: Schedule, tick: datetime, job: Job | None = None) -> None:
    changes: dict[str, Any] = {"last_tick_at": tick}
    if job is not None:
        changes["last_job"] = job
    _monotonic(Schedule.objects.using(using).filter(pk=row.pk), tick).update(**changes)


def _monotonic(rows, tick: datetime):
    """Return ``rows`` whose last tick is before ``tick``: ``last_tick_at`` never goes back."""
    return rows.filter(Q(last_tick_at__isnull=True) | Q(last_tick_at__lt=tick))


def _on_time_ticks(row: Schedule, after: datetime, until: datetime) -> list[datetime]:
    return list(ticks(row, after, until)) if until > after else []


def _newest_tick(row: Schedule, after: datetime, until: datetime) -> datetime | None:
    return latest_tick(row, until, after=after)


def _iso(tick: datetime) -> str:
    return tick.isoformat().replace("+00:00", "Z")
