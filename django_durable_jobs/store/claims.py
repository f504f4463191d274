"""Claiming work: by id, or the next claimable jobs in claim order."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from .. import registry, validation
from ..dbvendor import lock_for_update
from ..errors import NotReclaimable
from ..execution import Execution
from ..models import Job
from ..transactions import bounded_atomic
from ..values import Claimed, Lease
from ..vocabulary import JobStatus, assess_ownership, claim_refusal, is_takeable
from .batches import BatchMixin, _claim_order, _Disagreement

CLAIM_BATCH_MAX = 1000


class ClaimMixin(BatchMixin):
    """Take ownership of claimable jobs."""

    def claim(
        self, job_id: Any, *, max_running: int | None = None, execution: Execution | None = None
    ) -> Lease:
        """Claim an unclaimed pending job, or take over a running job whose lease expired."""
        with bounded_atomic(self.using, execution):
            now = self._now()
            row = self._locked_row(job_id)
            if row is None:
                raise NotReclaimable(f"There is no job {job_id} in this store's scope.")
            refusal = claim_refusal(row, assess_ownership(row, now))
            if refusal is not None:
                raise NotReclaimable(refusal)
            self._require_capacity(
                row.operation, self._capacity(row.operation, max_running), row.pk
            )
            return self._take(row, now, new_attempt=False)

    def claim_next(
        self,
        *,
        operations: Iterable[str] | None = None,
        queues: Iterable[str] | None = None,
        limit: int = 1,
        max_running: int | None = None,
        resume_expired: Iterable[str] | None = None,
    ) -> list[Lease]:
        """Claim up to ``limit`` claimable jobs, best first, skipping rows others are claiming.

        Claimable: unclaimed pending work that is due; expired leases of the ``resume_expired``
        operations (default: those registered with ``on_expired="resume"``); failed, cancelled or
        expired jobs with a retry request. Order: priority desc, run_after, created_at.
        """
        claimed = self.claim_batch(
            operations=operations,
            queues=queues,
            limit=limit,
            max_running=max_running,
            resume_expired=resume_expired,
        )
        return [claim.lease for claim in claimed]

    def claim_batch(
        self,
        *,
        operations: Iterable[str] | None = None,
        queues: Iterable[str] | None = None,
        limit: int = 1,
        max_running: int | None = None,
        resume_expired: Iterable[str] | None = None,
    ) -> list[Claimed]:
        """Claim as ``claim_next`` does; return each lease with its job row already loaded.

        When only pending work is claimable and no ``max_running`` limit applies, the batch is
        taken in one statement (see ``batches``); otherwise candidates are locked and taken
        one by one, in claim order, with capacity counted as they are taken.
        """
        validation.whole(limit, "limit", 1, CLAIM_BATCH_MAX)
        ops = _names(operations, validation.operation)
        queue_names = _names(queues, lambda q: validation.name(q, "queue"))
        if resume_expired is None:
            resume = registry.resumable_operations()
        else:
            resume = frozenset(_names(resume_expired, validation.operation))

        def candidates(now: datetime):
            base = self._jobs().filter(
                fencing_epoch__lt=validation.BIGINT_MAX, attempts__lt=validation.ATTEMPTS_MAX
            )
            if ops is not None:
                base = base.filter(operation__in=ops)
            if queue_names is not None:
                base = base.filter(queue__in=queue_names)
            return base

        def pending_and_rare(now: datetime):
            base = candidates(now)
            return base, base.retry_or_resume(now, resume)

        if not self._claims_capacity(ops, max_running):
            key = (
                None if ops is None else tuple(ops),
                None if queue_names is None else tuple(queue_names),
                tuple(sorted(resume)),
                limit,
            )
            try:
                with bounded_atomic(self.using):
                    now = self._now()
                    claimed = self._claim_pending_fast(pending_and_rare, key, now, limit)
                if claimed:
                    return claimed
                base, rare = pending_and_rare(now)
                if not (base.pending_due(now).exists() or rare.exists()):
                    return []  # nothing at all: no need for the exact path
            except _Disagreement:
                pass  # rolled back untouched; the exact path below checks rows one by one
        with bounded_atomic(self.using):
            now = self._now()
            base = candidates(now)
            sets = [base.pending_due(now), base.retry_requested(now)]
            sets.append(base.lease_expired(now).filter(retry_requested_at__isnull=False))
            if resume:
                sets.append(base.lease_expired(now).filter(operation__in=sorted(resume)))
            return self._claim_from(sets, now, limit, max_running)

    def _claim_from(
        self, sets: list, now: datetime, limit: int, max_running: int | None
    ) -> list[Claimed]:
        """Claim up to ``limit`` rows from the candidate ``sets``, best first.

        Rows that cannot be taken (a defective proposal, an operation at capacity) are passed
        over and the window widens, so they never starve the work behind them.
        """
        claimed: list[Claimed] = []
        seen: set = set()
        full: set[str] = set()
        slots: dict[str, int | None] = {}
        window = limit
        while True:
            found: dict[Any, Job] = {}
            for rows in sets:
                rows = rows.exclude(pk__in=seen).exclude(operation__in=full).in_claim_order()
                for row in lock_for_update(rows, skip_locked=True)[:window]:
                    found[row.pk] = row
            exhausted = len(found) < window
            seen.update(found)
            for row in sorted(found.values(), key=_claim_order):
                if len(claimed) == limit:
                    return claimed
                if row.operation in full or not is_takeable(row):
                    continue
                if row.operation not in slots:
                    cap = self._capacity(row.operation, max_running)
                    slots[row.operation] = (
                        None if cap is None else self._free_slots(row.operation, cap)
                    )
                free = slots[row.operation]
                adds_running = row.status != JobStatus.RUNNING  # a reclaim replaces its attempt
                if free is not None:
                    if free - adds_running < 0:
                        full.add(row.operation)
                        continue
                    slots[row.operation] = free - adds_running
                retrying = row.retry_requested_at is not None
                claimed.append(Claimed(self._take(row, now, new_attempt=retrying), row))
            if exhausted or len(claimed) == limit or window >= CLAIM_BATCH_MAX:
                return claimed
            window = min(window * 4, CLAIM_BATCH_MAX)


def _names(values: Iterable[str] | None, check: Callable[[Any], str]) -> list[str] | None:
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    return [check(v) for v in values]
