"""The body of ``GET /jobs/stats``: ``stats.Snapshot`` as typed schemas, so OpenAPI documents it.

Each schema reads the snapshot's frozen dataclasses by attribute; the fields and their meanings
are the snapshot's (see ``docs/stats.md``).
"""

from __future__ import annotations

from datetime import datetime

from ninja import Schema
from pydantic import Field


class JobCountOut(Schema):
    operation: str
    queue: str
    status: str
    ownership: str
    count: int


class TerminalCountOut(Schema):
    operation: str
    queue: str
    status: str
    count: int


class QueueOut(Schema):
    queue: str
    pending: int
    due: int = Field(
        description="Pending jobs whose run_after has come, and sleeping ones whose sleep is over."
    )
    running: int
    oldest_due_at: datetime | None = Field(
        description="When the oldest due job became due: max(created_at, run_after)."
    )
    lag_seconds: float = Field(description="Now minus oldest_due_at; 0 when nothing is due.")
    waiting: int = Field(
        description="Workflow jobs whose parents have not all completed (never due until then)."
    )
    sleeping: int = Field(
        description="Jobs that called ctx.sleep; counted in due too once their sleep is over."
    )


class WorkerOut(Schema):
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
    leases_held: int = Field(description="Running jobs this worker owns, counted from the jobs.")
    vanished: bool = Field(description="Stale and still holding leases.")


class WorkersOut(Schema):
    alive: int
    stale: int
    stopped: int
    vanished: int
    active: list[WorkerOut] = Field(description="Alive and stale workers, newest heartbeat first.")
    recently_stopped: list[WorkerOut]


class PausedScheduleOut(Schema):
    name: str
    operation: str
    scope: str | None
    paused_at: datetime
    paused_by: str


class SchedulesOut(Schema):
    total: int
    paused: int
    paused_schedules: list[PausedScheduleOut]


class HistoryBucketOut(Schema):
    start: datetime
    complete: int
    failed: int
    cancelled: int


class PercentilesOut(Schema):
    count: int
    p50: float | None
    p95: float | None
    p99: float | None


class OperationOut(Schema):
    operation: str
    finished: int
    complete: int
    failed: int
    cancelled: int
    failure_rate: float | None
    enqueue_to_start: PercentilesOut
    run_time: PercentilesOut


class AttentionOut(Schema):
    kind: str
    count: int
    title: str
    params: dict[str, str] = Field(description="The admin job list's filter that shows them.")


class PauseInForceOut(Schema):
    id: int
    target: str
    name: str
    scope: str = Field(description='The scope it holds; "" for every scope.')
    reason: str
    paused_at: datetime
    paused_by: str
    held: int = Field(description="Pending jobs it holds now.")


class HeldKeyOut(Schema):
    key: str = Field(description='The key at its limit ("" for a limit without keys).')
    held: int
    detail: str
    until: datetime | None = Field(description="A rate limit: when its next start may be.")


class LimitOut(Schema):
    target: str
    name: str
    kind: str = Field(description="rate_limit or max_running_per_key.")
    limit: str
    held: int = Field(description="Pending, due, unpaused jobs it holds back now.")
    keys: list[HeldKeyOut]


class FlowOut(Schema):
    paused_jobs: int = Field(description="Pending jobs a pause in force holds.")
    limited_jobs: int = Field(description="Due, unpaused pending jobs a limit holds back now.")
    pauses: list[PauseInForceOut]
    limits: list[LimitOut]


class StatsOut(Schema):
    taken_at: datetime
    scope: str | None
    jobs: list[JobCountOut] = Field(
        description="Jobs not ended (pending, running, waiting, sleeping) by ownership."
    )
    terminal_last_24h: list[TerminalCountOut]
    queues: list[QueueOut]
    workers: WorkersOut
    schedules: SchedulesOut
    history_per_minute: list[HistoryBucketOut] = Field(description="The last 60 minutes.")
    history_per_hour: list[HistoryBucketOut] = Field(description="The last 24 hours.")
    operations_last_hour: list[OperationOut]
    attempt_sample: int = Field(description="Attempts read for the last hour's durations.")
    attention: list[AttentionOut]
    flow: FlowOut | None = Field(
        default=None,
        description="Pauses in force and declared limits, with the pending jobs each holds back.",
    )
