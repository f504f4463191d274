"""Flow control at claim: rate limits (sliding logs in ``RateBucket`` rows) and concurrency per key.

A claim admits a job only when every limit over it allows one more start:

* its operation's ``rate_limit`` (per ``Job.rate_key`` when the operation has a ``rate_key``)
  and its queue's ``rate_limit`` (``DURABLE_JOBS["QUEUES"]``): each bucket's row is locked in
  the claim's own transaction, its sliding log read, and the start appended when admitted, so
  two claimers of one bucket take turns and no window ever holds more than N starts;
* its operation's ``max_running_per_key``: the running jobs of its ``Job.concurrency_key`` are
  counted under a lock on that key's capacity gate, like ``max_running``.

What a limit holds back stays pending and the claim passes over it to other work. A client
remembers "this bucket is full until T" (``Client.memo``) and leaves its jobs out of the
candidates until then: a sliding log only fills further while it is full, so none of them
could start earlier.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from django.db import connections, transaction
from django.db.models import Q

from ..database.dbvendor import lock_for_update, lock_gate
from ..models import CapacityGate, Job, JobPause, RateBucket
from ..rules import flow, registry
from ..rules.errors import CapacityReached
from ..rules.vocabulary import JobStatus
from .client import Client

FULL = "flow full until"  # Client.memo: {(target, name, key): unix time the bucket frees}
EXISTING = "flow rows seen"  # Client.memo: {id: when (monotonic) this client saw it exist}
# A gate or bucket found held (SKIP LOCKED returns no row whether held or gone) is taken to exist
# until its last sighting is this old; then one plain read asks again (a flushed table). Asking
# at every miss doubled the statements of a limited pass whose bucket 8 workers contend for.
EXISTING_SECONDS = 1.0
# A whole bucket another claimer held is left alone this long (that claimer is taking its
# room): measured, looking again at once made most limited passes find it held. Each time in a
# row a client finds it held, it waits twice as long, up to BUSY_MAX_SECONDS: with 8 workers,
# whose claims hold the bucket most of the time, 9 looks in 10 found it held, and each cost the
# claim a statement. Measured on PostgreSQL (8 workers, a 200/s limit beside free work): from
# 50 ms up to 0.4 s the free work kept 64-84 % of its rate, from 0.2 s up to 0.8 s 93-106 %,
# and the limited work started as fast (31 jobs a second against 33): one claimer at a time
# can admit from a bucket, so more looks only found it held more often.
BUSY_SECONDS = 0.2
BUSY_MAX_SECONDS = 0.8
BUSY_MISSES = "flow busy misses"  # Client.memo: {operation: times in a row found held}


@dataclass(frozen=True)
class Held:
    """Why a job may not start now: a sentence, the time it may (None: unknown), and the
    condition of every row held back by the same limit (passed over for the rest of a claim)."""

    reason: str
    until: float | None
    rows: Q


@dataclass(frozen=True)
class Limits:
    """The limited operations and queues one claim can meet (``None`` when there are none)."""

    operations: frozenset[str]
    queues: frozenset[str]

    def rows(self) -> Q:
        """Return the condition of the rows a limit may hold back."""
        parts = []  # no empty IN: SQL has none
        if self.operations:
            parts.append(Q(operation__in=sorted(self.operations)))
        if self.queues:
            parts.append(Q(queue__in=sorted(self.queues)))
        return parts[0] if len(parts) == 1 else parts[0] | parts[1]

    def covers(self, row: Job) -> bool:
        return row.operation in self.operations or row.queue in self.queues

    def plainly_rated(self) -> list[str]:
        """Return the operations whose only limit is one whole ``rate_limit`` (no key).

        Their work can be admitted in one step per claim: the bucket's room is the number of
        jobs the claim may start, taken in one statement (``claiming``), as long as no queue
        limit covers the same rows (those rows are left to the row-by-row path).
        """
        found = []
        for name in sorted(self.operations):
            op_flow = flow.of_operation(name)
            if op_flow.rate_limit is not None and op_flow.rate_key is None:
                if op_flow.max_running_per_key is None:
                    found.append(name)
        return found

    def free_operations(self, ops: Iterable[str] | None) -> list[str] | None:
        """Return the operations of ``ops`` no limit covers; None when that is not known by
        operation (any operation claimed, or a queue limit covers rows of any operation)."""
        if ops is None or self.queues:
            return None
        return [name for name in ops if name not in self.operations]

    def all_at_once(self, batched: Iterable[str]) -> bool:
        """Return True when ``batched`` operations leave no limited row to the row-by-row path."""
        return not self.queues and self.operations <= set(batched)

    def rows_one_by_one(self, batched: Iterable[str]) -> Q:
        """Return the limited rows the row-by-row path takes when ``batched`` operations' plain
        rate limits were admitted in one step (their rows under a queue limit stay here)."""
        condition = self.rows()
        batched = sorted(batched)
        if batched:
            alone = Q(operation__in=batched)
            if self.queues:
                alone &= ~Q(queue__in=sorted(self.queues))
            condition &= ~alone
        return condition


def limits_for(ops: Iterable[str] | None, queue_names: Iterable[str] | None) -> Limits | None:
    """Return the limits a claim of ``ops`` from ``queue_names`` (None: any) can meet."""
    specs = registry.all_operations()
    limited_ops = {name for name, spec in specs.items() if spec.flow.limited}
    if ops is not None:
        limited_ops &= set(ops)
    limited_queues = set(flow.queues())
    if queue_names is not None:
        limited_queues &= set(queue_names)
    if not limited_ops and not limited_queues:
        return None
    return Limits(frozenset(limited_ops), frozenset(limited_queues))


# -- what the client remembers --------------------------------------------------------------------


def remembered_full(client: Client, now: datetime) -> Q | None:
    """Return the condition of rows in a bucket this client knows is full at ``now``."""
    memo = client.memo.get(FULL)
    if not memo:
        return None
    at = now.timestamp()
    for bucket in [b for b, until in memo.items() if until <= at]:
        del memo[bucket]
    condition = None
    for target, name, key in memo:
        if target == "queue":
            part = Q(queue=name)
        elif key:
            part = Q(operation=name, rate_key=key)
        else:
            part = Q(operation=name)
        condition = part if condition is None else condition | part
    return condition


def known_full(client: Client, target: str, name: str, now: datetime) -> bool:
    """Return True when this client knows the whole bucket of ``name`` is full at ``now``."""
    return client.memo.get(FULL, {}).get((target, name, ""), 0.0) > now.timestamp()


def all_remembered_full(client: Client, limits: Limits, now: datetime) -> bool:
    """Return True when every row ``limits`` covers is in a bucket known to be full at ``now``.

    Only whole operations and queues count (not keys), so a claim can skip its limited pass
    without a query while its buckets are full.
    """
    memo = client.memo.get(FULL)
    if not memo:
        return False
    at = now.timestamp()

    def full(target: str, name: str) -> bool:
        return memo.get((target, name, ""), 0.0) > at

    for name in limits.operations:
        op_flow = flow.of_operation(name)
        if op_flow.max_running_per_key is not None or op_flow.rate_key is not None:
            return False
        if not full("operation", name):
            return False
    return all(full("queue", name) for name in limits.queues)


def remember_full(client: Client, bucket: tuple[str, str, str], until: float) -> None:
    """Remember that ``bucket`` ((target, name, key)) admits no start before ``until``."""
    client.memo.setdefault(FULL, {})[bucket] = until


def forget_full(client: Client, operations: Iterable[str]) -> None:
    """Forget that the whole buckets of ``operations`` are full (their starts rolled back)."""
    memo = client.memo.get(FULL, {})
    for name in operations:
        memo.pop(("operation", name, ""), None)


def existing(client: Client) -> dict[str, float]:
    """Return the gates and buckets this client has found to exist, with when it last did."""
    return client.memo.setdefault(EXISTING, {})


# -- admission ------------------------------------------------------------------------------------


class Admission:
    """What one claim transaction has locked and counted of the limits it met.

    A batch claim (``waits=False``) never waits for a limit's row: it takes a gate or bucket
    row with ``SKIP LOCKED`` and passes over a job whose row another claimer holds at that
    moment (that claimer is admitting work of the same limit; the job is taken on a later
    claim). So claimers neither deadlock nor queue up behind one bucket while free work waits.
    A row that does not exist yet is not created inside the claim (creating it could wait): it
    is noted in ``missing``, created after the transaction holding nothing else
    (:func:`create_missing`), and the claim runs again. The explicit one-job claim
    (``waits=True``) creates and locks its job's few rows, waiting, in one fixed order.
    """

    def __init__(self, *, waits: bool = False, existing: dict[str, float] | None = None) -> None:
        self.waits = waits
        # Rows known to exist (gates and buckets are never deleted), with when each was last
        # seen (monotonic): no plain read first.
        self.existing = existing if existing is not None else {}
        self.key_free: dict[tuple[str, str], int] = {}
        self.held: dict[tuple[str, str, str], Held] = {}
        self.missing: list[tuple[str, str, str, str]] = []  # (kind, target, name, key)
        self.logs: dict[tuple[str, str, str], tuple[str, list[float]]] = {}  # locked buckets
        self.dirty: set[tuple[str, str, str]] = set()

    def log(self, using: str, target: str, name: str, key: str) -> list[float] | None:
        """Return the locked sliding log of a bucket (read once per transaction), or None."""
        bucket = (target, name, key)
        if bucket not in self.logs:
            row = self.lock(using, "bucket", target, name, key)
            if row is None:
                return None
            self.logs[bucket] = (row.pk, json.loads(row.starts or "[]"))
        return self.logs[bucket][1]

    def flush(self, using: str, now: datetime) -> None:
        """Write the starts admitted in this transaction to their buckets (before COMMIT)."""
        if not self.dirty:
            return
        connection = connections[using]
        at = connection.ops.adapt_datetimefield_value(now)
        with connection.cursor() as cursor:
            for bucket in sorted(self.dirty):
                pk, starts = self.logs[bucket]
                cursor.execute(_bucket_sql(using).update, [json.dumps(starts), at, pk])
        self.dirty.clear()

    def lock(self, using: str, kind: str, target: str, name: str, key: str) -> Any:
        """Lock a gate (``kind="gate"``) or bucket row; return it, or None when passed over."""
        model, pk = _row_of(kind, target, name, key)
        if self.waits:
            return _create_and_lock(using, kind, target, name, key)
        # A plain read first: a locking read of a missing row would lock the gap it falls in
        # (InnoDB), and a claimer creating another row there would wait on it.
        if pk not in self.existing:
            if not model.objects.using(using).filter(pk=pk).exists():
                self.missing.append((kind, target, name, key))
                return None
            self.existing[pk] = time.monotonic()
        if kind == "gate":
            row = lock_for_update(model.objects.using(using).filter(pk=pk), skip_locked=True)
            row = row.first()
        else:  # a bucket: once per limited pass, so a statement compiled once, no model built
            with connections[using].cursor() as cursor:
                cursor.execute(_bucket_sql(using).lock, [pk])
                found = cursor.fetchone()
            row = None if found is None else LockedBucket(*found)
        if row is None:  # held, or gone (a flushed table): after a while, read plainly again
            if time.monotonic() - self.existing[pk] > EXISTING_SECONDS:
                del self.existing[pk]
        else:
            self.existing[pk] = time.monotonic()
        return row


class LockedBucket(NamedTuple):
    """A bucket row locked for this transaction: its id and sliding log (JSON)."""

    pk: str
    starts: str


@dataclass(frozen=True)
class BucketSQL:
    lock: str  # one bucket's id and sliding log, locked (skipped when another claimer holds it)
    update: str  # its sliding log and updated_at written, by id


_BUCKET_SQL: dict[str, BucketSQL] = {}


def _bucket_sql(using: str) -> BucketSQL:
    """Return the bucket statements of ``using``'s database, compiled once per alias.

    The limited pass locks and writes its bucket in every claim that looks at limited work,
    inside the claim's transaction; built by the ORM each time they cost more than they ran
    (SQLite holds its single write lock meanwhile).
    """
    statements = _BUCKET_SQL.get(using)
    if statements is None:
        connection = connections[using]
        table = connection.ops.quote_name(RateBucket._meta.db_table)
        pk, starts, updated = (
            connection.ops.quote_name(RateBucket._meta.get_field(f).column)
            for f in ("id", "starts", "updated_at")
        )
        lock = f"SELECT {pk}, {starts} FROM {table} WHERE {pk} = %s"
        features = connection.features
        if features.has_select_for_update_skip_locked:
            lock += " FOR UPDATE SKIP LOCKED"
        elif features.has_select_for_update:
            lock += " FOR UPDATE"
        update = f"UPDATE {table} SET {starts} = %s, {updated} = %s WHERE {pk} = %s"
        statements = _BUCKET_SQL[using] = BucketSQL(lock, update)
    return statements


def admit(
    client: Client, row: Job, now: datetime, admission: Admission | None = None
) -> Held | None:
    """Record the start of ``row`` in every limit over it; or return what holds it back.

    Runs inside the claim's transaction: the locks taken here are held until it commits. The
    starts admitted are written by ``admission.flush()``, which the caller runs before COMMIT.
    A refusal writes nothing but the empty row of a gate or bucket the check created.
    """
    admission = admission if admission is not None else Admission(waits=True)
    spec = registry.get(row.operation)
    op_flow = spec.flow if spec is not None else flow.NO_FLOW
    slot = None
    if op_flow.max_running_per_key is not None and row.status != JobStatus.RUNNING:
        slot = (row.operation, row.concurrency_key)
        held = _key_room(client, row, op_flow.max_running_per_key, admission)
        if held is not None:
            return held
    buckets = []
    if op_flow.rate_limit is not None:
        key = row.rate_key if op_flow.rate_key is not None else ""
        buckets.append(("operation", row.operation, key, op_flow.rate_limit))
    queue_flow = flow.queues().get(row.queue)
    if queue_flow is not None and queue_flow.rate_limit is not None:
        buckets.append(("queue", row.queue, "", queue_flow.rate_limit))
    at = now.timestamp()
    logs = []
    for target, name, key, limit in buckets:
        if (target, name, key) in admission.held:
            return admission.held[(target, name, key)]  # met earlier in this transaction
        starts = admission.log(client.using, target, name, key)
        if starts is None:  # another claimer holds it: pass over its jobs for this claim
            held = Held(
                f"{_named(target, name, key)} is busy", None, _bucket_rows(target, name, key)
            )
            admission.held[(target, name, key)] = held
            return held
        room, frees = flow.rate_room(starts, limit, at)
        if room <= 0:
            remember_full(client, (target, name, key), frees)
            held = Held(
                f"the rate limit {limit} of {_named(target, name, key)} is used up until "
                f"{_when(frees)}",
                frees,
                _bucket_rows(target, name, key),
            )
            admission.held[(target, name, key)] = held
            return held
        logs.append(((target, name, key), starts, limit))
    for bucket, starts, limit in logs:
        starts.append(flow.recorded_start(at))
        starts.sort()
        del starts[: -limit.count]  # the N latest starts decide every window
        admission.dirty.add(bucket)
    if slot is not None:
        admission.key_free[slot] -= 1
    return None


def bucket_room(
    client: Client, operation: str, now: datetime, admission: Admission, take_at_most: int
) -> tuple[int, list[float] | None]:
    """Lock the whole bucket of ``operation``'s plain rate limit; return its room and log.

    ``(0, None)`` when another claimer holds the row (or it does not exist yet: noted in
    ``admission.missing``); a full bucket is remembered, like ``admit`` does, and so is a bucket
    another claimer holds: for half to all of BUSY_SECONDS, doubled each time in a row it is
    found held, up to BUSY_MAX_SECONDS. A bucket with less room than it gathers
    (``flow.gathered_room``, at most ``take_at_most``) is remembered full until it has that
    much, when that is soon, and admits nothing now.
    """
    limit = flow.of_operation(operation).rate_limit
    starts = admission.log(client.using, "operation", operation, "")
    misses = client.memo.setdefault(BUSY_MISSES, {})
    if starts is None:
        if not admission.missing:  # held by another claimer, admitting its room now
            misses[operation] = misses.get(operation, 0) + 1
            wait = min(BUSY_SECONDS * 2 ** (misses[operation] - 1), BUSY_MAX_SECONDS)
            busy_until = now.timestamp() + wait * random.uniform(0.5, 1.0)
            remember_full(client, ("operation", operation, ""), busy_until)
        return 0, None
    misses.pop(operation, None)
    room, frees = flow.rate_room(starts, limit, now.timestamp())
    if room <= 0:
        remember_full(client, ("operation", operation, ""), frees)
        return 0, starts
    at_least = min(flow.gathered_count(limit), take_at_most)
    if room < at_least:
        gathered = flow.gathered_room(starts, limit, now.timestamp(), room, at_least)
        if gathered is not None:
            remember_full(client, ("operation", operation, ""), gathered)
            return 0, starts
    return room, starts


def record_starts(
    client: Client,
    operation: str,
    starts: list[float],
    count: int,
    now: datetime,
    admission: Admission,
) -> None:
    """Append ``count`` starts at ``now`` to the locked log (written by ``admission.flush``).

    A bucket this fills is remembered as full until its first start leaves the window.
    """
    if count:
        limit = flow.of_operation(operation).rate_limit
        at = now.timestamp()
        starts.extend([flow.recorded_start(at)] * count)
        starts.sort()
        del starts[: -limit.count]
        admission.dirty.add(("operation", operation, ""))
        room, frees = flow.rate_room(starts, limit, at)
        if room <= 0:
            remember_full(client, ("operation", operation, ""), frees)


def _key_room(client: Client, row: Job, cap: int, admission: Admission) -> Held | None:
    slot = (row.operation, row.concurrency_key)
    if ("key", *slot) in admission.held:
        return admission.held[("key", *slot)]
    if slot not in admission.key_free:
        gate = admission.lock(client.using, "gate", "key", row.operation, row.concurrency_key)
        if gate is None:  # another claimer holds it: pass over its jobs for this claim
            held = Held(
                f"concurrency key {row.concurrency_key!r} is busy",
                None,
                Q(operation=row.operation, concurrency_key=row.concurrency_key),
            )
            admission.held[("key", *slot)] = held
            return held
        running = Job.objects.using(client.using).filter(
            operation=row.operation,
            concurrency_key=row.concurrency_key,
            status=JobStatus.RUNNING,
        )
        admission.key_free[slot] = cap - running.exclude(pk=row.pk).count()
    if admission.key_free[slot] <= 0:
        return Held(
            f"concurrency key {row.concurrency_key!r} of operation {row.operation!r} already "
            f"has {cap} running job(s) (max_running_per_key={cap})",
            None,
            Q(operation=row.operation, concurrency_key=row.concurrency_key),
        )
    return None


def key_gate(operation: str, key: str) -> str:
    """Return the capacity gate of a concurrency key (no operation name looks like it)."""
    return "#key " + hashlib.sha256(f"{operation}\x00{key}".encode()).hexdigest()


def _row_of(kind: str, target: str, name: str, key: str) -> tuple[Any, str]:
    if kind == "gate":
        return CapacityGate, key_gate(name, key)
    return RateBucket, flow.bucket_id(target, name, key)


def _create_and_lock(using: str, kind: str, target: str, name: str, key: str) -> Any:
    """Lock a gate or bucket row for this transaction, creating it race-free when missing."""
    model, pk = _row_of(kind, target, name, key)
    if kind == "gate":
        lock_gate(using, pk)
        return model.objects.using(using).get(pk=pk)
    connection = connections[using]
    buckets = RateBucket.objects.using(using)
    if connection.vendor in ("mysql", "postgresql"):
        table = connection.ops.quote_name(RateBucket._meta.db_table)
        columns = ", ".join(
            connection.ops.quote_name(RateBucket._meta.get_field(f).column)
            for f in ("id", "target", "name", "key", "starts")
        )
        if connection.vendor == "mysql":
            # A failed duplicate INSERT would leave a shared lock (see lock_gate): take the
            # exclusive one at once.
            pk_column = connection.ops.quote_name(RateBucket._meta.pk.column)
            tail = f"ON DUPLICATE KEY UPDATE {pk_column} = {pk_column}"
        else:
            tail = "ON CONFLICT DO NOTHING"
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} ({columns}) VALUES (%s, %s, %s, %s, '[]') {tail}",
                [pk, target, name, key],
            )
    else:  # SQLite: the IMMEDIATE transaction's write lock serialises every claimer
        buckets.get_or_create(pk=pk, defaults={"target": target, "name": name, "key": key})
    return buckets.select_for_update().get(pk=pk)


def create_missing(using: str, admission: Admission) -> None:
    """Create the gates and buckets a claim passed over for want of them, each on its own."""
    for kind, target, name, key in admission.missing:
        with transaction.atomic(using=using):
            _create_and_lock(using, kind, target, name, key)


def _bucket_rows(target: str, name: str, key: str) -> Q:
    if target == "queue":
        return Q(queue=name)
    return Q(operation=name, rate_key=key) if key else Q(operation=name)


def _named(target: str, name: str, key: str) -> str:
    what = f"{target} {name!r}"
    return f"{what} for key {key!r}" if key else what


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")


def require_flow_room(client: Client, row: Job, now: datetime, *, created: bool = False) -> None:
    """Refuse to start ``row`` while a pause or a limit holds it (``CapacityReached``).

    Called inside the transaction of the explicit one-job claim, and of a job created running
    (``created``: ``store.insert``, which writes the row only when this admits it); a refusal
    rolls it back, so nothing is written. An admitted start is recorded in the rate limits over
    it.
    """
    subject = f"A new job of operation {row.operation!r}" if created else f"Job {row.pk}"
    again = "start it again" if created else "claim again"
    pause = pause_over(client.using, row)
    if pause is not None:
        where = f" in scope {pause.scope!r}" if pause.scope else ""
        raise CapacityReached(
            f"{subject} is held by a pause of {pause.target} {pause.name!r}{where} (since "
            f"{pause.paused_at.isoformat()}, by {pause.paused_by or 'unknown'}); resume it "
            f"(manage.py jobs resume --{pause.target} {pause.name}) and {again}."
        )
    admission = Admission(waits=True)
    held = admit(client, row, now, admission)
    admission.flush(client.using, now)
    if held is not None:
        when = "later" if held.until is None else f"after {_when(held.until)}"
        raise CapacityReached(f"{subject} may not start now: {held.reason}; try again {when}.")


# -- pauses ---------------------------------------------------------------------------------------


def pause_over(using: str, row: Job) -> JobPause | None:
    """Return the pause in force that holds ``row`` (its queue's or its operation's), if any."""
    pauses = JobPause.objects.using(using).filter(active=True)
    pauses = pauses.filter(
        Q(target=JobPause.Target.QUEUE, name=row.queue)
        | Q(target=JobPause.Target.OPERATION, name=row.operation)
    )
    return pauses.filter(Q(scope="") | Q(scope=row.scope or "")).order_by("paused_at").first()
