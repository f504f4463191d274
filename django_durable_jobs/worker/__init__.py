"""Running jobs: the worker and its roles, the in-process runner, ``JobContext`` and reports.

What other parts of the app use is imported from here: ``runjobs`` builds a ``Worker`` from
``WorkerOptions`` (or supervises several with ``supervise``), code runs jobs in its own threads
with ``InProcessRunner``, and executors get a ``JobContext``. The modules inside are the roles
and may change.
"""

from .context import JobContext
from .inprocess import InProcessRunner
from .options import (
    TIMEOUT_GRACE,
    WorkerOptions,
    check_processes,
    check_schedules,
    setting_lease_seconds,
)
from .reports import AttemptReport, ExecutionReport, Unwritten, summary_line
from .reports import deprecated as _deprecated
from .runner import Worker
from .shutdown import ignore_parent_requests
from .supervisor import (
    CRASH_LOOP_DEATHS,
    CRASH_LOOP_SECONDS,
    MAX_RESTART_DELAY,
    RESTART_DELAY,
    RestartRule,
    supervise,
)

__all__ = [
    "CRASH_LOOP_DEATHS",
    "CRASH_LOOP_SECONDS",
    "MAX_RESTART_DELAY",
    "RESTART_DELAY",
    "TIMEOUT_GRACE",
    "AttemptReport",
    "ExecutionReport",
    "InProcessRunner",
    "JobContext",
    "RestartRule",
    "Unwritten",
    "Worker",
    "WorkerOptions",
    "check_processes",
    "check_schedules",
    "ignore_parent_requests",
    "setting_lease_seconds",
    "summary_line",
    "supervise",
]


def __getattr__(name: str):
    """Return a former name of this package (``AttemptEnd``) with a ``DeprecationWarning``."""
    return _deprecated(name, __name__)
