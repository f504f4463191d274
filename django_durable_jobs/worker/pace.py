"""How fast each operation's jobs run in this worker, and how many short jobs to claim at once.

A claim and a completion cost a transaction each whatever the number of jobs in them, so jobs
that run in a few milliseconds are cheapest claimed many at a time. The fetch loop claims as
many as its job threads and its prefetch buffer have room for (``--concurrency`` +
``--prefetch``); when ``--prefetch`` is not given, it then claims more, in the same turn, of the
operations this worker has seen run short (:meth:`Pace.short`): up to as many as its job threads
run in about ``WORK_SECONDS`` at their recent pace, and never more than ``GROWN_MAX`` held in all.

So the buffer grows only with a backlog of short jobs, and what a grown buffer holds is done in
about ``WORK_SECONDS``: a job submitted meanwhile, of higher priority or of another scope, waits
that long at most for the next claim. An operation this worker has not run yet, or whose recent
runs were not short, is claimed as before, so long jobs never wait in a grown buffer behind
each other while other workers are idle.
"""

from __future__ import annotations

import statistics
import threading
from collections import deque

# An operation is short when the median of its recent runs in this worker is at most this long.
SHORT_SECONDS = 0.005
# A grown buffer holds about this much work for the job threads at the recent pace (the mean).
WORK_SECONDS = 0.05
GROWN_MAX = 100  # jobs held (buffered and running) at most while the buffer is grown
RECENT = 16  # the runs of each operation remembered


class Pace:
    """How long each operation's recent jobs ran in this worker (thread-safe).

    Which operations are short goes by the median of their last ``RECENT`` runs, so a slow
    first run (imports) or a hiccup does not undo it; how many to hold goes by the mean, so
    the few long runs of an operation that is mostly short still shrink the buffer.
    """

    def __init__(self, concurrency: int, prefetch: int | None) -> None:
        self.concurrency = concurrency
        self.grows = prefetch is None  # a --prefetch given is kept as given
        self.lock = threading.Lock()
        self.runs: dict[str, deque[float]] = {}

    def ran(self, operation: str, seconds: float) -> None:
        """Count one run of ``operation`` that took ``seconds`` (its outcome aside)."""
        with self.lock:
            self.runs.setdefault(operation, deque(maxlen=RECENT)).append(seconds)

    def short(self, operations: list[str]) -> tuple[list[str], int]:
        """Return the short ones of ``operations`` and how many jobs to hold while claiming them.

        ``([], 0)`` when the buffer does not grow: ``--prefetch`` was given, or no operation
        is short yet.
        """
        if not self.grows:
            return [], 0
        with self.lock:
            recent = {op: list(self.runs[op]) for op in operations if op in self.runs}
        found = {
            op: statistics.fmean(runs)
            for op, runs in recent.items()
            if statistics.median(runs) <= SHORT_SECONDS
        }
        if not found:
            return [], 0
        slowest = max(max(found.values()), 1e-6)
        hold = min(GROWN_MAX, int(self.concurrency * WORK_SECONDS / slowest))
        return sorted(found), hold
