"""Enforcing each scope's quotas: before a submission is written, and atomically at claim.

The limits themselves are read by :mod:`django_durable_jobs.quotas`. Submissions check the
priority ceiling, the pending cap and the submission rate before anything is written; a claim
that would take a scope past its ``MAX_RUNNING`` counts that scope's running jobs under a lock on
the scope's capacity gate, as ``max_running`` does per operation.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from .. import quotas
from ..errors import CapacityReached, InputInvalid
from ..models import Job
from ..vocabulary import JobStatus
from .base import StoreBase


def _gate_name(scope: str) -> str:
    """Return the capacity gate row of ``scope``: no operation name can look like it."""
    return "#scope " + hashlib.sha256(scope.encode()).hexdigest()


class QuotaMixin(StoreBase):
    """Refuse what a scope's quotas do not allow."""

    def _admit(
        self, scope: str, adding: int, priority: int, now: datetime, *, pending: bool = True
    ) -> list[quotas.Taken]:
        """Refuse ``adding`` new jobs of ``scope`` at ``priority`` that its quotas do not allow.

        The priority ceiling and a batch larger than a whole window are ``InputInvalid``; a full
        pending cap or a used-up rate window is ``CapacityReached``. Nothing is written either way.
        Returns the rate counts taken: a caller refused later gives them back
        (``quotas.counted``), so only submissions that were answered use up a window.
        """
        quota = quotas.quota_for(scope)
        if priority > quota.max_priority:
            raise InputInvalid(
                f"Scope {scope!r} may submit at priority {quota.max_priority} at most; got "
                f"{priority}. Submit at a lower priority (the ceiling is the scope's "
                f"MAX_PRIORITY quota)."
            )
        if pending and quota.max_pending is not None:
            self._require_pending_room(scope, adding, quota.max_pending)
        if quota.submit_rate is None:
            return []
        return [quotas.take_submissions("scope", scope, quota.submit_rate, adding, now)]

    def _require_pending_room(self, scope: str, adding: int, cap: int) -> None:
        if adding > cap:
            raise InputInvalid(
                f"This call submits {adding} jobs but scope {scope!r} may have {cap} pending; "
                f"split it into smaller calls."
            )
        estimates = quotas.pending_estimates
        if estimates.room(self.using, scope, adding, cap):
            return
        pending = Job.objects.using(self.using).filter(scope=scope, status=JobStatus.PENDING)
        count = pending.values("pk")[:cap].count()  # never counts past the cap
        if count + adding > cap:
            estimates.counted(self.using, scope, count)
            raise CapacityReached(
                f"Scope {scope!r} has {count} pending jobs and may have {cap} "
                f"(its MAX_PENDING quota); try again when workers have taken some."
            )
        estimates.counted(self.using, scope, count + adding)

    # -- at claim -----------------------------------------------------------------------------------

    def _scope_cap(self, scope: str | None) -> int | None:
        return None if scope is None else quotas.quota_for(scope).max_running

    def _scope_free_slots(self, scope: str, cap: int, exclude: Any = None) -> int:
        """Lock the scope's gate and return how many more of its jobs may run."""
        return self._gated_slots(_gate_name(scope), cap, exclude, scope=scope)

    def _require_scope_capacity(self, scope: str | None, exclude: Any = None) -> None:
        """Refuse to start one more job of ``scope`` past its ``MAX_RUNNING`` quota."""
        if not quotas.running_limits_configured():
            return
        cap = self._scope_cap(scope)
        if cap is not None and self._scope_free_slots(scope, cap, exclude) <= 0:
            raise CapacityReached(
                f"Scope {scope!r} already has {cap} running job(s) (its MAX_RUNNING quota); "
                f"try again when one finishes."
            )
