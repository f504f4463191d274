"""How ``manage.py jobs stats`` prints a snapshot for people: a few aligned tables, blanks left out.

``--json`` prints ``Snapshot.as_dict()`` itself; this module only words it.
"""

from __future__ import annotations

from collections import defaultdict
from urllib.parse import urlencode

from ...formatting.humanize import relative, span
from ...stats import Percentiles, Snapshot
from ._jobs_format import aligned

TERMINAL = ("complete", "failed", "cancelled", "orphaned")


def stats_text(snap: Snapshot) -> str:
    """Return the snapshot as text: queues, live jobs, the last day, the last hour, workers,
    schedules and what needs attention."""
    now = snap.taken_at
    scope = "every scope" if snap.scope is None else f"scope {snap.scope}"
    parts = [f"Jobs of {scope} at {now:%Y-%m-%d %H:%M:%S %Z}"]
    if snap.queues:
        rows = [
            (
                q.queue,
                q.pending,
                q.due,
                q.running,
                q.waiting,
                q.sleeping,
                span(q.lag_seconds) if q.due else "-",
            )
            for q in snap.queues
        ]
        header = ("queue", "pending", "due", "running", "waiting", "sleeping", "lag")
        parts.append(aligned(header, rows))
    else:
        parts.append("No pending, running, waiting or sleeping jobs.")
    if snap.jobs:
        rows = [(c.operation, c.queue, c.status, c.ownership, c.count) for c in snap.jobs]
        parts.append(aligned(("operation", "queue", "status", "ownership", "jobs"), rows))
    day: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(TERMINAL, 0))
    for t in snap.terminal_last_24h:
        day[t.operation][t.status] += t.count
    if day:
        rows = [(name, *counts.values()) for name, counts in sorted(day.items())]
        parts.append(aligned(("ended in the last 24 h", *TERMINAL), rows))
    if snap.operations_last_hour:
        rows = [
            (
                o.operation,
                o.finished,
                o.failed,
                "-" if o.failure_rate is None else f"{o.failure_rate:.0%}",
                _percentiles(o.enqueue_to_start),
                _percentiles(o.run_time),
            )
            for o in snap.operations_last_hour
        ]
        header = ("last hour", "finished", "failed", "rate", "wait p50/p95/p99", "run p50/p95/p99")
        parts.append(aligned(header, rows))
    parts.append(_workers(snap))
    parts.append(_schedules(snap))
    if snap.flow is not None:
        parts.append(_flow(snap))
    parts.append(_attention(snap))
    return "\n\n".join(parts)


def _percentiles(p: Percentiles) -> str:
    if not p.count:
        return "-"
    return "/".join(_seconds(v) for v in (p.p50, p.p95, p.p99))


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}s" if value < 10 else span(value).replace(" ", "")


def _workers(snap: Snapshot) -> str:
    w = snap.workers
    line = f"Workers: {w.alive} alive, {w.stale} stale, {w.stopped} stopped"
    if w.vanished:
        line += f"; {w.vanished} vanished holding leases"
    if not w.active:
        return line
    rows = [
        (
            r.actor,
            r.host,
            r.pid,
            r.state + (" (vanished)" if r.vanished else ""),
            r.leases_held,
            relative(r.heartbeat_at, snap.taken_at),
        )
        for r in w.active
    ]
    return line + "\n" + aligned(("worker", "host", "pid", "state", "leases", "heartbeat"), rows)


def _schedules(snap: Snapshot) -> str:
    s = snap.schedules
    line = f"Schedules: {s.total}, {s.paused} paused"
    for p in s.paused_schedules:
        by = f" by {p.paused_by}" if p.paused_by else ""
        line += f"\n  {p.name} ({p.operation}) paused{by} {relative(p.paused_at, snap.taken_at)}"
    return line


def _flow(snap: Snapshot) -> str:
    """Return the pauses in force and the limits holding pending jobs back."""
    f = snap.flow
    line = f"Flow control: {f.paused_jobs} pending jobs paused, {f.limited_jobs} held by limits"
    for p in f.pauses:
        where = f" in scope {p.scope}" if p.scope else ""
        by = f" by {p.paused_by}" if p.paused_by else ""
        why = f": {p.reason}" if p.reason else ""
        when = relative(p.paused_at, snap.taken_at)
        line += (
            f"\n  paused {p.target} {p.name}{where}{by} {when} (pause {p.id}, {p.held} held){why}"
        )
    rows = [
        (
            f"{limit.target} {limit.name}",
            limit.limit,
            limit.held,
            ", ".join(f"{k.key or '(all)'}: {k.detail}" for k in limit.keys) or "-",
        )
        for limit in f.limits
    ]
    if rows:
        line += "\n" + aligned(("limit of", "limit", "held back", "at the limit"), rows)
    return line


def _attention(snap: Snapshot) -> str:
    items = [a for a in snap.attention if a.count]
    if not items:
        return "Nothing needs attention."
    rows = [(a.count, a.title, f"?{urlencode(a.params)}") for a in items]
    return "Needs attention (admin job list filter in the last column):\n" + aligned(
        ("jobs", "what", "filter"), rows
    )
