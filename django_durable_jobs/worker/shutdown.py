"""Stopping a worker: signals, the grace period, releasing unstarted claims, signing off."""

from __future__ import annotations

import logging
import queue
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.db import DatabaseError

from ..rules.errors import LeaseLost
from ..rules.vocabulary import AttemptOutcomeChoice
from .connections import reset_broken_connections
from .held import Held, HeldState
from .holdings import Holdings
from .reports import AttemptReport
from .signals import relay_signals

if TYPE_CHECKING:
    from ..store import DurableJobStore

logger = logging.getLogger("django_durable_jobs.worker")

# How ``runjobs --processes`` passes a first and a second SIGTERM/SIGINT on to its children.
PARENT_STOP = signal.SIGUSR1
PARENT_CANCEL = signal.SIGUSR2


def ignore_parent_requests() -> None:
    """Ignore ``PARENT_STOP`` and ``PARENT_CANCEL`` until a handler is installed for them.

    For a ``runjobs`` process that ends with its worker, called just before the worker installs
    its handlers, so that undoing them restores this instead of the default action. The parent
    of ``--processes`` repeats its request each second, for a child that was still starting and
    missed it; a repeat that arrived after the worker had stopped would otherwise end the child
    by the signal ("terminate", in whichever thread took it) instead of with its own exit status.
    """
    for signum in (PARENT_STOP, PARENT_CANCEL):
        signal.signal(signum, signal.SIG_IGN)


class Shutdown:
    """A worker's graceful stop: stop claiming, release what never started, cancel on request.

    Given what it acts on: the worker's ``store``, ``holdings`` (whose lock guards ``unstarted``
    too), prefetch ``buffer``, ``grace`` period, ``wake`` (the fetch loop's event), ``on_ended``
    (reports a released claim as ended) and ``abandoned_running`` (how many abandoned job
    threads still run, for the log). ``stopping`` is set by the first stop request,
    ``cancel_requested`` by one that also cancels what runs.
    """

    def __init__(
        self,
        store: DurableJobStore,
        holdings: Holdings,
        buffer: queue.SimpleQueue[Held | None],
        *,
        grace: float,
        wake: threading.Event,
        on_ended: Callable[[Held, AttemptReport], object],
        abandoned_running: Callable[[], int],
    ) -> None:
        self.store = store
        self.holdings = holdings
        self.buffer = buffer
        self.grace = grace
        self.wake = wake
        self.on_ended = on_ended
        self.abandoned_running = abandoned_running
        self.stopping = threading.Event()
        self.cancel_requested = threading.Event()  # second signal: cancel what still runs
        self.deadline: float | None = None  # time.monotonic() when the grace period ends
        self.announced = False
        self.unstarted: list[Held] = []  # taken from the buffer after the stop: to release

    def request(self, *, cancel_running: bool = False) -> None:
        """Stop claiming; let running jobs finish within the grace period (or cancel them).

        Only sets events (called from the signal relay thread, never inside a signal handler:
        see ``signals.py``); the fetch loop does the database work.
        """
        if not self.stopping.is_set():
            self.deadline = time.monotonic() + self.grace
            self.stopping.set()
        if cancel_running:
            self.cancel_requested.set()
        self.wake.set()

    def set_aside(self, entry: Held) -> bool:
        """Keep ``entry`` for release when stopping (its job thread must not start it).

        Return False, doing nothing, when the worker is not stopping. Called under the
        holdings' lock.
        """
        if not self.stopping.is_set():
            return False
        self.unstarted.append(entry)
        self.wake.set()
        return True

    def step(self) -> bool:
        """Do one round of the graceful stop; return True when the fetch loop may end.

        Claims no job thread started yet are released at once, so no lease is left to expire;
        running jobs get the grace period; outcomes are flushed before the worker signs off.
        """
        if not self.announced:
            self.announced = True
            running = self.holdings.counts[HeldState.RUNNING]
            logger.info("stopping: %d job(s) still running", running)
            if still_running := self.abandoned_running():
                logger.warning(
                    "stopping: %d abandoned job thread(s) still running; they end with the process",
                    still_running,
                )
        self._release_unstarted()
        if self.cancel_requested.is_set():
            self._cancel_running()
        if not self.holdings:
            return True
        if self.deadline is not None and time.monotonic() >= self.deadline:
            logger.warning("grace period over; leaving %d job(s) to expire", len(self.holdings))
            return True
        self.wake.wait(0.1)
        self.wake.clear()
        return False

    def _release_unstarted(self) -> None:
        """Hand back every buffered claim (none of its code ran) in one transaction."""
        while True:
            try:
                entry = self.buffer.get_nowait()
            except queue.Empty:
                break
            if entry is not None:
                with self.holdings.lock:
                    self.unstarted.append(entry)
        with self.holdings.lock:
            entries, self.unstarted = self.unstarted, []
        if not entries:
            return
        try:
            released = self.store.release([entry.lease for entry in entries])
        except DatabaseError:
            logger.warning("could not release unstarted jobs; retrying", exc_info=True)
            reset_broken_connections()
            # One at a time next: the database may refuse them only together (one statement
            # larger than MariaDB's max_allowed_packet when their rows are large).
            released, failed = 0, []
            for index, entry in enumerate(entries):
                try:
                    released += self.store.release([entry.lease])
                except DatabaseError:  # unavailable after all: the rest on the next pass
                    reset_broken_connections()
                    failed = entries[index:]
                    break
            with self.holdings.lock:
                self.unstarted.extend(failed)
            entries = [entry for entry in entries if entry not in failed]
            if not entries:
                return
        logger.info("released %d claimed job(s) that never started", released)
        for entry in entries:
            self.on_ended(entry, AttemptReport.of(entry.claim, AttemptOutcomeChoice.RELEASED, 0.0))

    def _cancel_running(self) -> None:
        """Record a cancellation request for every running job, then tell its executor.

        The request is recorded first: an executor that acknowledges with ``JobCancelled``
        ends ``cancelled`` only when a request exists (otherwise the job would be failed).
        A heartbeat just before proves the lease is still ours, so a worker that lost a job to
        another never asks to cancel the other's attempt. A database error leaves the rest for
        the next pass of the fetch loop.
        """
        entries = [
            e
            for e in self.holdings.entries()
            if e.state == HeldState.RUNNING and not e.cancel_recorded
        ]
        for entry in entries:
            try:
                self.store.heartbeat(entry.lease)
                self.store.request_cancel(entry.lease.job_id)
                logger.info("job %s cancellation requested (second signal)", entry.lease.job_id)
            except LeaseLost:
                pass  # no longer ours: stop the executor, whose writes are refused anyway
            except DatabaseError:
                logger.warning("cancellation request failed: database unavailable", exc_info=True)
                reset_broken_connections()
                return
            entry.cancel_recorded = True
            entry.cancel.set()

    def install_signal_handlers(self) -> Callable[[], None]:
        """First SIGTERM/SIGINT: stop claiming. Second: also request cancellation of jobs.

        ``runjobs --processes`` passes its own signals on as SIGUSR1 (stop claiming) and SIGUSR2
        (also cancel), counted apart from SIGTERM/SIGINT: a child that gets SIGTERM from a
        service manager that signals every process of the service (systemd's default
        ``KillMode=control-group``) and SIGUSR1 from its parent, in either order, stops once and
        cancels nothing. The handlers only pass the signal to a relay thread (``signals.py``):
        setting an event inside a handler could deadlock the main thread waiting on it.
        Return a function that restores the previous handlers (and ends the relay thread).
        """
        stop_signals: list[int] = []

        def stop(signum: int) -> None:
            self.request(cancel_running=bool(stop_signals))
            stop_signals.append(signum)

        return relay_signals(
            {
                signal.SIGTERM: stop,
                signal.SIGINT: stop,
                PARENT_STOP: lambda signum: self.request(),
                PARENT_CANCEL: lambda signum: self.request(cancel_running=True),
            }
        )

    def sign_off(self) -> None:
        """Mark this worker's row stopped (after a clean stop only)."""
        try:
            self.store.worker_stopped()
        except DatabaseError:
            logger.warning("could not mark the worker row stopped", exc_info=True)
