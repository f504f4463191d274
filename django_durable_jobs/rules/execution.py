"""Executions: who is acting, for how long, and under which write fence.

An :class:`Execution` carries a time budget (measured on ``time.monotonic``), an optional
cancellation event, resource counters, and optionally a :class:`WriteFence` that ties domain writes
to one lease. Store calls given an execution are *bounded*: they refuse before any SQL once the budget
is spent and cap lock waits at what remains.
"""

from __future__ import annotations

import math
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from .errors import ExecutionStopped, InputInvalid

if TYPE_CHECKING:
    from .values import Lease

HEX_SHA256 = re.compile(r"[0-9a-fA-F]{64}")

__all__ = ["Execution", "Identity", "WriteFence", "bind_write_fence"]


@dataclass(frozen=True)
class Identity:
    """Who acts, for which job: scope, actor, operation and idempotency key."""

    scope: str | None
    actor: str | None
    operation: str
    idempotency_key: str | None = None


@dataclass(frozen=True)
class WriteFence:
    """The lease a domain write must still hold when it commits."""

    lease: Lease
    proposal_hash: str
    using: str = "default"
    clock: Callable[[], datetime] | None = None


@dataclass
class _Budget:
    deadline: float
    cancel_event: threading.Event
    max_bytes: int | None
    max_items: int | None
    used_bytes: int = 0
    used_items: int = 0
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class Execution:
    """One bounded unit of work; create it with :meth:`Execution.start`."""

    identity: Identity
    _budget: _Budget
    write_fence: WriteFence | None = None

    @classmethod
    def start(
        cls,
        identity: Identity,
        *,
        budget: float = 2.0,
        deadline: float | None = None,
        write_fence: WriteFence | None = None,
        cancel_event: threading.Event | None = None,
        max_bytes: int | None = None,
        max_items: int | None = None,
    ) -> Execution:
        """Start an execution of at most ``budget`` seconds (and not past ``deadline``).

        ``deadline`` is an absolute ``time.monotonic()`` value; the earlier of the two wins.
        """
        if not isinstance(identity, Identity):
            raise InputInvalid("Execution.start() needs an Identity(scope, actor, operation, key).")
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or math.isnan(budget):
            raise InputInvalid("budget must be a number of seconds.")
        if budget < 0:
            raise InputInvalid("budget must not be negative.")
        if deadline is not None and (
            isinstance(deadline, bool)
            or not isinstance(deadline, (int, float))
            or math.isnan(deadline)
        ):
            raise InputInvalid("deadline must be a time.monotonic() value (a number) or None.")
        if cancel_event is not None and not (
            callable(getattr(cancel_event, "is_set", None))
            and callable(getattr(cancel_event, "set", None))
        ):
            raise InputInvalid("cancel_event must be a threading.Event (or None for a new one).")
        if write_fence is not None and not isinstance(write_fence, WriteFence):
            raise InputInvalid("write_fence comes from bind_write_fence(execution, lease, ...).")
        for name, value in (("max_bytes", max_bytes), ("max_items", max_items)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise InputInvalid(f"{name} must be a non-negative integer or None.")
        end = time.monotonic() + budget
        if deadline is not None:
            end = min(end, deadline)
        state = _Budget(
            deadline=end,
            cancel_event=cancel_event if cancel_event is not None else threading.Event(),
            max_bytes=max_bytes,
            max_items=max_items,
        )
        return cls(identity=identity, _budget=state, write_fence=write_fence)

    def remaining(self) -> float:
        """Return the seconds left in the budget (never negative)."""
        return max(0.0, self._budget.deadline - time.monotonic())

    @property
    def cancelled(self) -> bool:
        return self._budget.cancel_event.is_set()

    @property
    def closed(self) -> bool:
        return self._budget.closed

    def assert_active(self) -> None:
        """Raise ExecutionStopped when the execution is closed, cancelled or out of time."""
        if self._budget.closed:
            raise ExecutionStopped(
                ExecutionStopped.CLOSED, "The execution is closed; start a new one."
            )
        if self.cancelled:
            raise ExecutionStopped(
                ExecutionStopped.CANCELLED, "The execution was cancelled; stop and roll back."
            )
        if self.remaining() <= 0:
            raise ExecutionStopped(
                ExecutionStopped.DEADLINE, "The execution's time budget is spent; start a new one."
            )

    def consume(self, bytes: int = 0, items: int = 0) -> None:  # noqa: A002 - public name
        """Account for work done; raise ExecutionStopped past ``max_bytes`` or ``max_items``."""
        if bytes < 0 or items < 0:
            raise InputInvalid("consume() takes non-negative amounts.")
        self.assert_active()
        state = self._budget
        with state.lock:
            state.used_bytes += bytes
            state.used_items += items
            over_bytes = state.max_bytes is not None and state.used_bytes > state.max_bytes
            over_items = state.max_items is not None and state.used_items > state.max_items
        if over_bytes or over_items:
            raise ExecutionStopped(
                ExecutionStopped.RESOURCE_LIMIT,
                f"The execution used {state.used_bytes} bytes / {state.used_items} items, over its "
                f"limits ({state.max_bytes} bytes / {state.max_items} items).",
            )

    def cancel(self) -> None:
        """Ask the execution to stop; store calls observe it before COMMIT and roll back."""
        self._budget.cancel_event.set()

    def close(self) -> None:
        """End the execution; later store calls with it are refused."""
        self._budget.closed = True


def bind_write_fence(
    execution: Execution,
    lease: Lease,
    proposal_hash: str,
    *,
    using: str = "default",
    clock: Callable[[], datetime] | None = None,
) -> Execution:
    """Return the execution bound to ``lease``: its domain writes must pass the write fence.

    The returned execution shares the budget, cancellation and counters of ``execution``.
    ``clock`` is the clock of the store that issued the lease (default ``timezone.now``);
    ``assert_write_fence`` compares the lease expiry against it.
    """
    if not isinstance(execution, Execution):
        raise InputInvalid("bind_write_fence() needs an Execution.")
    if not isinstance(proposal_hash, str) or not HEX_SHA256.fullmatch(proposal_hash):
        raise InputInvalid("proposal_hash must be the 64-character hex SHA-256 of the proposal.")
    from .values import Lease  # at call time: values imports nothing of executions

    if (
        not isinstance(lease, Lease)
        or not isinstance(lease.job_id, uuid.UUID)
        or isinstance(lease.epoch, bool)
        or not isinstance(lease.epoch, int)
    ):
        raise InputInvalid("bind_write_fence() needs the Lease returned by a claim.")
    fence = WriteFence(lease=lease, proposal_hash=proposal_hash.lower(), using=using, clock=clock)
    return replace(execution, write_fence=fence)
