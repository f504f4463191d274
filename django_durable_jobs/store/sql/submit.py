"""The submit statement: insert new jobs unless their idempotency key is taken.

Submitting is dominated by round trips, so a new job costs one statement and no savepoint: the
insert itself skips a row whose (scope, operation, idempotency key) or id is already held, and says
what it did.

* PostgreSQL: ``INSERT … ON CONFLICT DO NOTHING`` in a CTE whose outer SELECT counts the new rows
  and, when there are any, sends the queue's NOTIFY in the same round trip. Beyond two rows the
  insert reads ``unnest()`` of seven arrays (the columns that vary) and binds the shared values
  once: a VALUES list of 1,000 rows took 55 ms to bind and 27 ms to plan, the arrays 5 ms and
  0.2 ms. For one or two rows the VALUES list is the faster one. The arrays go to the server as
  parameters in binary, through the worker's prepared-statement cursor, where the settings allow
  it (``planned_once_cursor``): Django's cursor would quote each of their 7,000 items into the
  statement's text, a fifth of the time of a bulk submit.
* SQLite: ``INSERT … VALUES … ON CONFLICT DO NOTHING``; the driver's row count says how many went in.
* MariaDB: ``INSERT … VALUES … ON DUPLICATE KEY UPDATE id = id RETURNING …``, which returns per
  row the new row or the one holding its key: a row went in where the id and key are its own.
  (Django connects with ``CLIENT_FOUND_ROWS``, so the affected-row count cannot tell the two
  apart.) A row or two return whole, so a key taken needs no SELECT after; beyond, only the id
  and the key: loading 1,000 returned rows was about a fifth of a bulk submit's CPU, for rows it
  had already built. MySQL has no ``RETURNING``: a SELECT of the keys follows.

Each of those differences is a named helper of :mod:`django_durable_jobs.dbvendor`. When not
every row went in, one SELECT per statement reads the rows holding the other keys; the submitting room
applies the idempotency rules to them. Columns, types and adaptation come from the model's
metadata and ``connection.ops``, so the statements follow the schema on every database.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connections

from ...database.dbvendor import (
    binds_on_server,
    client_literals,
    counted_insert_sql,
    insert_counts_itself,
    insert_from_arrays_sql,
    insert_returns_holders,
    planned_once_cursor,
    quote,
    rowcount_counts_inserted,
    skip_taken_sql,
    submit_rows_most,
    submits_arrays,
    work_notice,
)
from ...database.wakeups import work_written
from ...models import Job
from .rows import ATTNAMES, build_job, load_job

# The columns that differ from row to row; every other column is the same for a whole call.
VARYING = (
    Job._meta.pk.attname,
    "idempotency_key",
    "proposal",
    "proposal_hash",
    "rate_key",
    "concurrency_key",
    "unique_key",
)
FIELDS = tuple(Job._meta.concrete_fields)
SLOTS = tuple(ATTNAMES.index(name) for name in VARYING)
# The positions in VARYING of the varying columns in model order: a row's placeholders' order.
IN_MODEL_ORDER = tuple(sorted(range(len(SLOTS)), key=SLOTS.__getitem__))
ROWS_PER_STATEMENT = 2_000
# PostgreSQL binds a VALUES list faster up to a few rows, the unnest form beyond (measured);
# MariaDB writes the values the rows share into the statement's text beyond it.
VALUES_ROWS_MOST = 2
# Proposal characters per statement: far below MariaDB's default 16 MiB max_allowed_packet even
# when every character is escaped or four bytes long.
CHARS_PER_STATEMENT = 2_000_000


@dataclass(frozen=True)
class NewJob:
    """What one submitted job does not share with the others of its call."""

    pk: uuid.UUID
    key: str
    proposal: str
    proposal_hash: str
    # Flow control (``rules.flow``): the keys computed from the input, "" or None for none.
    rate_key: str = ""
    concurrency_key: str = ""
    unique_key: str | None = None

    def row(self) -> tuple[Any, ...]:
        """Return the job's values in ``VARYING`` order."""
        return (
            self.pk,
            self.key,
            self.proposal,
            self.proposal_hash,
            self.rate_key,
            self.concurrency_key,
            self.unique_key,
        )


def submit(
    using: str, fields: dict[str, Any], jobs: Sequence[NewJob], *, notify: str | None = None
) -> list[tuple[Job | None, bool]]:
    """Insert the rows of ``jobs`` (their other columns set from ``fields``) whose keys are free.

    Return, for each job in order, the job holding its key once the statements ran, and whether
    that job was built from the values just inserted rather than read from the database. The job
    is the new row, or the earlier job holding the key (the caller compares its proposal), or
    None when the job's id is taken by a job of another key. ``fields`` holds at least
    ``scope``, ``operation``, ``created_at`` and ``run_after``; the keys of ``jobs`` are
    distinct. ``notify`` names the queue to wake when the transaction commits (PostgreSQL's
    NOTIFY; this process's workers on every database).
    """
    # Every job's proposal passed the store's checks (strict JSON, size and depth) on its way
    # into a ``NewJob``: the flag records that, for the ownership assessment in SQL and Python.
    statement = SubmitStatement(using, {**fields, "proposal_checked": True})
    if len(jobs) == 1:
        in_order = statement.run(jobs, notify)
    else:
        # Rows go in sorted by key, so that concurrent calls over the same keys wait on each
        # other in one order instead of deadlocking.
        order = sorted(range(len(jobs)), key=lambda index: jobs[index].key)
        most = submit_rows_most(statement.connection, list(FIELDS), ROWS_PER_STATEMENT)
        held: list[tuple[Job | None, bool]] = []
        for chunk in _chunks([jobs[index] for index in order], most):
            held.extend(statement.run(chunk, notify))
        in_order = [(None, False)] * len(jobs)
        for index, pair in zip(order, held, strict=True):
            in_order[index] = pair
    if notify is not None:  # after the rows: when their transaction commits (in autocommit, now)
        work_written(using)
    return in_order


def _chunks(jobs: Sequence[NewJob], most: int) -> Iterator[Sequence[NewJob]]:
    start, chars = 0, 0
    for index, job in enumerate(jobs):
        if index > start and (
            index - start >= most or chars + len(job.proposal) > CHARS_PER_STATEMENT
        ):
            yield jobs[start:index]
            start, chars = index, 0
        chars += len(job.proposal)
    if start < len(jobs):
        yield jobs[start:]


@dataclass(frozen=True)
class _Shape:
    """What the submit statements of one database alias share, worked out once."""

    table: str  # quoted
    columns: str  # quoted, in model order
    casts: tuple[str, ...]  # each column's SQL type, for PostgreSQL's casts
    defaults: tuple[tuple[Any, Any] | None, ...]  # (value, adapted) of a constant default


@functools.cache
def _shape(using: str) -> _Shape:
    connection = connections[using]
    fields = Job._meta.concrete_fields
    defaults = []
    for field in fields:
        if field.attname in VARYING or callable(field.default):
            defaults.append(None)  # set per row, or computed per call
        else:
            value = field.get_default()
            defaults.append((value, field.get_db_prep_save(value, connection)))
    return _Shape(
        table=quote(connection.alias, Job._meta.db_table),
        columns=", ".join(quote(connection.alias, f.column) for f in fields),
        casts=tuple(f.cast_db_type(connection) for f in fields),
        defaults=tuple(defaults),
    )


class SubmitStatement:
    """The submit statement of one call: its shared values adapted once, its rows in chunks."""

    def __init__(self, using: str, fields: dict[str, Any]) -> None:
        self.using = using
        self.connection = connections[using]
        self.fields = fields
        shape = _shape(using)
        self.table, self.columns, self.casts = shape.table, shape.columns, shape.casts
        self.slots = SLOTS
        # Column values in model order, for Python (the returned jobs) and for the database.
        self.values: list[Any] = [None] * len(ATTNAMES)
        self.prepared: list[Any] = [None] * len(ATTNAMES)
        for index, (field, default) in enumerate(zip(FIELDS, shape.defaults, strict=True)):
            if field.attname in fields:
                value = fields[field.attname]
            elif default is not None:
                self.values[index], self.prepared[index] = default
                continue
            elif field.attname in VARYING:
                continue
            else:
                value = field.get_default()
            self.values[index] = value
            self.prepared[index] = field.get_db_prep_save(value, self.connection)

    def run(self, chunk: Sequence[NewJob], notify: str | None) -> list[tuple[Job | None, bool]]:
        """Insert ``chunk`` in one statement; return what :func:`submit` returns for it."""
        connection = self.connection
        went_in: list[bool] | None = None  # per job, whether its row went in, where known
        returned: list[Job] | None = None  # the rows holding the keys, where the insert gave them
        arrays = self._as_arrays(chunk)
        cursors = planned_once_cursor(self.using) if arrays else connection.cursor()
        with cursors as cursor:
            if insert_counts_itself(connection):
                notice = work_notice(self.using, notify) if notify is not None else None
                cursor.execute(*counted_insert_sql(*self._insert_sql(chunk), notice))
                inserted = cursor.fetchone()[0]
            else:
                cursor.execute(*self._insert_sql(chunk))
                if insert_returns_holders(connection):
                    # The row holding each key: a row went in where its id and key are its own.
                    if self._returns_rows(chunk):
                        returned = [self._load(record) for record in cursor.fetchall()]
                        held = {(job.pk, job.idempotency_key) for job in returned}
                    else:
                        pk = Job._meta.pk
                        held = {(pk.to_python(id_), key) for id_, key in cursor.fetchall()}
                    went_in = [(job.pk, job.key) in held for job in chunk]
                    inserted = sum(went_in)
                else:
                    inserted = cursor.rowcount if rowcount_counts_inserted(connection) else -1
        if inserted == len(chunk):
            return [(self._new_job(job), True) for job in chunk]
        if went_in is None:
            went_in = [False] * len(chunk)
        if returned is None:
            returned = self._holders(
                [job.key for job, new in zip(chunk, went_in, strict=True) if not new]
            )
        holders = {
            job.idempotency_key: job
            for job in returned
            if (job.scope, job.operation) == (self.fields["scope"], self.fields["operation"])
        }
        # A key the database matched another way (MariaDB's collations ignore case) is read alone.
        return [
            (self._new_job(job), True)
            if new
            else (holders.get(job.key) or next(iter(self._holders([job.key])), None), False)
            for job, new in zip(chunk, went_in, strict=True)
        ]

    def _insert_sql(self, chunk: Sequence[NewJob]) -> tuple[str, list]:
        """Return the INSERT of ``chunk`` that skips rows whose key or id is taken."""
        connection = self.connection
        pk = Job._meta.pk
        if self._as_arrays(chunk):
            return self._arrays_sql(chunk)
        id_slot = self.slots[0]
        params: list[Any] = []
        # One or two rows bind every value: escaping the shared ones apart costs more than it saves.
        shared = self._shared_literals if len(chunk) > VALUES_ROWS_MOST else None
        if shared is None:  # every value a placeholder
            for job in chunk:
                values = list(self.prepared)
                for slot, value in zip(self.slots, job.row(), strict=True):
                    values[slot] = value
                values[id_slot] = pk.get_db_prep_save(job.pk, connection)
                params.extend(values)
            placeholders = "(" + ", ".join(["%s"] * len(self.prepared)) + ")"
        else:  # the shared values written once as literals, the varying ones placeholders
            for job in chunk:
                row = list(job.row())
                row[0] = pk.get_db_prep_save(job.pk, connection)
                params.extend(row[position] for position in IN_MODEL_ORDER)
            placeholders = "(" + ", ".join(shared) + ")"
        sql = f"INSERT INTO {self.table} ({self.columns}) VALUES " + ", ".join(
            [placeholders] * len(chunk)
        )
        returning = self.columns if self._returns_rows(chunk) else None
        return sql + skip_taken_sql(connection, pk.column, "idempotency_key", returning), params

    def _returns_rows(self, chunk: Sequence[NewJob]) -> bool:
        """Return True when MariaDB's insert of ``chunk`` returns whole rows, not ids and keys.

        A row or two: a key taken needs no SELECT after. Beyond, loading every returned row
        was about a fifth of a bulk submit's CPU (half its time waits on the server), for rows
        it had already built.
        """
        return len(chunk) <= VALUES_ROWS_MOST

    @functools.cached_property
    def _shared_literals(self) -> list[str] | None:
        """Each column's text in a row of the VALUES list where the driver escapes on the
        client: the shared values as literals, escaped once for the call (MariaDB: 31 of each
        row's 38 values), the varying ones as placeholders. None elsewhere."""
        literals = client_literals(self.connection, self.prepared)
        if literals is not None:
            for slot in self.slots:
                literals[slot] = "%s"
        return literals

    def _as_arrays(self, chunk: Sequence[NewJob]) -> bool:
        """Return True when ``chunk`` goes in as arrays (PostgreSQL, beyond a few rows)."""
        return submits_arrays(self.connection) and len(chunk) > VALUES_ROWS_MOST

    def _arrays_sql(self, chunk: Sequence[NewJob]) -> tuple[str, list]:
        """Return the INSERT of many rows as arrays (one per varying column), the rest bound once."""
        pk = Job._meta.pk
        select, params = [], []
        for index, (value, cast) in enumerate(zip(self.prepared, self.casts, strict=True)):
            if index in self.slots:
                select.append(f"u.c{self.slots.index(index)}")
            else:
                select.append(f"CAST(%s AS {cast})")
                params.append(value)
        rows = [job.row() for job in chunk]
        params.append([pk.get_db_prep_save(job.pk, self.connection) for job in chunk])
        params.extend([row[index] for row in rows] for index in range(1, len(VARYING)))
        array_types = [self.casts[slot] for slot in self.slots]
        binary = binds_on_server(self.using)
        sql = insert_from_arrays_sql(self.table, self.columns, select, array_types, binary=binary)
        return sql, params

    def _new_job(self, job: NewJob) -> Job:
        """Return the job just inserted for ``job``, as the ORM would load it."""
        values = list(self.values)
        for slot, value in zip(self.slots, job.row(), strict=True):
            values[slot] = value
        return build_job(self.using, values)

    def _load(self, record: Sequence[Any]) -> Job:
        """Return the job of a row the database returned, through Django's converters."""
        return load_job(self.using, record)

    def _holders(self, keys: list[str]) -> list[Job]:
        """Return the jobs holding ``keys`` (in this call's scope and operation)."""
        scope, operation, key = (
            quote(self.connection.alias, Job._meta.get_field(name).column)
            for name in ("scope", "operation", "idempotency_key")
        )
        placeholders = ", ".join(["%s"] * len(keys))
        sql = (
            f"SELECT {self.columns} FROM {self.table} "
            f"WHERE {scope} = %s AND {operation} = %s AND {key} IN ({placeholders})"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, [self.fields["scope"], self.fields["operation"], *keys])
            return [self._load(record) for record in cursor.fetchall()]
