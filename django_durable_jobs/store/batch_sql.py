"""Hand-compiled statements over many job rows, for the store's batched paths.

At batch sizes Django's per-value lookup machinery (and per-call query compilation) cost more
than running the statements, so these few are written once here, from the model's own metadata
(table, columns, field adaptation), and stay correct on SQLite, PostgreSQL and MariaDB.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connections
from django.db.models import Exists
from django.db.models.expressions import RawSQL

from ..dbvendor import can_update_returning, lock_for_update
from ..models import Job, JobAttempt
from ..values import Lease
from ..vocabulary import JobStatus

DECREMENT = object()  # a change that lowers a counter by one: ``column = column - 1``


def _quote(using: str, name: str) -> str:
    return connections[using].ops.quote_name(name)


@functools.cache
def _names(using: str) -> tuple[str, str]:
    """Return the job table's quoted name and its quoted, qualified column list."""
    table = _quote(using, Job._meta.db_table)
    columns = ", ".join(f"{table}.{_quote(using, f.column)}" for f in Job._meta.concrete_fields)
    return table, columns


_ATTNAMES = tuple(f.attname for f in Job._meta.concrete_fields)


@functools.cache
def _converters(using: str) -> tuple[tuple[int, Any, tuple], ...]:
    """Return, per column that has any, Django's converters from database to Python values."""
    connection = connections[using]
    found = []
    for index, field in enumerate(Job._meta.concrete_fields):
        column = field.get_col(Job._meta.db_table)
        converters = connection.ops.get_db_converters(column) + field.get_db_converters(connection)
        if converters:
            found.append((index, column, tuple(converters)))
    return tuple(found)


def load_job(using: str, record: Sequence[Any]) -> Job:
    """Return the job of a row selected as ``_names(using)``'s columns, as the ORM loads it.

    What ``Job.objects.raw()`` does, without the per-query machinery that cost more than the
    statement at batch sizes.
    """
    values = list(record)
    connection = connections[using]
    for index, column, converters in _converters(using):
        for converter in converters:
            values[index] = converter(values[index], column, connection)
    return Job.from_db(using, _ATTNAMES, values)


def fetch_jobs(using: str, sql: str, params: Sequence[Any]) -> list[Job]:
    """Run ``sql`` (selecting or returning ``_names(using)``'s columns); return its jobs."""
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        return [load_job(using, record) for record in cursor.fetchall()]


class JobRows:
    """Read, lock and update job rows by id, within one store client's scope."""

    def __init__(self, using: str, scope: str | None) -> None:
        self.using = using
        self.scope = scope
        self.table, self.columns = _names(using)

    def _ids(self, ids: Iterable[Any]) -> tuple[str, list]:
        """Return the condition 'id is one of ``ids``' and its parameters."""
        connection = connections[self.using]
        pk = Job._meta.pk
        column = f"{self.table}.{_quote(self.using, pk.column)}"
        ids = list(dict.fromkeys(ids))
        if connection.vendor == "postgresql":
            # One array literal: the driver escapes one string instead of adapting every id.
            return f"{column} = ANY(%s::uuid[])", ["{" + ",".join(map(str, ids)) + "}"]
        values = [pk.get_db_prep_value(value, connection) for value in ids]
        return f"{column} IN ({', '.join(['%s'] * len(values))})", values

    def _scoped(self, where: list[str], params: list) -> None:
        if self.scope is not None:
            where.append(f"{self.table}.{_quote(self.using, 'scope')} = %s")
            params.append(self.scope)

    def get(self, ids: Iterable[Any], *, lock: bool = False) -> dict[Any, Job]:
        """Return the rows of ``ids`` in scope by id, locked for update when ``lock``."""
        condition, params = self._ids(ids)
        if not params or params == ["{}"]:
            return {}
        where = [condition]
        self._scoped(where, params)
        pk = _quote(self.using, Job._meta.pk.column)
        sql = f"SELECT {self.columns} FROM {self.table} WHERE {' AND '.join(where)} ORDER BY {pk}"
        if lock and connections[self.using].features.has_select_for_update:
            sql += " FOR UPDATE"
        return {row.pk: row for row in fetch_jobs(self.using, sql, params)}

    def update_fenced(
        self,
        leases: Sequence[Lease],
        changes: dict[str, Any],
        *,
        owner_id: str,
        unexpired_at: datetime | None = None,
        each: dict[str, dict[Any, Any]] | None = None,
    ) -> int:
        """Change the rows each lease still holds, in one statement; return how many changed.

        A row changes only where it is the lease's job at the lease's epoch, running, owned by
        ``owner_id`` and (with ``unexpired_at``) leased beyond that time. ``changes`` apply to
        every row; ``each`` maps a field to per-job values (``CASE id WHEN … THEN …``), rows
        without one keep theirs.
        """
        if not leases:
            return 0
        connection = connections[self.using]
        meta = Job._meta
        pk = f"{self.table}.{_quote(self.using, meta.pk.column)}"
        assignments, values = [], []
        for name, value in changes.items():
            field = meta.get_field(name)
            column = _quote(self.using, field.column)
            if value is DECREMENT:
                assignments.append(f"{column} = {column} - 1")
            else:
                assignments.append(f"{column} = %s")
                values.append(field.get_db_prep_save(value, connection))
        if connection.vendor == "postgresql":
            return self._update_fenced_pg(leases, assignments, values, owner_id, unexpired_at, each)
        for name, by_job in (each or {}).items():
            if not by_job:
                continue
            field = meta.get_field(name)
            column = _quote(self.using, field.column)
            whens = []
            for job_id, value in by_job.items():
                whens.append("WHEN %s THEN %s")
                values.append(meta.pk.get_db_prep_value(job_id, connection))
                values.append(field.get_db_prep_save(value, connection))
            assignments.append(f"{column} = CASE {pk} {' '.join(whens)} ELSE {column} END")
        by_epoch: dict[int, list] = {}
        for lease in leases:
            by_epoch.setdefault(lease.epoch, []).append(lease.job_id)
        fences, params = [], []
        for epoch, ids in by_epoch.items():
            condition, id_params = self._ids(ids)
            fences.append(f"(fencing_epoch = %s AND {condition})")
            params += [epoch, *id_params]
        where = [f"({' OR '.join(fences)})", "owner_id = %s", "status = %s"]
        params += [owner_id, JobStatus.RUNNING]
        if unexpired_at is not None:
            where.append("lease_expires_at > %s")
            expiry = meta.get_field("lease_expires_at")
            params.append(expiry.get_db_prep_value(unexpired_at, connection))
        self._scoped(where, params)
        sql = f"UPDATE {self.table} SET {', '.join(assignments)} WHERE {' AND '.join(where)}"
        with connection.cursor() as cursor:
            cursor.execute(sql, [*values, *params])
            return cursor.rowcount

    def _update_fenced_pg(
        self,
        leases: Sequence[Lease],
        assignments: list[str],
        values: list,
        owner_id: str,
        unexpired_at: datetime | None,
        each: dict[str, dict[Any, Any]] | None,
    ) -> int:
        """``update_fenced`` on PostgreSQL: the per-row values travel as one JSON document.

        Each row of it names a job, its lease's epoch and the values ``each`` gives that job
        (with a flag per field saying whether it gives one); a row changes only where the job is
        at that epoch, so the fence is still checked per row in SQL.
        """
        connection = connections[self.using]
        meta = Job._meta
        table = self.table
        shape = ["id uuid", "epoch bigint"]
        for name in each or {}:
            field = meta.get_field(name)
            shape += [f"{name} {field.db_type(connection)}", f"{name}__set boolean"]
            column = _quote(self.using, field.column)
            assignments.append(
                f"{column} = CASE WHEN v.{name}__set THEN v.{name} ELSE {table}.{column} END"
            )
        rows = []
        for lease in leases:
            row = {"id": str(lease.job_id), "epoch": lease.epoch}
            for name, by_job in (each or {}).items():
                if lease.job_id in by_job:
                    row[name], row[f"{name}__set"] = by_job[lease.job_id], True
            rows.append(row)
        where = [
            f"{table}.{_quote(self.using, meta.pk.column)} = v.id",
            f"{table}.fencing_epoch = v.epoch",
            f"{table}.owner_id = %s",
            f"{table}.status = %s",
        ]
        params = [owner_id, JobStatus.RUNNING]
        if unexpired_at is not None:
            where.append(f"{table}.lease_expires_at > %s")
            params.append(unexpired_at)
        self._scoped(where, params)
        # The rows are locked first, in id order: the order ``get(lock=True)`` locks them in
        # (record_outcomes, release). An UPDATE alone locks rows in the order its plan meets
        # them (here the leases' order), so a worker's renewal and its completer's flush could
        # each hold a row the other waits for: a deadlock, and one of them aborted.
        pk = _quote(self.using, meta.pk.column)
        ids, id_params = self._ids(lease.job_id for lease in leases)
        where.append(f"{table}.{pk} IN (SELECT {pk} FROM locked)")
        sql = (
            f"WITH locked AS MATERIALIZED (SELECT {pk} FROM {table} WHERE {ids} "
            f"AND {table}.owner_id = %s ORDER BY {pk} FOR UPDATE) "
            f"UPDATE {table} SET {', '.join(assignments)} "
            f"FROM jsonb_to_recordset(%s::jsonb) AS v({', '.join(shape)}) "
            f"WHERE {' AND '.join(where)}"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [*id_params, owner_id, *values, json.dumps(rows), *params])
            return cursor.rowcount


def _jsonable(value: Any) -> Any:
    """Return ``value`` as JSON can carry it for PostgreSQL to read back exactly."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def insert_attempts(using: str, attempts: Sequence[JobAttempt]) -> None:
    """Insert history rows in one multi-row INSERT.

    ``bulk_create`` does the same with more machinery per row than the INSERT costs here.
    """
    if not attempts:
        return
    connection = connections[using]
    meta = JobAttempt._meta
    fields = [f for f in meta.concrete_fields if f is not meta.pk]
    columns = ", ".join(_quote(using, f.column) for f in fields)
    if connection.vendor == "postgresql":
        # One JSON document instead of nine escaped parameters a row (the client-side
        # escaping of the snapshots cost more than the INSERT).
        shape = ", ".join(f"{_quote(using, f.column)} {f.db_type(connection)}" for f in fields)
        document = json.dumps(
            [{f.column: _jsonable(getattr(a, f.attname)) for f in fields} for a in attempts]
        )
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {_quote(using, meta.db_table)} ({columns}) SELECT {columns} "
                f"FROM jsonb_to_recordset(%s::jsonb) AS attempt({shape})",
                [document],
            )
        return
    row = f"({', '.join(['%s'] * len(fields))})"
    params = [
        field.get_db_prep_save(getattr(attempt, field.attname), connection)
        for attempt in attempts
        for field in fields
    ]
    sql = (
        f"INSERT INTO {_quote(using, meta.db_table)} ({columns}) "
        f"VALUES {', '.join([row] * len(attempts))}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


# Stands for the clock's value while a claim statement is compiled; found again in its parameters.
_SENTINEL = datetime(2999, 12, 31, 23, 59, 58, 987654, tzinfo=UTC)
_TURN_SENTINEL = "\x01durable-jobs-turn\x01"  # no scope holds control characters


@dataclass(frozen=True)
class ClaimStatement:
    """A compiled claim of pending work: SQL, and parameters in which only the clock changes.

    Candidates are chosen in claim order with cheap conditions only; the checks that cost per
    row (no lease, proposal matching its SHA-256) apply to the chosen few,
    so a planner that reads more of the backlog than it must still does not hash all of it.
    Where ``UPDATE … RETURNING`` exists, ``sql`` is the statement's WITH prefix (``claim``: the
    locked candidates; ``intact``: those that pass); elsewhere it is the locking SELECT of the
    candidates' rows, which the store checks in Python.
    """

    sql: str
    params: tuple
    now_at: frozenset[int]
    turn_at: frozenset[int]
    returning: bool

    @classmethod
    def compile(cls, using: str, build, limit: int, *, fair: bool) -> ClaimStatement:
        """Compile the claim; with ``fair``, of the scope whose turn follows the one bound."""
        connection = connections[using]
        base, rare = build(_SENTINEL)
        candidates = base.pending_due(_SENTINEL)
        if fair:
            candidates = candidates.scope_turn(_TURN_SENTINEL)
        candidates = candidates.in_claim_order()
        returning = can_update_returning(using)
        pk = Job._meta.pk
        if returning:
            candidates = candidates.filter(~Exists(rare)).values(pk.attname)
        query = lock_for_update(candidates, skip_locked=True)[:limit].query
        sql, params = query.get_compiler(using).as_sql()
        if returning:
            chosen = RawSQL(f"SELECT {_quote(using, pk.column)} FROM claim", [])
            intact = (
                Job.objects.using(using)
                .filter(pk__in=chosen)
                .unleased()
                .proposal_hashed()
                .values(pk.attname)
            )
            intact_sql, intact_params = intact.query.get_compiler(using).as_sql()
            sql = f"WITH claim AS MATERIALIZED ({sql}), intact AS ({intact_sql})"
            params = (*params, *intact_params)
        marker = connection.ops.adapt_datetimefield_value(_SENTINEL)
        now_at = frozenset(n for n, value in enumerate(params) if value == marker)
        turn_at = frozenset(n for n, value in enumerate(params) if value == _TURN_SENTINEL)
        return cls(sql, tuple(params), now_at, turn_at, returning)

    def _bind(self, using: str, now: datetime, turn: str) -> list:
        value = connections[using].ops.adapt_datetimefield_value(now)
        return [
            value if n in self.now_at else turn if n in self.turn_at else p
            for n, p in enumerate(self.params)
        ]

    def select(self, using: str, now: datetime, turn: str) -> list[Job]:
        """Lock and return the candidate rows (databases without ``UPDATE … RETURNING``)."""
        return fetch_jobs(using, self.sql, self._bind(using, now, turn))

    def take(self, using: str, now: datetime, turn: str, changes: dict[str, Any]) -> list[Job]:
        """Run one ``UPDATE … RETURNING`` over the intact candidates; return them as claimed."""
        connection = connections[using]
        quote = connection.ops.quote_name
        meta = Job._meta
        table, columns = _names(using)
        assignments, params = [], []
        for name, value in changes.items():
            field = meta.get_field(name)
            assignments.append(f"{quote(field.column)} = %s")
            params.append(field.get_db_prep_save(value, connection))
        for name in ("fencing_epoch", "attempts"):
            column = quote(meta.get_field(name).column)
            assignments.append(f"{column} = {table}.{column} + 1")
        pk = quote(meta.pk.column)
        sql = (
            f"{self.sql} UPDATE {table} SET {', '.join(assignments)} "
            f"WHERE {table}.{pk} IN (SELECT {pk} FROM intact) RETURNING {columns}"
        )
        return fetch_jobs(using, sql, [*self._bind(using, now, turn), *params])
