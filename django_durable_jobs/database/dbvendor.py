"""Per-database differences, confined to one place.

* lock-wait caps (``LockPolicy``): PostgreSQL ``lock_timeout``, MariaDB/MySQL
  ``innodb_lock_wait_timeout`` and MariaDB ``max_statement_time``, SQLite busy timeout — set,
  verified before COMMIT and restored, for :mod:`django_durable_jobs.transactions`;
* ``SKIP LOCKED`` where the database has it, and the capacity gate's row lock;
* PostgreSQL NOTIFY for new work;
* recognising a lock-wait timeout among database errors;
* the database's own clock (``database_now``), against which workers measure theirs;
* telling a wrong configuration from an unreachable database (``misconfiguration``);
* statements PostgreSQL plans once per session (``planned_once_cursor``).
"""

from __future__ import annotations

import functools
import math
import re
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.db import connections
from django.db.models import QuerySet

from ..rules.errors import LockPolicyConflict
from .wakeups import work_written

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

LOCK_WAIT_MAX_SECONDS = 86_400.0  # PostgreSQL's lock_timeout tops out near 24.8 days in ms
MYSQL_LOCK_ERRORS = frozenset(
    {1205, 1969, 3024}
)  # lock wait timeout, statement time (MariaDB, MySQL)
POSTGRES_LOCK_STATES = frozenset({"55P03", "57014"})  # lock_not_available, query_canceled
MYSQL_DEADLOCK = 1213  # "Deadlock found when trying to get lock; try restarting transaction"
POSTGRES_DEADLOCK = "40P01"  # deadlock_detected


def is_lock_timeout(connection: BaseDatabaseWrapper, exc: BaseException) -> bool:
    """Return True when ``exc`` says a lock wait (or the statement budget) ran out."""
    if connection.vendor == "postgresql":
        return _postgres_state(exc) in POSTGRES_LOCK_STATES
    if connection.vendor == "mysql":
        return bool(exc.args) and exc.args[0] in MYSQL_LOCK_ERRORS
    if connection.vendor == "sqlite":
        return "locked" in str(exc) or "busy" in str(exc)
    return False


def is_deadlock(using: str, exc: BaseException) -> bool:
    """Return True when the database aborted ``exc``'s transaction to break a deadlock.

    The whole transaction was rolled back, so running it again from the start is safe.
    """
    connection = connections[using]
    if connection.vendor == "mysql":
        return bool(exc.args) and exc.args[0] == MYSQL_DEADLOCK
    if connection.vendor == "postgresql":
        return _postgres_state(exc) == POSTGRES_DEADLOCK
    return False


def _postgres_state(exc: BaseException) -> str | None:
    """Return the SQLSTATE of PostgreSQL's error behind ``exc`` (psycopg 3 or 2), if any."""
    cause = exc.__cause__ or exc
    return getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)


class LockPolicy:
    """Install, verify and restore a lock-wait cap for one bounded transaction."""

    def __init__(self, connection: BaseDatabaseWrapper, seconds: float) -> None:
        self.connection = connection
        # Long budgets (a job's whole run) are capped at what every database accepts.
        self.seconds = min(max(seconds, 0.001), LOCK_WAIT_MAX_SECONDS)
        self.installed: tuple | None = None
        self.previous: tuple | None = None

    # SQLite waits for its write lock at BEGIN, so its cap goes in before the transaction.
    def before_begin(self) -> None:
        if self.connection.vendor == "sqlite":
            self.connection.ensure_connection()
            with self.connection.cursor() as cursor:
                self.previous = (cursor.execute("PRAGMA busy_timeout").fetchone()[0],)
                millis = max(1, int(self.seconds * 1000))
                cursor.execute(f"PRAGMA busy_timeout = {millis}")
                self.installed = (millis,)

    def inside(self) -> None:
        vendor = self.connection.vendor
        with self.connection.cursor() as cursor:
            if vendor == "postgresql":
                millis = max(1, int(self.seconds * 1000))
                cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{millis}ms"])
                self.installed = (cursor.fetchone()[0],)
            elif vendor == "mysql":
                self.previous = self._read_mysql(cursor)
                wait = max(1, math.ceil(self.seconds))
                if self._mariadb:
                    cursor.execute(
                        "SET SESSION innodb_lock_wait_timeout = %s, max_statement_time = %s",
                        [wait, round(self.seconds, 3)],
                    )
                else:
                    cursor.execute("SET SESSION innodb_lock_wait_timeout = %s", [wait])
                self.installed = self._read_mysql(cursor)

    def verify(self) -> None:
        vendor = self.connection.vendor
        with self.connection.cursor() as cursor:
            if vendor == "postgresql":
                cursor.execute("SELECT current_setting('lock_timeout')")
                current = (cursor.fetchone()[0],)
            elif vendor == "mysql":
                current = self._read_mysql(cursor)
            elif vendor == "sqlite":
                current = (cursor.execute("PRAGMA busy_timeout").fetchone()[0],)
            else:
                return
        if current != self.installed:
            raise LockPolicyConflict(
                f"The lock-wait setting installed for this bounded transaction was changed during "
                f"it (installed {self.installed}, found {current}); nothing was committed. Do not "
                f"change lock timeouts inside store callbacks."
            )

    def restore(self) -> None:
        # A connection closed during the transaction (Django drops one whose rollback failed) is
        # left closed: the next one starts with the server's defaults.
        closed = self.connection.connection is None
        if self.previous is None or closed or not self.connection.is_usable():
            return
        with self.connection.cursor() as cursor:
            if self.connection.vendor == "sqlite":
                cursor.execute(f"PRAGMA busy_timeout = {int(self.previous[0])}")
            elif self._mariadb:
                cursor.execute(
                    "SET SESSION innodb_lock_wait_timeout = %s, max_statement_time = %s",
                    list(self.previous),
                )
            else:
                cursor.execute("SET SESSION innodb_lock_wait_timeout = %s", [self.previous[0]])

    @property
    def _mariadb(self) -> bool:
        return self.connection.vendor == "mysql" and self.connection.mysql_is_mariadb

    def _read_mysql(self, cursor) -> tuple:
        if self._mariadb:
            cursor.execute(
                "SELECT @@SESSION.innodb_lock_wait_timeout, @@SESSION.max_statement_time"
            )
            wait, statement = cursor.fetchone()
            return (int(wait), float(statement))
        cursor.execute("SELECT @@SESSION.innodb_lock_wait_timeout")
        return (int(cursor.fetchone()[0]),)


WORK_CHANNEL = "durable_jobs_work"


def notify_work(using: str, queue: str) -> None:
    """Wake listening workers when the current transaction commits (PostgreSQL NOTIFY), and
    this process's workers on every database (``wakeups.py``).

    Elsewhere workers watch and poll; NOTIFY is only a shortcut, so losing one costs a poll
    interval.
    PostgreSQL delivers identical notifications (same channel and payload, here the queue) of one
    transaction once, at COMMIT, so calling this for every job of a transaction still wakes the
    workers of each queue once.
    """
    work_written(using)
    notice = work_notice(using, queue)
    if notice is not None:
        expression, params = notice
        with connections[using].cursor() as cursor:
            cursor.execute(f"SELECT {expression}", params)


def work_notice(using: str, queue: str) -> tuple[str, list[str]] | None:
    """Return the SQL expression (and its parameters) that sends ``notify_work``'s wake-up.

    A statement can carry it, so that writing work and announcing it is one round trip. None
    where the database has no NOTIFY.
    """
    if connections[using].vendor != "postgresql":
        return None
    return "pg_notify(%s, %s)", [WORK_CHANNEL, queue]


def lock_for_update(queryset: QuerySet, *, skip_locked: bool = False) -> QuerySet:
    """Return ``queryset`` locking its rows (skipping rows others hold where supported)."""
    features = connections[queryset.db].features
    if skip_locked and features.has_select_for_update_skip_locked:
        return queryset.select_for_update(skip_locked=True)
    return queryset.select_for_update()


def has_immediate_transactions(settings_dict: dict) -> bool:
    """Return True when an SQLite alias takes its write lock at BEGIN."""
    mode = (settings_dict.get("OPTIONS") or {}).get("transaction_mode")
    return isinstance(mode, str) and mode.upper() in {"IMMEDIATE", "EXCLUSIVE"}


def has_one_writer(using: str) -> bool:
    """Return True when ``using``'s database runs one write transaction at a time (SQLite)."""
    return connections[using].vendor == "sqlite"


@contextmanager
def planned_once_cursor(using: str) -> Iterator[Any]:
    """Yield a cursor for a statement a worker runs again and again with new values only.

    On PostgreSQL with psycopg 3 the server binds its parameters and it is prepared: parsed
    once per session, and planned once when PostgreSQL keeps a generic plan. An idle worker's
    claim took 1.6 ms to plan and 0.3 ms to run. (Django's cursors bind on the client and
    prepare nothing, so every call is a new text.) Not where the settings say statements
    must not outlive one transaction: ``DISABLE_SERVER_SIDE_CURSORS`` (set for a pooler in
    transaction mode, where the next transaction may run on another server connection) or
    ``"prepare_threshold": None`` given in ``OPTIONS``. Elsewhere, and with psycopg2,
    Django's own cursor.
    """
    connection = connections[using]
    if not _prepares(connection):
        with connection.cursor() as cursor:
            yield cursor
        return
    connection.ensure_connection()
    connection.validate_thread_sharing()
    raw = _preparing_cursor()(connection.connection)
    # Django's wrappers, so that execute_wrapper() hooks, query logging and error
    # translation apply as to any of its cursors.
    wrap = connection.make_debug_cursor if connection.queries_logged else connection.make_cursor
    with wrap(raw) as cursor:
        yield cursor


def binds_on_server(using: str) -> bool:
    """Return True when :func:`planned_once_cursor` yields a cursor the server binds for.

    Its statements may then send parameters in binary (``%b``): an array of a thousand strings
    goes as it is, where Django's cursor quotes every item into the statement's text.
    """
    return _prepares(connections[using])


def constants_written(
    using: str, sql: str, params: Sequence[Any], bound: frozenset[int]
) -> tuple[str, tuple]:
    """Return ``sql`` with its parameters written into it as literals, but those at the
    positions ``bound``, where :func:`planned_once_cursor` prepares it; and the parameters left.

    PostgreSQL keeps a prepared statement's generic plan, planned once, only when it costs about
    what a plan for the values at hand would. The claim compiled by the ORM bound every constant
    (its statuses, operations, bounds), so a generic plan could not use a partial index whose
    condition names a status, and PostgreSQL planned the claim again at every call (1.1-1.6 ms
    of the database's CPU a claim, in its log). With the constants in the text, only what
    changes from call to call (the clock, the scope's turn) stays a parameter. Elsewhere
    ``sql`` and ``params`` are returned as they are.
    """
    connection = connections[using]
    if not _prepares(connection) or not params:
        return sql, tuple(params)
    marker = f"durable_jobs_bound_{secrets.token_hex(8)}_%d"
    literal = [marker % n if n in bound else value for n, value in enumerate(params)]
    # The text is a statement again: its percent signs escaped, a placeholder where a kept
    # parameter's marker was written (as a plain quoted string: the marker needs no escaping).
    text = connection.ops.compose_sql(sql, literal).replace("%", "%%")
    for n in bound:
        text = text.replace(f"'{marker % n}'", "%s")
    return text, tuple(params[n] for n in sorted(bound))


def _prepares(connection: BaseDatabaseWrapper) -> bool:
    """Return True when ``connection``'s repeated statements may be prepared (see above)."""
    if connection.vendor != "postgresql":
        return False
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    settings_dict = connection.settings_dict
    options = settings_dict.get("OPTIONS") or {}
    opted_out = "prepare_threshold" in options and options["prepare_threshold"] is None
    return is_psycopg3 and not opted_out and not settings_dict.get("DISABLE_SERVER_SIDE_CURSORS")


@functools.cache
def _preparing_cursor() -> type:
    """Return a psycopg 3 cursor class that binds on the server and prepares what it runs.

    Django opens psycopg connections with ``prepare_threshold=None``, which prepares nothing;
    the threshold is lifted for this cursor's own statements only.
    """
    import psycopg

    class PreparingCursor(psycopg.Cursor):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            connection = self.connection
            threshold = connection.prepare_threshold
            if threshold is None:
                connection.prepare_threshold = 0
            try:
                return super().execute(query, params, prepare=True)
            finally:
                connection.prepare_threshold = threshold

    return PreparingCursor


def can_update_returning(using: str) -> bool:
    """Return True when ``UPDATE … RETURNING`` exists (PostgreSQL, SQLite ≥ 3.35; not MariaDB 10)."""
    connection = connections[using]
    if connection.vendor == "postgresql":
        return True
    if connection.vendor == "sqlite":
        import sqlite3

        return sqlite3.sqlite_version_info >= (3, 35)
    return False


def lock_gate(using: str, operation: str) -> None:
    """Lock ``operation``'s ``CapacityGate`` row for this transaction, creating it if missing.

    On MariaDB/MySQL a failed duplicate INSERT leaves a shared lock on the row, so two claimers
    racing to create the gate would each hold one and deadlock upgrading it for
    ``SELECT … FOR UPDATE``; ``INSERT … ON DUPLICATE KEY UPDATE`` takes the exclusive lock at once.
    """
    from ..models import CapacityGate

    connection = connections[using]
    if connection.vendor == "mysql":
        table = connection.ops.quote_name(CapacityGate._meta.db_table)
        column = connection.ops.quote_name(CapacityGate._meta.pk.column)
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} ({column}) VALUES (%s) "
                f"ON DUPLICATE KEY UPDATE {column} = {column}",
                [operation],
            )
        return
    gates = CapacityGate.objects.using(using)
    gates.get_or_create(operation=operation)
    gates.select_for_update().get(operation=operation)


def database_now(using: str) -> datetime:
    """Return the database server's current time (UTC, aware), read with one query.

    Each database reads its own clock: PostgreSQL ``clock_timestamp()`` (the time of the call,
    not of the transaction), MariaDB/MySQL ``UTC_TIMESTAMP(6)``, SQLite ``'now'`` (the clock of
    the host that opens the file: with no server, that is this host's own clock).
    """
    connection = connections[using]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT clock_timestamp()")
        elif connection.vendor == "mysql":
            cursor.execute("SELECT UTC_TIMESTAMP(6)")
        else:
            cursor.execute("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")
        (value,) = cursor.fetchone()
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:  # MariaDB/MySQL and SQLite answer in UTC, without a zone
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


# Errors that say the configuration is wrong, not that the database is unreachable for now:
# waiting would not fix them, so a starting worker refuses at once.
CREDENTIALS = "the database refused the credentials"
UNKNOWN_DATABASE = "the database does not exist"
NO_TABLES = "the job tables do not exist (run manage.py migrate)"
NO_PRIVILEGE = "the database user lacks a privilege the job tables need"
UNOPENABLE_FILE = "the database file cannot be opened or created"
POSTGRES_CONFIG_STATES = {
    "28P01": CREDENTIALS,  # invalid_password
    "28000": CREDENTIALS,  # invalid_authorization_specification: unknown role, pg_hba.conf
    "3D000": UNKNOWN_DATABASE,  # invalid_catalog_name
    "42P01": NO_TABLES,  # undefined_table
    "42501": NO_PRIVILEGE,  # insufficient_privilege
}
# psycopg reports a refused login without a SQLSTATE: the server's text is all there is (in
# English unless the server's lc_messages says otherwise; then the worker waits, logging why).
POSTGRES_CONFIG_TEXTS = (
    (re.compile(r"FATAL: +password authentication failed"), CREDENTIALS),
    (re.compile(r"FATAL: +no pg_hba\.conf entry"), CREDENTIALS),
    (re.compile(r'FATAL: +role ".*" does not exist'), CREDENTIALS),
    (re.compile(r'FATAL: +database ".*" does not exist'), UNKNOWN_DATABASE),
)
MYSQL_CONFIG_ERRORS = {
    1044: CREDENTIALS,  # access denied for user to database
    1045: CREDENTIALS,  # access denied for user (using password: …)
    1698: CREDENTIALS,  # access denied (e.g. unix_socket authentication)
    1049: UNKNOWN_DATABASE,
    1146: NO_TABLES,
    1142: NO_PRIVILEGE,  # command denied to user for table
}


def misconfiguration(vendor: str, exc: BaseException) -> str | None:
    """Return why ``exc`` shows a configuration error, or None when waiting may cure it.

    Only connection-level trouble is worth waiting for: a server that refuses connections, is
    starting up or shutting down, or dropped the connection. MariaDB/MySQL say which by error code
    (2002/2003/2013… can't connect; 1045 access denied, 1049 unknown database); psycopg gives a
    SQLSTATE for errors after login and only a message for a refused login. On SQLite there is
    no server to wait for: only a locked database is worth another try.
    """
    from django.db import InterfaceError, OperationalError

    text = str(exc)
    if vendor == "postgresql":
        cause = exc.__cause__ or exc
        state = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
        if state in POSTGRES_CONFIG_STATES:
            return POSTGRES_CONFIG_STATES[state]
        for pattern, reason in POSTGRES_CONFIG_TEXTS:
            if pattern.search(text):
                return reason
    elif vendor == "mysql":
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        if code in MYSQL_CONFIG_ERRORS:
            return MYSQL_CONFIG_ERRORS[code]
    elif vendor == "sqlite":
        if "locked" in text or "busy" in text:
            return None
        if "unable to open database file" in text:
            return UNOPENABLE_FILE
        if "no such table" in text:
            return NO_TABLES
        return f"SQLite cannot use the database ({type(exc).__name__})"
    if not isinstance(exc, OperationalError | InterfaceError):
        return f"the database refused a query ({type(exc).__name__})"
    return None


# -- for the store's claims and fenced updates (rooms-core) ------------------------------------


def quote(using: str, name: str) -> str:
    """Return ``name`` quoted as a table or column name of ``using``'s database."""
    return connections[using].ops.quote_name(name)


def ids_condition(using: str, column: str, ids: list, prep) -> tuple[str, list]:
    """Return the condition '``column`` is one of ``ids``' and its parameters.

    On PostgreSQL the ids travel as one array literal: the driver escapes one string instead of
    adapting every id. Elsewhere each id is a parameter, prepared by ``prep(id)``.
    """
    if connections[using].vendor == "postgresql":
        return f"{column} = ANY(%s::uuid[])", ["{" + ",".join(map(str, ids)) + "}"]
    values = [prep(value) for value in ids]
    return f"{column} IN ({', '.join(['%s'] * len(values))})", values


def read_through(using: str, sql: str, table: str, index: str = "PRIMARY") -> str:
    """Return ``sql`` reading ``table`` only through ``index`` on MariaDB and MySQL.

    ``sql`` is an UPDATE of ``table`` or a SELECT from it (unaliased or aliased ``V0``, as
    Django writes it). By default, the primary key: a statement that changes or locks rows by
    id must touch only those rows. While a table's running or pending rows churn, MariaDB's
    planner sometimes reads such a statement through a status-led index instead; it then locks
    every row of that status it passes, rows other workers hold, and two such statements wait
    on each other until one is aborted (``1213 Deadlock found``). Elsewhere ``sql`` is returned
    unchanged (PostgreSQL and SQLite lock only the rows a statement changes).
    """
    if connections[using].vendor != "mysql":
        return sql
    hint = f"FORCE INDEX ({index if index == 'PRIMARY' else quote(using, index)})"
    hinted = sql.replace(f"UPDATE {table} SET ", f"UPDATE {table} {hint} SET ", 1)
    for reader in (f"FROM {table}", f"FROM {table} {quote(using, 'V0')}"):
        hinted = hinted.replace(f"{reader} WHERE", f"{reader} {hint} WHERE")
    if hinted == sql:
        raise ValueError(f"No read of {table} to give an index to in: {sql[:200]}")
    return hinted


def no_ids(params: list) -> bool:
    """Return True when the parameters of an ``ids_condition`` name no id at all."""
    return not params or params == ["{}"]


def row_lock_clause(using: str) -> str:
    """Return the clause that locks a SELECT's rows for update (empty where none exists)."""
    return " FOR UPDATE" if connections[using].features.has_select_for_update else ""


def takes_json_rows(using: str) -> bool:
    """Return True when per-row values are sent as one JSON document (PostgreSQL)."""
    return connections[using].vendor == "postgresql"


def json_rows(alias: str, shape: str) -> str:
    """Return the FROM item reading one JSON parameter as rows of ``shape`` (PostgreSQL)."""
    return f"jsonb_to_recordset(%s::jsonb) AS {alias}({shape})"


def locked_in_id_order(name: str, table: str, pk: str, where: str) -> str:
    """Return a WITH item ``name`` locking the rows ``where`` selects, in id order (PostgreSQL).

    An UPDATE alone locks rows in the order its plan meets them; locking first, in id order,
    is the order every other batched path locks in, so two of them never deadlock.
    """
    return (
        f"WITH {name} AS MATERIALIZED (SELECT {pk} FROM {table} WHERE {where} "
        f"ORDER BY {pk} FOR UPDATE)"
    )


# -- for the store's submitting statement (rooms-edge) -----------------------------------------


def submit_rows_most(connection: BaseDatabaseWrapper, fields: list, most: int) -> int:
    """Return how many rows one multi-row ``VALUES`` insert of ``fields`` may hold (≤ ``most``).

    One placeholder per column and row. PostgreSQL's large inserts bind arrays instead of a
    ``VALUES`` list (:func:`submits_arrays`), so only ``most`` bounds them; Django 5.2 assumes
    SQLite's old limit of 999 placeholders, so the SQLite connection is asked for its own.
    """
    if connection.vendor == "postgresql":
        return most
    rows = connection.ops.bulk_batch_size(fields, range(most))
    if connection.vendor == "sqlite":
        import sqlite3

        connection.ensure_connection()
        limit = connection.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        rows = max(rows, limit // len(fields))
    return max(1, min(most, rows))


def client_literals(connection: BaseDatabaseWrapper, values: Sequence[Any]) -> list[str] | None:
    """Return ``values`` as the SQL literals the driver would bind them as, to stand in a
    statement's text beside its placeholders; None where the driver does not bind so.

    MariaDB's and MySQL's driver binds on the client: it escapes every parameter into the
    statement's text. A value that many rows of one statement share is escaped here once
    instead of once a row, by the driver's own escaping, with ``%`` doubled for the
    placeholders' formatting that follows. Elsewhere the server binds, and nothing is written
    into the text.
    """
    if connection.vendor != "mysql":
        return None
    connection.ensure_connection()
    raw = connection.connection
    literals = []
    for value in values:
        literal = raw.literal(value)  # bytes from mysqlclient, str from PyMySQL
        if isinstance(literal, bytes):
            literal = literal.decode(raw.encoding)
        literals.append(literal.replace("%", "%%"))
    return literals


def submits_arrays(connection: BaseDatabaseWrapper) -> bool:
    """Return True when many new rows go in as one array per column (PostgreSQL's ``unnest``)."""
    return connection.vendor == "postgresql"


def insert_from_arrays_sql(
    table: str, columns: str, select: list[str], array_types: list[str], *, binary: bool = False
) -> str:
    """Return PostgreSQL's INSERT of the rows of ``unnest()`` of one array per varying column.

    ``select`` gives each column's value: ``u.c0``, ``u.c1``… for the varying ones, a
    placeholder for the shared ones; ``array_types`` the SQL type of each array's items. A row
    whose key or id is taken is skipped. With ``binary`` the arrays are bound in binary (for a
    cursor the server binds for, see :func:`binds_on_server`).
    """
    placeholder = "%b" if binary else "%s"
    arrays = ", ".join(f"{placeholder}::{item}[]" for item in array_types)
    names = ", ".join(f"c{index}" for index in range(len(array_types)))
    return (
        f"INSERT INTO {table} ({columns}) SELECT {', '.join(select)} "
        f"FROM unnest({arrays}) AS u({names}) ON CONFLICT DO NOTHING"
    )


def skip_taken_sql(
    connection: BaseDatabaseWrapper, pk_column: str, key_column: str, columns: str | None = None
) -> str:
    """Return the clause that makes an INSERT skip a row whose unique key or id is taken.

    ``ON CONFLICT DO NOTHING`` (PostgreSQL, SQLite); on MariaDB/MySQL
    ``ON DUPLICATE KEY UPDATE id = id``, which, where the database has ``RETURNING`` (MariaDB),
    also returns, per row, ``columns`` (when given) or else the id and the key (``key_column``)
    of the new row or of the row holding its key (:func:`insert_returns_holders`).
    """
    if connection.vendor != "mysql":
        return " ON CONFLICT DO NOTHING"
    pk = quote(connection.alias, pk_column)
    clause = f" ON DUPLICATE KEY UPDATE {pk} = {pk}"
    if insert_returns_holders(connection):
        columns = columns or f"{pk}, {quote(connection.alias, key_column)}"
        clause += f" RETURNING {columns}"
    return clause


def insert_returns_holders(connection: BaseDatabaseWrapper) -> bool:
    """Return True when :func:`skip_taken_sql`'s insert returns the row that holds each key
    after it (or its id and key): the new row, or the earlier holder.

    MariaDB's ``INSERT … ON DUPLICATE KEY UPDATE … RETURNING``; MySQL has no ``RETURNING``.
    """
    return connection.vendor == "mysql" and connection.features.can_return_columns_from_insert


def rowcount_counts_inserted(connection: BaseDatabaseWrapper) -> bool:
    """Return True when an insert's row count is the number of rows that went in.

    Not on MariaDB/MySQL: Django connects with ``CLIENT_FOUND_ROWS``, so a row skipped by
    ``ON DUPLICATE KEY UPDATE id = id`` counts as well.
    """
    return connection.vendor != "mysql"


def insert_counts_itself(connection: BaseDatabaseWrapper) -> bool:
    """Return True when an insert can answer how many rows went in (:func:`counted_insert_sql`)."""
    return connection.vendor == "postgresql"


def counted_insert_sql(
    insert: str, params: list, notice: tuple[str, list[str]] | None
) -> tuple[str, list]:
    """Return PostgreSQL's ``insert`` wrapped to answer how many rows went in, in one round trip.

    A CTE's outer SELECT counts the new rows and, when there are any, evaluates ``notice``
    (:func:`work_notice`: the NOTIFY that wakes the workers of their queue).
    """
    sql = f"WITH ins AS ({insert} RETURNING 1) SELECT count(*)"
    params = list(params)
    if notice is not None:
        expression, notice_params = notice
        sql += f", CASE WHEN count(*) > 0 THEN {expression} END"
        params.extend(notice_params)
    return sql + " FROM ins", params


# -- for the worker's wake-ups (rooms-worker)


def listen_statement(using: str) -> str | None:
    """Return the statement that subscribes a session to ``notify_work``'s wake-ups.

    None where the database has no LISTEN/NOTIFY: workers there find new work by polling.
    """
    if connections[using].vendor != "postgresql":
        return None
    return f"LISTEN {WORK_CHANNEL}"
