"""Read-only admin pages of jobs, attempts and workers: rows are evidence, never edited here.

Django's admin autodiscovery imports this package, which registers the three pages:

- :mod:`.jobs`: the job list and job page (with :mod:`.filters`, :mod:`.format` and
  :mod:`.paginator`);
- :mod:`.actions`: *Request cancellation* and *Request retry*, which call the store, the only
  writer, and word its typed answers;
- :mod:`.attempts` and :mod:`.workers`: the attempt history and the ``runjobs`` processes.
"""

from __future__ import annotations

from .actions import RequestActions
from .attempts import JobAttemptAdmin, JobAttemptInline
from .base import ReadOnlyAdmin
from .filters import OperationFilter, OwnershipFilter, QueueFilter, ScopeFilter
from .jobs import JobAdmin, JobChangeList
from .paginator import EstimatedCountPaginator
from .workers import WorkerProcessAdmin

__all__ = [
    "EstimatedCountPaginator",
    "JobAdmin",
    "JobAttemptAdmin",
    "JobAttemptInline",
    "JobChangeList",
    "OperationFilter",
    "OwnershipFilter",
    "QueueFilter",
    "ReadOnlyAdmin",
    "RequestActions",
    "ScopeFilter",
    "WorkerProcessAdmin",
]
