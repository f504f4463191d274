"""The scheduler: every ``runjobs`` process enqueues the due ticks of the declared schedules.

There is no leader. Each process, unless started with ``--no-schedules``, checks the declared
schedules before it starts (:func:`declared`: a bad cron expression or time zone refuses the
start, naming the schedule), reconciles them with their rows once its worker row exists, then
runs a pass about every second in a thread of its own (:class:`Scheduler`) until the worker
stops. What makes a tick's job exactly once across processes is the store's
(``DurableJobStore.enqueue_due_ticks``): a transaction per tick under the schedule row's lock,
and an idempotency key built from the schedule's name and the tick's time.

A database error is logged at WARNING and the pass is tried again a second later; the scheduler
never stops the worker. ``--burst`` runs one pass (after reconciling) before it drains.

A schedule row this process cannot read (a time zone this host does not know, a cron expression
changed by hand: ``schedules.row_problem``) is skipped by every pass while the others go on
ticking. It is logged once, at ERROR, with its name and the fix, when a pass first finds it
broken (and again only if its reason changes, or after it was readable again), not every second.
Reconciliation repairs it when this process declares it validly.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import DatabaseError

from ..formatting.terminal import printable
from ..rules.errors import JobError
from ..store import MISSED_AFTER, DurableJobStore, Reconciliation, TickPass
from .connections import close_thread_connections, reset_broken_connections

if TYPE_CHECKING:
    from ..schedules import ScheduleSpec

logger = logging.getLogger("django_durable_jobs.worker")

__all__ = ["PASS_INTERVAL", "RECONCILE_EVERY", "Scheduler", "declared"]

PASS_INTERVAL = 1.0  # seconds between two passes
RECONCILE_EVERY = 60  # passes between two reconciliations (rows a stopped worker left behind)


def declared() -> dict[str, ScheduleSpec]:
    """Return the declared schedules, checked; raise ``InputInvalid`` naming a bad one.

    Pure: reads the settings and the operation registry, never the database.
    """
    from ..schedules import declared_schedules

    return declared_schedules()


class Scheduler:
    """Reconcile the declared schedules, then run a scheduler pass every ``interval`` seconds.

    ``owner_id`` is the worker row this process declares its schedules in. The passes use a
    store of their own, unscoped: a worker started with ``--scope`` still enqueues every
    schedule's ticks (each into the schedule's own scope).
    """

    def __init__(
        self,
        schedules: dict[str, ScheduleSpec],
        *,
        owner_id: str,
        actor: str | None,
        using: str,
        clock: Callable[[], datetime] | None = None,
        interval: float = PASS_INTERVAL,
        stopping: threading.Event | None = None,
    ) -> None:
        self.schedules = schedules
        self.owner_id = owner_id
        self.store = DurableJobStore(actor=actor, using=using, clock=clock)
        self.interval = interval
        self.missed_after = max(MISSED_AFTER, 2 * interval)
        self.reconciled = False
        self.passes = 0
        self.broken: dict[str, str] = {}  # schedule name → the reason logged for it
        self.passed = threading.Event()  # tests wait on this: a pass completed
        self.stopping = stopping or threading.Event()  # the worker's: no pass once it stops
        self._stop = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the passes in a daemon thread (the first at once)."""
        self.thread = threading.Thread(
            target=self._loop, name="durable-jobs-scheduler", daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        """Stop after the pass in progress, if any (setting ``stopping`` does the same)."""
        self._stop.set()

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the thread to end."""
        if self.thread is not None:
            self.thread.join(timeout)

    def run_once(self) -> TickPass | None:
        """Reconcile when not done yet (or due again), then run one pass; None if it failed.

        Never raises: a database error is logged at WARNING, anything else with its
        traceback, and the next call tries again.
        """
        try:
            if not self.reconciled or self.passes % RECONCILE_EVERY == 0:
                self._reconcile()
            summary = self.store.enqueue_due_ticks(missed_after=self.missed_after)
        except DatabaseError as exc:
            logger.warning(
                "scheduler pass failed, tried again in %gs: %s",
                self.interval,
                printable(" ".join(f"{type(exc).__name__}: {exc}".split()), keep_newlines=False),
            )
            reset_broken_connections()
            return None
        except Exception:  # noqa: BLE001 - the scheduler must never take the worker down
            logger.exception("scheduler pass failed, tried again in %gs", self.interval)
            return None
        finally:
            self.passes += 1
        self._report_broken(summary.broken)
        self.passed.set()
        return summary

    def _report_broken(self, broken: dict[str, str]) -> None:
        """Log each schedule a pass found broken once, and each one that no longer is."""
        for name in sorted(set(self.broken) - set(broken)):
            logger.info(
                "schedule %s: no longer skipped as broken (repaired, paused or removed)",
                printable(name, keep_newlines=False),
            )
        for name, problem in sorted(broken.items()):
            if self.broken.get(name) != problem:
                logger.error(
                    "schedule %s is broken and skipped: %s",
                    printable(name, keep_newlines=False),
                    printable(problem, keep_newlines=False),
                )
        self.broken = dict(broken)

    def _reconcile(self) -> Reconciliation:
        result = self.store.reconcile_schedules(self.schedules, owner_id=self.owner_id)
        if not self.reconciled or str(result) != "nothing to change":
            logger.info(
                "schedules reconciled (%d declared here): %s",
                len(self.schedules),
                printable(str(result), keep_newlines=False),
            )
        self.reconciled = True
        return result

    def _loop(self) -> None:
        try:
            while not (self._stop.is_set() or self.stopping.is_set()):
                self.run_once()
                self._stop.wait(self.interval)
        finally:
            close_thread_connections()


def refusal(exc: JobError) -> str:
    """Return the one-line message ``runjobs`` gives for a bad schedule declaration."""
    return f"{exc.message} runjobs did not start (use --no-schedules to run without schedules)."
