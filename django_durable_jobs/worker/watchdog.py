"""The watchdog thread: calls back when watched attempts pass their deadline, and after a grace.

What those callbacks do (cancel, then abandon) is the worker's timeouts' (``timeouts.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .held import Held
from .options import TIMEOUT_GRACE

logger = logging.getLogger("django_durable_jobs.worker")

__all__ = ["TIMEOUT_GRACE", "Watchdog"]  # TIMEOUT_GRACE: its old home, kept for imports


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
