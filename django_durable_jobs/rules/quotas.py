"""Per-scope quotas: how much one scope may queue, submit and run, so no tenant crowds out another.

Every scope gets the built-in limits, overridden by ``DURABLE_JOBS["QUOTAS"]`` for every scope and
by ``DURABLE_JOBS["SCOPE_QUOTAS"][scope]`` for one:

``MAX_PENDING``        100,000 — pending jobs a scope may have; more is ``CapacityReached``.
``SUBMIT_RATE``        None — submissions per window a scope may make, e.g. ``"600/m"``.
``TOKEN_SUBMIT_RATE``  None — the same, per REST API token.
``MAX_PRIORITY``       100 — the highest priority the scope may submit at.
``MAX_RUNNING``        None — running jobs the scope may have, enforced atomically at claim.

Rates read ``"N/s"``, ``"N/m"``, ``"N/h"``, ``"N/d"`` or ``(N, seconds)``. They are counted in
fixed windows in a Django cache (``DURABLE_JOBS["RATE_LIMIT_CACHE"]``): exact per process with the
default local-memory cache, shared by every process with a shared one (Redis, Memcached).

The store enforces them (:mod:`django_durable_jobs.store.capacity`); this module only reads the
settings and keeps the counters that live outside the database.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from .conf import jobs_settings, user_settings
from .errors import CapacityReached, InputInvalid

__all__ = [
    "BUILTIN",
    "QUOTA_KEYS",
    "Quota",
    "Rate",
    "Taken",
    "counted",
    "pending_estimates",
    "quota_for",
    "running_limits_configured",
    "settings_problems",
    "take_submissions",
    "take_token_submission",
]

BUILTIN: dict[str, Any] = {
    "MAX_PENDING": 100_000,
    "SUBMIT_RATE": None,
    "TOKEN_SUBMIT_RATE": None,
    "MAX_PRIORITY": 100,
    "MAX_RUNNING": None,
}
QUOTA_KEYS = frozenset(BUILTIN)
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_generation = 0  # bumped when the settings change (tests), so rate windows start afresh
_RATE_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([smhd])\s*$")


@dataclass(frozen=True)
class Rate:
    """``count`` submissions per ``seconds``-long window."""

    count: int
    seconds: float

    @classmethod
    def parse(cls, value: Any, what: str) -> Rate | None:
        """Return the rate ``value`` names (``"600/m"``, ``"10/5s"``, ``(600, 60)``), or None."""
        if value is None:
            return None
        if isinstance(value, str) and (match := _RATE_RE.match(value)):
            count, many, unit = match.groups()
            seconds = _UNITS[unit] * (int(many) if many else 1)
        elif (
            isinstance(value, (tuple, list))
            and len(value) == 2
            and not any(isinstance(v, bool) for v in value)
            and isinstance(value[0], int)
            and isinstance(value[1], (int, float))
        ):
            count, seconds = value
        else:
            raise ImproperlyConfigured(
                f"{what} is a rate such as '600/m' or (600, 60); got {value!r}."
            )
        count, seconds = int(count), float(seconds)
        if count < 1 or not math.isfinite(seconds) or seconds <= 0:
            raise ImproperlyConfigured(f"{what} needs a positive count and window; got {value!r}.")
        return cls(count, seconds)

    def __str__(self) -> str:
        return f"{self.count} per {self.seconds:g} s"


@dataclass(frozen=True)
class Quota:
    """The limits of one scope, resolved from the settings."""

    scope: str
    max_pending: int | None
    submit_rate: Rate | None
    token_submit_rate: Rate | None
    max_priority: int
    max_running: int | None


def _limit(value: Any, what: str, low: int, high: int | None = None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ImproperlyConfigured(f"{what} is None or a whole number ≥ {low}; got {value!r}.")
    if high is not None and value > high:
        raise ImproperlyConfigured(f"{what} is at most {high}; got {value!r}.")
    return value


def _merged(scope: str) -> tuple[dict[str, Any], str]:
    """Return the scope's raw limits and the settings key they came from (for messages)."""
    values = dict(BUILTIN)
    common = jobs_settings.QUOTAS
    _check_keys(common, "DURABLE_JOBS['QUOTAS']")
    values.update(common)
    where = "DURABLE_JOBS['QUOTAS']"
    own = jobs_settings.SCOPE_QUOTAS.get(scope)
    if own is not None:
        where = f"DURABLE_JOBS['SCOPE_QUOTAS'][{scope!r}]"
        if not isinstance(own, Mapping):
            raise ImproperlyConfigured(f"{where} must be a dict of limits.")
        _check_keys(own, where)
        values.update(own)
    return values, where


def _check_keys(values: Mapping, where: str) -> None:
    unknown = sorted(set(values) - QUOTA_KEYS)
    if unknown:
        raise ImproperlyConfigured(
            f"{where} has unknown keys {', '.join(map(str, unknown))}; known: "
            f"{', '.join(sorted(QUOTA_KEYS))}."
        )


def quota_for(scope: str) -> Quota:
    """Return ``scope``'s limits; a bad setting raises ``ImproperlyConfigured`` naming it."""
    values, where = _merged(scope)
    max_priority = _limit(values["MAX_PRIORITY"], f"{where}['MAX_PRIORITY']", -100, 100)
    return Quota(
        scope=scope,
        max_pending=_limit(values["MAX_PENDING"], f"{where}['MAX_PENDING']", 1),
        submit_rate=Rate.parse(values["SUBMIT_RATE"], f"{where}['SUBMIT_RATE']"),
        token_submit_rate=Rate.parse(values["TOKEN_SUBMIT_RATE"], f"{where}['TOKEN_SUBMIT_RATE']"),
        max_priority=100 if max_priority is None else max_priority,
        max_running=_limit(values["MAX_RUNNING"], f"{where}['MAX_RUNNING']", 1),
    )


def running_limits_configured() -> bool:
    """Return True when any scope has a ``MAX_RUNNING`` limit (claims then count per scope)."""
    if jobs_settings.QUOTAS.get("MAX_RUNNING") is not None:
        return True
    return any(
        isinstance(own, Mapping) and own.get("MAX_RUNNING") is not None
        for own in jobs_settings.SCOPE_QUOTAS.values()
    )


def settings_problems() -> list[str]:
    """Return what is wrong with ``QUOTAS`` and ``SCOPE_QUOTAS`` (for the system checks)."""
    problems = []
    raw = user_settings()
    for name in ("QUOTAS", "SCOPE_QUOTAS"):
        if not isinstance(raw.get(name, {}), Mapping):
            problems.append(f"DURABLE_JOBS['{name}'] must be a dict.")
    scopes = jobs_settings.SCOPE_QUOTAS
    for scope in [None, *scopes]:
        try:
            quota_for("" if scope is None else scope)
        except ImproperlyConfigured as exc:
            problems.append(str(exc))
    return sorted(set(problems))


# -- submission rates ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Taken:
    """Submissions counted in one rate window, which a call refused later gives back."""

    cache_key: str
    count: int

    def give_back(self) -> None:
        """Uncount these submissions: the call that took them wrote nothing."""
        try:
            caches[jobs_settings.RATE_LIMIT_CACHE].decr(self.cache_key, self.count)
        except ValueError:  # the window ended meanwhile: nothing left to give back
            pass


@contextmanager
def counted() -> Iterator[list[Taken]]:
    """Collect the counts a submission takes (``taken += ...``); give them all back when the
    block raises: a submission refused or failed after its rates were counted uses none."""
    taken: list[Taken] = []
    try:
        yield taken
    except BaseException:
        for each in taken:
            each.give_back()
        raise


def take_submissions(kind: str, key: str, rate: Rate, count: int, now: datetime) -> Taken:
    """Count ``count`` submissions against ``rate`` in the window holding ``now``, or refuse.

    A refused call gives its count back, so refusals do not use up the window; a call refused
    later, after its count was taken, gives it back with the returned :class:`Taken`. Raises
    ``CapacityReached`` with ``retry_after`` (seconds to the next window), or ``InputInvalid``
    when one call alone is larger than a whole window allows.
    """
    if count > rate.count:
        raise InputInvalid(
            f"This call submits {count} jobs but {kind} {key!r} may submit {rate}; "
            f"split it into calls of at most {rate.count}."
        )
    stamp = now.timestamp()
    window = math.floor(stamp / rate.seconds)
    digest = hashlib.sha256(f"{kind}\x00{key}".encode()).hexdigest()[:32]
    cache_key = f"durable_jobs:rate:{_generation}:{digest}:{rate.seconds:g}:{window}"
    cache = caches[jobs_settings.RATE_LIMIT_CACHE]
    timeout = math.ceil(rate.seconds) + 1
    cache.add(cache_key, 0, timeout=timeout)
    try:
        used = cache.incr(cache_key, count)
    except ValueError:  # the window's counter expired between add and incr
        cache.add(cache_key, count, timeout=timeout)
        used = count
    if used <= rate.count:
        return Taken(cache_key, count)
    try:
        cache.decr(cache_key, count)
    except ValueError:
        pass
    retry_after = max(0.001, (window + 1) * rate.seconds - stamp)
    raise CapacityReached(
        f"{kind.capitalize()} {key!r} may submit {rate} and has used this window; "
        f"try again in {math.ceil(retry_after)} s.",
        retry_after=retry_after,
    )


def take_token_submission(prefix: str, scope: str, now: datetime) -> list[Taken]:
    """Count one submission of the REST API token ``prefix`` against its scope's token rate.

    Returns what was counted, for ``counted`` to give back when the submission is refused.
    """
    rate = quota_for(scope).token_submit_rate
    return [] if rate is None else [take_submissions("token", prefix, rate, 1, now)]


# -- pending counts ----------------------------------------------------------------------------------


class PendingEstimates:
    """What this process last counted of each scope's pending jobs, plus what it added since.

    Counting a large backlog on every submission would cost more than the insert, so a count is
    trusted for ``TTL`` seconds while the scope stays clearly under its cap; near the cap (within
    ``NEAR`` of it) every submission counts exactly.
    """

    TTL = 1.0
    NEAR = 0.9

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], tuple[float, int]] = {}

    def room(self, using: str, scope: str, adding: int, cap: int) -> bool:
        """Return True when the estimate alone shows room for ``adding`` more (and count them)."""
        with self._lock:
            entry = self._counts.get((using, scope))
            if entry is None or time.monotonic() - entry[0] > self.TTL:
                return False
            if entry[1] + adding > cap * self.NEAR:
                return False
            self._counts[using, scope] = (entry[0], entry[1] + adding)
            return True

    def counted(self, using: str, scope: str, count: int) -> None:
        with self._lock:
            self._counts[using, scope] = (time.monotonic(), count)

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()


pending_estimates = PendingEstimates()


@receiver(setting_changed)
def _forget_counts(*, setting: str, **kwargs: Any) -> None:
    """New limits start from fresh counts (``override_settings`` in tests, for one)."""
    global _generation
    if setting == "DURABLE_JOBS":
        pending_estimates.clear()
        _generation += 1  # and counts windows afresh
