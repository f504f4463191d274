"""Claiming work: by id, or the next claimable jobs in claim order.

Two paths take pending work, side by side here:

* the one-statement path (:func:`claim_pending_fast`): when only pending work is claimable and
  no ``max_running`` limit applies, up to ``limit`` jobs are taken in one statement
  (``UPDATE … RETURNING`` on PostgreSQL and SQLite; one locking SELECT and one UPDATE on
  MariaDB) compiled once per client (``sql/claim.py``);
* the exact row-by-row path (:func:`claim_from`): candidates are locked and taken one by one, in
  claim order, with capacity counted as they are taken.

Each claim of pending work takes the best jobs (priority, then ``run_after``, then age) of one
scope: the first scope, in name order, after the one this client's previous claim served,
wrapping around. So with ``S`` scopes that have work due, every one of them is served at least
once in any ``S`` consecutive claims of a client, however much the others queue and at
whatever priority. Retries and resumed leases are rare and are taken in priority order ahead
of pending work. Taking one row (:func:`take`) is a compare-and-set on the epoch it was read at.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.db import OperationalError
from django.db.models import F

from ..database.dbvendor import has_one_writer, is_deadlock, lock_for_update
from ..database.transactions import bounded_atomic
from ..models import Job, JobPause
from ..rules import quotas, registry, validation
from ..rules.errors import NotReclaimable
from ..rules.execution import Execution
from ..rules.values import Claimed, Lease
from ..rules.vocabulary import (
    JobStatus,
    assess_ownership,
    claim_refusal,
    is_authentic_pending,
    is_takeable,
    proposal_defect,
)
from . import capacity, ending, fence, limits
from . import client as client_room
from .client import Client
from .sql.claim import ClaimStatement, ProbeStatement
from .sql.rows import update_by_ids

CLAIM_BATCH_MAX = 1000
OPERATION_CLAIM_INDEX = "durable_jobs_operation_claim_idx"  # made by migration 0018
# The keys of what a client remembers between claims (``Client.memo``).
STATEMENTS = "claim statements"  # compiled claims, by filter set and limit
TURN = "claim turn"  # the scope this client's last claim of pending work served
TURN_BEFORE = "claim turn before"  # TURN as the last claim not in the same turn found it
FLOW_PASS = "flow pass"  # when this client last looked at work a flow limit covers
FLOW_WAIT = "flow pass wait"  # how long this client now waits between limited passes
PAUSES_SEEN = "pauses seen"  # when this client's fast claim last met a pause in force
FREE_NONE = "free work none"  # this client's last claim of free work found none (flow control)
# A worker whose free work fills every claim still looks at limited work this often; a claim
# that finds free slots left looks at once. Measured: the look costs a few statements even
# when it finds nothing, which at every claim halved an unlimited drain (docs/benchmarks.md).
FLOW_PASS_SECONDS = 0.05
FLOW_PASS_MAX_SECONDS = 0.4  # the longest wait after passes that found nothing to take
# After meeting a pause in force, the fast claim probes each row for pauses this long before it
# tries the cheaper statement that claims nothing while any pause is in force (see unpaused).
PAUSES_SEEN_SECONDS = 5.0


# A claim transaction the database aborted to break a deadlock is run again this many times.
# MariaDB's claimers lock the index entries of the rows a locking read passes through, and its
# planner picks different indexes for different claims: two claims, each holding an entry of
# the other's row and then waiting for it (or for a capacity gate the other holds), deadlock
# now and then under load (1213). Nothing of the aborted transaction was written.
DEADLOCK_RETRIES = 3


class Disagreement(Exception):
    """SQL took a row whose proposal Python finds defective: undo the statement, go row by row."""


def claim(
    client: Client, job_id: Any, *, max_running: int | None, execution: Execution | None
) -> Lease:
    """Claim an unclaimed pending job, or take over a running job whose lease expired."""
    capacity.checked_max_running(max_running)
    with bounded_atomic(client.using, execution):
        now = client_room.now(client)
        row = client_room.locked_row(client, job_id)
        if row is None:
            raise NotReclaimable(f"There is no job {job_id} in this store's scope.")
        refusal = claim_refusal(row, assess_ownership(row, now))
        if refusal is not None:
            raise NotReclaimable(refusal)
        capacity.require_operation_room(
            client, row.operation, capacity.operation_cap(row.operation, max_running), row.pk
        )
        capacity.require_scope_room(client, row.scope, row.pk)
        limits.require_flow_room(client, row, now)
        return take(client, row, now, new_attempt=False)


def claim_batch(
    client: Client,
    *,
    operations: Iterable[str] | None,
    queues: Iterable[str] | None,
    limit: int,
    max_running: int | None,
    resume_expired: Iterable[str] | None,
    same_turn: bool = False,
) -> list[Claimed]:
    """Claim up to ``limit`` claimable jobs, best first; return each lease with its job row.

    With ``same_turn``, pending work is taken from the scope the previous claim served first
    (while it has any), not from the next scope: a second claim of the same turn.
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

    flows = limits.limits_for(ops, queue_names)
    capped = claims_capacity(ops, max_running)
    passed_over = None  # rows the fast path leaves to the exact one (limited ones)

    def candidates(now: datetime, *, passing_over: bool = True, pauses: str = "probe"):
        base = fence.epoch_can_advance(client_room.jobs(client)).filter(
            attempts__lt=validation.ATTEMPTS_MAX
        )
        if pauses == "probe":
            base = base.unpaused()
        elif pauses == "none in force":
            base = base.unless_any_pause()
        if ops is not None:
            base = base.filter(operation__in=ops)
        if queue_names is not None:
            base = base.filter(queue__in=queue_names)
        if passing_over and passed_over is not None:
            base = base.exclude(passed_over)
        return base

    def pending_and_rare(now: datetime, pauses: str = "probe"):
        # The rare rows only leave the fast path (they are claimed on the exact one), so
        # they need no probe of the pauses.
        rare = candidates(now, pauses="ignored").retry_or_resume(now, resume)
        return candidates(now, pauses=pauses), rare

    def exact(only, take_at_most: int, *, only_limited: bool = False) -> list[Claimed]:
        claimed: list[Claimed] = []
        missing_rounds = deadlocks = 0
        while missing_rounds < 3:  # again only after creating a limit's missing rows (below)
            try:
                got, admission = exact_once(only, take_at_most - len(claimed), only_limited)
            except OperationalError as exc:
                if not is_deadlock(client.using, exc) or deadlocks == DEADLOCK_RETRIES:
                    raise
                deadlocks += 1  # rolled back whole: claim again
                continue
            claimed += got
            if not admission.missing or len(claimed) == take_at_most:
                return claimed
            # A job was passed over because its gate or bucket did not exist yet (it is not
            # created inside a batch claim, see limits.Admission): create it now,
            # holding nothing, and claim again.
            limits.create_missing(client.using, admission)
            missing_rounds += 1
        return claimed

    def exact_once(only, left: int, only_limited: bool) -> tuple[list[Claimed], limits.Admission]:
        """Claim up to ``left`` rows one by one in one transaction; return them and what the
        limits met (their missing rows)."""
        with bounded_atomic(client.using):
            now = client_room.now(client)
            base = candidates(now, passing_over=not only_limited)
            if only is not None:
                base = base.filter(only)
            full = limits.remembered_full(client, now)
            if full is not None:
                base = base.exclude(full)
            sets = [base.retry_requested(now)]
            sets.append(base.lease_expired(now).filter(retry_requested_at__isnull=False))
            if resume:
                sets.append(base.lease_expired(now).filter(operation__in=sorted(resume)))
            pending = base.pending_due(now)
            admission = limits.Admission(existing=limits.existing(client))
            got = claim_from(client, pending, sets, now, left, max_running, turn, flows, admission)
            admission.flush(client.using, now)
        return got, admission

    def rated_at_once(name: str, take_at_most: int) -> list[Claimed] | None:
        """Claim work of ``name``, whose only limit is a whole rate limit, in one statement.

        The bucket's row is locked (skipped when another claimer holds it), its room read, up
        to that many pending jobs taken on the one-statement path, and their starts logged,
        all in one transaction. Returns None when the row-by-row path must look instead
        (rarer work waits, or a row Python finds defective).
        """
        for _ in range(2):  # again only after creating the bucket's missing row
            admission = limits.Admission(existing=limits.existing(client))
            try:
                with bounded_atomic(client.using):
                    now = client_room.now(client)
                    taken = rated_in(name, now, take_at_most, admission)
                    admission.flush(client.using, now)
            except (Disagreement, OperationalError) as exc:
                if not undone_whole(client, exc):
                    raise
                limits.forget_full(client, [name])  # its starts were rolled back
                return None  # the row-by-row path looks instead
            if not admission.missing:
                if taken and turn is not None:
                    client.memo[TURN] = taken[0].job.scope
                return taken
            limits.create_missing(client.using, admission)
        return []

    def rated_in(
        name: str, now: datetime, take_at_most: int, admission: limits.Admission
    ) -> list[Claimed] | None:
        """Inside the caller's transaction, take what the bucket of ``name`` has room for.

        Returns None when the bucket had room but no job was taken (rarer work waits, or
        a pause): the row-by-row path looks instead.
        """
        queued = sorted(flows.queues)

        def build(now: datetime):
            mine = candidates(now, passing_over=False, pauses=pauses).filter(operation=name)
            if queued:
                mine = mine.exclude(queue__in=queued)  # a queue limit too: one by one
            rare = candidates(now, passing_over=False, pauses="ignored").filter(operation=name)
            return mine, rare.retry_or_resume(now, resume)

        room, starts = limits.bucket_room(client, name, now, admission, take_at_most)
        size = min(room, take_at_most)
        if not size:
            return []  # full or held by another claimer: remembered until when (limits)
        key = ("rated", name, tuple(sorted(resume)), size, turn is not None, pauses)
        taken = claim_pending_fast(client, build, key, now, size, turn, index=OPERATION_CLAIM_INDEX)
        limits.record_starts(client, name, starts, len(taken), now, admission)
        if len(taken) < size:
            short.append(name)
        if not taken:
            note_pauses(client, pauses)
            return None
        return taken

    def limited(at: datetime, take_at_most: int) -> list[Claimed]:
        """Claim limited work (unless every bucket over it is known to be full)."""
        client.memo[FLOW_PASS] = at
        if limits.all_remembered_full(client, flows, at):
            return []
        claimed: list[Claimed] = []
        at_once = []
        for name in flows.plainly_rated():
            if len(claimed) == take_at_most:
                break
            if limits.known_full(client, "operation", name, at):
                at_once.append(name)  # its jobs could not start before the bucket frees
                continue
            taken = rated_at_once(name, take_at_most - len(claimed))
            if taken is not None:
                at_once.append(name)
                claimed += taken
        if len(claimed) < take_at_most and not flows.all_at_once(at_once):
            left = take_at_most - len(claimed)
            one_by_one = exact(flows.rows_one_by_one(at_once), left, only_limited=True)
            if len(one_by_one) < left:  # no more work, or its limits held it back
                short.append("one by one")
            claimed += one_by_one
        return claimed

    # Whether a limited pass found less work than its limits had room for (the rate limits'
    # own room is remembered in the memo, see limits): then the next pass waits longer.
    short: list[str] = []
    turn = None
    if client.scope is None:
        if same_turn:  # start where the last claim started: at the scope it served first
            turn = client.memo.get(TURN_BEFORE, "")
        else:
            turn = client.memo[TURN_BEFORE] = client.memo.get(TURN, "")
    # The one-statement claims probe every candidate for a pause only while pauses are about:
    # otherwise they claim nothing at all when any pause is in force (a check PostgreSQL makes
    # once per statement), and the first such miss switches them to probing (note_pauses).
    seen = client.memo.get(PAUSES_SEEN)
    pauses = "none in force"
    if seen is not None and abs(time.monotonic() - seen) < PAUSES_SEEN_SECONDS:
        pauses = "probe"
    claimed: list[Claimed] = []
    limited_pass = False  # whether this claim has looked at limited work yet
    rated: list[str] = []  # limited operations admitted inside the fast claim's transaction
    half = (limit + 1) // 2
    # The share of this claim that whole rate limits' work may take in the free claim's own
    # transaction (below). On SQLite, whose claimers take turns on one write lock, all of it: a
    # claim split between the two runs two claim statements under the lock and leaves the free
    # work's rest to another claim, which every other worker waits for (measured, 8 workers:
    # free work beside a 200/s limit kept 88 % of its rate instead of 76-82 %, and the limited
    # work ran at 192/s instead of 160). Where claims run side by side, half: there the whole
    # claim cost the free work more than the limited work gained (PostgreSQL: 75 % against
    # 93 %; docs/benchmarks.md).
    rated_share = limit if has_one_writer(client.using) else half
    if flows is not None and not capped:
        # Limited work is taken row by row (each start admitted by its limits); the rest,
        # which no limit can hold back, on the fast path as if no limit existed. The limited
        # pass costs a few statements even when it finds nothing, so it runs at most every
        # FLOW_PASS_SECONDS, and whenever the fast path leaves slots free. It takes at most
        # half the claim (rounded up), so free work keeps slots while limited work is
        # admissible; the fast path's unused slots go back to limited work below.
        passed_over = flows.rows()
        at = client_room.now(client)
        last = client.memo.get(FLOW_PASS)
        wait = client.memo.get(FLOW_WAIT, FLOW_PASS_SECONDS)
        due = last is None or not timedelta(0) <= at - last < timedelta(seconds=wait)
        plain = flows.plainly_rated() if due else []
        if due and flows.all_at_once(plain):
            # Only whole rate limits: their room is taken in the fast claim's own
            # transaction (one BEGIN and COMMIT for both, which a single-writer SQLite feels).
            client.memo[FLOW_PASS] = at
            rated = [name for name in plain if not limits.known_full(client, "operation", name, at)]
            if not rated:  # every bucket is known full: nothing to look at until it frees
                pass_waits(client, wait, ran_short=False)
            limited_pass = True
        elif due:
            claimed = limited(at, half)
            limited_pass = len(claimed) < half  # it found all it could
            pass_waits(client, wait, ran_short=bool(short))
            if len(claimed) == limit:
                return claimed
    if not capped:
        fast: list[Claimed] = []
        taken: list[Claimed] = []  # limited work admitted in the same transaction
        nothing = False
        # The claim of free work walks the scope's pending rows in claim order and passes over
        # the limited ones: all of them when no free work is left, 25 ms a claim with 20,000
        # limited jobs waiting on SQLite. So after a claim that found no free work, a probe of
        # the operation claim index asks first whether there is any.
        free_ops = None if flows is None else flows.free_operations(ops)
        probe = free_ops is not None and (not free_ops or bool(client.memo.get(FREE_NONE)))
        free_due = None  # whether free work is due (None: not asked)
        admission = limits.Admission(existing=limits.existing(client))
        try:
            with bounded_atomic(client.using):
                now = client_room.now(client)
                for name in rated:
                    more = rated_in(name, now, rated_share - len(taken), admission)
                    if more is None:
                        limited_pass = False  # the row-by-row pass looks below
                    else:
                        taken += more
                    if len(taken) == rated_share:
                        break
                admission.flush(client.using, now)
                left = limit - len(claimed) - len(taken)  # what the limited pass left
                key = (
                    None if ops is None else tuple(ops),
                    None if queue_names is None else tuple(queue_names),
                    tuple(sorted(resume)),
                    left,
                    turn is not None,
                    flows,
                    pauses,
                )
                if left and probe:  # paused or not: the statement's misses note the pauses
                    free_due = bool(free_ops) and any_claimable(
                        client,
                        ("free due", key),
                        lambda at: [
                            candidates(at, passing_over=False, pauses="ignored")
                            .filter(operation__in=free_ops)
                            .pending_due(at)
                        ],
                        now,
                    )
                if left and free_due is not False:
                    fast = claim_pending_fast(
                        client, partial(pending_and_rare, pauses=pauses), key, now, left, turn
                    )
            if fast:
                client.memo.pop(FREE_NONE, None)
                if turn is not None:
                    client.memo[TURN] = fast[0].job.scope
            elif left:
                if free_ops is not None:
                    client.memo[FREE_NONE] = True

                def claimable(at: datetime) -> list:
                    base, rare = pending_and_rare(at)
                    return [rare] if free_due is False else [base.pending_due(at), rare]

                nothing = not any_claimable(
                    client, ("claimable", key, free_due is False), claimable, now
                )
                if not nothing:
                    note_pauses(client, pauses)
            else:
                nothing = True  # limited work filled the claim
        except (Disagreement, OperationalError) as exc:
            if not undone_whole(client, exc):
                raise
            # Rolled back untouched (a disagreement, or a deadlock the database broke), the
            # limited work's starts too; the exact paths below check rows one by one.
            taken, fast, nothing, limited_pass = [], [], False, False
            limits.forget_full(client, rated)
        if rated:
            pass_waits(client, wait, ran_short=bool(short))
            if taken and not fast and turn is not None:
                client.memo[TURN] = taken[0].job.scope
            if admission.missing:  # created now; the pass below claims from them
                limits.create_missing(client.using, admission)
                limited_pass = False
        claimed += taken + fast
        if not fast and not nothing:
            claimed += exact(None, limit - len(claimed))
        if flows is not None and not limited_pass and len(claimed) < limit:
            claimed += limited(client_room.now(client), limit - len(claimed))
        return claimed
    return exact(None, limit)


def undone_whole(client: Client, exc: Exception) -> bool:
    """Return True when ``exc`` rolled its claim transaction back whole and the claim goes on
    by another path: a disagreement, or a deadlock the database broke."""
    return isinstance(exc, Disagreement) or is_deadlock(client.using, exc)


def pass_waits(client: Client, wait: float, *, ran_short: bool) -> None:
    """Set how long this client waits before its next limited pass.

    A pass that found less limited work than its limits had room for waits twice as long as
    the last, up to FLOW_PASS_MAX_SECONDS; any other looks again after FLOW_PASS_SECONDS. A
    full bucket, or one another claimer holds, is remembered apart, until it frees
    (``limits.known_full``), so it does not lengthen the wait for the rest.
    """
    wait = min(wait * 2, FLOW_PASS_MAX_SECONDS) if ran_short else FLOW_PASS_SECONDS
    client.memo[FLOW_WAIT] = wait


def note_pauses(client: Client, pauses: str) -> None:
    """After a one-statement claim that ignored pause-free work, note whether a pause is why.

    Called when such a claim took nothing though work was there: while it claims nothing
    whenever any pause is in force (``pauses="none in force"``), a pause in force switches this
    client's claims to probing each row for PAUSES_SEEN_SECONDS.
    """
    if pauses != "probe" and JobPause.objects.using(client.using).filter(active=True).exists():
        client.memo[PAUSES_SEEN] = time.monotonic()


def claims_capacity(ops: list[str] | None, max_running: int | None) -> bool:
    """Return True when a ``max_running`` limit applies to any operation or scope claimed."""
    if max_running is not None or quotas.running_limits_configured():
        return True
    specs = (
        registry.all_operations().values() if ops is None else filter(None, map(registry.get, ops))
    )
    return any(spec.max_running is not None for spec in specs)


# -- the one-statement path -----------------------------------------------------------------------


def claim_pending_fast(
    client: Client,
    build,
    key: tuple,
    now: datetime,
    limit: int,
    turn: str | None,
    *,
    index: str | None = None,
) -> list[Claimed]:
    """Take up to ``limit`` intact pending jobs in claim order, unless rarer work waits.

    With a ``turn`` (a scope name, or ``""``), the jobs are those of the first scope after
    it that has pending work due, wrapping around; with None, of every scope.

    ``build(now)`` returns the candidate rows and the rarer claimable rows (retries,
    resumable expired leases). Returns ``[]`` when nothing was taken: nothing pending, or
    rarer work is claimable, which the caller's exact path orders with the rest. The
    statement is compiled once per filter set and limit (compiling it cost more than
    running it) and only the clock's value changes between calls.
    """
    statements = client.memo.setdefault(STATEMENTS, {})
    statement = statements.get(key)
    if statement is None:
        statement = ClaimStatement.compile(
            client.using, build, limit, fair=turn is not None, index=index
        )
        statements[key] = statement
    expires = now + timedelta(seconds=client.lease_seconds)
    changes = {
        "status": JobStatus.RUNNING,
        "owner_id": client.owner_id,
        "lease_expires_at": expires,
        "heartbeat_at": now,
        "claimed_at": now,
        "claimed_by": client.actor or "",
    }
    if statement.returning:
        rows = statement.take(client.using, now, turn, changes)
    else:
        # A plain read first, so that the locking SELECT locks pending rows only.
        if any_claimable(client, ("rare", key), lambda at: build(at)[1:], now):
            return []
        chosen = statement.select(client.using, now, turn)
        rows = [row for row in chosen if is_authentic_pending(row)]
        if rows:
            counters = {"fencing_epoch": F("fencing_epoch") + 1, "attempts": 1}
            picked = Job.objects.using(client.using).filter(
                pk__in=[row.pk for row in rows], status=JobStatus.PENDING
            )
            matched = update_by_ids(picked, **changes, **counters)
            if matched != len(rows):  # the rows are locked: this cannot happen
                raise fence.changed_under_lock("claiming")
            for row in rows:
                for name, value in changes.items():
                    setattr(row, name, value)
                row.fencing_epoch += 1
                row.attempts = 1
    if any(proposal_defect(row) for row in rows):
        raise Disagreement
    rows.sort(key=claim_order)
    return [
        Claimed(Lease(row.pk, client.owner_id, row.fencing_epoch, expires), row) for row in rows
    ]


def any_claimable(client: Client, key: tuple, build, now: datetime) -> bool:
    """Return True when any candidate set of ``build(now)`` has a row; the probe is compiled
    once per ``key`` (see :class:`ProbeStatement`)."""
    statements = client.memo.setdefault(STATEMENTS, {})
    statement = statements.get(key)
    if statement is None:
        statement = statements[key] = ProbeStatement.compile(client.using, build)
    return statement.any(client.using, now)


# -- the exact row-by-row path --------------------------------------------------------------------


def claim_from(
    client: Client,
    pending,
    sets: list,
    now: datetime,
    limit: int,
    max_running: int | None,
    turn: str | None,
    flows: limits.Limits | None = None,
    admission: limits.Admission | None = None,
) -> list[Claimed]:
    """Claim up to ``limit`` rows from ``pending`` (one scope's turn) and the rarer ``sets``.

    Rows that cannot be taken (a defective proposal, an operation or a scope at capacity, a
    rate limit used up or a concurrency key at its limit) are passed over and the window
    widens, so they never starve the work behind them; a scope at capacity passes its turn to
    the next. Every row ``flows`` covers is admitted by ``limits.admit`` before it is taken.
    """
    claimed: list[Claimed] = []
    seen: set = set()
    full: set[str] = set()
    full_scopes: set[str] = set()
    slots: dict[str, int | None] = {}
    scope_slots: dict[str, int | None] = {}
    scope_limits = quotas.running_limits_configured()
    held = None  # the rows a limit met in this claim holds back
    admission = admission if admission is not None else limits.Admission()
    window = limit
    while True:
        found: dict[Any, Job] = {}
        # What cannot be taken is left out before the turn is chosen, so the turn passes on.
        turn_rows = (
            pending.exclude(pk__in=seen).exclude(operation__in=full).exclude(scope__in=full_scopes)
        )
        if held is not None:
            turn_rows = turn_rows.exclude(held)
        if turn is not None:
            turn_rows = turn_rows.scope_turn(turn)
        for rows in [turn_rows, *sets]:
            rows = rows.exclude(pk__in=seen).exclude(operation__in=full)
            if held is not None:
                rows = rows.exclude(held)
            rows = rows.in_claim_order()
            for row in lock_for_update(rows, skip_locked=True)[:window]:
                found[row.pk] = row
        exhausted = len(found) < window
        seen.update(found)
        for row in sorted(found.values(), key=claim_order):
            if len(claimed) == limit:
                return claimed
            if row.operation in full or not is_takeable(row):
                continue
            if row.operation not in slots:
                cap = capacity.operation_cap(row.operation, max_running)
                slots[row.operation] = (
                    None
                    if cap is None
                    else capacity.operation_free_slots(client, row.operation, cap)
                )
            free = slots[row.operation]
            adds_running = row.status != JobStatus.RUNNING  # a reclaim replaces its attempt
            if free is not None and free - adds_running < 0:
                full.add(row.operation)
                continue
            if scope_limits and row.scope not in scope_slots:
                cap = capacity.scope_cap(row.scope)
                scope_slots[row.scope] = (
                    None if cap is None else capacity.scope_free_slots(client, row.scope, cap)
                )
            scope_free = scope_slots.get(row.scope)
            if scope_free is not None and scope_free - adds_running < 0:
                full_scopes.add(row.scope)
                continue
            if flows is not None and flows.covers(row):
                holds = limits.admit(client, row, now, admission)
                if holds is not None:
                    held = holds.rows if held is None else held | holds.rows
                    continue
            if free is not None:
                slots[row.operation] = free - adds_running
            if scope_free is not None:
                scope_slots[row.scope] = scope_free - adds_running
            if turn is not None and row.status == JobStatus.PENDING:
                client.memo[TURN] = row.scope
            retrying = row.retry_requested_at is not None
            claimed.append(Claimed(take(client, row, now, new_attempt=retrying), row))
        if len(claimed) == limit or window >= CLAIM_BATCH_MAX or not found:
            return claimed
        if exhausted:
            if claimed:
                return claimed
            continue  # every row of this turn was passed over: the next scope's turn
        window = min(window * 4, CLAIM_BATCH_MAX)


# -- taking one row -------------------------------------------------------------------------------


def take(client: Client, row: Job, now: datetime, *, new_attempt: bool) -> Lease:
    """Make ``client`` the owner of the locked ``row`` at the next epoch; return its lease.

    A running row's attempt is superseded first (``ending.supersede``). The write is a
    compare-and-set on the epoch and status the row was read at (``fence.unchanged``).
    """
    epoch = validation.bump(row.fencing_epoch, validation.BIGINT_MAX, "fencing epoch")
    attempts = validation.bump(row.attempts, validation.ATTEMPTS_MAX, "attempts")
    ending.supersede(client, row, now)
    expires = now + timedelta(seconds=client.lease_seconds)
    changes: dict[str, Any] = {
        "status": JobStatus.RUNNING,
        "owner_id": client.owner_id,
        "fencing_epoch": epoch,
        "attempts": attempts,
        "lease_expires_at": expires,
        "heartbeat_at": now,
        "claimed_at": now,
        "claimed_by": client.actor or "",
    }
    if new_attempt:
        changes.update(
            result=None,
            error=None,
            completed_at=None,
            cancellation_requested_at=None,
            retry_requested_at=None,
            progress=0.0,
        )
    if fence.unchanged(client, row).update(**changes) != 1:
        raise NotReclaimable(f"Job {row.pk} changed while it was being claimed; try again.")
    for name, value in changes.items():
        setattr(row, name, value)
    return Lease(job_id=row.pk, owner_id=client.owner_id, epoch=epoch, expires_at=expires)


def claim_order(row: Job) -> tuple:
    """Return the sort key of the claim order, without the id: ties keep the database's order.

    A stable sort over rows read in claim order leaves ties as the database ordered them by id
    (MariaDB's UUID type does not sort like the id's text, so Python must not break them).
    """
    return (-row.priority, row.run_after, row.created_at)


def _names(values: Iterable[str] | None, check: Callable[[Any], str]) -> list[str] | None:
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    return [check(v) for v in validation.listed(values, "operations, queues and resume_expired")]
