"""Hand-compiled statements over many job rows: load, lock, fenced update, history insert.

At batch sizes Django's per-value lookup machinery (and per-call query compilation) cost more
than running the statements, so these few are written once here, from the model's own metadata
(table, columns, field adaptation), and stay correct on SQLite, PostgreSQL and MariaDB. Each
database difference is a named helper of ``dbvendor``; what a fenced UPDATE compares comes from
the fence (``store/fence.py``).
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connections, transaction
from django.db.models import Model, QuerySet
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init
from django.db.models.sql import UpdateQuery

from ...database.dbvendor import (
    ids_condition,
    json_rows,
    locked_in_id_order,
    no_ids,
    planned_once_cursor,
    quote,
    read_through,
    row_lock_clause,
    takes_json_rows,
)
from ...models import Job, JobAttempt
from ...rules.values import Lease
from .. import fence

DECREMENT = object()  # a change that lowers a counter by one: ``column = column - 1``


@functools.cache
def names(using: str) -> tuple[str, str]:
    """Return the job table's quoted name and its quoted, qualified column list."""
    table = quote(using, Job._meta.db_table)
    columns = ", ".join(f"{table}.{quote(using, f.column)}" for f in Job._meta.concrete_fields)
    return table, columns


ATTNAMES = tuple(f.attname for f in Job._meta.concrete_fields)


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
    """Return the job of a row selected as ``names(using)``'s columns, as the ORM loads it.

    What ``Job.objects.raw()`` does, without the per-query machinery that cost more than the
    statement at batch sizes.
    """
    values = list(record)
    connection = connections[using]
    for index, column, converters in _converters(using):
        value = values[index]
        if value is None:  # NULL stays None through every converter; most times of a job are NULL
            continue
        for converter in converters:
            value = converter(value, column, connection)
        values[index] = value
    return build_job(using, values)


def build_job(using: str, values: Sequence[Any]) -> Job:
    """Return the job of ``values`` (every concrete field, in model order) as loaded from
    ``using``: the instance ``Job.from_db()`` makes.

    ``from_db()`` runs ``Model.__init__``, which sends ``pre_init`` and ``post_init`` and sets
    each field by ``setattr``. Every field of a job stores its value in the instance's
    ``__dict__`` (the foreign key's descriptor too, for a new instance with nothing cached), so
    while no receiver listens to those signals for jobs, filling the ``__dict__`` makes the same
    instance for about half the cost (measured: 8-10 µs a job against 13-17), for every job
    claimed and every job of a ``submit_many()``. With a receiver, ``from_db()`` itself.
    """
    if pre_init.has_listeners(Job) or post_init.has_listeners(Job):
        return Job.from_db(using, ATTNAMES, values)
    return _filled(Job, ATTNAMES, values, using)


_ATTEMPT_FIELDS = tuple(f for f in JobAttempt._meta.concrete_fields if not f.primary_key)
ATTEMPT_ATTNAMES = tuple(f.attname for f in _ATTEMPT_FIELDS)
# Per history column: the type whose values Django passes to the database unchanged (text and
# integer columns), so that their preparation is skipped; None where every value is prepared.
_AS_IS_TYPES = tuple(
    {"CharField": str, "TextField": str, "BigIntegerField": int}.get(f.get_internal_type())
    for f in _ATTEMPT_FIELDS
)


def new_attempt(**values: Any) -> JobAttempt:
    """Return the unsaved history row ``JobAttempt(**values)`` makes (``values``: every field but
    the id), filled as :func:`build_job` fills a job (10-15 µs less per attempt ended) while no
    receiver listens to ``pre_init``/``post_init`` for history rows."""
    if pre_init.has_listeners(JobAttempt) or post_init.has_listeners(JobAttempt):
        return JobAttempt(**values)
    attempt = _filled(JobAttempt, ATTEMPT_ATTNAMES, [values[n] for n in ATTEMPT_ATTNAMES], None)
    attempt.id = None
    return attempt


def _filled(
    model: type[Model], attnames: tuple[str, ...], values: Sequence[Any], using: str | None
) -> Any:
    """Return an instance of ``model`` whose ``__dict__`` holds ``values``; loaded from ``using``,
    or new (unsaved) when ``using`` is None."""
    instance = model.__new__(model)
    instance.__dict__.update(zip(attnames, values, strict=True))
    state = instance._state = ModelState()
    state.adding = using is None
    state.db = using
    return instance


def fetch_jobs(
    using: str, sql: str, params: Sequence[Any], *, planned_once: bool = False
) -> list[Job]:
    """Run ``sql`` (selecting or returning ``names(using)``'s columns); return its jobs.

    With ``planned_once``, for a statement run again and again with new values only, through
    :func:`~django_durable_jobs.database.dbvendor.planned_once_cursor`.
    """
    cursors = planned_once_cursor(using) if planned_once else connections[using].cursor()
    with cursors as cursor:
        cursor.execute(sql, params)
        return [load_job(using, record) for record in cursor.fetchall()]


class JobRows:
    """Read, lock and update job rows by id, within one store client's scope."""

    def __init__(self, using: str, scope: str | None) -> None:
        self.using = using
        self.scope = scope
        self.table, self.columns = names(using)

    def _column(self, name: str) -> str:
        return f"{self.table}.{quote(self.using, name)}"

    def _ids(self, ids: Iterable[Any]) -> tuple[str, list]:
        """Return the condition 'id is one of ``ids``' and its parameters."""
        connection = connections[self.using]
        pk = Job._meta.pk
        return ids_condition(
            self.using,
            self._column(pk.column),
            list(dict.fromkeys(ids)),
            lambda value: pk.get_db_prep_value(value, connection),
        )

    def _scoped(self, where: list[str], params: list) -> None:
        if self.scope is not None:
            where.append(f"{self._column('scope')} = %s")
            params.append(self.scope)

    def get(self, ids: Iterable[Any], *, lock: bool = False) -> dict[Any, Job]:
        """Return the rows of ``ids`` in scope by id, locked for update when ``lock``."""
        condition, params = self._ids(ids)
        if no_ids(params):
            return {}
        where = [condition]
        self._scoped(where, params)
        pk = quote(self.using, Job._meta.pk.column)
        sql = f"SELECT {self.columns} FROM {self.table} WHERE {' AND '.join(where)} ORDER BY {pk}"
        if lock:
            sql = read_through(self.using, sql, self.table) + row_lock_clause(self.using)
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

        A row changes only where the fence passes (``fence.sql_epoch``, ``fence.sql_holder``):
        it is the lease's job at the lease's epoch, running, owned by ``owner_id`` and (with
        ``unexpired_at``) leased beyond that time. ``changes`` apply to every row; ``each`` maps
        a field to per-job values (``CASE id WHEN … THEN …``), rows without one keep theirs.
        """
        if not leases:
            return 0
        connection = connections[self.using]
        meta = Job._meta
        assignments, values = self._assignments(changes)
        if takes_json_rows(self.using):
            return self._update_fenced_json(
                leases, assignments, values, owner_id, unexpired_at, each
            )
        pk = self._column(meta.pk.column)
        for name, by_job in (each or {}).items():
            if not by_job:
                continue
            field = meta.get_field(name)
            column = quote(self.using, field.column)
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
            fences.append(f"({fence.sql_epoch(self._bare)} AND {condition})")
            params += [epoch, *id_params]
        if unexpired_at is not None:
            expiry = meta.get_field("lease_expires_at")
            unexpired_at = expiry.get_db_prep_value(unexpired_at, connection)
        holder, holder_params = fence.sql_holder(self._bare, owner_id, unexpired_at)
        where = [f"({' OR '.join(fences)})", *holder]
        params += holder_params
        self._scoped(where, params)
        sql = f"UPDATE {self.table} SET {', '.join(assignments)} WHERE {' AND '.join(where)}"
        sql = read_through(self.using, sql, self.table)
        with connection.cursor() as cursor:
            cursor.execute(sql, [*values, *params])
            return cursor.rowcount

    def _bare(self, name: str) -> str:
        return name

    def _assignments(self, changes: dict[str, Any]) -> tuple[list[str], list]:
        """Return the SET items of ``changes`` (the same value for every row), and their values."""
        connection = connections[self.using]
        meta = Job._meta
        assignments, values = [], []
        for name, value in changes.items():
            field = meta.get_field(name)
            column = quote(self.using, field.column)
            if value is DECREMENT:
                assignments.append(f"{column} = {column} - 1")
            else:
                assignments.append(f"{column} = %s")
                values.append(field.get_db_prep_save(value, connection))
        return assignments, values

    def _update_fenced_json(
        self,
        leases: Sequence[Lease],
        assignments: list[str],
        values: list,
        owner_id: str,
        unexpired_at: datetime | None,
        each: dict[str, dict[Any, Any]] | None,
        *,
        returning: bool = False,
    ) -> int | list[Job]:
        """``update_fenced`` where the per-row values travel as one JSON document (PostgreSQL);
        with ``returning``, the rows it changed (as changed) instead of their count.

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
            column = quote(self.using, field.column)
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
        qualified = functools.partial(_qualified, table)
        where = [f"{self._column(meta.pk.column)} = v.id", fence.sql_epoch(qualified, "v.epoch")]
        # The rows are locked first, in id order: the order ``get(lock=True)`` locks them in
        # (record_outcomes, release). An UPDATE alone locks rows in the order its plan meets
        # them (here the leases' order), so a worker's renewal and its completer's flush could
        # each hold a row the other waits for: a deadlock, and one of them aborted.
        # The fence's holder conditions (and the scope) are checked there, on the rows read by
        # id and locked (nothing changes them before COMMIT); the UPDATE finds them by id: with
        # them in its own WHERE the planner read every running row of the status index for
        # each job (its statistics, taken while the backlog was pending, know no running
        # rows): 80,000 rows for a flush of 100 jobs beside 800 running (measured).
        pk = quote(self.using, meta.pk.column)
        ids, id_params = self._ids(lease.job_id for lease in leases)
        holder, holder_params = fence.sql_holder(qualified, owner_id, unexpired_at)
        owned, owned_params = [ids, *holder], [*id_params, *holder_params]
        self._scoped(owned, owned_params)
        where.append(f"{table}.{pk} IN (SELECT {pk} FROM locked)")
        sql = (
            f"{locked_in_id_order('locked', table, pk, ' AND '.join(owned))} "
            f"UPDATE {table} SET {', '.join(assignments)} "
            f"FROM {json_rows('v', ', '.join(shape))} "
            f"WHERE {' AND '.join(where)}"
        )
        params = [*owned_params, *values, json.dumps(rows)]
        if returning:
            return fetch_jobs(self.using, f"{sql} RETURNING {self.columns}", params)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount

    def end_fenced(
        self,
        leases: Sequence[Lease],
        changes: dict[str, Any],
        *,
        owner_id: str,
        unexpired_at: datetime,
        each: dict[str, dict[Any, Any]],
    ) -> list[Job]:
        """``update_fenced`` returning the rows it changed, as changed: one statement, no
        locking read before it (PostgreSQL only:
        :func:`~django_durable_jobs.database.dbvendor.takes_json_rows`).

        The fence is the UPDATE's (its rows locked in id order, then matched by id and epoch);
        a lease not in the result was not held.
        """
        if not takes_json_rows(self.using):
            raise ValueError("end_fenced() needs PostgreSQL's UPDATE … RETURNING of JSON rows.")
        if not leases:
            return []
        assignments, values = self._assignments(changes)
        return self._update_fenced_json(
            leases, assignments, values, owner_id, unexpired_at, each, returning=True
        )


def update_by_ids(rows: QuerySet, **changes: Any) -> int:
    """Return ``rows.update(**changes)``, for ``rows`` picked by id, touching only those rows.

    On MariaDB and MySQL the statement reads the table by its primary key alone
    (:func:`~django_durable_jobs.database.dbvendor.read_through`); elsewhere this is
    ``rows.update(**changes)``.
    """
    using = rows.db
    if connections[using].vendor != "mysql":
        return rows.update(**changes)
    query = rows.query.chain(UpdateQuery)
    query.add_update_values(changes)
    try:
        sql, params = query.get_compiler(using).as_sql()
    except EmptyResultSet:  # no id at all
        return 0
    sql = read_through(using, sql, quote(using, rows.model._meta.db_table))
    with transaction.mark_for_rollback_on_error(using), connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def lock_by_ids(rows: QuerySet) -> list[Model]:
    """Return ``rows`` (picked by id) locked for update, locking only those rows.

    On MariaDB and MySQL the locking read goes through the primary key alone, as
    :func:`update_by_ids`'s statement does.
    """
    rows = rows.select_for_update()
    using = rows.db
    if connections[using].vendor != "mysql":
        return list(rows)
    try:
        sql, params = rows.query.get_compiler(using).as_sql()
    except EmptyResultSet:  # no id at all
        return []
    sql = read_through(using, sql, quote(using, rows.model._meta.db_table))
    return list(rows.model.objects.using(using).raw(sql, params))


def _qualified(table: str, name: str) -> str:
    return f"{table}.{name}"


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
    fields = _ATTEMPT_FIELDS
    columns = ", ".join(quote(using, f.column) for f in fields)
    table = quote(using, JobAttempt._meta.db_table)
    if takes_json_rows(using):
        # One JSON document instead of nine escaped parameters a row (the client-side
        # escaping of the snapshots cost more than the INSERT).
        shape = ", ".join(f"{quote(using, f.column)} {f.db_type(connection)}" for f in fields)
        document = json.dumps(
            [{f.column: _jsonable(getattr(a, f.attname)) for f in fields} for a in attempts]
        )
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} ({columns}) SELECT {columns} "
                f"FROM {json_rows('attempt', shape)}",
                [document],
            )
        return
    row = f"({', '.join(['%s'] * len(fields))})"
    params = []
    for attempt in attempts:
        values = attempt.__dict__
        for field, as_is in zip(fields, _AS_IS_TYPES, strict=True):
            value = values[field.attname]
            if as_is is None or (value is not None and type(value) is not as_is):
                value = field.get_db_prep_save(value, connection)
            params.append(value)
    sql = f"INSERT INTO {table} ({columns}) VALUES {', '.join([row] * len(attempts))}"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
