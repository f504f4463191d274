"""What flow control holds back now: the pauses in force and the limits declared. Read-only.

A pending job whose time has come waits for one of three reasons besides a busy worker:

* a **pause** in force holds its queue or its operation (in its scope, or in every scope);
* a **rate limit** of its operation or queue (per key of its input, or whole) has no room: the
  bucket's starts in the last period number N (``rules.flow.rate_room`` on the ``RateBucket``
  row, id ``rules.flow.bucket_id(target, name, key)``);
* its operation's **concurrency per key** is at its limit: ``max_running_per_key`` jobs of its
  ``concurrency_key`` are running (counted in every scope: the limit is the operation's).

Paused work is counted as paused only, never also as limited. The rules are ``rules.flow``'s;
this module only reads rows with them. Cost: with nothing paused and no limit declared, one
query (the pauses in force); else one more for the paused jobs, and two per declared limit.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db.models import Count, Q

from ..models import Job, JobPause, RateBucket
from ..rules import flow, registry
from ..rules.vocabulary import JobStatus

__all__ = ["FlowStats", "HeldKey", "LimitInForce", "PauseInForce", "flow_stats", "held_back"]

KEYS_SHOWN = 10  # keys at their limit listed per limit (the count covers them all)


@dataclass(frozen=True)
class PauseInForce:
    """A pause in force and how many pending jobs it holds now."""

    id: int
    target: str
    name: str
    scope: str
    reason: str
    paused_at: datetime
    paused_by: str
    held: int


@dataclass(frozen=True)
class HeldKey:
    """One key (``""``: the whole operation or queue) at its limit, and what it holds back."""

    key: str
    held: int
    detail: str
    until: datetime | None = None  # a rate limit: when its next start may be


@dataclass(frozen=True)
class LimitInForce:
    """A declared limit, and the pending, due, unpaused jobs it holds back now."""

    target: str  # "operation" or "queue"
    name: str
    kind: str  # "rate_limit" or "max_running_per_key"
    limit: str  # "10/s", or "2 running per key"
    held: int
    keys: tuple[HeldKey, ...]


@dataclass(frozen=True)
class FlowStats:
    """Pauses in force and declared limits, with the jobs each holds back."""

    paused_jobs: int
    limited_jobs: int
    pauses: tuple[PauseInForce, ...]
    limits: tuple[LimitInForce, ...]


def flow_stats(jobs, using: str, scope: str | None, now: datetime) -> FlowStats:
    """Return what holds ``jobs`` (the caller's scope's rows) back at ``now``."""
    pauses = list(_pauses_in_force(using, scope))
    pending = jobs.filter(status=JobStatus.PENDING)
    paused_jobs, held = 0, defaultdict(int)
    if pauses:
        groups = pending.paused().values("operation", "queue", "scope").annotate(n=Count("pk"))
        for group in groups.order_by():
            paused_jobs += group["n"]
            for p in pauses:
                if _holds(p, group["operation"], group["queue"], group["scope"]):
                    held[p.pk] += group["n"]
    due = pending.filter(run_after__lte=now).unpaused()
    limits = tuple(_limits(due, using, now))
    return FlowStats(
        paused_jobs=paused_jobs,
        limited_jobs=sum(limit.held for limit in limits),
        pauses=tuple(
            PauseInForce(
                p.pk, p.target, p.name, p.scope, p.reason, p.paused_at, p.paused_by, held[p.pk]
            )
            for p in pauses
        ),
        limits=limits,
    )


def declared_limits() -> list[tuple[str, str, flow.Flow]]:
    """Return (target, name, flow) of every declared limit: operations' then queues'."""
    found = [
        ("operation", name, spec.flow)
        for name, spec in sorted(registry.all_operations().items())
        if spec.flow.limited and not spec.flow.problems
    ]
    found += [("queue", name, f) for name, f in sorted(flow.queues().items())]
    return found


def held_back(job: Job, now: datetime, using: str) -> list[str]:
    """Return why the pending ``job`` is not claimed now, in an operator's words ([] if free)."""
    if job.status != JobStatus.PENDING:
        return []
    reasons = [
        f"Paused: {p.target} {p.name}"
        + (f" in scope {p.scope}" if p.scope else " in every scope")
        + f", since {_when(p.paused_at)} by {p.paused_by or 'someone unrecorded'}"
        + (f" — “{p.reason}”" if p.reason else "")
        + "."
        for p in _pauses_in_force(using, None)
        if _holds(p, job.operation, job.queue, job.scope)
    ]
    if job.run_after > now:
        return reasons
    for target, name, declared in declared_limits():
        if (job.operation if target == "operation" else job.queue) != name:
            continue
        if declared.rate_limit is not None:
            key = job.rate_key if target == "operation" else ""
            room, until = _room(using, target, name, key, declared.rate_limit, now)
            if room == 0:
                keyed = f" for key {key}" if key else ""
                reasons.append(
                    f"Rate limit {declared.rate_limit} of {target} {name}{keyed}: no room until "
                    f"~{_when(until)}."
                )
        if declared.max_running_per_key is not None and job.concurrency_key:
            running = _running(using, name).filter(concurrency_key=job.concurrency_key).count()
            if running >= declared.max_running_per_key:
                reasons.append(
                    f"Key {job.concurrency_key} of operation {name} is at its limit: {running} "
                    f"running of {declared.max_running_per_key} allowed per key."
                )
    return reasons


# -- helpers ---------------------------------------------------------------------------------


def _pauses_in_force(using: str, scope: str | None):
    rows = JobPause.objects.using(using).filter(active=True)
    if scope is not None:
        rows = rows.filter(Q(scope="") | Q(scope=scope))
    return rows.order_by("-paused_at", "-id")


def _holds(pause: JobPause, operation: str, queue: str, scope: str | None) -> bool:
    named = operation if pause.target == JobPause.Target.OPERATION else queue
    return named == pause.name and pause.scope in ("", scope)


def _limits(due, using: str, now: datetime):
    for target, name, declared in declared_limits():
        mine = due.filter(**{target: name})
        if declared.rate_limit is not None:
            yield _rate(mine, using, target, name, declared, now)
        if declared.max_running_per_key is not None:
            yield _per_key(mine, using, name, declared.max_running_per_key)


def _rate(due, using: str, target: str, name: str, declared: flow.Flow, now: datetime):
    limit = declared.rate_limit
    field = "rate_key" if target == "operation" and declared.rate_key else None
    if field:
        waiting = {row[field]: row["n"] for row in due.values(field).annotate(n=Count("pk"))}
    else:
        waiting = {"": due.count()}
    waiting = {key: n for key, n in waiting.items() if n}
    ids = {flow.bucket_id(target, name, key): key for key in waiting}
    buckets = RateBucket.objects.using(using).filter(pk__in=list(ids)) if ids else []
    starts = {ids[b.pk]: _starts(b.starts) for b in buckets}
    keys = []
    for key, n in sorted(waiting.items()):
        room, until = flow.rate_room(starts.get(key, []), limit, now.timestamp())
        if n > room:
            in_window = limit.count - room
            keys.append(
                HeldKey(
                    key,
                    n - room,
                    f"{in_window} started in the last {limit.seconds} s",
                    None if until is None else datetime.fromtimestamp(until, UTC),
                )
            )
    return _limit(target, name, "rate_limit", str(limit), keys)


def _per_key(due, using: str, name: str, per_key: int):
    full = {
        row["concurrency_key"]: row["n"]
        for row in _running(using, name)
        .exclude(concurrency_key="")
        .values("concurrency_key")
        .annotate(n=Count("pk"))
        .filter(n__gte=per_key)
        .order_by()
    }
    keys = []
    if full:
        waiting = due.filter(concurrency_key__in=list(full)).values("concurrency_key")
        for row in waiting.annotate(n=Count("pk")).order_by("concurrency_key"):
            key = row["concurrency_key"]
            keys.append(HeldKey(key, row["n"], f"{full[key]} running of {per_key}"))
    return _limit("operation", name, "max_running_per_key", f"{per_key} running per key", keys)


def _limit(target: str, name: str, kind: str, text: str, keys: list[HeldKey]) -> LimitInForce:
    keys.sort(key=lambda k: (-k.held, k.key))
    return LimitInForce(
        target, name, kind, text, sum(k.held for k in keys), tuple(keys[:KEYS_SHOWN])
    )


def _running(using: str, operation: str):
    return Job.objects.using(using).filter(operation=operation, status=JobStatus.RUNNING)


def _room(using, target, name, key, limit, now) -> tuple[int, datetime | None]:
    row = RateBucket.objects.using(using).filter(pk=flow.bucket_id(target, name, key)).first()
    room, until = flow.rate_room(_starts(row.starts) if row else [], limit, now.timestamp())
    return room, None if until is None else datetime.fromtimestamp(until, UTC)


def _starts(text: str) -> list[float]:
    """Return a bucket's start times; a row this code cannot read counts as empty."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return []
    if not isinstance(value, list):
        return []
    return sorted(
        float(t) for t in value if isinstance(t, (int, float)) and not isinstance(t, bool)
    )


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
