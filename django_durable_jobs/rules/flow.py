"""Flow control, as declared: rate limits, concurrency per key, uniqueness for a window.

Pure rules, no SQL. An operation declares its flow control on ``@operation(...)`` (or a
``DurableTask``); a queue in ``DURABLE_JOBS["QUEUES"]``. A declaration is kept as written and
judged here, so that ``manage.py check`` can name every bad one (``durable_jobs.E017`` and
``E018``) instead of an import failing half-way; a submission of an operation whose
declaration is bad is refused with ``InputInvalid`` and writes nothing.

The rate rule is a sliding log: a start is admitted when fewer than ``N`` starts of its bucket
fall in the ``period`` before it. So no window of ``period`` ever holds more than ``N`` starts,
whatever the number of workers, and a full bucket frees exactly when its oldest start ages out.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .errors import InputInvalid
from .validation import KEY_MAX

__all__ = [
    "PERIODS",
    "RATE_MAX",
    "UNIQUE_WHILE_CHOICES",
    "Flow",
    "RateLimit",
    "declare",
    "parse_rate",
    "rate_room",
]

PERIODS = {"s": 1, "m": 60, "h": 3600}  # and their long names below
_PERIOD_NAMES = {
    "sec": "s",
    "second": "s",
    "min": "m",
    "minute": "m",
    "hour": "h",
}
RATE_MAX = 10_000  # starts one bucket remembers (its sliding log); larger N is refused
# A whole bucket with less room than frees in this long at its full rate waits this long at
# most for that much to gather, and admits it in one claim (see gathered_room).
GATHER_SECONDS = 0.05
UNIQUE_WHILE_CHOICES = ("active",)
UNIQUE_FOR_MAX = timedelta(days=366)
_RATE = re.compile(r"^\s*(\d+)\s*/\s*([a-z]+)\s*$")


@dataclass(frozen=True)
class RateLimit:
    """At most ``count`` starts in any ``seconds``-long window."""

    count: int
    seconds: int
    text: str

    def __str__(self) -> str:
        return self.text


def parse_rate(value: Any, what: str = "rate_limit") -> RateLimit:
    """Return the ``RateLimit`` of ``"N/s"``, ``"N/m"`` or ``"N/h"``; refuse anything else."""
    match = _RATE.match(value) if isinstance(value, str) else None
    unit = match and _PERIOD_NAMES.get(match.group(2), match.group(2))
    if not match or unit not in PERIODS:
        raise InputInvalid(
            f"{what} is written 'N/s', 'N/m' or 'N/h' (at most N starts per second, minute or "
            f"hour); got {value!r}."
        )
    count = int(match.group(1))
    if not 1 <= count <= RATE_MAX:
        raise InputInvalid(f"{what}'s N is a whole number from 1 to {RATE_MAX}; got {value!r}.")
    return RateLimit(count, PERIODS[unit], f"{count}/{unit}")


def rate_room(starts: Sequence[float], limit: RateLimit, now: float) -> tuple[int, float | None]:
    """Return how many more may start at ``now`` and, when none may, when one next may.

    ``starts`` are the bucket's remembered start times (seconds since the epoch, ascending).
    Only those in the window ``(now - period, now]`` count; a start recorded by a worker whose
    clock runs a little ahead counts too (it is later than the window's start).
    """
    recent = [t for t in starts if t > now - limit.seconds]
    room = limit.count - len(recent)
    if room > 0:
        return room, None
    return 0, recent[-limit.count] + limit.seconds


def gathered_room(
    starts: Sequence[float], limit: RateLimit, now: float, room: int, at_least: int
) -> float | None:
    """Return when a bucket with ``room`` (fewer than ``at_least``) will have ``at_least``, if
    that is at most ``GATHER_SECONDS`` away; None when it is further (admit ``room`` now).

    Admitting the few starts that a sliding log frees at a time cost a claim its bucket's
    statements for one or two jobs, dozens of times a second; waiting up to ``GATHER_SECONDS``
    for a handful to gather admits them in one (``docs/flow-control.md``).
    """
    recent = recent_starts(starts, limit, now)
    leaving = at_least - room  # how many more starts must leave the window
    if leaving <= 0 or leaving > len(recent):
        return None
    at = recent[leaving - 1] + limit.seconds
    return at if at - now <= GATHER_SECONDS else None


def gathered_count(limit: RateLimit) -> int:
    """Return how many starts a bucket gathers before it admits (what frees in GATHER_SECONDS
    at its full rate; 1 for limits slower than 20 starts a second)."""
    return max(1, int(limit.count * GATHER_SECONDS / limit.seconds))


def recorded_start(at: float) -> float:
    """Return start time ``at`` as a bucket records it: rounded up to the millisecond.

    Later, never earlier, than the start, so no window counts fewer starts than happened (a
    bucket may hold a start back up to a millisecond longer); and a third of the digits to
    write and read in every claim that admits work (the log's JSON took 0.4 ms a claim).
    """
    recorded = math.ceil(at * 1000) / 1000
    return recorded if recorded >= at else recorded + 0.001  # the product was rounded down


def recent_starts(starts: Sequence[float], limit: RateLimit, now: float) -> list[float]:
    """Return the starts a bucket must keep at ``now``: those still inside the window."""
    return [t for t in starts if t > now - limit.seconds][-limit.count :]


@dataclass(frozen=True)
class Flow:
    """An operation's or a queue's flow control, parsed; ``problems`` lists what is wrong."""

    rate_limit: RateLimit | None = None
    rate_key: Callable[[Any], Any] | None = None
    max_running_per_key: int | None = None
    concurrency_key: Callable[[Any], Any] | None = None
    unique_while: str | None = None
    unique_for: timedelta | None = None
    problems: tuple[str, ...] = field(default=())

    @property
    def limited(self) -> bool:
        """True when a claim must count something (a rate or a concurrency key)."""
        return self.rate_limit is not None or self.max_running_per_key is not None

    @property
    def unique(self) -> bool:
        return self.unique_while is not None or self.unique_for is not None

    @property
    def keyed(self) -> bool:
        """True when a submission computes a key from its input."""
        return self.rate_key is not None or self.concurrency_key is not None

    def require(self, name: str) -> None:
        """Refuse to submit ``name`` while its declaration has a problem."""
        if self.problems:
            raise InputInvalid(
                f"{name!r} declares flow control that cannot be used: {self.problems[0]} Fix "
                f"the declaration (manage.py check lists every problem); nothing was written."
            )

    def keys(self, payload: Any) -> tuple[str, str]:
        """Return the rate key and concurrency key of ``payload`` (``""`` when undeclared)."""
        return (
            _key(self.rate_key, payload, "rate_key"),
            _key(self.concurrency_key, payload, "concurrency_key"),
        )


NO_FLOW = Flow()


def declare(
    *,
    rate_limit: Any = None,
    rate_key: Any = None,
    max_running_per_key: Any = None,
    concurrency_key: Any = None,
    unique_while: Any = None,
    unique_for: Any = None,
) -> Flow:
    """Parse a declaration; never raise: what is wrong is kept in ``Flow.problems``."""
    if all(
        v is None
        for v in (rate_limit, rate_key, max_running_per_key, concurrency_key, unique_while)
    ) and (unique_for is None):
        return NO_FLOW
    problems: list[str] = []
    rate = None
    if rate_limit is not None:
        try:
            rate = parse_rate(rate_limit)
        except InputInvalid as exc:
            problems.append(exc.message)
    if rate_key is not None and not callable(rate_key):
        problems.append(f"rate_key is a function of the input; got {rate_key!r}.")
    if rate_key is not None and rate_limit is None:
        problems.append("rate_key is given without a rate_limit; give both or neither.")
    per_key = max_running_per_key
    if per_key is not None and (
        isinstance(per_key, bool) or not isinstance(per_key, int) or per_key < 1
    ):
        problems.append(f"max_running_per_key is a positive whole number; got {per_key!r}.")
        per_key = None
    if concurrency_key is not None and not callable(concurrency_key):
        problems.append(f"concurrency_key is a function of the input; got {concurrency_key!r}.")
    if (max_running_per_key is None) != (concurrency_key is None):
        problems.append(
            "max_running_per_key and concurrency_key go together: give both or neither."
        )
    if unique_while is not None and unique_while not in UNIQUE_WHILE_CHOICES:
        problems.append(f"unique_while must be 'active'; got {unique_while!r}.")
    if unique_for is not None and not (
        isinstance(unique_for, timedelta) and timedelta(0) < unique_for <= UNIQUE_FOR_MAX
    ):
        problems.append(
            f"unique_for is a timedelta longer than zero and at most 366 days; got {unique_for!r}."
        )
    if unique_while is not None and unique_for is not None:
        problems.append("Give unique_while or unique_for, not both.")
    return Flow(
        rate_limit=rate,
        rate_key=rate_key if callable(rate_key) else None,
        max_running_per_key=per_key if callable(concurrency_key) else None,
        concurrency_key=concurrency_key if callable(concurrency_key) and per_key else None,
        unique_while=unique_while if unique_while in UNIQUE_WHILE_CHOICES else None,
        unique_for=unique_for if isinstance(unique_for, timedelta) else None,
        problems=tuple(problems),
    )


def _key(function: Callable[[Any], Any] | None, payload: Any, what: str) -> str:
    """Return ``function(payload)`` as a key: a string or a whole number, at most 255 chars."""
    if function is None:
        return ""
    try:
        value = function(payload)
    except Exception as exc:  # the user's function: any failure refuses the submission
        raise InputInvalid(
            f"{what} raised {type(exc).__name__}: {exc}; it must return a key for every input "
            f"submitted. Nothing was written."
        ) from None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputInvalid(f"{what} returned {value!r}; it must return a string or a whole number.")
    key = str(value)
    if not key or len(key) > KEY_MAX:
        raise InputInvalid(f"{what} returned {value!r}; a key is 1-{KEY_MAX} characters.")
    return key


# -- queues -----------------------------------------------------------------------------------

QUEUE_KEYS = ("rate_limit",)


def queue_flows(raw: Any) -> tuple[dict[str, Flow], list[str]]:
    """Return ``DURABLE_JOBS["QUEUES"]`` as ``{queue: Flow}`` and its problems."""
    if raw is None:
        return {}, []
    if not isinstance(raw, dict):
        return {}, [f"DURABLE_JOBS['QUEUES'] is a dict of queue name -> options; got {raw!r}."]
    flows: dict[str, Flow] = {}
    problems: list[str] = []
    for queue, options in raw.items():
        if not isinstance(queue, str) or not queue:
            problems.append(f"DURABLE_JOBS['QUEUES'] has a key {queue!r}: a queue name.")
            continue
        if not isinstance(options, dict):
            problems.append(f"DURABLE_JOBS['QUEUES'][{queue!r}] is a dict; got {options!r}.")
            continue
        unknown = sorted(set(options) - set(QUEUE_KEYS))
        if unknown:
            problems.append(
                f"DURABLE_JOBS['QUEUES'][{queue!r}] has unknown keys {unknown}; known: "
                f"{list(QUEUE_KEYS)}."
            )
        flow = declare(rate_limit=options.get("rate_limit"))
        problems.extend(f"DURABLE_JOBS['QUEUES'][{queue!r}]: {p}" for p in flow.problems)
        if not flow.problems and flow.rate_limit is not None:
            flows[queue] = flow
    return flows, problems


def queues() -> dict[str, Flow]:
    """Return the rate-limited queues of ``DURABLE_JOBS["QUEUES"]`` (bad entries left out)."""
    from .conf import user_settings

    return queue_flows(user_settings().get("QUEUES"))[0]


def of_operation(name: str) -> Flow:
    """Return the flow control ``name`` declared (none for an unregistered operation)."""
    from . import registry

    spec = registry.get(name)
    return NO_FLOW if spec is None else spec.flow


def bucket_id(target: str, name: str, key: str = "") -> str:
    """Return the ``RateBucket`` id of a limit (``"operation"``/``"queue"``, its name, a key)."""
    return hashlib.sha256("\x00".join((target, name, key)).encode()).hexdigest()
