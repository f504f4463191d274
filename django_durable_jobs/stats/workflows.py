"""How far a workflow is, from its jobs' statuses: its state and its progress, as the REST API
and ``manage.py jobs workflow`` show them. Pure: nothing here reads the database.

The state is the store's own rule (``store.workflows.state_of``), spelled again here because
the surfaces may not reach into the store's rooms and the store is above this layer;
``tests/test_stats.py`` proves the two agree for every set of statuses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from ..rules.vocabulary import TERMINAL_STATUSES, JobStatus

__all__ = ["WORKFLOW_STATES", "progress", "workflow_state"]

WORKFLOW_STATES = ("running", "complete", "failed", "cancelled")


def workflow_state(statuses: Iterable[str]) -> str:
    """Return a workflow's state from its jobs' statuses.

    ``complete`` when every job completed; ``failed`` when one failed for good (or is an
    orphan) and nothing is left to run; ``cancelled`` when one was cancelled and nothing is
    left to run; ``running`` while any job runs, waits, sleeps or is pending.
    """
    found = set(statuses)
    if found <= {JobStatus.COMPLETE}:
        return "complete"
    if not found <= set(TERMINAL_STATUSES):
        return "running"
    if JobStatus.FAILED in found or JobStatus.ORPHANED in found:
        return "failed"
    return "cancelled"


def progress(statuses: Iterable[str]) -> dict[str, Any]:
    """Return how far a workflow is: its jobs in all, complete, and counted by status."""
    counts = Counter(statuses)
    return {
        "total": sum(counts.values()),
        "complete": counts.get(JobStatus.COMPLETE, 0),
        "by_status": dict(sorted(counts.items())),
    }
