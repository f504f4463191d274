"""The snapshot's values: frozen dataclasses, turned into JSON-ready data by ``as_dict()``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = [
    "AttentionItem",
    "HistoryBucket",
    "JobCount",
    "OperationStats",
    "PausedSchedule",
    "Percentiles",
    "QueueStats",
    "ScheduleStats",
    "Snapshot",
    "TerminalCount",
    "WorkerRow",
    "WorkerStats",
]


@dataclass(frozen=True)
class JobCount:
    """Live rows (pending, running, waiting, sleeping) of one operation and queue, in one status
    and ownership."""

    operation: str
    queue: str
    status: str
    ownership: str
    count: int


@dataclass(frozen=True)
class TerminalCount:
    """Jobs of one operation and queue that ended in ``status`` within the terminal window."""

    operation: str
    queue: str
    status: str
    count: int


@dataclass(frozen=True)
class QueueStats:
    """One queue now: its backlog, what of it is due, and how long the oldest due job waits.

    ``waiting`` are workflow jobs whose parents have not all completed; ``sleeping`` jobs that
    called ``ctx.sleep`` (due, and counted in ``due``, once their sleep is over).
    """

    queue: str
    pending: int
    due: int
    running: int
    oldest_due_at: datetime | None
    lag_seconds: float
    waiting: int = 0
    sleeping: int = 0


@dataclass(frozen=True)
class WorkerRow:
    """One ``runjobs`` process, with the leases it holds counted from the job rows."""

    owner_id: str
    actor: str
    host: str
    pid: int
    state: str
    started_at: datetime
    heartbeat_at: datetime
    stopped_at: datetime | None
    lease_seconds: float
    concurrency: int
    leases_held: int
    vanished: bool


@dataclass(frozen=True)
class WorkerStats:
    """Workers by state; the alive and stale ones listed, the stopped ones only the newest."""

    alive: int
    stale: int
    stopped: int
    vanished: int
    active: tuple[WorkerRow, ...]
    recently_stopped: tuple[WorkerRow, ...]


@dataclass(frozen=True)
class PausedSchedule:
    name: str
    operation: str
    scope: str | None
    paused_at: datetime
    paused_by: str


@dataclass(frozen=True)
class ScheduleStats:
    """Schedules not removed: how many, how many paused, and the paused ones by name."""

    total: int
    paused: int
    paused_schedules: tuple[PausedSchedule, ...]


@dataclass(frozen=True)
class HistoryBucket:
    """Jobs that ended in ``[start, start + bucket length)``, by terminal status."""

    start: datetime
    complete: int
    failed: int
    cancelled: int


@dataclass(frozen=True)
class Percentiles:
    """Nearest-rank percentiles of ``count`` durations, in seconds (None without any)."""

    count: int
    p50: float | None
    p95: float | None
    p99: float | None


@dataclass(frozen=True)
class OperationStats:
    """One operation over the operations window: its outcomes and how long its jobs took."""

    operation: str
    finished: int
    complete: int
    failed: int
    cancelled: int
    failure_rate: float | None
    enqueue_to_start: Percentiles
    run_time: Percentiles


@dataclass(frozen=True)
class AttentionItem:
    """Jobs someone should look at, and the admin job-list query that shows exactly them."""

    kind: str
    count: int
    title: str
    params: dict[str, str]


@dataclass(frozen=True)
class Snapshot:
    """What the job tables say at ``taken_at``, for one scope or (``scope=None``) for all."""

    taken_at: datetime
    scope: str | None
    jobs: tuple[JobCount, ...]
    terminal_last_24h: tuple[TerminalCount, ...]
    queues: tuple[QueueStats, ...]
    workers: WorkerStats
    schedules: ScheduleStats
    history_per_minute: tuple[HistoryBucket, ...]
    history_per_hour: tuple[HistoryBucket, ...]
    operations_last_hour: tuple[OperationStats, ...]
    attempt_sample: int
    attention: tuple[AttentionItem, ...]
    # Pauses in force and declared limits, with the pending jobs each holds back
    # (``stats.flow.FlowStats``); None only for a snapshot built by hand.
    flow: Any = None

    def as_dict(self) -> dict[str, Any]:
        """Return the snapshot as JSON-ready data: ISO 8601 times, seconds as floats."""
        return _plain(dataclasses.asdict(self))


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value
