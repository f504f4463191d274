"""Automatic retry policies: pure functions of the attempt count, tested without a database."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from .errors import InputInvalid


@dataclass(frozen=True)
class RetryPolicy:
    """Retry a failed job up to ``max_attempts`` attempts in all, backing off exponentially.

    The delay before attempt ``n + 1`` is ``base_delay * 2 ** (n - 1)`` seconds, capped at
    ``max_delay``, then spread by ±``jitter`` (a fraction) so failed jobs do not retry in lockstep.
    """

    max_attempts: int = 3
    base_delay: float = 1.0
    max_delay: float = 300.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise InputInvalid("RetryPolicy.max_attempts must be a whole number.")
        if self.max_attempts < 1:
            raise InputInvalid("RetryPolicy.max_attempts must be at least 1.")
        for name in ("base_delay", "max_delay", "jitter"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise InputInvalid(f"RetryPolicy.{name} must be a non-negative number.")
        if self.jitter > 1:
            raise InputInvalid("RetryPolicy.jitter is a fraction from 0 to 1.")

    @classmethod
    def of(cls, value: RetryPolicy | int | None) -> RetryPolicy | None:
        """Return the policy for ``@operation(retry=...)``: a policy, a max attempt count, or None."""
        if value is None or isinstance(value, RetryPolicy):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(max_attempts=value)
        raise InputInvalid(f"retry= takes a RetryPolicy or a number of attempts; got {value!r}.")

    def allows_another(self, attempts: int) -> bool:
        """Return True when a job that failed after ``attempts`` attempts may run again."""
        return attempts < self.max_attempts

    def delay(self, attempts: int, rand: Callable[[], float] = random.random) -> float:
        """Return the seconds to wait after the ``attempts``-th failed attempt."""
        base = min(self.max_delay, self.base_delay * 2 ** max(attempts - 1, 0))
        return max(0.0, base * (1 + self.jitter * (2 * rand() - 1)))
