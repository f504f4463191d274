"""Worker: claims jobs with ``claim_next``, runs them in threads, keeps their leases alive.

One concern per method: the fetch loop (``run``), the heartbeat loop (``_heartbeat_loop``),
starting one job (``_start``), and shutdown (``request_stop``). The producer never claims more
than it has free slots for.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import DatabaseError

from .. import conf, registry
from ..errors import LeaseLost
from ..store import DurableJobStore, Lease
from .connections import close_thread_connections, reset_broken_connections
from .executor import execute
from .heartbeat import renew_lease
from .listener import NotifyListener

logger = logging.getLogger("django_durable_jobs.worker")


@dataclass
class WorkerOptions:
    """What ``runjobs`` was asked to do; checked before anything starts."""

    concurrency: int = 4
    operations: list[str] | None = None
    queues: list[str] | None = None
    lease: float = 30.0
    poll: float = 1.0
    burst: bool = False
    max_jobs: int | None = None
    scope: str | None = None
    grace: float = 30.0
    using: str | None = None
    actor: str | None = None
    status_every: float | None = None

    def validate(self) -> None:
        """Raise ValueError with a clear message for options that cannot work."""
        if self.concurrency < 1:
            raise ValueError("--concurrency must be at least 1.")
        if not self.lease > 0:
            raise ValueError("--lease must be a positive number of seconds.")
        if not self.poll > 0:
            raise ValueError("--poll must be a positive number of seconds.")
        if self.max_jobs is not None and self.max_jobs < 1:
            raise ValueError("--max-jobs must be at least 1.")
        if self.grace < 0:
            raise ValueError("--grace must not be negative.")
        unknown = [op for op in self.operations or [] if registry.get(op) is None]
        if unknown:
            known = ", ".join(sorted(registry.all_operations())) or "none"
            raise ValueError(
                f"Unknown operation(s): {', '.join(unknown)}. Registered operations: {known}."
            )


@dataclass
class Running:
    lease: Lease
    cancel: threading.Event = field(default_factory=threading.Event)
    cancel_recorded: bool = False  # this worker recorded a cancellation request (2nd signal)


class Worker:
    """A ``runjobs`` process: one store (one owner id), many job threads, one heartbeat loop."""

    def __init__(
        self,
        options: WorkerOptions,
        *,
        clock: Callable[[], datetime] | None = None,
        report: Callable[[str], None] | None = None,
    ) -> None:
        options.validate()
        self.options = options
        self.using = options.using or conf.get("DATABASE")
        actor = options.actor or f"worker@{socket.gethostname()}:{os.getpid()}"
        self.store = DurableJobStore(
            scope=options.scope, actor=actor, lease=options.lease, using=self.using, clock=clock
        )
        # Only claim what this process can run: jobs of operations registered elsewhere (another
        # deployment, a newer release) stay pending for a worker that knows them.
        self.operations = options.operations or sorted(registry.all_operations())
        self.report = report or (lambda line: None)
        self.running: dict[object, Running] = {}
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.cancel_requested = threading.Event()  # second signal: cancel what still runs
        self.stopped = threading.Event()
        self.jobs: queue.SimpleQueue[Running | None] = queue.SimpleQueue()
        self.idle = threading.Event()  # tests wait on this: nothing running, nothing claimable
        self.claimed = 0
        self.outcomes: Counter[str] = Counter()
        self.stop_deadline: float | None = None

    # -- the fetch loop ------------------------------------------------------------------------

    def run(self) -> int:
        """Claim and run jobs until stopped (or, with ``burst``, until nothing is claimable)."""
        self.store.register_worker(
            concurrency=self.options.concurrency,
            queues=self.options.queues,
            operations=self.operations,
        )
        listener = None
        if NotifyListener.supported(self.using):
            listener = NotifyListener(self.using, self.wake, self.stopped)
            listener.start()
        heartbeat = threading.Thread(target=self._heartbeat_loop, name="durable-jobs-heartbeat")
        heartbeat.daemon = True
        heartbeat.start()
        for n in range(self.options.concurrency):
            name = f"durable-jobs-{n + 1}"
            threading.Thread(target=self._job_thread, name=name, daemon=True).start()
        logger.info("worker %s started (owner %s)", self.store.actor, self.store.owner_id)
        clean = False
        try:
            self._fetch_loop()
            clean = True
        finally:
            self.stopped.set()
            for _ in range(self.options.concurrency):
                self.jobs.put(None)  # idle job threads exit; busy ones die with the process
            heartbeat.join(timeout=self.options.lease)
            if clean:  # a crashed worker's row must go stale, not claim a clean stop
                self._sign_off()
            close_thread_connections()
        return 0

    def _fetch_loop(self) -> None:
        delay = self.options.poll
        last_status = time.monotonic()
        announced = False
        while True:
            if self.stopping.is_set():
                if not announced:
                    announced = True
                    logger.info("stopping: %d job(s) still running", len(self.running))
                if self.cancel_requested.is_set():
                    self._cancel_running()
                if not self.running:
                    return
                if self.stop_deadline is not None and time.monotonic() >= self.stop_deadline:
                    logger.warning(
                        "grace period over; leaving %d job(s) to expire", len(self.running)
                    )
                    return
                self.wake.wait(0.1)
                self.wake.clear()
                continue
            claimed = self._claim()
            if claimed is None:  # database unavailable: back off, then try again
                self.wake.wait(delay)
                delay = min(delay * 2, 10.0)
                continue
            delay = self.options.poll
            if self._status_due(last_status):
                last_status = time.monotonic()
                self.report(self.status_line())
            if claimed:
                continue
            if self._claim_budget() == 0 and not self.running:
                return  # --max-jobs reached and done
            if not self.running:
                self.idle.set()
                if self.options.burst:
                    return
            self.wake.wait(self.options.poll)
            self.wake.clear()

    def _claim_budget(self) -> int:
        free = self.options.concurrency - len(self.running)
        if self.options.max_jobs is not None:
            free = min(free, self.options.max_jobs - self.claimed)
        return max(free, 0)

    def _claim(self) -> list[Lease] | None:
        limit = self._claim_budget()
        if limit == 0:
            return []
        try:
            leases = self.store.claim_next(
                operations=self.operations, queues=self.options.queues, limit=limit
            )
        except DatabaseError:
            logger.warning("claim failed: database unavailable", exc_info=True)
            reset_broken_connections()
            return None
        for lease in leases:
            self._start(lease)
        if leases:
            self.idle.clear()
        return leases

    # -- one job ---------------------------------------------------------------------------------

    def _start(self, lease: Lease) -> None:
        """Hand ``lease``'s job to an idle job thread.

        No database work here: were the database to drop now, an exception would leave the
        rest of the claimed batch unstarted, holding leases nobody runs.
        """
        entry = Running(lease=lease)
        with self.lock:
            self.running[lease.job_id] = entry
            self.claimed += 1
        self.jobs.put(entry)

    def _job_thread(self) -> None:
        """Run jobs one after another on one long-lived database connection."""
        try:
            while (entry := self.jobs.get()) is not None:
                self._execute(entry)
        finally:
            close_thread_connections()

    def _execute(self, entry: Running) -> None:
        lease = entry.lease
        try:
            report = execute(
                self.store,
                lease,
                entry.cancel,
                retry_until=lambda: self._lease_may_be_alive(lease),
            )
            outcome = report.outcome
        except Exception:  # noqa: BLE001 - the lease will expire; the job stays evidence
            logger.exception("job %s: outcome could not be recorded", lease.job_id)
            outcome = "unrecorded"
        with self.lock:
            self.outcomes[outcome] += 1
            self.running.pop(lease.job_id, None)
        self.wake.set()

    def _lease_may_be_alive(self, lease: Lease) -> bool:
        return self.store.clock() < lease.expires_at or not self.stopped.is_set()

    # -- the heartbeat loop ------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        """Renew every lease held each lease/3 s; pass cancellation and lost leases to ctx."""
        interval = self.options.lease / 3
        try:
            while not self.stopped.wait(interval):
                self.heartbeat_once()
        finally:
            close_thread_connections()

    def heartbeat_once(self) -> None:
        with self.lock:
            entries = list(self.running.values())
        for entry in entries:
            try:
                renew_lease(
                    self.store,
                    entry.lease,
                    entry.cancel,
                    finished=lambda job_id=entry.lease.job_id: job_id not in self.running,
                )
            except DatabaseError:
                logger.warning("heartbeat failed: database unavailable", exc_info=True)
                reset_broken_connections()
                return
        try:
            self.store.worker_heartbeat(leases_held=len(entries), stopping=self.stopping.is_set())
        except DatabaseError:
            reset_broken_connections()

    # -- shutdown ------------------------------------------------------------------------------

    def request_stop(self, *, cancel_running: bool = False) -> None:
        """Stop claiming; let running jobs finish within the grace period (or cancel them).

        Only sets events, so it is safe in a signal handler (which runs in the main thread, maybe
        while that thread holds ``self.lock`` or is inside a transaction); the fetch loop does
        the database work.
        """
        if not self.stopping.is_set():
            self.stop_deadline = time.monotonic() + self.options.grace
            self.stopping.set()
        if cancel_running:
            self.cancel_requested.set()
        self.wake.set()

    def _cancel_running(self) -> None:
        """Record a cancellation request for every running job, then tell its executor.

        The request is recorded first: an executor that acknowledges with ``JobCancelled``
        ends ``cancelled`` only when a request exists (otherwise the job would be failed).
        A heartbeat just before proves the lease is still ours, so a worker that lost a job to
        another never asks to cancel the other's attempt. A database error leaves the rest for
        the next pass of the fetch loop.
        """
        with self.lock:
            entries = [e for e in self.running.values() if not e.cancel_recorded]
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

    def install_signal_handlers(self) -> None:
        """First SIGTERM/SIGINT: stop claiming. Second: also request cancellation of jobs."""

        def handle(signum, frame) -> None:
            self.request_stop(cancel_running=self.stopping.is_set())

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    def _sign_off(self) -> None:
        try:
            self.store.worker_stopped()
        except DatabaseError:
            logger.warning("could not mark the worker row stopped", exc_info=True)

    def _status_due(self, last: float) -> bool:
        every = self.options.status_every
        return every is not None and time.monotonic() - last >= every

    def status_line(self) -> str:
        done = ", ".join(f"{k}={v}" for k, v in sorted(self.outcomes.items())) or "none"
        return (
            f"runjobs {self.store.actor}: running={len(self.running)} claimed={self.claimed} "
            f"finished: {done}"
        )
