"""The counters and histograms a worker process keeps (prometheus-client imported here only).

Labels are bounded: ``operation`` is a registered operation's name (the worker claims nothing
else), ``outcome`` one of ``AttemptEnd``'s few words, ``write`` one of ``WRITES``. No job id
ever becomes a label.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Histogram

from . import WRITES

if TYPE_CHECKING:
    from ..worker import AttemptReport

PREFIX = "durable_jobs"

# Seconds: from a few milliseconds (a no-op job) to an hour (a long report).
DURATION_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0
)  # fmt: skip
# Seconds: a NOTIFY wake-up takes milliseconds, a poll up to --poll, a backlog much longer.
LATENCY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0
)  # fmt: skip

# The attempt ends that wrote nothing because another attempt owns the job.
LEASE_LOST = "lease-lost"
RELEASED = "released"


class Recorder:
    """One process's counters and histograms, in ``registry`` (None: registered nowhere)."""

    def __init__(self, registry: Any = None) -> None:
        kwargs = {"registry": registry}
        self.claims = Counter(
            f"{PREFIX}_claims", "Jobs claimed by this worker.", ["operation"], **kwargs
        )
        self.attempts = Counter(
            f"{PREFIX}_attempts",
            "Attempts ended, by how they ended (complete, failed, cancelled, released, "
            "lease-lost, unrecorded).",
            ["operation", "outcome"],
            **kwargs,
        )
        self.duration = Histogram(
            f"{PREFIX}_attempt_duration_seconds",
            "Run time of attempts, from the executor's start to its end.",
            ["operation"],
            buckets=DURATION_BUCKETS,
            **kwargs,
        )
        self.latency = Histogram(
            f"{PREFIX}_enqueue_to_start_seconds",
            "Wait of first attempts, from the time the job was due to the executor's start.",
            ["operation"],
            buckets=LATENCY_BUCKETS,
            **kwargs,
        )
        self.leases_lost = Counter(
            f"{PREFIX}_leases_lost",
            "Attempts that ended without their lease: another attempt owns the job.",
            ["operation"],
            **kwargs,
        )
        self.stale_writes = Counter(
            f"{PREFIX}_stale_writes_refused",
            "Fenced writes the store refused because the lease was lost (outcome, heartbeat, "
            "checkpoint, progress, complete_atomically).",
            ["operation", "write"],
            **kwargs,
        )
        # Label children by operation, so that the hot path is a dict lookup and an increment.
        self._per_operation: dict[str, tuple[Any, Any, Any]] = {}
        self._ended: dict[tuple[str, str], Any] = {}

    def _children(self, operation: str) -> tuple[Any, Any, Any]:
        children = self._per_operation.get(operation)
        if children is None:
            children = (
                self.claims.labels(operation),
                self.duration.labels(operation),
                self.latency.labels(operation),
            )
            self._per_operation[operation] = children
        return children

    def claimed(self, operation: str) -> None:
        self._children(operation)[0].inc()

    def attempt_started(self, job: Any, clock: Callable[[], datetime]) -> None:
        if job.attempts != 1:  # a later attempt waited for a retry or a lease, not in a queue
            return
        due = job.created_at
        if job.run_after is not None and job.run_after > due:
            due = job.run_after
        self._children(job.operation)[2].observe(max((clock() - due).total_seconds(), 0.0))

    def attempt_ended(self, report: AttemptReport) -> None:
        operation, outcome = report.operation, report.outcome
        ended = self._ended.get((operation, outcome))
        if ended is None:
            ended = self._ended[(operation, outcome)] = self.attempts.labels(operation, outcome)
        ended.inc()
        if outcome == RELEASED:  # never started
            return
        self._children(operation)[1].observe(report.duration)
        if outcome == LEASE_LOST:
            self.leases_lost.labels(operation).inc()
            self.stale_writes.labels(operation, "outcome").inc()

    def stale_write_refused(self, operation: str, write: str) -> None:
        if write not in WRITES:
            raise ValueError(f"write is one of {', '.join(WRITES)}; got {write!r}.")
        self.stale_writes.labels(operation, write).inc()
