"""Faults at a chosen point inside the store's transactions, on each database.

A *point* is a row event of one table (``INSERT`` or ``UPDATE``), a condition on the row
(``NEW``/``OLD``) and how many matching rows to let pass first. :class:`Faults` installs a trigger
at a point that either **raises** there (PostgreSQL ``RAISE EXCEPTION``, MariaDB
``SIGNAL SQLSTATE '45000'``, SQLite ``RAISE(ABORT, ...)``) or **holds** the transaction there so
that its connection can be killed:

* PostgreSQL: the trigger waits for an advisory lock the test holds on a second connection,
  which finds the waiting backend in ``pg_locks`` and ``pg_terminate_backend``\\ s it;
* MariaDB: the trigger waits in ``GET_LOCK`` for a lock the test holds; the test finds the waiting
  connection in the process list and runs ``KILL CONNECTION`` on it;
* SQLite (no server): the trigger calls ``proof_hold()``, a function only a child process
  registers (:func:`register_hold`); it writes a marker file and sleeps, and the test SIGKILLs
  the child.

A trigger does nothing until the test *arms* it (a row in the control table, committed). On
PostgreSQL and MariaDB it then fires exactly once: the matching rows are counted by a sequence,
which a rollback does not undo, and only the ``skip + 1``-th fires (or, made with ``once=False``,
every one after the ``skip``-th while armed). SQLite has no write outside
the transaction, so there the count is rolled back with the fault: the trigger fires at the same
point of every transaction until the test disarms it (:attr:`Faults.can_fire_once` says which).

The fixture that builds :class:`Faults` drops every trigger, function, sequence and the control
table when the test ends, passed or failed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connections

from django_durable_jobs.models import Schedule
from tests.markers import write_marker
from tests.support import db_state
from tests.testapp.models import DomainRow, RetryHistory

ARMED = "proof_fault_armed"  # the control table: one row per armed fault
HOLD_FUNCTION = "proof_hold"  # SQLite: the function a child process registers to hold there
PG_LOCK_KEY = 0x50524F46  # the advisory lock a holding trigger waits for on PostgreSQL
HOLD_SECONDS = 20  # a hold no test ends gives up after this long (the test then fails)
MESSAGE = "proof fault"  # every raised fault's message starts with this


@dataclass(frozen=True)
class Point:
    """A row event inside a transition: ``event`` on ``table`` where ``when`` holds.

    ``when`` is SQL over ``NEW`` and ``OLD`` that every database reads alike; ``skip`` matching
    rows pass before the fault fires.
    """

    table: str
    event: str
    when: str = "1 = 1"
    skip: int = 0


@dataclass
class Fault:
    """A trigger installed by :class:`Faults`; it fires only while armed."""

    faults: Faults
    name: str
    point: Point
    holds: bool
    once: bool = True

    def arm(self) -> None:
        """Commit the control row that switches the trigger on."""
        self.faults._execute(f"INSERT INTO {ARMED} (name, passed) VALUES (%s, 0)", [self.name])

    def disarm(self) -> None:
        """Delete the control row: the trigger no longer fires."""
        self.faults._execute(f"DELETE FROM {ARMED} WHERE name = %s", [self.name])

    def fired(self) -> bool:
        """Return True once the trigger fired (PostgreSQL and MariaDB: its count says so)."""
        vendor = self.faults.vendor
        if vendor == "postgresql":
            sql = f"SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {self.name}_seq"
        elif vendor == "mysql":
            sql = f"SELECT next_not_cached_value - 1 FROM {self.name}_seq"
        else:
            raise NotImplementedError("SQLite keeps no count outside the transaction")
        with connections[self.faults.using].cursor() as cursor:
            cursor.execute(sql)
            (seen,) = cursor.fetchone()
        return seen > self.point.skip


@dataclass
class Faults:
    """Install fault triggers on database ``using`` and drop them all in :meth:`drop_all`."""

    using: str = "default"
    installed: list[Fault] = field(default_factory=list)
    _undo_hold: Callable[[], None] | None = None

    @property
    def vendor(self) -> str:
        return connections[self.using].vendor

    @property
    def can_fire_once(self) -> bool:
        """True when an armed trigger can fire once only (a count no rollback undoes)."""
        return self.vendor != "sqlite"

    def _execute(self, sql: str, params: list | None = None) -> None:
        with connections[self.using].cursor() as cursor:
            cursor.execute(sql, params)

    def _table(self, name: str) -> str:
        return connections[self.using].ops.quote_name(name)

    def setup(self) -> None:
        """Create the control table (empty: nothing armed); on SQLite define ``proof_hold()``."""
        if self.vendor == "sqlite":
            self._undo_hold = register_hold(None)
        self._execute(f"DROP TABLE IF EXISTS {ARMED}")
        self._execute(
            f"CREATE TABLE {ARMED} (name varchar(100) PRIMARY KEY, passed integer NOT NULL)"
        )

    def raising(self, name: str, point: Point, *, once: bool = True) -> Fault:
        """Install a trigger that raises ``proof fault <name>`` at ``point`` once armed.

        With ``once=False`` it raises at every matching row after the skipped ones, for as long
        as it is armed (a database that keeps refusing).
        """
        return self._install(Fault(self, name, point, holds=False, once=once))

    def holding(self, name: str, point: Point) -> Fault:
        """Install a trigger that holds the transaction at ``point`` once armed (see module)."""
        return self._install(Fault(self, name, point, holds=True))

    def _install(self, fault: Fault) -> Fault:
        install = {
            "postgresql": self._install_pg,
            "mysql": self._install_mysql,
            "sqlite": self._install_sqlite,
        }[self.vendor]
        self.installed.append(fault)
        install(fault)
        return fault

    def _install_pg(self, fault: Fault) -> None:
        name, point, fires = fault.name, fault.point, _fires(fault)
        if fault.holds:
            action = f"PERFORM pg_advisory_xact_lock({PG_LOCK_KEY});"
        else:
            action = f"RAISE EXCEPTION '{MESSAGE} {name}';"
        self._execute(f"CREATE SEQUENCE {name}_seq")
        self._execute(
            f"""CREATE FUNCTION {name}_fn() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF {point.when} THEN
                IF EXISTS (SELECT 1 FROM {ARMED} WHERE name = '{name}') THEN
                  IF nextval('{name}_seq') {fires} THEN
                    {action}
                  END IF;
                END IF;
              END IF;
              RETURN NEW;
            END $$"""
        )
        self._execute(
            f"CREATE TRIGGER {name} BEFORE {point.event} ON {self._table(point.table)} "
            f"FOR EACH ROW EXECUTE FUNCTION {name}_fn()"
        )

    def _install_mysql(self, fault: Fault) -> None:
        name, point, fires = fault.name, fault.point, _fires(fault)
        if fault.holds:
            action = f"DO GET_LOCK('{self.mysql_lock()}', {HOLD_SECONDS})"
        else:
            action = f"SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{MESSAGE} {name}'"
        self._execute(f"CREATE SEQUENCE {name}_seq NOCACHE")
        self._execute(
            f"""CREATE TRIGGER {name} BEFORE {point.event} ON {self._table(point.table)}
            FOR EACH ROW BEGIN
              IF {point.when} THEN
                IF EXISTS (SELECT 1 FROM {ARMED} WHERE name = '{name}') THEN
                  IF NEXTVAL({name}_seq) {fires} THEN
                    {action};
                  END IF;
                END IF;
              END IF;
            END"""
        )

    def _install_sqlite(self, fault: Fault) -> None:
        name, point = fault.name, fault.point
        if fault.holds:
            action = f"SELECT {HOLD_FUNCTION}('{name}')"
        else:
            action = f"SELECT RAISE(ABORT, '{MESSAGE} {name}')"
        self._execute(
            f"""CREATE TRIGGER {name} BEFORE {point.event} ON {self._table(point.table)}
            FOR EACH ROW WHEN ({point.when})
              AND EXISTS (SELECT 1 FROM {ARMED} WHERE name = '{name}')
            BEGIN
              {action} WHERE (SELECT passed FROM {ARMED} WHERE name = '{name}') >= {point.skip};
              UPDATE {ARMED} SET passed = passed + 1 WHERE name = '{name}';
            END"""
        )

    def drop_all(self) -> None:
        """Drop every trigger installed, its function and sequence, and the control table."""
        for fault in reversed(self.installed):
            name, table = fault.name, self._table(fault.point.table)
            if self.vendor == "postgresql":
                self._execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
                self._execute(f"DROP FUNCTION IF EXISTS {name}_fn()")
            else:
                self._execute(f"DROP TRIGGER IF EXISTS {name}")
            if self.vendor != "sqlite":
                self._execute(f"DROP SEQUENCE IF EXISTS {name}_seq")
        self.installed.clear()
        self._execute(f"DROP TABLE IF EXISTS {ARMED}")
        if self._undo_hold is not None:
            self._undo_hold()
            self._undo_hold = None

    def mysql_lock(self) -> str:
        """Return the name of the MariaDB user lock a holding trigger waits for (per database)."""
        return f"proof_fault_{connections[self.using].settings_dict['NAME']}"[:64]


def _fires(fault: Fault) -> str:
    """Return the test of a matching row's number (counted by the sequence) that fires."""
    return f"= {fault.point.skip + 1}" if fault.once else f"> {fault.point.skip}"


# -- killing a held connection (PostgreSQL, MariaDB) ------------------------------------------


class Killer:
    """A second connection that holds the lock the holding triggers wait for, and kills waiters.

    Use as a context manager: inside, a transaction that reaches an armed holding trigger waits;
    :meth:`kill_waiter` finds that connection and kills it. The lock is released on exit.
    """

    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        connection = connections[faults.using]
        self.vendor = connection.vendor
        self.database = connection.settings_dict["NAME"]
        # A raw driver connection of its own: independent of Django's per-thread connections.
        self.raw = connection.get_new_connection(connection.get_connection_params())
        if self.vendor == "postgresql":
            self.raw.autocommit = True
        else:
            self.raw.autocommit(True)

    def _query(self, sql: str, params: list | None = None) -> list[tuple]:
        cursor = self.raw.cursor()
        try:
            cursor.execute(sql, params)
            return list(cursor.fetchall()) if cursor.description else []
        finally:
            cursor.close()

    def __enter__(self) -> Killer:
        if self.vendor == "postgresql":
            self._query("SELECT pg_advisory_lock(%s)", [PG_LOCK_KEY])
        else:
            (acquired,) = self._query("SELECT GET_LOCK(%s, 5)", [self.faults.mysql_lock()])[0]
            assert acquired == 1, "another connection holds the fault lock"
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self.vendor == "postgresql":
                self._query("SELECT pg_advisory_unlock_all()")
            else:
                self._query("DO RELEASE_LOCK(%s)", [self.faults.mysql_lock()])
        finally:
            self.raw.close()

    def waiters(self) -> list[int]:
        """Return the ids of the connections waiting for the lock now."""
        if self.vendor == "postgresql":
            rows = self._query(
                "SELECT l.pid FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                "WHERE l.locktype = 'advisory' AND NOT l.granted AND l.objid = %s "
                "AND d.datname = %s",
                [PG_LOCK_KEY, self.database],
            )
        else:
            rows = self._query(
                "SELECT ID FROM information_schema.PROCESSLIST "
                "WHERE STATE = 'User lock' AND DB = %s",
                [self.database],
            )
        return [row[0] for row in rows]

    def kill_waiter(self, timeout: float = 15.0) -> int:
        """Wait for one connection to be held, kill it, and return its id."""
        deadline = time.monotonic() + timeout
        while not (found := self.waiters()):
            if time.monotonic() > deadline:
                raise AssertionError(f"no connection reached the holding trigger in {timeout} s")
            time.sleep(0.01)
        (victim,) = found
        self._kill(victim)
        return victim

    def kill_until(self, done: Callable[[], bool], timeout: float = 30.0) -> list[int]:
        """Kill every connection that reaches a holding trigger until ``done()`` and none
        waits; return the ids killed, in order."""
        deadline = time.monotonic() + timeout
        killed: list[int] = []
        quiet = 0  # scans in a row that found no waiter, every fault having fired before them
        while quiet < 3:  # a trigger counts itself just before it waits: look again
            finished = done()
            waiting = [victim for victim in self.waiters() if victim not in killed]
            for victim in waiting:  # a killed one may be listed until it is gone
                self._kill(victim)
                killed.append(victim)
            quiet = quiet + 1 if finished and not waiting else 0
            if time.monotonic() > deadline:
                raise AssertionError(f"not done after {timeout} s; killed {killed}")
            time.sleep(0.02)
        return killed

    def _kill(self, victim: int) -> None:
        if self.vendor == "postgresql":
            self._query("SELECT pg_terminate_backend(%s)", [victim])
        else:
            self._query(f"KILL CONNECTION {int(victim)}")

    def kill_in_background(self, timeout: float = 15.0) -> Callable[[], int]:
        """Start :meth:`kill_waiter` in a thread; return a function that waits for its result."""
        result: dict[str, Any] = {}

        def run() -> None:
            try:
                result["victim"] = self.kill_waiter(timeout)
            except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
                result["error"] = exc

        thread = threading.Thread(target=run, name="proof-fault-killer", daemon=True)
        thread.start()

        def wait() -> int:
            thread.join(timeout + 5)
            if "error" in result:
                raise result["error"]
            return result["victim"]

        return wait


# -- holding a child process (SQLite) ---------------------------------------------------------


def register_hold(marker: str | None) -> Callable[[], None]:
    """Define ``proof_hold()`` on every SQLite connection this process opens; return the undo.

    In a child process (``marker`` given) it writes ``marker`` (the name of the fault) and sleeps
    until the test kills the process. In the test's own process (``marker=None``) it raises:
    SQLite compiles a trigger with the statement that fires it, so the function must exist
    there too, but a holding trigger must never be reached in the test process.
    """
    from django.db.backends.signals import connection_created

    def hold(name: str) -> int:
        if marker is None:
            raise RuntimeError(f"the holding trigger {name} was reached in the test process")
        write_marker(marker, name)  # whole: the test reads it once it exists
        time.sleep(HOLD_SECONDS)
        return 0

    def define(connection: Any) -> None:
        if connection.vendor == "sqlite" and connection.connection is not None:
            connection.connection.create_function(HOLD_FUNCTION, 1, hold)

    def register(sender: Any, connection: Any, **kwargs: Any) -> None:
        define(connection)

    connection_created.connect(register, weak=False)
    for connection in connections.all(initialized_only=True):
        define(connection)
    return lambda: connection_created.disconnect(register)


# -- what the database holds --------------------------------------------------------------------


def snapshot() -> str:
    """Return a canonical dump of every job, attempt, gate, schedule and domain row."""
    schedules = list(Schedule.objects.order_by("name").values())
    domain = list(DomainRow.objects.order_by("job_id").values("job_id", "value"))
    retries = list(
        RetryHistory.objects.order_by("job_id").values(
            "job_id", "previous_status", "previous_epoch"
        )
    )
    extra = json.dumps([schedules, domain, retries], cls=DjangoJSONEncoder, sort_keys=True)
    return db_state() + extra


# -- a second connection that holds row locks -----------------------------------------------------


class SecondConnection:
    """A raw connection to the test database that locks job rows in a transaction of its own.

    It stands in for another transaction of a worker (PostgreSQL, MariaDB): lock rows one by
    one, see who waits for them, commit.
    """

    def __init__(self, using: str = "default") -> None:
        connection = connections[using]
        self.connection = connection
        self.vendor = connection.vendor
        self.database = connection.settings_dict["NAME"]
        self.raw = connection.get_new_connection(connection.get_connection_params())
        if self.vendor == "postgresql":
            self.raw.autocommit = False
            self._query("SET lock_timeout = '10s'")
        else:
            self.raw.autocommit(False)
            self._query("SET SESSION innodb_lock_wait_timeout = 10")

    def __enter__(self) -> SecondConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self.raw.rollback()
        finally:
            self.raw.close()

    def _query(self, sql: str, params: list | None = None) -> list[tuple]:
        cursor = self.raw.cursor()
        try:
            cursor.execute(sql, params)
            return list(cursor.fetchall()) if cursor.description else []
        finally:
            cursor.close()

    def lock_rows(self, *job_ids: Any) -> None:
        """Lock the rows of ``job_ids`` (waiting for them if needed) until :meth:`commit`."""
        from django_durable_jobs.models import Job

        pk = Job._meta.pk
        quote = self.connection.ops.quote_name
        values = [pk.get_db_prep_value(job_id, self.connection) for job_id in job_ids]
        self._query(
            f"SELECT {quote(pk.column)} FROM {quote(Job._meta.db_table)} "
            f"WHERE {quote(pk.column)} IN ({', '.join(['%s'] * len(values))}) FOR UPDATE",
            values,
        )

    def commit(self) -> None:
        self.raw.commit()

    def activity(self) -> list[tuple]:
        """Return what the test database's connections are doing (for failure messages)."""
        if self.vendor == "postgresql":
            return self._query(
                "SELECT pid, state, wait_event_type, wait_event, left(query, 60) "
                "FROM pg_stat_activity WHERE datname = %s",
                [self.database],
            )
        return self._query(
            "SELECT p.ID, p.STATE, t.trx_state, LEFT(p.INFO, 60) "
            "FROM information_schema.PROCESSLIST p LEFT JOIN information_schema.INNODB_TRX t "
            "ON t.trx_mysql_thread_id = p.ID WHERE p.DB = %s",
            [self.database],
        )

    def lock_waiters(self) -> int:
        """Return how many other connections to the test database wait for a lock now.

        On MariaDB: how many run an UPDATE (a waiting one is not always listed as ``LOCK
        WAIT`` in ``INNODB_TRX`` yet); an UPDATE only lingers there while it waits.
        """
        if self.vendor == "postgresql":
            self._query("SELECT pg_stat_clear_snapshot()")  # else the transaction's first view
            rows = self._query(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = %s AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()",
                [self.database],
            )
        else:
            rows = self._query(
                "SELECT count(*) FROM information_schema.PROCESSLIST WHERE DB = %s "
                "AND ID <> CONNECTION_ID() AND COMMAND = 'Query' AND INFO LIKE 'UPDATE%%'",
                [self.database],
            )
        return rows[0][0]
