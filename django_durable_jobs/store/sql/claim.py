"""The compiled claim of pending work: one statement, in which only the clock and turn change."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connections
from django.db.models import Exists
from django.db.models.expressions import RawSQL

from ...database.dbvendor import (
    can_update_returning,
    constants_written,
    lock_for_update,
    planned_once_cursor,
    quote,
    read_through,
)
from ...models import Job
from .rows import fetch_jobs, names

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
    def compile(
        cls, using: str, build, limit: int, *, fair: bool, index: str | None = None
    ) -> ClaimStatement:
        """Compile the claim; with ``fair``, of the scope whose turn follows the one bound.

        ``index`` names the index the candidates are read through where the planner must be
        told (MariaDB and MySQL, see :func:`_read_through`).
        """
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
        if index is not None and connection.vendor == "mysql":
            sql = _read_through(using, sql, index)
        if returning:
            chosen = RawSQL(f"SELECT {quote(using, pk.column)} FROM claim", [])
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
        changing = _clock_positions(using, params) | _turn_positions(params)
        sql, params = constants_written(using, sql, params, changing)
        now_at, turn_at = _clock_positions(using, params), _turn_positions(params)
        return cls(sql, params, now_at, turn_at, returning)

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
        """Run one ``UPDATE … RETURNING`` over the intact candidates; return them as claimed.

        Each row's epoch and attempts go up by one: the claim's leases carry the new epoch.
        """
        connection = connections[using]
        meta = Job._meta
        table, columns = names(using)
        assignments, params = [], []
        for name, value in changes.items():
            field = meta.get_field(name)
            assignments.append(f"{quote(using, field.column)} = %s")
            params.append(field.get_db_prep_save(value, connection))
        for name in ("fencing_epoch", "attempts"):
            column = quote(using, meta.get_field(name).column)
            assignments.append(f"{column} = {table}.{column} + 1")
        pk = quote(using, meta.pk.column)
        sql = (
            f"{self.sql} UPDATE {table} SET {', '.join(assignments)} "
            f"WHERE {table}.{pk} IN (SELECT {pk} FROM intact) RETURNING {columns}"
        )
        return fetch_jobs(using, sql, [*self._bind(using, now, turn), *params], planned_once=True)


@dataclass(frozen=True)
class ProbeStatement:
    """Whether any of some candidate sets has a row: compiled once, only the clock bound.

    The probes a claim makes when its one statement took nothing (is other work there, which
    the exact path must order?) cost more to build and compile through the ORM than to run:
    on an idle PostgreSQL worker, two thirds of an empty claim. Compiled like
    :class:`ClaimStatement`, from the same candidate sets.
    """

    sql: str
    params: tuple
    now_at: frozenset[int]

    @classmethod
    def compile(cls, using: str, build) -> ProbeStatement:
        """Compile ``build(now)``'s querysets into one ``SELECT EXISTS (…) OR EXISTS (…)``."""
        parts, params = [], []
        for candidates in build(_SENTINEL):
            sql, part = candidates.query.exists().get_compiler(using).as_sql()
            parts.append(f"EXISTS ({sql})")
            params.extend(part)
        sql, params = constants_written(
            using, "SELECT " + " OR ".join(parts), params, _clock_positions(using, params)
        )
        return cls(sql, params, _clock_positions(using, params))

    def any(self, using: str, now: datetime) -> bool:
        """Return True when any of the candidate sets has a row at ``now``."""
        value = connections[using].ops.adapt_datetimefield_value(now)
        params = [value if n in self.now_at else p for n, p in enumerate(self.params)]
        with planned_once_cursor(using) as cursor:
            cursor.execute(self.sql, params)
            return bool(cursor.fetchone()[0])


def _turn_positions(params: Sequence[Any]) -> frozenset[int]:
    """Return where the turn's scope (compiled as ``_TURN_SENTINEL``) sits in ``params``."""
    return frozenset(n for n, value in enumerate(params) if value == _TURN_SENTINEL)


def _clock_positions(using: str, params: Sequence[Any]) -> frozenset[int]:
    """Return where the clock's value (compiled as ``_SENTINEL``) sits in ``params``."""
    marker = connections[using].ops.adapt_datetimefield_value(_SENTINEL)
    return frozenset(n for n, value in enumerate(params) if value == marker)


def _read_through(using: str, sql: str, index: str) -> str:
    """Return the candidates' SELECT reading the job table, and its scope's turn, via ``index``.

    For the claim of one operation (a rate-limited one's): MariaDB's planner chose the scope
    claim index for it and for the choice of the scope whose turn it is until ANALYZE TABLE
    had run, and then still for that choice, walking every other operation's pending row ahead
    of the first of its own: 21 ms a claim with 10,000 of them, while the claim held the
    operation's rate-limit bucket. The rarer work's subquery keeps the planner's choice.
    """
    return read_through(using, sql, quote(using, Job._meta.db_table), index)
