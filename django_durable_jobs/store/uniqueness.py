"""Uniqueness for a window: the submission of an operation declared ``unique_while="active"`` or
``unique_for=timedelta`` coalesces with the job of its key in the window.

A job's *unique key* is the caller's idempotency key when one is given, else the SHA-256 of its
input (the proposal hash); it is stored in ``Job.unique_key``, and the job's own
``idempotency_key`` is then its id, so the key is never taken forever. Nothing is deleted to
make room: an ended job keeps its row and its key, it simply no longer counts.

Race-free on every database: a submission first locks a striped gate row (``CapacityGate``
``"#unique N"``, N = the key's hash modulo 4,096), then looks for the window's job with a locking
read. Two submitters of one key therefore take turns, and the second sees the first's committed
row: on PostgreSQL (READ COMMITTED) each statement reads what is committed when it starts; on
MariaDB/MySQL a locking read reads the latest committed rows even under REPEATABLE READ, whose
plain SELECT would read the transaction's snapshot; SQLite's IMMEDIATE transactions take turns at
BEGIN. Calls of many keys lock their gates in sorted order, so they never deadlock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime

from django.db import connections
from django.db.models import Q

from ..database.dbvendor import lock_for_update
from ..models import CapacityGate, Job
from ..rules.errors import IdempotencyConflict
from ..rules.flow import Flow
from ..rules.vocabulary import JobStatus
from .sql.submit import NewJob

STRIPES = 4_096
# A job in these states, or failed/cancelled with a retry to come, holds its key while "active".
ACTIVE = (JobStatus.PENDING, JobStatus.WAITING, JobStatus.SLEEPING, JobStatus.RUNNING)
RETRYABLE_ENDS = (JobStatus.FAILED, JobStatus.CANCELLED)


def gate_of(scope: str, operation: str, key: str) -> str:
    """Return the gate row that serialises submissions of ``key`` (shared by 1/4,096 of keys)."""
    digest = hashlib.sha256("\x00".join((scope, operation, key)).encode()).hexdigest()
    return f"#unique {int(digest, 16) % STRIPES}"


def lock(using: str, operation: str, keys: Iterable[tuple[str, str]]) -> None:
    """Lock the gates of ``keys`` ((scope, unique key) pairs), each once, in sorted order.

    One statement whatever the number of gates: an upsert of the gate rows, which creates the
    missing ones and locks every one of them (in the order given) until the transaction ends.
    A ``SELECT … FOR UPDATE`` per gate cost a round trip per key (measured: 2.3-7 ms a row for
    ``submit_many`` of 100 keys, against 0.15-0.3 ms a row without uniqueness).
    """
    gates = sorted({gate_of(scope, operation, key) for scope, key in keys})
    connection = connections[using]
    table = connection.ops.quote_name(CapacityGate._meta.db_table)
    column = connection.ops.quote_name(CapacityGate._meta.pk.column)
    values = ", ".join(["(%s)"] * len(gates))
    if connection.vendor == "mysql":
        # As ``lock_gate``: the upsert takes each row's exclusive lock at once (a failed
        # duplicate INSERT would hold a shared one, and two of those deadlock on upgrade).
        conflict = f"ON DUPLICATE KEY UPDATE {column} = {column}"
    else:  # PostgreSQL and SQLite: DO UPDATE locks the row it finds (DO NOTHING would not)
        conflict = f"ON CONFLICT ({column}) DO UPDATE SET {column} = excluded.{column}"
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} ({column}) VALUES {values} {conflict}", gates)


def window(flow: Flow, at: datetime) -> Q:
    """Return the condition of a job that holds its unique key at ``at``."""
    if flow.unique_for is not None:
        return Q(created_at__gt=at - flow.unique_for)
    return Q(status__in=ACTIVE) | Q(status__in=RETRYABLE_ENDS, retry_requested_at__isnull=False)


def holders(
    using: str,
    operation: str,
    scope: str,
    keys: list[str],
    flow: Flow,
    at: datetime,
    *,
    locking: bool = True,
) -> dict[str, Job]:
    """Return the job holding each of ``keys`` in its window at ``at`` (the latest).

    Call under the keys' gates (:func:`lock`) in the transaction that then inserts; the read
    locks the rows it returns, which is what makes it see the latest committed rows on MariaDB
    under REPEATABLE READ. ``locking=False`` reads without locks (a look outside any write).
    """
    rows = Job.objects.using(using).filter(
        window(flow, at), operation=operation, scope=scope, unique_key__in=keys
    )
    rows = rows.order_by("created_at", "id")
    found: dict[str, Job] = {}
    for job in lock_for_update(rows) if locking else rows:
        found[job.unique_key] = job  # the latest wins
    return found


def judge(operation: str, scope: str, key: str, proposal: str, proposal_hash: str, job: Job) -> Job:
    """Return ``job`` when it was submitted with the same input; refuse different input."""
    if job.proposal_hash != proposal_hash or job.proposal != proposal:
        raise IdempotencyConflict(
            f"{operation!r} with unique key {key!r} in scope {scope!r} is held by job {job.pk} "
            f"({job.status}), submitted with a different input; nothing was written. Use "
            f"another idempotency key for new input, or submit it once that job's window "
            f"(unique_while / unique_for) has passed."
        )
    return job


def held_one(
    using: str, operation: str, flow: Flow, scope: str, new: NewJob, at: datetime
) -> Job | None:
    """Lock ``new``'s unique key; return the job holding it (same input), or None."""
    lock(using, operation, [(scope, new.unique_key)])
    found = holders(using, operation, scope, [new.unique_key], flow, at)
    if (job := found.get(new.unique_key)) is None:
        return None
    return judge(operation, scope, new.unique_key, new.proposal, new.proposal_hash, job)


def held_many(
    using: str, operation: str, flow: Flow, news: list[tuple[str, NewJob]], at: datetime
) -> dict[tuple[str, str], tuple[Job | None, bool]]:
    """Lock the unique keys of ``news`` in sorted order; return the jobs holding them.

    Keyed like the submit statement's answers, by (scope, the new job's idempotency key); the
    caller judges each holder's input.
    """
    lock(using, operation, [(scope, new.unique_key) for scope, new in news])
    by_scope: dict[str, dict[str, NewJob]] = {}
    for scope, new in news:
        by_scope.setdefault(scope, {})[new.unique_key] = new
    held: dict[tuple[str, str], tuple[Job | None, bool]] = {}
    for scope, group in by_scope.items():
        found = holders(using, operation, scope, list(group), flow, at)
        for key, job in found.items():
            held[scope, group[key].key] = (job, False)
    return held
