"""The dashboard's flow-control panels: what is paused (with Resume buttons) and the limits in
force, each with the pending jobs it holds back. Numbers from ``snapshot.flow``
(``stats/flow.py``); this module only arranges them and links them to the job list."""

from __future__ import annotations

from urllib.parse import urlencode

from django.urls import reverse
from django.utils import timezone

from .. import stats
from ..rules.vocabulary import JobStatus


def flow_panels(snapshot: stats.Snapshot, site: str, jobs_url: str, pauser: bool) -> dict:
    """Return the context of the Paused and Limits-in-force panels (empty without a flow)."""
    flow = snapshot.flow
    if flow is None:
        return {"flow": None}
    pauses = []
    for p in flow.pauses:
        params = {f"{p.target}__exact": p.name, "status__exact": JobStatus.PENDING}
        if p.scope:
            params["scope__exact"] = p.scope
        pauses.append(
            {
                "pause": p,
                "paused_at": timezone.localtime(p.paused_at),
                "jobs_url": f"{jobs_url}?{urlencode(params)}",
                "resume_url": reverse(f"{site}:durable_jobs_jobpause_resume", args=[p.id]),
            }
        )
    limits = []
    for limit in flow.limits:
        params = {f"{limit.target}__exact": limit.name, "status__exact": JobStatus.PENDING}
        limits.append({"limit": limit, "jobs_url": f"{jobs_url}?{urlencode(params)}"})
    paused_queues = {}
    for p in flow.pauses:
        if p.target == "queue":
            paused_queues.setdefault(p.name, []).append(p.scope or "every scope")
    return {
        "flow": flow,
        "paused_queues": {q: ", ".join(scopes) for q, scopes in paused_queues.items()},
        "flow_pauses": pauses,
        "flow_limits": limits,
        "may_pause": pauser,
        "pause_url": reverse(f"{site}:durable_jobs_jobpause_pause"),
        "pauses_url": reverse(f"{site}:durable_jobs_jobpause_changelist"),
    }
