"""Schedules as declared in code: ``every()``, ``ScheduleSpec`` and the checks of each key.

Every refusal is an ``InputInvalid`` that names the schedule, the key at fault and where to fix it.
"""

from __future__ import annotations

import difflib
import hashlib
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..rules import registry, validation
from ..rules.conf import user_settings
from ..rules.errors import InputInvalid
from ..rules.values import canonical_json
from .timetable import zone

OVERLAP_CHOICES = ("skip", "allow")
CATCH_UP_CHOICES = ("latest", "all", "none")
CATCH_UP_LIMIT_MAX = 10_000
INTERVAL_MAX_SECONDS = 2**31 - 1  # what ``Schedule.interval_seconds`` holds on every database
CRON_MAX = 255
TIMEZONE_MAX = 64

SETTINGS = 'DURABLE_JOBS["SCHEDULES"]'
DEFAULTS: dict[str, Any] = {
    "payload": {},
    "scope": None,
    "queue": "default",
    "priority": 0,
    "timezone": "UTC",
    "overlap": "skip",
    "catch_up": "latest",
    "catch_up_limit": 100,
    "anchor": None,
}
OPERATION_KEYS = frozenset({"cron", "every", *DEFAULTS})
SETTINGS_KEYS = OPERATION_KEYS | {"operation"}


def every(**kwargs: float) -> timedelta:
    """Return the interval of a schedule: ``every(seconds=30)``, ``every(hours=1)``.

    Takes the keyword arguments of ``timedelta``; the interval must come to whole seconds.
    """
    return timedelta(**kwargs)


@dataclass(frozen=True)
class ScheduleSpec:
    """A validated schedule, as declared in code: exactly one of ``cron`` and ``every`` is set.

    ``payload`` is canonical JSON text. ``scope`` None means ``DURABLE_JOBS["DEFAULT_SCOPE"]``
    when a tick is submitted. ``anchor`` (intervals only) is in UTC, or None when the
    declaration gives none: the row's anchor is then chosen when the row is first written.
    """

    name: str
    operation: str
    cron: str | None = None
    every: timedelta | None = None
    payload: str = "{}"
    scope: str | None = None
    queue: str = "default"
    priority: int = 0
    timezone: str = "UTC"
    overlap: str = "skip"
    catch_up: str = "latest"
    catch_up_limit: int = 100
    anchor: datetime | None = None

    @property
    def interval_seconds(self) -> int | None:
        """Return the interval in whole seconds, or None for a cron schedule."""
        return None if self.every is None else int(self.every.total_seconds())

    def definition(self) -> dict[str, Any]:
        """Return what the schedule does, as JSON-ready values (its name excluded)."""
        fields: dict[str, Any] = {
            "operation": self.operation,
            "cron": self.cron,
            "every": self.interval_seconds,
            "payload": self.payload,
            "scope": self.scope,
            "queue": self.queue,
            "priority": self.priority,
            "timezone": self.timezone,
            "overlap": self.overlap,
            "catch_up": self.catch_up,
            "catch_up_limit": self.catch_up_limit,
        }
        if self.anchor is not None:
            fields["anchor"] = self.anchor.astimezone(UTC).isoformat()
        return fields

    @property
    def definition_hash(self) -> str:
        """Return the SHA-256 (hex) of the canonical JSON of :meth:`definition`."""
        return hashlib.sha256(canonical_json(self.definition()).encode("utf-8")).hexdigest()

    def row_fields(self) -> dict[str, Any]:
        """Return the ``Schedule`` row's field values this declaration sets.

        ``anchor`` is included only when the declaration gives one.
        """
        fields: dict[str, Any] = {
            "operation": self.operation,
            "cron": self.cron or "",
            "interval_seconds": self.interval_seconds,
            "timezone": self.timezone,
            "payload": self.payload,
            "scope": self.scope,
            "queue": self.queue,
            "priority": self.priority,
            "overlap": self.overlap,
            "catch_up": self.catch_up,
            "catch_up_limit": self.catch_up_limit,
            "definition_hash": self.definition_hash,
        }
        if self.anchor is not None:
            fields["anchor"] = self.anchor
        return fields


# -- declaring ------------------------------------------------------------------------------------


def parse_settings_schedule(name: Any, entry: Any) -> ScheduleSpec:
    """Return the schedule ``DURABLE_JOBS["SCHEDULES"][name]`` declares, or refuse it."""
    where = SETTINGS
    _check_name(name, where)
    if not isinstance(entry, dict):
        raise _refusal(
            name,
            f"the declaration is a {type(entry).__name__}, not a dict",
            where,
            'write {"operation": ..., "cron": ...} or {"operation": ..., "every": ...}',
        )
    _check_keys(name, entry, SETTINGS_KEYS, where)
    if "operation" not in entry:
        raise _refusal(name, "operation is missing", where, "name the operation to submit")
    operation = _field(name, "operation", where, validation.operation, entry["operation"])
    return _build(name, operation, entry, where)


def parse_operation_schedule(name: str, value: Any) -> ScheduleSpec:
    """Return the schedule ``@operation(name, schedule=value)`` declares, or refuse it.

    ``value`` is a cron expression, a ``timedelta`` (``every(...)``) or a dict of the keys of a
    ``DURABLE_JOBS["SCHEDULES"]`` entry, ``operation`` excepted. The schedule is named ``name``.
    """
    where = f"@operation({name!r}, schedule=...)"
    if isinstance(value, str):
        entry: dict[str, Any] = {"cron": value}
    elif isinstance(value, timedelta):
        entry = {"every": value}
    elif isinstance(value, dict):
        entry = value
    else:
        raise _refusal(
            name,
            f"schedule is a {type(value).__name__}",
            where,
            'give a cron expression ("0 3 * * *"), every(seconds=...) or a dict',
        )
    _check_keys(name, entry, OPERATION_KEYS, where)
    return _build(name, name, entry, where)


def settings_schedules() -> dict[str, ScheduleSpec]:
    """Return the schedules of ``DURABLE_JOBS["SCHEDULES"]`` by name; refuse the first bad one."""
    declared = _settings_entries()
    return {name: parse_settings_schedule(name, entry) for name, entry in declared.items()}


def operation_schedules() -> dict[str, ScheduleSpec]:
    """Return the schedules of the registered operations (``@operation(..., schedule=...)``)."""
    return {
        name: parse_operation_schedule(name, spec.schedule)
        for name, spec in sorted(registry.all_operations().items())
        if spec.schedule is not None
    }


def declared_schedules() -> dict[str, ScheduleSpec]:
    """Return every schedule this process declares, by name: settings and ``@operation``.

    A name declared in both places must declare the same schedule; otherwise it is refused.
    """
    specs = settings_schedules()
    for name, spec in operation_schedules().items():
        other = specs.get(name)
        if other is not None and other.definition_hash != spec.definition_hash:
            raise InputInvalid(
                f"Schedule {name!r} is declared twice, differently: by @operation({name!r}, "
                f"schedule=...) and in {SETTINGS}; keep one of them, or make them the same."
            )
        specs[name] = spec
    return dict(sorted(specs.items()))


def problems() -> list[str]:
    """Return what is wrong with the declared schedules: one message per bad schedule."""
    found = []
    try:
        entries = _settings_entries()
    except InputInvalid as exc:
        return [exc.message]
    for name, entry in entries.items():
        try:
            parse_settings_schedule(name, entry)
        except InputInvalid as exc:
            found.append(exc.message)
    for name, spec in sorted(registry.all_operations().items()):
        if spec.schedule is None:
            continue
        try:
            parse_operation_schedule(name, spec.schedule)
        except InputInvalid as exc:
            found.append(exc.message)
    if not found:
        try:
            declared_schedules()
        except InputInvalid as exc:
            found.append(exc.message)
    return found


def _settings_entries() -> dict[Any, Any]:
    declared = user_settings().get("SCHEDULES", {})
    if not isinstance(declared, dict):
        raise InputInvalid(
            f"{SETTINGS} is a {type(declared).__name__}; make it a dict of schedule name → "
            f'{{"operation": ..., "cron": ... or "every": ...}}.'
        )
    return declared


def _build(name: str, operation: str, entry: dict[str, Any], where: str) -> ScheduleSpec:
    values = {**DEFAULTS, **entry}
    has_cron = values.get("cron") is not None
    has_every = values.get("every") is not None
    if has_cron == has_every:
        raise _refusal(
            name,
            "both cron and every are given" if has_cron else "neither cron nor every is given",
            where,
            'give exactly one: a cron expression ("cron": "0 3 * * *") or an interval '
            '("every": 30, in seconds, or a timedelta)',
        )
    cron = _check_cron(name, values["cron"], where) if has_cron else None
    interval = None if has_cron else _check_every(name, values["every"], where)
    timezone = _check_timezone(name, values["timezone"], where)
    if interval is not None and timezone != "UTC":
        raise _refusal(
            name,
            f"timezone {timezone!r} is given for an interval",
            where,
            "intervals run in absolute time whatever the zone: remove the timezone, or use a "
            "cron expression for wall-clock times",
        )
    anchor = values["anchor"]
    if anchor is not None:
        if cron is not None:
            raise _refusal(
                name, "anchor is given for a cron schedule", where, "anchors are for intervals"
            )
        anchor = _field(name, "anchor", where, _check_anchor, anchor).astimezone(UTC)
    scope = values["scope"]
    if scope is not None:
        scope = _field(name, "scope", where, validation.scope, scope)
    return ScheduleSpec(
        name=name,
        operation=operation,
        cron=cron,
        every=interval,
        payload=_check_payload(name, values["payload"], where),
        scope=scope,
        queue=_field(name, "queue", where, validation.name, values["queue"], "queue"),
        priority=_field(name, "priority", where, validation.priority, values["priority"]),
        timezone=timezone,
        overlap=_check_choice(name, "overlap", values["overlap"], OVERLAP_CHOICES, where),
        catch_up=_check_choice(name, "catch_up", values["catch_up"], CATCH_UP_CHOICES, where),
        catch_up_limit=_field(
            name,
            "catch_up_limit",
            where,
            validation.whole,
            values["catch_up_limit"],
            "catch_up_limit",
            1,
            CATCH_UP_LIMIT_MAX,
        ),
        anchor=anchor,
    )


def _refusal(name: Any, problem: str, where: str, fix: str = "") -> InputInvalid:
    """Return the refusal of schedule ``name``: what is wrong, where to fix it, and how."""
    how = f": {fix}" if fix else ""
    return InputInvalid(f"Schedule {name!r}: {problem}; fix it in {where}{how}.")


def _field(name: str, key: str, where: str, check: Any, value: Any, *args: Any) -> Any:
    """Return ``check(value, *args)``, or its refusal with the schedule and key named."""
    try:
        return check(value, *args)
    except InputInvalid as exc:
        refusal = _refusal(name, f"{key} {value!r} is refused ({exc.message.rstrip('.')})", where)
        raise type(exc)(refusal.message) from None


def _check_name(name: Any, where: str) -> None:
    try:
        validation.name(name, "schedule name")
    except InputInvalid as exc:
        raise _refusal(name, f"the name is refused ({exc.message.rstrip('.')})", where) from None


def _check_keys(name: str, entry: dict[Any, Any], known: frozenset[str], where: str) -> None:
    for key in entry:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), sorted(known), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(sorted(known))}"
        if key == "operation":
            hint = "the decorator names the operation; remove it"
        raise _refusal(name, f"unknown key {key!r} ({hint})", where)


def _check_cron(name: str, value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > CRON_MAX:
        raise _refusal(
            name,
            f"cron {value!r} is not a cron expression",
            where,
            f'give one of 1-{CRON_MAX} characters such as "0 3 * * *"',
        )
    cron = " ".join(value.split())
    try:
        next(CronSim(cron, datetime(2000, 1, 1, tzinfo=UTC)))
    except CronSimError as exc:
        raise _refusal(
            name,
            f"cron {value!r} is not a cron expression ({exc})",
            where,
            'write five fields, "minute hour day-of-month month day-of-week", such as "0 3 * * *"',
        ) from None
    except StopIteration:
        raise _refusal(name, f"cron {value!r} never fires", where) from None
    return cron


def _check_every(name: str, value: Any, where: str) -> timedelta:
    if isinstance(value, timedelta):
        interval = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        interval = timedelta(seconds=value) if abs(value) <= INTERVAL_MAX_SECONDS else None
    else:
        interval = None
    if (
        interval is None
        or interval < timedelta(seconds=1)
        or interval % timedelta(seconds=1)
        or interval > timedelta(seconds=INTERVAL_MAX_SECONDS)
    ):
        raise _refusal(
            name,
            f"every {value!r} is not an interval of whole seconds",
            where,
            f"give a whole number of seconds from 1 to {INTERVAL_MAX_SECONDS} (30, or "
            f"every(minutes=5))",
        )
    return interval


def _check_timezone(name: str, value: Any, where: str) -> str:
    if isinstance(value, str) and 0 < len(value) <= TIMEZONE_MAX:
        try:
            zone(value)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
        else:
            return value
    raise _refusal(
        name,
        f"timezone {value!r} is not a time zone",
        where,
        'give an IANA name such as "Europe/Paris" or "UTC" (install the tzdata package where '
        "the system has no time zone database)",
    )


def _check_anchor(value: Any) -> datetime:
    """Return an aware datetime, given as one or as ISO 8601 text with an offset."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise InputInvalid(
                "give an aware datetime, or ISO 8601 text with an offset such as "
                '"2026-01-01T00:00:00+00:00"'
            ) from None
    anchor = validation.aware(value, "The anchor")
    if anchor.microsecond:
        raise InputInvalid("give a whole second: ticks fall on whole seconds")
    return anchor


def _check_choice(name: str, key: str, value: Any, choices: tuple[str, ...], where: str) -> str:
    if value not in choices or not isinstance(value, str):
        raise _refusal(
            name, f"{key} {value!r} is not a choice", where, f"use one of {', '.join(choices)}"
        )
    return value


def _check_payload(name: str, value: Any, where: str) -> str:
    try:
        text = canonical_json(value)
    except (TypeError, ValueError) as exc:
        raise _refusal(
            name, f"the payload is not JSON ({exc})", where, "give a JSON-serialisable value"
        ) from None
    return _field(name, "payload", where, validation.json_text, text, "payload")
