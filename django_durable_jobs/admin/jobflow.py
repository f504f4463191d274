"""What a job's page says of its place in a workflow, of its sleep, and of its recorded steps.

Three queries at most, whatever the workflow's size: the workflow, the parents and the
children (each list cut at ``RELATIVES_SHOWN``); one more for the steps (cut at
``STEPS_SHOWN``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..formatting.humanize import relative
from ..models import Job, JobStep, Workflow
from ..rules.jsontext import JsonTooDeep, pretty
from ..rules.validation import loads_strict
from ..rules.vocabulary import TERMINAL_STATUSES, JobStatus
from . import format as fmt

# The parents (or children) a job's page lists; the workflow's page has them all.
RELATIVES_SHOWN = 50
# The steps a job's page shows, and how much of each step's result (bytes of output).
STEPS_SHOWN, STEP_RESULT_BYTES = 200, 2_048


@dataclass(frozen=True)
class Relative:
    """A parent or a child of a job, linked."""

    url: str
    name: str
    operation: str
    status: str

    @property
    def badge(self):
        return fmt.status_badge(self.status)


def declared(job: Job) -> tuple[int, str]:
    """Return a job's place in its workflow's declaration (its key ends with its index)."""
    tail = job.idempotency_key.rsplit(":", 1)[-1]
    return (int(tail) if tail.isdigit() else 0, str(job.pk))


def _relatives(rows, job_url: Callable[[Any], str]) -> tuple[list[Relative], int]:
    """Return the first ``RELATIVES_SHOWN`` of ``rows`` in declaration order, and how many."""
    found = sorted(rows.only("id", "node", "operation", "status", "idempotency_key"), key=declared)
    shown = [
        Relative(job_url(row.pk), row.node or str(row.pk)[:8], row.operation, row.status)
        for row in found[:RELATIVES_SHOWN]
    ]
    return shown, len(found)


def workflow_facts(
    job: Job,
    using: str,
    job_url: Callable[[Any], str],
    workflow_url: Callable[[Any], str],
) -> dict[str, Any] | None:
    """Return the workflow of a workflow's job, its parents and children, or None."""
    if job.workflow_id is None:
        return None
    workflow = Workflow.objects.using(using).filter(pk=job.workflow_id).only("id", "name").first()
    jobs = Job.objects.using(using)
    parents, parent_count = _relatives(jobs.filter(child_links__child_id=job.pk), job_url)
    children, child_count = _relatives(jobs.filter(parent_links__parent_id=job.pk), job_url)
    waiting = None
    if job.status == JobStatus.WAITING:
        names = ", ".join(p.name for p in parents if p.status not in TERMINAL_STATUSES)
        waiting = (
            f"Waiting for {job.waiting_on} of its {parent_count} parents to complete"
            + (f" ({names})" if names else "")
            + "; it becomes pending when the last one does."
        )
    return {
        "name": workflow.name if workflow else "(missing)",
        "id": str(job.workflow_id),
        "url": workflow_url(job.workflow_id),
        "node": job.node,
        "on_upstream_failure": job.on_upstream_failure,
        "parents": parents,
        "parents_more": parent_count - len(parents),
        "children": children,
        "children_more": child_count - len(children),
        "waiting": waiting,
    }


def sleeping_until(job: Job, now: datetime) -> str | None:
    """Return "Sleeping until <time> (in 4 min)" for a sleeping job, else None."""
    if job.status != JobStatus.SLEEPING:
        return None
    until = job.sleep_until or job.run_after
    if until is None:
        return "Sleeping, with no wake-up time recorded."
    due = "due now: the next worker to claim takes it" if until <= now else relative(until, now)
    return f"Sleeping until {fmt.moment(until)} ({due}): it called ctx.sleep(); a worker takes it up again then."


@dataclass(frozen=True)
class StepRow:
    """One recorded step (``ctx.step``), its result pretty-printed and cut."""

    position: int
    name: str
    epoch: int
    recorded_at: datetime
    result: str

    @property
    def recorded(self) -> str:
        return fmt.moment(self.recorded_at)

    @property
    def shown(self) -> str:
        try:
            loads_strict(self.result)
        except (TypeError, ValueError, JsonTooDeep):
            text, cut = self.result[:STEP_RESULT_BYTES], len(self.result) > STEP_RESULT_BYTES
            return text + ("\n… (cut)" if cut else "")
        shown = pretty(self.result, STEP_RESULT_BYTES)
        return f"{shown.text}\n{shown.note()}" if shown.truncated else shown.text


def steps_of(job: Job, using: str) -> tuple[list[StepRow], int]:
    """Return the job's first ``STEPS_SHOWN`` recorded steps in position order, and how many."""
    rows = JobStep.objects.using(using).filter(job_id=job.pk).order_by("position")
    shown = [
        StepRow(s.position, s.name, s.epoch, s.recorded_at, s.result) for s in rows[:STEPS_SHOWN]
    ]
    total = len(shown) if len(shown) < STEPS_SHOWN else rows.count()
    return shown, total
