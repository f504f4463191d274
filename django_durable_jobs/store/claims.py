"""Claiming work: by id, or the next claimable jobs in claim order."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from .. import quotas, registry, validation
from ..dbvendor import lock_for_update
from ..errors import NotReclaimable
from ..execution import Execution
from ..models import Job
from ..transactions import bounded_atomic
from ..values import Claimed, Lease
from ..vocabulary import JobStatus, assess_ownership, claim_refusal, is_takeable
from . import capacity
from .batches import BatchMixin, _claim_order, _Disagreement
from .submissions import listed

CLAIM_BATCH_MAX = 1000


class ClaimMixin(BatchMixin):
    """Take ownership of claimable jobs, the pending ones in turns across scopes.

    Each claim of pending work takes the best jobs (priority, then ``run_after``, then age) of one
    scope: the first scope, in name order, after the one this client's previous claim served,
    wrapping around. So with ``S`` scopes that have work due, every one of them is served at least
    once in any ``S`` consecutive claims of a client, however much the others queue and at
    whatever priority. Retries and resumed leases are rare and are taken in priority order
    ahead of pending work, as before.
    """

    def claim(
        self, job_id: Any, *, max_running: int | None = None, execution: Execution | None = None
    ) -> Lease:
        """Claim an unclaimed pending job, or take over a running job whose lease expired."""
        capacity.checked_max_running(max_running)
        with bounded_atomic(self.using, execution):
            now = self._now()
            row = self._locked_row(job_id)
            if row is None:
                raise NotReclaimable(f"There is no job {job_id} in this store's scope.")
            refusal = claim_refusal(row, assess_ownership(row, now))
            if refusal is not None:
                raise NotReclaimable(refusal)
            capacity.require_operation_room(
                self._client,
                row.operation,
                capacity.operation_cap(row.operation, max_running),
                row.pk,
            )
            capacity.require_scope_room(self._client, row.scope, row.pk)
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
        capacity.checked_max_running(max_running)
        ops = _names(operations, validation.operation)
        queue_names = _names(queues, lambda q: validation.name(q, "queue"))
        if resume_expired is None:
            resume = registry.resumable_operations()
        else:
            resume = frozenset(_names(resume_expired, validation.operation))
        if ops == [] or queue_names == []:
            return []  # no operation or no queue to claim from: nothing (SQL has no empty IN)

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

        turn = None if self.scope is not None else self._turn
        if not self._claims_capacity(ops, max_running):
            key = (
                None if ops is None else tuple(ops),
                None if queue_names is None else tuple(queue_names),
                tuple(sorted(resume)),
                limit,
                turn is not None,
            )
            try:
                with bounded_atomic(self.using):
                    now = self._now()
                    claimed = self._claim_pending_fast(pending_and_rare, key, now, limit, turn)
                if claimed:
                    if turn is not None:
                        self._turn = claimed[0].job.scope
                    return claimed
                base, rare = pending_and_rare(now)
                if not (base.pending_due(now).exists() or rare.exists()):
                    return []  # nothing at all: no need for the exact path
            except _Disagreement:
                pass  # rolled back untouched; the exact path below checks rows one by one
        with bounded_atomic(self.using):
            now = self._now()
            base = candidates(now)
            sets = [base.retry_requested(now)]
            sets.append(base.lease_expired(now).filter(retry_requested_at__isnull=False))
            if resume:
                sets.append(base.lease_expired(now).filter(operation__in=sorted(resume)))
            return self._claim_from(base.pending_due(now), sets, now, limit, max_running, turn)

    def _claim_from(
        self,
        pending,
        sets: list,
        now: datetime,
        limit: int,
        max_running: int | None,
        turn: str | None,
    ) -> list[Claimed]:
        """Claim up to ``limit`` rows from ``pending`` (one scope's turn) and the rarer ``sets``.

        Rows that cannot be taken (a defective proposal, an operation or a scope at capacity)
        are passed over and the window widens, so they never starve the work behind them; a
        scope at capacity passes its turn to the next.
        """
        claimed: list[Claimed] = []
        seen: set = set()
        full: set[str] = set()
        full_scopes: set[str] = set()
        slots: dict[str, int | None] = {}
        scope_slots: dict[str, int | None] = {}
        scope_limits = quotas.running_limits_configured()
        window = limit
        while True:
            found: dict[Any, Job] = {}
            # What cannot be taken is left out before the turn is chosen, so the turn passes on.
            turn_rows = (
                pending.exclude(pk__in=seen)
                .exclude(operation__in=full)
                .exclude(scope__in=full_scopes)
            )
            if turn is not None:
                turn_rows = turn_rows.scope_turn(turn)
            for rows in [turn_rows, *sets]:
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
                    cap = capacity.operation_cap(row.operation, max_running)
                    slots[row.operation] = (
                        None
                        if cap is None
                        else capacity.operation_free_slots(self._client, row.operation, cap)
                    )
                free = slots[row.operation]
                adds_running = row.status != JobStatus.RUNNING  # a reclaim replaces its attempt
                if free is not None and free - adds_running < 0:
                    full.add(row.operation)
                    continue
                if scope_limits and row.scope not in scope_slots:
                    cap = capacity.scope_cap(row.scope)
                    scope_slots[row.scope] = (
                        None
                        if cap is None
                        else capacity.scope_free_slots(self._client, row.scope, cap)
                    )
                scope_free = scope_slots.get(row.scope)
                if scope_free is not None and scope_free - adds_running < 0:
                    full_scopes.add(row.scope)
                    continue
                if free is not None:
                    slots[row.operation] = free - adds_running
                if scope_free is not None:
                    scope_slots[row.scope] = scope_free - adds_running
                if turn is not None and row.status == JobStatus.PENDING:
                    self._turn = row.scope
                retrying = row.retry_requested_at is not None
                claimed.append(Claimed(self._take(row, now, new_attempt=retrying), row))
            if len(claimed) == limit or window >= CLAIM_BATCH_MAX or not found:
                return claimed
            if exhausted:
                if claimed:
                    return claimed
                continue  # every row of this turn was passed over: the next scope's turn
            window = min(window * 4, CLAIM_BATCH_MAX)


def _names(values: Iterable[str] | None, check: Callable[[Any], str]) -> list[str] | None:
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    return [check(v) for v in listed(values, "operations, queues and resume_expired")]
