"""Running jobs: the worker loop, the executor, JobContext, heartbeats and wake-ups."""

from .context import JobContext
from .runner import Worker, WorkerOptions

__all__ = ["JobContext", "Worker", "WorkerOptions"]
