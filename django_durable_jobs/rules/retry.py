"""Automatic retry policies: pure functions of the attempt count, tested without a database."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from .errors import InputInvalid

# The longest backoff: the retry is due at now + the delay, which must stay a time Python can add
# and every database can store (a clock up to 9998 UTC, plus at most twice this with jitter).
MAX_DELAY_SECONDS = 30 * 86400


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
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value < 0
            ):
                raise InputInvalid(f"RetryPolicy.{name} must be a non-negative number.")
        for name in ("base_delay", "max_delay"):
            if getattr(self, name) > MAX_DELAY_SECONDS:
                raise InputInvalid(
                    f"RetryPolicy.{name} is at most {MAX_DELAY_SECONDS:,} seconds (30 days); "
                    f"got {getattr(self, name)!r}."
                )
        if self.jitter > 1:
            raise InputInvalid("RetryPolicy.jitter is a fraction from 0 to 1.")

    @classmethod
    def of(cls, value: RetryPolicy | int | None) -> RetryPolicy | None:
        """Return the policy for ``retry=``: a policy, a number of attempts in all, or None.

        A number counts every attempt, the first included: ``retry=3`` runs a job at most three
        times, as ``max_attempts=3`` does (Celery's ``max_retries=3`` would run it four times).
        """
        if value is None or isinstance(value, RetryPolicy):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(max_attempts=value)
        raise InputInvalid(
            f"retry= takes a RetryPolicy (or, as max_attempts= does, a number of attempts in "
            f"all); got {value!r}. Write max_attempts=3 to run a job at most three times."
        )

    @classmethod
    def from_options(
        cls, max_attempts: int | None, retry: RetryPolicy | int | None
    ) -> RetryPolicy | None:
        """Return the policy of ``@operation(max_attempts=..., retry=...)``: at most one is given.

        ``max_attempts=N`` counts every attempt, the first included, with the default backoff;
        ``retry=RetryPolicy(...)`` tunes the backoff too. Both at once would leave one of them
        ignored, so it is refused.
        """
        if max_attempts is None:
            return cls.of(retry)
        if retry is not None:
            raise InputInvalid(
                f"Give max_attempts or retry, not both (max_attempts={max_attempts!r}, "
                f"retry={retry!r}): max_attempts=N for the default backoff, or "
                f"retry=RetryPolicy(max_attempts=N, base_delay=..., max_delay=...) to tune it."
            )
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
            raise InputInvalid(
                f"max_attempts is the number of attempts in all, a whole number of at least 1; "
                f"got {max_attempts!r}."
            )
        return cls(max_attempts=max_attempts)

    def allows_another(self, attempts: int) -> bool:
        """Return True when a job that failed after ``attempts`` attempts may run again."""
        return attempts < self.max_attempts

    def delay(self, attempts: int, rand: Callable[[], float] = random.random) -> float:
        """Return the seconds to wait after the ``attempts``-th failed attempt."""
        # The exponent is bounded so the product stays a float (inf at worst, then capped): a
        # job that failed a thousand times waits max_delay, not an OverflowError.
        base = min(self.max_delay, self.base_delay * 2.0 ** min(max(attempts - 1, 0), 1000))
        return max(0.0, base * (1 + self.jitter * (2 * rand() - 1)))
