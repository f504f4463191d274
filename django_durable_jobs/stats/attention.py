"""What needs a person: the four kinds of jobs the snapshot counts and the admin lists.

:func:`attention_jobs` is the one definition of each kind; the snapshot counts it and the admin
job list's ``?attention=<kind>`` filter shows it, so the number and the list always agree.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Subquery

from ..models import Job, WorkerProcess
from ..models.querysets import JobQuerySet
from ..rules import registry
from ..rules.conf import jobs_settings
from ..rules.errors import InputInvalid
from ..rules.vocabulary import JobStatus
from .workers import lease_values, stale_q

HOLD_EXPIRED = "hold-expired"
FAILED_FINAL = "failed-final"
CANCEL_UNACKNOWLEDGED = "cancel-unacknowledged"
VANISHED_WORKER = "vanished-worker"
KINDS = (HOLD_EXPIRED, FAILED_FINAL, CANCEL_UNACKNOWLEDGED, VANISHED_WORKER)
TITLES = {
    HOLD_EXPIRED: "Expired leases waiting for a person (on_expired='hold')",
    FAILED_FINAL: "Failed jobs with no retry left",
    CANCEL_UNACKNOWLEDGED: "Cancellation requests not acknowledged within a lease",
    VANISHED_WORKER: "Running jobs held by workers that vanished",
}


def attention_jobs(
    kind: str,
    *,
    now: datetime,
    using: str | None = None,
    leases: list[float] | None = None,
) -> JobQuerySet:
    """Return the jobs (of every scope) that need a person for the reason ``kind`` names.

    - ``hold-expired``: running, lease expired, and an operation no worker resumes by itself
      (registered with ``on_expired="hold"``, or not registered here);
    - ``failed-final``: failed with no retry to come: its retry policy scheduled none (an
      automatic retry is recorded as a retry request) and nobody asked for one;
    - ``cancel-unacknowledged``: running, with a cancellation request made one lease
      (``DURABLE_JOBS['LEASE_SECONDS']``) ago or longer;
    - ``vanished-worker``: running and owned by a worker whose heartbeat is older than its lease.

    ``leases`` are the distinct lease lengths of live workers when already read.
    """
    using = jobs_settings.database(using)
    jobs = Job.objects.using(using)
    if kind == HOLD_EXPIRED:
        return jobs.lease_expired(now).exclude(
            operation__in=sorted(registry.resumable_operations())
        )
    if kind == FAILED_FINAL:
        return jobs.filter(status=JobStatus.FAILED, retry_requested_at__isnull=True)
    if kind == CANCEL_UNACKNOWLEDGED:
        late = now - timedelta(seconds=jobs_settings.LEASE_SECONDS)
        return jobs.filter(status=JobStatus.RUNNING, cancellation_requested_at__lte=late)
    if kind == VANISHED_WORKER:
        if leases is None:
            leases = lease_values(using)
        stale = WorkerProcess.objects.using(using).filter(stale_q(now, leases))
        return jobs.filter(
            status=JobStatus.RUNNING, owner_id__in=Subquery(stale.values("owner_id"))
        )
    raise InputInvalid(f"Unknown attention kind {kind!r}; use one of {', '.join(KINDS)}.")
