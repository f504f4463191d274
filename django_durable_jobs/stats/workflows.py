"""How far a workflow is, from its jobs' statuses: its progress, as the REST API and
``manage.py jobs workflow`` show it. Pure: nothing here reads the database. Its state is
the one rule of ``rules.graph`` (``state_of``, ``workflow_state``), re-exported here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from ..rules.graph import WORKFLOW_STATES, state_of, workflow_state
from ..rules.vocabulary import JobStatus

__all__ = ["WORKFLOW_STATES", "progress", "state_of", "workflow_state"]


def progress(statuses: Iterable[str]) -> dict[str, Any]:
    """Return how far a workflow is: its jobs in all, complete, and counted by status."""
    counts = Counter(statuses)
    return {
        "total": sum(counts.values()),
        "complete": counts.get(JobStatus.COMPLETE, 0),
        "by_status": dict(sorted(counts.items())),
    }
