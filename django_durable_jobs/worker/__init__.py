"""Running jobs: the worker loop, one attempt's rules, JobContext, holdings and heartbeats."""

from .context import JobContext
from .reports import AttemptEnd, AttemptReport, ExecutionReport
from .runner import Worker, WorkerOptions

__all__ = [
    "AttemptEnd",
    "AttemptReport",
    "ExecutionReport",
    "JobContext",
    "Worker",
    "WorkerOptions",
]
