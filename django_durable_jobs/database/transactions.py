"""Transaction policy of the store: every mutation in a transaction of its own, bounded.

A store call opens and commits its own transaction, and refuses inside the caller's
(``TransactionOwned``). Given an :class:`~django_durable_jobs.execution.Execution` it is
*bounded*: refused before any SQL when the budget is spent, its lock waits capped at what is left
(the per-database caps are :class:`~django_durable_jobs.dbvendor.LockPolicy`), the budget and
cancellation checked again before COMMIT, and the previous lock setting restored.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from django.db import DatabaseError, connections, transaction

from ..rules.errors import DeadlineExceeded, ExecutionStopped, TransactionOwned
from .dbvendor import LockPolicy, is_lock_timeout

if TYPE_CHECKING:
    from ..rules.execution import Execution

__all__ = ["bounded_atomic", "check_execution", "refuse_caller_transaction"]


def check_execution(execution: Execution) -> None:
    """Refuse (before any SQL) an execution that is closed, cancelled or out of time."""
    try:
        execution.assert_active()
    except ExecutionStopped as exc:
        if exc.code == ExecutionStopped.DEADLINE:
            raise DeadlineExceeded(
                "The execution's time budget ran out; nothing was written. Retry with a new "
                "execution and a larger budget."
            ) from exc
        raise


def refuse_caller_transaction(using: str) -> None:
    connection = connections[using]
    # Autocommit turned off by hand is a caller-owned transaction too: a nested atomic() would
    # only make a savepoint, and the caller could still roll the "committed" write back.
    if connection.in_atomic_block or not connection.get_autocommit():
        raise TransactionOwned(
            "This store call opens and commits its own transaction; call it outside "
            "transaction.atomic(). Your transaction was left untouched."
        )


@contextmanager
def bounded_atomic(using: str, execution: Execution | None = None) -> Iterator[None]:
    """Run the block in a transaction of its own, bounded by ``execution`` when given.

    Refuses inside the caller's atomic block (``TransactionOwned``) and, for an execution whose
    budget is spent, before any SQL (``DeadlineExceeded``). Lock waits are capped at the remaining
    budget; the budget and cancellation are checked again before COMMIT; the previous lock setting
    is restored whatever happens.
    """
    refuse_caller_transaction(using)
    if execution is None:
        with transaction.atomic(using=using):
            yield
        return
    check_execution(execution)
    connection = connections[using]
    policy = LockPolicy(connection, execution.remaining())
    try:
        policy.before_begin()
        with transaction.atomic(using=using):
            policy.inside()
            yield
            policy.verify()
            check_execution(execution)
    except DatabaseError as exc:
        if is_lock_timeout(connection, exc):
            raise DeadlineExceeded(
                "Waiting for a lock used up the execution's time budget; nothing was written. "
                "Retry later or with a larger budget."
            ) from exc
        raise
    finally:
        try:
            policy.restore()
        except DatabaseError:  # the connection is gone; a new one starts with the defaults
            pass
