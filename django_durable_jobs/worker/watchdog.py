"""Timeouts: the watchdog that cancels an attempt past its deadline and abandons it after a grace.

An operation's ``timeout`` bounds each attempt, counted from its start. When it passes, the
watchdog sets the attempt's ``ctx.cancelled``; an executor that stops then (or returns, or raises)
ends ``failed`` with a timeout message. One still running ``timeout_grace`` seconds later is
*abandoned*: its outcome, ``failed``, goes to the completer at once, its job thread's place is
taken by a new thread, and the old thread runs on until the executor returns (Python cannot stop
a thread), when whatever it produced is discarded. Its writes through ``ctx`` are refused once the
failure committed (the row no longer runs under its lease); what it does outside the job
(an e-mail, an HTTP call) still happens.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..outcome import storable_message
from ..terminal import printable
from ..values import Outcome
from ..vocabulary import AttemptOutcomeChoice
from .completer import Finished
from .held import Held, HeldState

logger = logging.getLogger("django_durable_jobs.worker")

TIMEOUT_GRACE = 5.0  # seconds a timed-out executor gets to stop before it is abandoned


class Watchdog(threading.Thread):
    """Call back when the attempts it watches pass their deadline, and again after their grace.

    ``on_deadline(entry)`` runs when ``entry.deadline`` passes, ``on_grace_over(entry)`` ``grace``
    seconds later, each unless the entry was forgotten meanwhile (both check what it does now).

    Only attempts of operations with a timeout are watched, at most one per job thread (plus
    the abandoned ones), so every wake-up scans them all.
    """

    def __init__(
        self,
        grace: float,
        *,
        on_deadline: Callable[[Held], None],
        on_grace_over: Callable[[Held], None],
    ) -> None:
        super().__init__(name="durable-jobs-watchdog", daemon=True)
        self.grace = grace
        self.on_deadline = on_deadline
        self.on_grace_over = on_grace_over
        self._due: dict[Held, tuple[float, bool]] = {}  # entry → (when, whether its grace is over)
        self._changed = threading.Condition()
        self._wakes_at: float | None = None
        self._stopped = False

    def watch(self, entry: Held) -> None:
        """Watch ``entry``, whose ``deadline`` is set."""
        with self._changed:
            self._due[entry] = (entry.deadline, False)
            if self._wakes_at is None or entry.deadline < self._wakes_at:
                self._changed.notify()

    def forget(self, entry: Held) -> None:
        """Stop watching ``entry`` (its executor ended)."""
        with self._changed:
            self._due.pop(entry, None)

    def stop(self) -> None:
        """End the thread; nothing more is called back."""
        with self._changed:
            self._stopped = True
            self._changed.notify()

    def run(self) -> None:
        while (fired := self._next()) is not None:
            for entry, grace_over in fired:
                try:
                    (self.on_grace_over if grace_over else self.on_deadline)(entry)
                except Exception:  # noqa: BLE001 - the watchdog must outlive one bad pass
                    logger.exception("timeout handling of job %s failed", entry.lease.job_id)

    def _next(self) -> list[tuple[Held, bool]] | None:
        """Wait for the next deadlines or graces to pass; return them (None once stopped)."""
        with self._changed:
            while not self._stopped:
                now = time.monotonic()
                fired = [(e, over) for e, (when, over) in self._due.items() if when <= now]
                if fired:
                    for entry, grace_over in fired:
                        if grace_over:
                            del self._due[entry]
                        else:
                            self._due[entry] = (now + self.grace, True)
                    self._wakes_at = None
                    return fired
                self._wakes_at = min((when for when, _ in self._due.values()), default=None)
                self._changed.wait(None if self._wakes_at is None else self._wakes_at - now)
            return None


def timeout_message(timeout: float, outcome: Outcome | None = None, grace: float = 0.0) -> str:
    """Return the failure message of an attempt that outlived its ``timeout``.

    ``outcome`` is what its executor ended with after the deadline; None when it was abandoned
    after ``grace`` more seconds.
    """
    head = f"The attempt timed out after {timeout:g} s"
    if outcome is None:
        return (
            f"{head} and had not stopped {grace:g} s after it was cancelled; it was abandoned "
            f"(its thread may still run, but nothing it writes to the job is accepted)."
        )
    if outcome.status == AttemptOutcomeChoice.CANCELLED:
        return f"{head}; it stopped when cancelled."
    if outcome.status == AttemptOutcomeChoice.COMPLETE:
        return f"{head}; it returned later, and its result was discarded."
    return storable_message(f"{head}; then it failed: {outcome.error}")


class TimeoutMixin:
    """The worker's side of timeouts (a mixin of ``Worker``): what happens past a deadline."""

    def _watch(self, entry: Held, timeout: float | None) -> None:
        """Note that ``entry``'s attempt starts now; watch it if its operation has a timeout."""
        entry.started = time.monotonic()
        if timeout is not None:
            entry.timeout, entry.deadline = timeout, entry.started + timeout
            self.watchdog.watch(entry)

    def _timed_out(self, entry: Held, outcome: Outcome | None) -> Outcome | None:
        """Return the outcome to record for ``entry``'s executor, which just ended as ``outcome``.

        An executor that ended after its deadline fails with the timeout message, whatever it
        did (an exception it raised keeps its class path and traceback in the history row); one
        that completed the job itself (``ctx.complete_atomically``, refused after the deadline)
        stays complete.
        """
        self.watchdog.forget(entry)
        late = entry.deadline is not None and time.monotonic() >= entry.deadline
        if outcome is None or not late:
            return outcome
        return Outcome.failed(
            outcome.lease,
            timeout_message(entry.timeout, outcome),
            error_class=outcome.error_class,
            traceback=outcome.traceback,
        )

    def _deadline_passed(self, entry: Held) -> None:
        """Cancel ``entry``'s attempt: its timeout passed (``ctx.cancelled`` becomes true)."""
        with self.holdings.lock:
            if entry.state != HeldState.RUNNING:
                return
        _warn(
            entry,
            "timed out after %gs; cancelling it (abandoned in %gs if it runs on)",
            entry.timeout,
            self.options.timeout_grace,
        )
        entry.cancel.set()

    def _abandon(self, entry: Held) -> None:
        """Fail ``entry``'s attempt without its executor, and give its job thread's place away.

        The executor's thread runs on (nothing can stop it); ``_discard`` forgets whatever it
        ends with.
        """
        with self.holdings.lock:
            if entry.state != HeldState.RUNNING:
                return  # it ended just now: its own outcome is on its way
            entry.abandoned = True
            self.holdings.move(entry, HeldState.FINISHING)
            self.abandoned += 1
            self.abandoned_running += 1
            running = self.abandoned_running
        _warn(
            entry,
            "abandoned: still running %gs after its timeout of %gs; failing it and starting a "
            "new job thread (abandoned threads still running: %d)",
            self.options.timeout_grace,
            entry.timeout,
            running,
        )
        message = timeout_message(entry.timeout, grace=self.options.timeout_grace)
        duration = time.monotonic() - entry.started
        self.completer.put(Finished(entry, Outcome.failed(entry.lease, message), duration))
        if not self.stopped.is_set():
            self._start_job_thread()
        self.wake.set()

    def _discard(self, entry: Held, duration: float) -> None:
        """Forget what the abandoned executor of ``entry`` ended with: its job was failed."""
        with self.holdings.lock:
            self.abandoned_running -= 1
            running = self.abandoned_running
        _warn(
            entry,
            "the abandoned attempt returned after %.3fs; nothing of it is recorded "
            "(abandoned threads still running: %d)",
            duration,
            running,
        )


def _warn(entry: Held, message: str, *args: object) -> None:
    """Log ``message`` at WARNING about ``entry``'s job: ``job <id> <operation> <message>``."""
    operation = printable(entry.claim.job.operation, keep_newlines=False)
    logger.warning(f"job %s %s {message}", entry.lease.job_id, operation, *args)
