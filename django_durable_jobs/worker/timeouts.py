"""Timeouts, the worker's rescuer: cancel an attempt past its deadline, abandon it after a grace.

An operation's ``timeout`` bounds each attempt, counted from its start. When it passes, the
watchdog (``watchdog.py``) calls back and the attempt's ``ctx.cancelled`` is set; an executor that
stops then (or returns, or raises) ends ``failed`` with a timeout message. One still running
``timeout_grace`` seconds later is *abandoned*: its outcome, ``failed``, goes to the completer at
once, its job thread's place is taken by a new thread, and the old thread runs on until the
executor returns (Python cannot stop a thread), when whatever it produced is discarded. Its writes
through ``ctx`` are refused once the failure committed (the row no longer runs under its lease);
what it does outside the job (an e-mail, an HTTP call) still happens.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..formatting.terminal import printable
from ..rules.outcome import storable_message
from ..rules.values import Outcome
from ..rules.vocabulary import AttemptOutcomeChoice
from .completer import Finished
from .held import Held, HeldState
from .holdings import Holdings
from .watchdog import Watchdog

logger = logging.getLogger("django_durable_jobs.worker")

__all__ = ["Timeouts", "timeout_message"]


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


class Timeouts:
    """What happens to the attempts of a worker past their operation's timeout.

    Given what it acts on: the worker's ``holdings`` (whose lock guards the counts here too),
    ``fail`` (hands an abandoned attempt's failure to the completer), ``replace_thread`` (starts
    a job thread in the place of an abandoned entry's) and ``wake`` (the fetch loop's event). It counts
    the job threads given up on (``abandoned``) and those whose executors still run
    (``abandoned_running``).
    """

    def __init__(
        self,
        grace: float,
        holdings: Holdings | None,
        *,
        fail: Callable[[Finished], object],
        replace_thread: Callable[[Held], object],
        wake: threading.Event,
    ) -> None:
        self.grace = grace
        self.holdings = holdings
        self.fail = fail
        self.replace_thread = replace_thread
        self.wake = wake
        self.abandoned = 0  # job threads given up on after a timeout (guarded by the lock)
        self.abandoned_running = 0  # ... whose executors have not returned yet
        self.watchdog = Watchdog(
            grace, on_deadline=self.deadline_passed, on_grace_over=self.abandon
        )

    def start(self) -> None:
        """Start the watchdog's thread."""
        self.watchdog.start()

    def stop(self) -> None:
        """Stop the watchdog: nothing more is cancelled or abandoned."""
        self.watchdog.stop()

    def watch(self, entry: Held, timeout: float | None) -> None:
        """Note that ``entry``'s attempt starts now; watch it if its operation has a timeout."""
        entry.started = time.monotonic()
        if timeout is not None:
            entry.timeout, entry.deadline = timeout, entry.started + timeout
            self.watchdog.watch(entry)

    def timed_out(self, entry: Held, outcome: Outcome | None) -> Outcome | None:
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

    def deadline_passed(self, entry: Held) -> None:
        """Cancel ``entry``'s attempt: its timeout passed (``ctx.cancelled`` becomes true)."""
        with self.holdings.lock:
            if entry.state != HeldState.RUNNING:
                return
        _warn(
            entry,
            "timed out after %gs; cancelling it (abandoned in %gs if it runs on)",
            entry.timeout,
            self.grace,
        )
        entry.cancel.set()

    def abandon(self, entry: Held) -> None:
        """Fail ``entry``'s attempt without its executor, and give its job thread's place away.

        The executor's thread runs on (nothing can stop it); ``discard`` forgets whatever it
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
            self.grace,
            entry.timeout,
            running,
        )
        message = timeout_message(entry.timeout, grace=self.grace)
        duration = time.monotonic() - entry.started
        self.fail(Finished(entry, Outcome.failed(entry.lease, message), duration))
        self.replace_thread(entry)
        self.wake.set()

    def discard(self, entry: Held, duration: float) -> None:
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
