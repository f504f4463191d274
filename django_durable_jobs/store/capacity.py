"""Capacity: how many may run (per operation, per scope) and how many may wait (per scope).

The limits themselves are read by :mod:`django_durable_jobs.quotas` and the registry. A claim
that would take an operation past its ``max_running``, or a scope past its ``MAX_RUNNING``
quota, counts the running jobs under a lock on that operation's or scope's capacity gate, so the
count holds until the claim commits. Submissions check the priority ceiling, the pending cap and
the submission rate before anything is written.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from ..database.dbvendor import lock_gate
from ..models import Job
from ..rules import quotas, registry
from ..rules.errors import CapacityReached, InputInvalid
from ..rules.vocabulary import JobStatus
from .client import Client

# -- per operation: max_running ---------------------------------------------------------------


def checked_max_running(max_running: Any) -> int | None:
    """Return ``max_running`` when it is None or a positive whole number; else refuse it.

    Called first by every method that takes it, so a bad value is ``InputInvalid`` before any
    SQL, never a ``CapacityReached`` (``max_running=0`` would allow nothing, ever).
    """
    if max_running is not None and (
        isinstance(max_running, bool) or not isinstance(max_running, int) or max_running < 1
    ):
        raise InputInvalid(
            f"max_running is a positive whole number, or None for the operation's own "
            f"limit; got {max_running!r}."
        )
    return max_running


def operation_cap(operation: str, max_running: int | None) -> int | None:
    """Return the running limit of ``operation``: ``max_running``, else the registered one."""
    if checked_max_running(max_running) is None:
        spec = registry.get(operation)
        max_running = spec.max_running if spec else None
    return checked_max_running(max_running)


def operation_free_slots(client: Client, operation: str, cap: int, exclude: Any = None) -> int:
    """Lock the operation's gate and return how many more may run (atomic with the claim)."""
    return _gated_slots(client, operation, cap, exclude, operation=operation)


def require_operation_room(
    client: Client, operation: str, cap: int | None, exclude: Any = None
) -> None:
    """Refuse to start one more job of ``operation`` past ``cap`` (``CapacityReached``)."""
    if cap is not None and operation_free_slots(client, operation, cap, exclude) <= 0:
        raise CapacityReached(
            f"Operation {operation!r} already has {cap} running job(s) (max_running={cap}); "
            f"try again when one finishes."
        )


def _gated_slots(client: Client, gate: str, cap: int, exclude: Any = None, **running_of) -> int:
    """Lock capacity gate ``gate``; return ``cap`` less the running jobs ``running_of`` names.

    ``exclude`` is a job not to count (the one being claimed again).
    """
    lock_gate(client.using, gate)
    running = Job.objects.using(client.using).filter(status=JobStatus.RUNNING, **running_of)
    if exclude is not None:
        running = running.exclude(pk=exclude)
    return cap - running.count()


# -- per scope: the quotas --------------------------------------------------------------------


def _gate_name(scope: str) -> str:
    """Return the capacity gate row of ``scope``: no operation name can look like it."""
    return "#scope " + hashlib.sha256(scope.encode()).hexdigest()


def admit(
    client: Client,
    scope: str,
    adding: int,
    priority: int,
    now: datetime,
    *,
    pending: bool = True,
) -> list[quotas.Taken]:
    """Refuse ``adding`` new jobs of ``scope`` at ``priority`` that its quotas do not allow.

    The priority ceiling and a batch larger than a whole window are ``InputInvalid``; a full
    pending cap or a used-up rate window is ``CapacityReached``. Nothing is written either way.
    Returns the rate counts taken: a caller refused later gives them back (``quotas.counted``),
    so only submissions that were answered use up a window.
    """
    quota = quotas.quota_for(scope)
    if priority > quota.max_priority:
        raise InputInvalid(
            f"Scope {scope!r} may submit at priority {quota.max_priority} at most; got "
            f"{priority}. Submit at a lower priority (the ceiling is the scope's "
            f"MAX_PRIORITY quota)."
        )
    if pending and quota.max_pending is not None:
        require_pending_room(client, scope, adding, quota.max_pending)
    if quota.submit_rate is None:
        return []
    return [quotas.take_submissions("scope", scope, quota.submit_rate, adding, now)]


def require_pending_room(client: Client, scope: str, adding: int, cap: int) -> None:
    """Refuse ``adding`` more pending jobs of ``scope`` past its ``MAX_PENDING`` quota ``cap``."""
    if adding > cap:
        raise InputInvalid(
            f"This call submits {adding} jobs but scope {scope!r} may have {cap} pending; "
            f"split it into smaller calls."
        )
    estimates = quotas.pending_estimates
    if estimates.room(client.using, scope, adding, cap):
        return
    pending = Job.objects.using(client.using).filter(scope=scope, status=JobStatus.PENDING)
    count = pending.values("pk")[:cap].count()  # never counts past the cap
    if count + adding > cap:
        estimates.counted(client.using, scope, count)
        raise CapacityReached(
            f"Scope {scope!r} has {count} pending jobs and may have {cap} "
            f"(its MAX_PENDING quota); try again when workers have taken some."
        )
    estimates.counted(client.using, scope, count + adding)


def scope_cap(scope: str | None) -> int | None:
    """Return the ``MAX_RUNNING`` quota of ``scope``, or None when it has none."""
    return None if scope is None else quotas.quota_for(scope).max_running


def scope_free_slots(client: Client, scope: str, cap: int, exclude: Any = None) -> int:
    """Lock the scope's gate and return how many more of its jobs may run."""
    return _gated_slots(client, _gate_name(scope), cap, exclude, scope=scope)


def require_scope_room(client: Client, scope: str | None, exclude: Any = None) -> None:
    """Refuse to start one more job of ``scope`` past its ``MAX_RUNNING`` quota."""
    if not quotas.running_limits_configured():
        return
    cap = scope_cap(scope)
    if cap is not None and scope_free_slots(client, scope, cap, exclude) <= 0:
        raise CapacityReached(
            f"Scope {scope!r} already has {cap} running job(s) (its MAX_RUNNING quota); "
            f"try again when one finishes."
        )
