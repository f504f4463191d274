"""Admin pages of jobs, attempts and workers (read-only: rows are evidence), schedules and API
tokens.

Django's admin autodiscovery imports this package, which registers the pages:

- :mod:`.jobs`: the job list and job page (with :mod:`.filters`, :mod:`.format` and
  :mod:`.paginator`);
- :mod:`.actions`: *Request cancellation* and *Request retry*, which call the store, the only
  writer, and word its typed answers;
- :mod:`.attempts` and :mod:`.workers`: the attempt history and the ``runjobs`` processes;
- :mod:`.schedules`: the recurring jobs declared in code, paused and resumed;
- :mod:`.tokens`: the REST API's bearer tokens, created (shown once) and revoked;
- :mod:`.workflows`: workflows, drawn as graphs (:mod:`.graph`), cancelled and retried whole;
- :mod:`.pauses`: the history of pauses, pausing and resuming queues and operations (the
  dashboard's panels are :mod:`.flowpanels`).
"""

from __future__ import annotations

from .actions import RequestActions
from .attempts import JobAttemptAdmin, JobAttemptInline
from .base import ReadOnlyAdmin
from .dashboard import DashboardAdmin as DashboardAdmin
from .filters import (
    AttentionFilter,
    OperationFilter,
    OwnershipFilter,
    QueueFilter,
    ScheduledFilter,
    ScheduleFilter,
    ScopeFilter,
    WorkerStateFilter,
    WorkflowFilter,
)
from .jobs import JobAdmin, JobChangeList
from .paginator import EstimatedCountPaginator
from .pauses import JobPauseAdmin, PauseActions
from .schedules import ScheduleAdmin
from .tokens import ApiTokenAdmin
from .workers import WorkerProcessAdmin
from .workflows import WorkflowAdmin

__all__ = [
    "ApiTokenAdmin",
    "AttentionFilter",
    "EstimatedCountPaginator",
    "JobAdmin",
    "JobAttemptAdmin",
    "JobAttemptInline",
    "JobChangeList",
    "JobPauseAdmin",
    "OperationFilter",
    "OwnershipFilter",
    "PauseActions",
    "QueueFilter",
    "ReadOnlyAdmin",
    "RequestActions",
    "ScheduleAdmin",
    "ScheduleFilter",
    "ScheduledFilter",
    "ScopeFilter",
    "WorkerProcessAdmin",
    "WorkerStateFilter",
    "WorkflowAdmin",
    "WorkflowFilter",
]
