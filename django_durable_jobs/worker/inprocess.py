"""InProcessRunner: runs durable jobs in threads of the calling process (was ``JobManager``).

Each job still lives in the job table under a lease held by the runner's own store client, so a
crashed process leaves evidence and a lease that expires, never a silently lost job. The runner
uses the worker's machinery: its claims are held in ``Holdings`` and renewed, all in one
statement, by a ``Heartbeat`` every lease_seconds/3 while any executor runs, which passes
cancellation requests and lost leases to the executors through ``ctx.cancelled``. Each attempt
follows the worker's rules (``attempt.py``): return → ``complete``,
``JobCancelled`` after a request → ``cancelled``, any other exception → ``failed``, a lost lease
→ nothing written.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import DatabaseError

from ..models import Job
from ..rules import validation
from ..rules.errors import CapacityReached, InputInvalid, LeaseLost
from ..rules.values import Claimed
from ..store import DurableJobStore, Lease, Submission
from .attempt import Executor, context_of, in_a_thread, run_and_record
from .connections import close_thread_connections, reset_broken_connections
from .heartbeat import Heartbeat
from .held import Held, HeldState
from .holdings import Holdings
from .reports import AttemptReport

# Its name from when the runner was called JobManager: logging configurations name it.
logger = logging.getLogger("django_durable_jobs.manager")

__all__ = ["InProcessRunner"]


class InProcessRunner:
    """Start, resume and watch durable jobs in threads of this process.

    ``InProcessRunner(*, scope=None, actor=None, lease_seconds=30.0, max_jobs=10,
    using="default", clock=None)``; ``lease=`` is the deprecated name of ``lease_seconds=``.
    ``django_durable_jobs.manager.JobManager`` is the same class under its former name.

    ``max_jobs`` caps the executors this runner runs at once; one more is refused with
    ``CapacityReached`` before anything is written. ``destroy()`` asks this runner's own executors
    to stop and never touches jobs run by anybody else.
    """

    def __init__(
        self,
        *,
        scope: str | None = None,
        actor: str | None = None,
        lease_seconds: float = 30.0,
        max_jobs: int = 10,
        using: str = "default",
        clock: Callable[[], datetime] | None = None,
        lease: float | None = None,
    ) -> None:
        if isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1:
            raise InputInvalid(f"max_jobs must be a positive whole number; got {max_jobs!r}.")
        actor = actor or f"manager@{socket.gethostname()}:{os.getpid()}"
        self.store = DurableJobStore(
            scope=scope,
            actor=actor,
            lease_seconds=validation.lease_seconds(lease_seconds, lease),
            using=using,
            clock=clock,
        )
        self.max_jobs = max_jobs
        # The holdings' lock also guards _finished, _reserved, _destroyed and the heartbeat.
        self.holdings = Holdings(self.store)
        self._finished: dict[Any, Held] = {}  # the last attempt of each job that ended here
        self._reserved = 0  # slots taken by calls between the capacity check and the thread start
        self._heartbeat = Heartbeat(
            self.store.lease_seconds / 3,
            self.heartbeat_once,
            name="durable-jobs-manager-heartbeat",
        )
        self._destroyed = False

    def __repr__(self) -> str:
        running = f"{len(self.holdings)}/{self.max_jobs}"
        return f"<{type(self).__name__} {self.store.actor} running={running}>"

    # -- starting work ---------------------------------------------------------------------------

    def start_job(
        self, operation: str, executor: Executor, submission: Submission | None = None
    ) -> Any:
        """Create a job owned by this runner and run ``executor(ctx)`` in a thread; return its id.

        An ``async def`` executor runs to its end in an event loop of that thread.

        An identical earlier submission returns that job's id and runs nothing, wherever and
        whenever the earlier job ran.
        """
        self._check_executor(executor)
        if not self._reserve():
            existing = self._identical(operation, submission)
            if existing is not None:
                return existing.pk
            raise self._full()
        try:
            lease = self.store.insert(operation, submission=submission)
            if lease is None:
                existing = self._identical(operation, submission)
                if existing is None:  # cannot happen: insert coalesced onto a row it then lost
                    raise InputInvalid(f"The submission of {operation!r} coalesced onto no job.")
                return existing.pk
            self._launch(lease, executor)
            return lease.job_id
        finally:
            self._release()

    def defer_job(self, operation: str, submission: Submission) -> Any:
        """Persist pending work (a worker or ``resume_job`` runs it later); return the job id."""
        return self.store.defer(operation, submission).pk

    def resume_job(self, job_id: Any, executor: Executor) -> Any:
        """Claim a pending job, or one whose lease expired, and run ``executor(ctx)`` on it.

        The new attempt sees the last checkpoint as ``ctx.checkpoint_value``. A job someone else
        holds, or one that ended, is refused with ``NotReclaimable``.
        """
        self._check_executor(executor)
        if not self._reserve():
            raise self._full()
        try:
            lease = self.store.claim(job_id)
            self._launch(lease, executor)
            return lease.job_id
        finally:
            self._release()

    # -- reading and requests --------------------------------------------------------------------

    def get_job(self, job_id: Any) -> Job | None:
        """Return the job in this runner's scope, or None."""
        return self.store.get(job_id)

    def list_jobs(self, status: str | None = None) -> list[Job]:
        """Return the jobs in this runner's scope, oldest first, optionally of one status."""
        return self.store.list(status)

    def cancel_job(self, job_id: Any) -> bool:
        """Request cancellation; the executor sees ``ctx.cancelled`` at once if it runs here.

        Returns False for a job that already ended or does not exist (nothing changes).
        """
        requested = self.store.request_cancel(job_id)
        if requested:
            entry = self.holdings.find(validation.job_id(job_id))
            if entry is not None:
                entry.cancel.set()
        return requested

    def update_progress(self, job_id: Any, percent: float) -> bool:
        """Record progress for a job this runner runs; False for any other job.

        A lost lease also returns False (and tells the executor to stop).
        """
        entry = self.holdings.find(validation.job_id(job_id))
        if entry is None or entry.ctx is None:
            validation.percent(percent)
            return False
        try:
            entry.ctx.progress(percent)
        except LeaseLost:
            entry.lose()
            return False
        return True

    def cleanup(self) -> int:
        """Forget finished executors; return 0: no job row is ever deleted (rows are evidence)."""
        with self.holdings.lock:
            self._finished.clear()
        return 0

    def destroy(self) -> None:
        """Request cancellation of this runner's own executors and start no more.

        Other runners' and workers' jobs are never touched. The request is persisted, so an
        executor that stops with ``JobCancelled`` ends ``cancelled``; one that returns anyway ends
        ``complete``. Use :meth:`wait` to wait for them.
        """
        with self.holdings.lock:
            self._destroyed = True
            entries = list(self.holdings.held.values())
        for entry in entries:
            try:
                self.store.request_cancel(entry.lease.job_id)
            except DatabaseError:
                logger.warning("could not record cancellation of %s", entry.lease.job_id)
                reset_broken_connections()
            entry.cancel.set()

    def wait(self, job_id: Any, timeout: float | None = None) -> Job | None:
        """Wait until this runner's executor of ``job_id`` ended; return the job as stored.

        Returns at once for a job this runner is not running. Raises ``TimeoutError`` when the
        executor is still running after ``timeout`` seconds.
        """
        pk = validation.job_id(job_id)
        entry = self.holdings.find(pk) or self._finished.get(pk)
        if entry is not None and not entry.done.wait(timeout):
            raise TimeoutError(f"Job {pk} is still running after {timeout} s.")
        return self.store.get(pk)

    def report(self, job_id: Any) -> AttemptReport | None:
        """Return how this runner's executor of ``job_id`` ended, or None (not ended, not ours)."""
        entry = self._finished.get(validation.job_id(job_id))
        return None if entry is None else entry.report

    @property
    def running(self) -> list[Any]:
        """Return the ids of the jobs whose executors this runner is running."""
        return list(dict.fromkeys(entry.lease.job_id for entry in self.holdings.entries()))

    # -- executors -------------------------------------------------------------------------------

    def _check_executor(self, executor: Any) -> None:
        if not callable(executor):
            raise InputInvalid(f"The executor must be callable as executor(ctx); got {executor!r}.")

    def _full(self) -> CapacityReached:
        return CapacityReached(
            f"This {type(self).__name__} already runs {self.max_jobs} job(s) "
            f"(max_jobs={self.max_jobs}); wait for one to finish, or defer the job for a worker."
        )

    def _reserve(self) -> bool:
        with self.holdings.lock:
            if self._destroyed:
                raise InputInvalid(f"This {type(self).__name__} was destroyed; create a new one.")
            if len(self.holdings) + self._reserved >= self.max_jobs:
                return False
            self._reserved += 1
            return True

    def _release(self) -> None:
        with self.holdings.lock:
            self._reserved -= 1

    def _identical(self, operation: str, submission: Submission | None) -> Job | None:
        if submission is None:
            return None
        return self.store.find_submission(operation, submission)

    def _launch(self, lease: Lease, executor: Executor) -> None:
        """Hold the claim and start the executor's thread (the reserved slot becomes it)."""
        job = Job.objects.using(self.store.using).get(pk=lease.job_id)
        entry = Held(Claimed(lease, job), HeldState.RUNNING)
        entry.ctx = context_of(self.store, entry.claim, entry.cancel)
        thread = threading.Thread(
            target=self._run_attempt,
            args=(entry, in_a_thread(executor)),
            name=f"durable-job-{lease.job_id}",
            daemon=True,
        )
        with self.holdings.lock:
            self.holdings.add(entry)
            if self._destroyed:  # destroy() ran since the reservation: stop as soon as it starts
                entry.cancel.set()
            self._heartbeat.start()
        thread.start()

    def _run_attempt(self, entry: Held, executor: Executor) -> None:
        report = None
        try:
            report = run_and_record(
                self.store,
                entry.ctx,
                executor,
                entry.claim,
                retry_until=lambda: self.store.clock() < entry.expires_at,
            )
        except Exception:  # noqa: BLE001 - the lease will expire; the row stays as evidence
            logger.exception("job %s: the outcome could not be recorded", entry.lease.job_id)
        finally:
            close_thread_connections()
            with self.holdings.lock:
                self._finished[entry.lease.job_id] = entry
                self.holdings.finish(entry, report)
                if not self.holdings:  # the heartbeat starts again with the next executor
                    self._heartbeat.stop()

    def heartbeat_once(self) -> None:
        """Renew this runner's leases once; pass cancellation requests and lost leases to ctx."""
        self.holdings.renew()
