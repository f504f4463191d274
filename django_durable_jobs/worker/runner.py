"""Worker: claims jobs in batches, runs them in threads, keeps their leases alive.

Its roles, each a collaborator given what it acts on: the fetch loop here (the producer, ``run``)
claims into a prefetch buffer, never more than the job threads and the buffer have room for;
job threads run what it holds (``_run_attempt``, with the rules of ``attempt.py``), and the
event loop (``eventloop.py``) the attempts of ``async def`` operations (``_attempt_on_loop``); the
completer (``completer.py``) writes outcomes in batches; the heartbeat (``heartbeat.py``) renews
every held lease at once (``holdings.py``); the timeouts (``timeouts.py``, the rescuer) cancel
and abandon attempts past their operation's timeout; the listener (``listener.py``) wakes the
fetch loop on new work; the scheduler (``scheduler.py``) enqueues the declared schedules' due
ticks; the shutdown (``shutdown.py``) stops it all gracefully.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import queue
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import DatabaseError

from .. import metrics
from ..database import wakeups
from ..formatting.terminal import printable
from ..rules import registry
from ..rules.conf import jobs_settings
from ..rules.values import Claimed, Outcome
from ..store import DurableJobStore, Lease
from .attempt import (
    context_of,
    ended_itself,
    registered_coroutine,
    registered_executor,
    run,
    run_on_loop,
    runs_on_loop,
    stopped_by_lost_lease,
)
from .clock import ClockCheck
from .clock import describe as describe_skew
from .completer import FLUSH_MAX, Completer, Finished
from .connections import close_thread_connections, reset_broken_connections
from .eventloop import EventLoop
from .heartbeat import Heartbeat
from .held import Held, HeldState
from .holdings import Holdings
from .listener import NotifyListener
from .options import WorkerOptions
from .pace import Pace
from .reports import AttemptReport, Ended, Unwritten, log
from .scheduler import Scheduler, declared
from .shutdown import Shutdown
from .startup import until_reachable, wait_for_database
from .timeouts import Timeouts
from .unregistered import UnregisteredWatch
from .watch import SubmissionWatch

if TYPE_CHECKING:
    from .context import JobContext

logger = logging.getLogger("django_durable_jobs.worker")


class Worker:
    """A ``runjobs`` process: one store (one owner id), many job threads, one heartbeat loop.

    The fetch loop (the producer) claims in batches into a prefetch buffer, job threads run what
    it holds, and the completer writes their outcomes in batches. Every claim stays in
    ``holdings`` (and so keeps its lease renewed by the heartbeat) until its outcome committed
    or it was released. ``timeouts`` cancels attempts past their operation's timeout and
    abandons those that run on; ``shutdown`` stops it all gracefully.
    """

    def __init__(
        self,
        options: WorkerOptions,
        *,
        clock: Callable[[], datetime] | None = None,
        report: Callable[[str], None] | None = None,
    ) -> None:
        options.validate()
        self.options = options
        self.using = jobs_settings.database(options.using)
        self.store = _store(options, self.using, clock)
        # Only claim what this process can run: jobs of operations registered elsewhere (another
        # deployment, a newer release) stay pending for a worker that knows them.
        self.operations = options.operations or sorted(registry.all_operations())
        # ``async def`` operations run on the event loop, the rest in the job threads; each side
        # is claimed for with its own room (``_budgets``).
        on_loop = [op for op in self.operations if runs_on_loop(op)] if options.async_slots else []
        self.loop_operations = on_loop
        self.thread_operations = [op for op in self.operations if op not in on_loop]
        self.loop = EventLoop() if on_loop else None
        self.prefetch = options.concurrency if options.prefetch is None else options.prefetch
        self.pace = Pace(options.concurrency, options.prefetch)  # grows the buffer for short jobs
        self.report = report or (lambda line: None)
        self.holdings = Holdings(self.store)  # its lock also guards claimed and outcomes
        self.buffer: queue.SimpleQueue[Held | None] = queue.SimpleQueue()
        self.wake = threading.Event()
        self.stopped = threading.Event()
        self.idle = threading.Event()  # tests wait on this: nothing held, nothing claimable
        self.looking = threading.Event()  # the fetch loop sleeps with room: watch.py may wake it
        self.claimed = 0
        self.outcomes: Counter[Ended] = Counter()
        self.drained = False  # the last claim found less than it asked for
        self.thread_numbers = itertools.count(1)  # names of job threads, replacements included
        self.completer = Completer(
            self.store, on_recorded=self._recorded, retry_until=self._flush_may_succeed
        )
        self.heartbeat = Heartbeat(
            options.lease_seconds / 3, self.heartbeat_once, name="durable-jobs-heartbeat"
        )
        self.timeouts = Timeouts(
            options.timeout_grace,
            self.holdings,
            fail=self.completer.put,
            replace_thread=self._replace_job_thread,
            wake=self.wake,
        )
        self.shutdown = Shutdown(
            self.store,
            self.holdings,
            self.buffer,
            grace=options.grace,
            wake=self.wake,
            on_ended=self._recorded,
            abandoned_running=lambda: self.timeouts.abandoned_running,
        )
        self.stopping = self.shutdown.stopping
        self.unregistered = UnregisteredWatch(self.store, self.operations, options.queues)
        # No claims while this host's clock is too far from the database's (see clock.py).
        self.clock_check = ClockCheck(self.store, options.lease_seconds, on_resume=self.wake.set)
        # Declared schedules are checked here, before the database: a bad one refuses the start.
        self.scheduler = _scheduler(options, self.store, clock, self.stopping)

    wait_for_database = staticmethod(wait_for_database)  # for runjobs, before it builds one

    # -- the fetch loop ------------------------------------------------------------------------

    def run(self) -> int:
        """Claim and run jobs until stopped (or, with ``burst``, until nothing is claimable).

        A database that cannot be reached yet is waited for (see ``startup.py``); one that
        refuses the configuration raises ``DatabaseUnusable``.
        """
        registered = until_reachable(
            self.using,
            lambda: self.store.register_worker(
                concurrency=self.options.concurrency,
                queues=self.options.queues,
                operations=self.operations,
            ),
            stopping=self.stopping,
        )
        if not registered:  # stopped while waiting: nothing started, nothing to sign off
            logger.info("stopped before the database could be reached")
            close_thread_connections()
            return 0
        self.clock_check.measure()
        if NotifyListener.supported(self.using):
            NotifyListener(self.using, self.wake, self.stopped).start()
        elif SubmissionWatch.supported(self.using) and self.options.watch != 0:
            every = self.options.watch
            SubmissionWatch(self.using, self.wake, self.looking, self.stopped, every).start()
        unlisten = wakeups.listen(self.using, self.wake)  # submissions of this process
        self.heartbeat.start()
        self.completer.start()
        self.timeouts.start()
        if self.loop is not None:
            self.loop.start()
        for _ in range(self.options.concurrency):
            self._start_job_thread()
        actor = printable(self.store.actor, keep_newlines=False)
        logger.info("worker %s started (owner %s)", actor, self.store.owner_id)
        self._start_scheduler()
        clean = False
        try:
            self._fetch_loop()
            clean = True
        finally:
            self.stopped.set()
            unlisten()
            if self.scheduler is not None:
                self.scheduler.stop()
                self.scheduler.join(timeout=self.options.lease_seconds)
            self.timeouts.stop()
            self.heartbeat.stop()
            for _ in range(self.options.concurrency):
                self.buffer.put(None)  # idle job threads exit; busy ones die with the process
            if self.loop is not None:
                self.loop.stop(timeout=self.options.lease_seconds)
            self.completer.stop()
            self.completer.join(timeout=self.options.lease_seconds)
            self.heartbeat.join(timeout=self.options.lease_seconds)
            if clean:  # a crashed worker's row must go stale, not claim a clean stop
                self.shutdown.sign_off()
            if self.timeouts.abandoned:
                logger.warning(
                    "stopped with %d abandoned job thread(s), %d still running",
                    self.timeouts.abandoned,
                    self.timeouts.abandoned_running,
                )
            close_thread_connections()
        return 0

    def _start_scheduler(self) -> None:
        """Start the scheduler's passes; with ``burst``, run a single pass here instead."""
        if self.scheduler is None:
            return
        if self.options.burst:  # its ticks are then drained with the rest
            self.scheduler.run_once()
            self.wake.set()
        else:
            self.scheduler.start()

    def _fetch_loop(self) -> None:
        delay = self.options.poll
        last_status = time.monotonic()
        while True:
            if self.stopping.is_set():
                if self.shutdown.step():
                    return
                continue
            self.wake.clear()  # before claiming: a wake-up during the claim is kept
            busy_at_claim = bool(self.holdings)
            claimed = self._claim()
            if claimed is None:  # database unavailable: back off, then try again
                self.wake.wait(delay)
                delay = min(delay * 2, 10.0)
                continue
            delay = self.options.poll
            if self._status_due(last_status):
                last_status = time.monotonic()
                self.report(self.status_line())
            if claimed and not self.drained:
                continue  # a full batch: more may be waiting
            # Drained: warn of due jobs no alive worker runs. Not while busy: a backlog of its own
            # operations would make the sample read more rows than it needs.
            if self.drained:
                self.unregistered.look()
            busy = bool(self.holdings)
            if not busy:
                if self._claim_budget() == 0 or self.options.burst:
                    if busy_at_claim or claimed:
                        # Jobs ended since that claim began (or it claimed some, already ended):
                        # claim once more, so what they submitted before ending is seen before
                        # --burst or --max-jobs says it is done.
                        continue
                    self.idle.set()
                    return  # --max-jobs reached and done, or --burst found nothing
                self.idle.set()
            self._sleep()

    def _sleep(self) -> None:
        """Wait for a wake-up or the poll; with a slot free, let the watch look meanwhile."""
        if self._claim_budget() > 0:
            self.looking.set()
        self.wake.wait(self.options.poll)
        self.looking.clear()

    def _claim_budget(self) -> int:
        """Return how many jobs to claim now: free slots plus the prefetch buffer's room."""
        return sum(limit for _, limit in self._budgets())

    def _budgets(self) -> list[tuple[list[str], int]]:
        """Return, for the job threads and for the event loop, their operations and how many
        jobs of them to claim now: free slots plus (for the threads) the prefetch buffer's room.
        """
        buffered, in_threads, on_loop, finishing = self._in_hand()
        left = None if self.options.max_jobs is None else self.options.max_jobs - self.claimed
        sides = []
        if self.loop_operations:
            sides.append((self.loop_operations, self.options.async_slots, on_loop, 0))
        if self.thread_operations or not self.loop_operations:  # a worker of none asks too
            capacity = self.options.concurrency + self.prefetch
            sides.append((self.thread_operations, capacity, in_threads, buffered))
        budgets = []
        for operations, capacity, in_hand, waiting in sides:
            free = capacity - in_hand
            if finishing >= FLUSH_MAX:  # the completer is behind: let it catch up first
                free = 0
            elif waiting and free < capacity // 2:
                free = 0  # work is still buffered: wait for room for a fuller batch
            if left is not None:  # each side may take what is left: _claim counts as it goes
                free = min(free, left)
            budgets.append((operations, max(free, 0)))
        return budgets

    def _in_hand(self) -> tuple[int, int, int, int]:
        """Return the claims held for the job threads buffered, and in all (buffered and
        running); those held on the event loop; and those whose outcome waits for the completer.
        """
        counts, loop = self.holdings.counts, self.holdings.loop_counts
        with self.holdings.lock:
            buffered = counts[HeldState.BUFFERED] - loop[HeldState.BUFFERED]
            in_threads = buffered + counts[HeldState.RUNNING] - loop[HeldState.RUNNING]
            on_loop = loop[HeldState.BUFFERED] + loop[HeldState.RUNNING]
            return buffered, in_threads, on_loop, counts[HeldState.FINISHING]

    def _claim(self) -> list[Claimed] | None:
        budgets = self._budgets()
        if not any(limit for _, limit in budgets):
            self.drained = False
            return []
        if not self.clock_check.allows_claims():  # logged; back off as for an unavailable database
            return None
        claimed: list[Claimed] = []
        self.drained = True  # nothing more claimable just now, unless a side got all it asked
        for operations, limit in budgets:
            if self.options.max_jobs is not None:  # less what the other side just claimed
                limit = min(limit, self.options.max_jobs - self.claimed)
            if limit <= 0:
                continue
            got = self._claim_held(operations, limit)
            if got is None:
                return None
            claimed += got
            if len(got) == limit:
                self.drained = False
                if operations is self.thread_operations and not self.stopping.is_set():
                    claimed += self._claim_short()  # more of a backlog of short jobs
        return claimed

    def _claim_short(self) -> list[Claimed]:
        """Claim more of the operations seen to run short, as ``pace`` holds for them."""
        short, more = self._short_room()
        if more <= 0:
            return []
        # In the same turn: from the scope the first claim served, so that with two scopes the
        # large claims do not all go to the one the small ones skip.
        return self._claim_held(short, more, same_turn=True) or []

    def _claim_held(
        self, operations: list[str], limit: int, *, same_turn: bool = False
    ) -> list[Claimed] | None:
        """Claim up to ``limit`` jobs of ``operations`` and buffer them; None on a database error."""
        try:
            claimed = self.store.claim_batch(
                operations=operations,
                queues=self.options.queues,
                limit=limit,
                same_turn=same_turn,
            )
        except DatabaseError:
            logger.warning("claim failed: database unavailable", exc_info=True)
            reset_broken_connections()
            return None
        if claimed:
            self.idle.clear()
        for claim in claimed:
            self._hold(claim)
        return claimed

    def _short_room(self) -> tuple[list[str], int]:
        """Return the operations seen to run short and how many more of them to claim now
        (``pace.py``): what ``pace`` holds for them beyond the jobs in hand."""
        short, hold = self.pace.short(self.thread_operations)
        _, in_threads, _, _ = self._in_hand()
        more = hold - in_threads
        if self.options.max_jobs is not None:
            more = min(more, self.options.max_jobs - self.claimed)
        return short, more

    # -- one job ---------------------------------------------------------------------------------

    def _hold(self, claim: Claimed) -> None:
        """Buffer ``claim`` for the next free job thread, or start it on the event loop.

        No database work here: were the database to drop now, an exception would leave the
        rest of the claimed batch unbuffered, holding leases nobody runs.
        """
        entry = Held(claim, on_loop=claim.job.operation in self.loop_operations)
        with self.holdings.lock:
            self.holdings.add(entry)
            self.claimed += 1
        metrics.claimed(claim.job.operation)
        if entry.on_loop:
            self.loop.spawn(lambda: self._attempt_on_loop(entry))
        else:
            self.buffer.put(entry)

    def _start_job_thread(self) -> None:
        name = f"durable-jobs-{next(self.thread_numbers)}"
        threading.Thread(target=self._job_thread, name=name, daemon=True).start()

    def _replace_job_thread(self, entry: Held) -> None:
        """Start a job thread in the place of ``entry``'s, abandoned, unless the worker stopped.

        An abandoned task of the event loop needs no replacement: its slot is free once its
        failure is recorded, and the loop runs other tasks while it waits.
        """
        if not self.stopped.is_set() and not entry.on_loop:
            self._start_job_thread()

    def _job_thread(self) -> None:
        """Run jobs one after another on one long-lived database connection.

        A thread whose attempt was abandoned ends once its executor returns: another thread
        took its place.
        """
        try:
            while (entry := self.buffer.get()) is not None:
                with self.holdings.lock:
                    if self.shutdown.set_aside(entry):  # never started: the fetch loop releases it
                        continue
                    self.holdings.move(entry, HeldState.RUNNING)
                if not self._run_attempt(entry):
                    return
        finally:
            close_thread_connections()

    def _run_attempt(self, entry: Held) -> bool:
        """Run ``entry``'s attempt and hand its outcome over; False if it was abandoned meanwhile."""
        self._started(entry)
        try:
            entry.ctx = self._context(entry)
            outcome = run(entry.ctx, registered_executor(entry.claim.job.operation))
        except BaseException as exc:  # noqa: BLE001 - a context that could not be built, or a
            # SystemExit of the job's: raised on, it would end the thread and leave the job
            # held, its lease renewed, running for as long as the worker lives
            outcome = self._not_run(entry, exc)
        return self._ended(entry, outcome)

    async def _attempt_on_loop(self, entry: Held) -> None:
        """Run ``entry``'s attempt as a task of the event loop, as ``_run_attempt`` does in a
        thread; whatever sets ``ctx.cancelled`` cancels the task."""
        with self.holdings.lock:
            if self.shutdown.set_aside(entry):  # never started: the fetch loop releases it
                return
            self.holdings.move(entry, HeldState.RUNNING)
        task = asyncio.current_task()
        entry.cancel.on_set(lambda: self.loop.cancel(task))
        self._started(entry)
        try:
            entry.ctx = self._context(entry)
            outcome = await run_on_loop(entry.ctx, registered_coroutine(entry.claim.job.operation))
        except BaseException as exc:  # noqa: BLE001 - as in _run_attempt; raised on, a
            # SystemExit would stop the loop of every async job
            outcome = self._not_run(entry, exc)
        self._ended(entry, outcome)

    def _started(self, entry: Held) -> None:
        """Note that ``entry``'s attempt starts now: logged, watched for its timeout, counted."""
        lease, job = entry.lease, entry.claim.job
        logger.debug(
            "job %s %s attempt=%s epoch=%s started",
            lease.job_id,
            printable(job.operation, keep_newlines=False),
            job.attempts,
            lease.epoch,
        )
        spec = registry.get(job.operation)
        self.timeouts.watch(entry, spec.timeout if spec else None)
        metrics.attempt_started(job, self.store.clock)

    def _context(self, entry: Held) -> JobContext:
        lease = entry.lease
        return context_of(
            self.store,
            entry.claim,
            entry.cancel,
            retry_until=lambda: self._lease_may_be_alive(lease),
        )

    def _not_run(self, entry: Held, exc: BaseException) -> Outcome:
        logger.exception("job %s could not be run", entry.lease.job_id)
        return Outcome.of_error(entry.lease, exc)

    def _ended(self, entry: Held, outcome: Outcome | None) -> bool:
        """Hand ``entry``'s outcome over; return False if it was abandoned meanwhile."""
        job = entry.claim.job
        outcome = self.timeouts.timed_out(entry, outcome)
        duration = time.monotonic() - entry.started
        self.pace.ran(job.operation, duration)
        with self.holdings.lock:
            abandoned = entry.abandoned
            if not abandoned:
                self.holdings.move(entry, HeldState.FINISHING)
        if abandoned:  # its job was failed without it: nothing of this attempt is recorded
            self.timeouts.discard(entry, duration)
            return False
        if outcome is None:  # the executor ended it itself (complete_atomically, sleep)
            self._recorded(entry, AttemptReport.of(entry.claim, ended_itself(entry.ctx), duration))
            return True
        if stopped_by_lost_lease(entry.ctx, outcome):  # nothing is written; the lease expires
            lost = AttemptReport.of(entry.claim, Unwritten.LEASE_LOST, duration, outcome.error)
            self._recorded(entry, lost)
            return True
        self.wake.set()
        self.completer.put(Finished(entry, outcome, duration))
        return True

    def _recorded(self, entry: Held, report: AttemptReport) -> None:
        """Forget ``entry`` once its outcome committed (or could not be written)."""
        log(report)
        metrics.attempt_ended(report)
        with self.holdings.lock:
            self.outcomes[report.outcome] += 1
            self.holdings.finish(entry, report)
        self.wake.set()

    def heartbeat_once(self) -> None:
        """Renew every held lease in one statement, then refresh this worker's row."""
        held = self.holdings.renew()
        if held is None:  # the database is unavailable: the next beat tries again
            return
        try:
            self.store.worker_heartbeat(leases_held=held, stopping=self.stopping.is_set())
        except DatabaseError:
            reset_broken_connections()
            return
        self.clock_check.measure()

    def _lease_may_be_alive(self, lease: Lease) -> bool:
        return self.store.clock() < lease.expires_at or not self.stopped.is_set()

    def _flush_may_succeed(self) -> bool:
        return not self.stopped.is_set() or any(
            self._lease_may_be_alive(entry.lease) for entry in self.holdings.entries()
        )

    def _status_due(self, last: float) -> bool:
        every = self.options.status_every
        return every is not None and time.monotonic() - last >= every

    def request_stop(self, *, cancel_running: bool = False) -> None:
        """Stop claiming; let running jobs finish within the grace period (or cancel them)."""
        self.shutdown.request(cancel_running=cancel_running)

    def install_signal_handlers(self) -> Callable[[], None]:
        """Stop on SIGTERM/SIGINT, cancel on a second one; return the handlers' restorer.

        See ``Shutdown.install_signal_handlers``.
        """
        return self.shutdown.install_signal_handlers()

    @property
    def abandoned(self) -> int:
        """Return how many job threads were given up on after a timeout."""
        return self.timeouts.abandoned

    def ended_counts(self) -> Counter[Ended]:
        """Return how many attempts ended each way so far (a copy)."""
        with self.holdings.lock:
            return Counter(self.outcomes)

    def status_line(self) -> str:
        done = ", ".join(f"{k}={v}" for k, v in sorted(self.outcomes.items())) or "none"
        counts = self.holdings.counts
        timeouts = self.timeouts
        abandoned = (
            f" abandoned={timeouts.abandoned} (still running {timeouts.abandoned_running})"
            if timeouts.abandoned
            else ""
        )
        return (
            f"runjobs {self.store.actor}: running={counts[HeldState.RUNNING]} "
            f"buffered={counts[HeldState.BUFFERED]} claimed={self.claimed} finished: {done}"
            f"{abandoned}{self._skew_note()}"
        )

    def _skew_note(self) -> str:
        """Return the status line's note on claims refused for clock skew ("" when claiming)."""
        check = self.clock_check
        with check.lock:
            if not check.refusing or check.skew is None:
                return ""
            return f" NOT CLAIMING: clock {describe_skew(check.skew)} the database's"


def _store(
    options: WorkerOptions, using: str, clock: Callable[[], datetime] | None
) -> DurableJobStore:
    """Return the worker's store client: its owner id holds every lease the worker takes."""
    return DurableJobStore(
        scope=options.scope,
        actor=options.actor or f"worker@{socket.gethostname()}:{os.getpid()}",
        lease_seconds=options.lease_seconds,
        using=using,
        clock=clock,
    )


def _scheduler(
    options: WorkerOptions,
    store: DurableJobStore,
    clock: Callable[[], datetime] | None,
    stopping: threading.Event,
) -> Scheduler | None:
    """Return the scheduler of the declared schedules (None under ``--no-schedules``).

    The declared schedules are checked here, before the database: a bad one refuses the start.
    """
    if not options.schedules:
        return None
    return Scheduler(
        declared(),
        owner_id=store.owner_id,
        actor=store.actor,
        using=store.using,
        clock=clock,
        stopping=stopping,
    )
