"""Schedules declared in code are validated up front, and their ticks are the same everywhere.

Pure: no database. Proves each refusal names the schedule and its key; the definition hash moves
with every field and only then; interval ticks are anchored (two processes agree); cron ticks follow
the schedule's zone, with the daylight-saving rules of the module docstring at exact instants; and
the work of finding the newest ticks is bounded however long the range.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
from django.test import override_settings

from django_durable_jobs import every, operation
from django_durable_jobs.models import Schedule
from django_durable_jobs.rules import registry, validation
from django_durable_jobs.rules.errors import InputInvalid, PayloadTooLarge
from django_durable_jobs.schedules import (
    MAX_TICKS,
    ScheduleSpec,
    declared_schedules,
    latest_tick,
    newest_ticks,
    next_tick,
    parse_operation_schedule,
    parse_settings_schedule,
    problems,
    tick_key,
    ticks,
    timetable,
)

NAME = "nightly-sales"
SETTINGS = 'DURABLE_JOBS["SCHEDULES"]'
FULL = {
    "operation": "reports.rebuild",
    "cron": "0 3 * * *",
    "timezone": "Europe/Paris",
    "payload": {"report": "sales"},
    "scope": "tenant-a",
    "queue": "reports",
    "priority": 5,
    "overlap": "allow",
    "catch_up": "all",
    "catch_up_limit": 50,
}
ANCHOR = datetime(2026, 1, 1, tzinfo=UTC)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def cron(expression: str, zone: str = "UTC") -> ScheduleSpec:
    return parse_settings_schedule("c", {"operation": "op", "cron": expression, "timezone": zone})


def interval(seconds: int, anchor: datetime = ANCHOR) -> ScheduleSpec:
    return parse_settings_schedule("i", {"operation": "op", "every": seconds, "anchor": anchor})


@pytest.fixture
def operations():
    """Yield a list to append operation names to; unregister them afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        registry.unregister(name)


# -- declaring ------------------------------------------------------------------------------------


def test_every_is_a_timedelta():
    assert every(minutes=5) == timedelta(seconds=300)


def test_a_full_settings_entry_becomes_a_spec():
    spec = parse_settings_schedule(NAME, FULL)
    assert spec == ScheduleSpec(
        name=NAME,
        operation="reports.rebuild",
        cron="0 3 * * *",
        payload='{"report":"sales"}',
        scope="tenant-a",
        queue="reports",
        priority=5,
        timezone="Europe/Paris",
        overlap="allow",
        catch_up="all",
        catch_up_limit=50,
    )
    assert spec.interval_seconds is None


def test_defaults_fill_a_short_entry():
    spec = parse_settings_schedule("flush", {"operation": "metrics.flush", "every": 30})
    assert spec.every == timedelta(seconds=30)
    assert spec.interval_seconds == 30
    assert (spec.cron, spec.payload, spec.scope, spec.queue, spec.priority) == (
        None,
        "{}",
        None,
        "default",
        0,
    )
    assert (spec.timezone, spec.overlap, spec.catch_up, spec.catch_up_limit, spec.anchor) == (
        "UTC",
        "skip",
        "latest",
        100,
        None,
    )


@pytest.mark.parametrize(
    "value",
    [30, 30.0, timedelta(seconds=30), every(seconds=30)],
    ids=["int", "float", "td", "every"],
)
def test_an_interval_is_whole_seconds_in_any_form(value):
    spec = parse_settings_schedule("flush", {"operation": "op", "every": value})
    assert spec.every == timedelta(seconds=30)


def test_cron_whitespace_is_normalised_and_six_fields_are_accepted():
    assert cron("  0   3 * *\t* ").cron == "0 3 * * *"
    assert cron("*/10 * * * * *").cron == "*/10 * * * * *"


@pytest.mark.parametrize(
    "anchor",
    [datetime(2026, 1, 1, 1, tzinfo=timezone(timedelta(hours=1))), "2026-01-01T01:00:00+01:00"],
    ids=["datetime", "iso"],
)
def test_an_anchor_is_kept_in_utc(anchor):
    spec = parse_settings_schedule("i", {"operation": "op", "every": 60, "anchor": anchor})
    assert spec.anchor == ANCHOR
    assert spec.anchor.tzinfo is UTC


def test_operation_schedule_forms():
    assert parse_operation_schedule("a.b", "0 3 * * *").cron == "0 3 * * *"
    assert parse_operation_schedule("a.b", every(seconds=5)).every == timedelta(seconds=5)
    spec = parse_operation_schedule("a.b", {"cron": "0 3 * * *", "payload": {"kind": "full"}})
    assert (spec.name, spec.operation, spec.payload) == ("a.b", "a.b", '{"kind":"full"}')


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


BAD = [
    ("cron-range", {"cron": "61 * * * *"}, "cron '61 * * * *' is not a cron expression"),
    ("cron-fields", {"cron": "0 3 * *"}, "cron '0 3 * *' is not a cron expression"),
    ("cron-empty", {"cron": " "}, "cron ' ' is not a cron expression"),
    ("cron-type", {"cron": 5}, "cron 5 is not a cron expression"),
    ("cron-feb-31", {"cron": "0 0 31 2 *"}, "cron '0 0 31 2 *' is not a cron expression"),
    ("tz-unknown", {"timezone": "Mars/Olympus"}, "timezone 'Mars/Olympus' is not a time zone"),
    ("tz-path", {"timezone": "../etc/passwd"}, "timezone '../etc/passwd' is not a time zone"),
    ("tz-empty", {"timezone": ""}, "timezone '' is not a time zone"),
    ("tz-type", {"timezone": 1}, "timezone 1 is not a time zone"),
    ("both", {"every": 30}, "both cron and every are given"),
    ("neither", {"cron": None}, "neither cron nor every is given"),
    ("operation-name", {"operation": "bad name!"}, "operation 'bad name!' is refused"),
    ("operation-empty", {"operation": ""}, "operation '' is refused"),
    ("scope-empty", {"scope": ""}, "scope '' is refused"),
    ("scope-control", {"scope": "a\x00b"}, "scope 'a\\x00b' is refused"),
    ("queue-type", {"queue": 5}, "queue 5 is refused"),
    ("priority-high", {"priority": 101}, "priority 101 is refused"),
    ("priority-low", {"priority": -101}, "priority -101 is refused"),
    ("priority-float", {"priority": 1.0}, "priority 1.0 is refused"),
    ("priority-bool", {"priority": True}, "priority True is refused"),
    ("payload-set", {"payload": {1, 2}}, "the payload is not JSON"),
    ("payload-nan", {"payload": [math.nan]}, "the payload is not JSON"),
    ("payload-deep", {"payload": _nested(validation.MAX_JSON_DEPTH + 1)}, "levels deep"),
    ("overlap", {"overlap": "never"}, "overlap 'never' is not a choice"),
    ("catch-up", {"catch_up": "everything"}, "catch_up 'everything' is not a choice"),
    ("limit-zero", {"catch_up_limit": 0}, "catch_up_limit 0 is refused"),
    ("limit-high", {"catch_up_limit": 10_001}, "catch_up_limit 10001 is refused"),
    ("limit-text", {"catch_up_limit": "5"}, "catch_up_limit '5' is refused"),
    ("typo", {"catchup": "all"}, "unknown key 'catchup' (did you mean 'catch_up'?)"),
    ("cron-anchor", {"anchor": ANCHOR}, "anchor is given for a cron schedule"),
]


@pytest.mark.parametrize(("changes", "says"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_each_bad_value_is_refused_naming_the_schedule_and_key(changes, says):
    entry = {**FULL, **changes}
    with pytest.raises(InputInvalid) as refused:
        parse_settings_schedule(NAME, entry)
    message = refused.value.message
    assert message.startswith(f"Schedule {NAME!r}: ")
    assert says in message
    assert message.endswith(".") and SETTINGS in message


BAD_INTERVALS = [0, -1, 1.5, math.inf, True, "30", 2**31, timedelta(milliseconds=1500)]


@pytest.mark.parametrize("value", BAD_INTERVALS, ids=[repr(v) for v in BAD_INTERVALS])
def test_an_interval_that_is_not_whole_seconds_is_refused(value):
    with pytest.raises(InputInvalid, match=r"^.*Schedule 'flush': every .* whole seconds"):
        parse_settings_schedule("flush", {"operation": "op", "every": value})


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"timezone": "Europe/Paris"}, "timezone 'Europe/Paris' is given for an interval"),
        ({"anchor": datetime(2026, 1, 1)}, "anchor datetime.datetime(2026, 1, 1, 0, 0) is"),
        ({"anchor": "yesterday"}, "anchor 'yesterday' is refused"),
        ({"anchor": ANCHOR.replace(microsecond=5)}, "give a whole second"),
    ],
    ids=["zone", "naive-anchor", "text-anchor", "fractional-anchor"],
)
def test_interval_only_refusals(changes, says):
    with pytest.raises(InputInvalid) as refused:
        parse_settings_schedule("flush", {"operation": "op", "every": 30, **changes})
    assert refused.value.message.startswith("Schedule 'flush': ")
    assert says in refused.value.message


def test_a_payload_over_the_cap_is_refused_as_too_large():
    with override_settings(DURABLE_JOBS={"MAX_PAYLOAD_BYTES": 10}):
        with pytest.raises(PayloadTooLarge, match="Schedule 'flush': payload"):
            parse_settings_schedule("flush", {"operation": "op", "every": 1, "payload": "x" * 20})


@pytest.mark.parametrize(
    ("name", "entry", "says"),
    [
        ("", {"operation": "op", "every": 1}, "the name is refused"),
        ("x" * 201, {"operation": "op", "every": 1}, "the name is refused"),
        (NAME, "0 3 * * *", "the declaration is a str, not a dict"),
        (NAME, {"every": 1}, "operation is missing"),
    ],
    ids=["empty-name", "long-name", "not-a-dict", "no-operation"],
)
def test_bad_entries_are_refused(name, entry, says):
    with pytest.raises(InputInvalid) as refused:
        parse_settings_schedule(name, entry)
    assert refused.value.message.startswith(f"Schedule {name!r}: ")
    assert says in refused.value.message


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (30, "schedule is a int"),
        ({"operation": "x", "every": 1}, "unknown key 'operation'"),
        ({"cron": "61 * * * *"}, "cron '61 * * * *' is not a cron expression"),
    ],
    ids=["type", "operation-key", "bad-cron"],
)
def test_operation_schedule_refusals_name_the_decorator(value, says):
    with pytest.raises(InputInvalid) as refused:
        parse_operation_schedule("a.b", value)
    message = refused.value.message
    assert message.startswith("Schedule 'a.b': ") and says in message
    assert "@operation('a.b', schedule=...)" in message


# -- the definition hash --------------------------------------------------------------------------


def test_the_same_definition_has_the_same_hash():
    first = parse_settings_schedule(NAME, FULL)
    again = parse_settings_schedule(NAME, dict(reversed(FULL.items())))
    assert first.definition_hash == again.definition_hash
    assert len(first.definition_hash) == 64 and int(first.definition_hash, 16) >= 0
    assert parse_settings_schedule("other-name", FULL).definition_hash == first.definition_hash


CHANGES = {
    "operation": "reports.other",
    "cron": "0 4 * * *",
    "timezone": "Europe/Berlin",
    "payload": {"report": "stock"},
    "scope": None,
    "queue": "default",
    "priority": 6,
    "overlap": "skip",
    "catch_up": "latest",
    "catch_up_limit": 51,
}


@pytest.mark.parametrize(("key", "value"), CHANGES.items(), ids=list(CHANGES))
def test_any_change_changes_the_hash(key, value):
    before = parse_settings_schedule(NAME, FULL).definition_hash
    assert parse_settings_schedule(NAME, {**FULL, key: value}).definition_hash != before


def test_interval_and_anchor_are_part_of_the_hash():
    base = {"operation": "op", "every": 30}
    plain = parse_settings_schedule("i", base)
    assert "anchor" not in plain.definition()
    hashes = {
        plain.definition_hash,
        parse_settings_schedule("i", {**base, "every": 31}).definition_hash,
        parse_settings_schedule("i", {**base, "anchor": ANCHOR}).definition_hash,
        parse_settings_schedule("i", {**base, "anchor": ANCHOR + timedelta(1)}).definition_hash,
    }
    assert len(hashes) == 4


def test_row_fields_fit_the_model():
    fields = parse_settings_schedule(NAME, FULL).row_fields()
    assert fields["cron"] == "0 3 * * *" and fields["interval_seconds"] is None
    assert "anchor" not in fields
    row = Schedule(name=NAME, anchor=ANCHOR, **fields)
    assert row.definition_hash == parse_settings_schedule(NAME, FULL).definition_hash


# -- declared schedules: settings and @operation --------------------------------------------------


def test_declared_schedules_merge_settings_and_operations(operations):
    operations.append("tests.sched_nightly")
    operation("tests.sched_nightly", schedule={"cron": "0 3 * * *", "timezone": "Europe/Paris"})(
        lambda ctx, payload: None
    )
    assert registry.get("tests.sched_nightly").schedule == {
        "cron": "0 3 * * *",
        "timezone": "Europe/Paris",
    }
    with override_settings(DURABLE_JOBS={"SCHEDULES": {"flush": {"operation": "m", "every": 5}}}):
        declared = declared_schedules()
        assert problems() == []
    assert list(declared) == ["flush", "tests.sched_nightly"]
    assert declared["tests.sched_nightly"].timezone == "Europe/Paris"
    assert declared["flush"].every == timedelta(seconds=5)


def test_the_same_schedule_declared_twice_alike_is_one(operations):
    operations.append("tests.sched_twice")
    operation("tests.sched_twice", schedule="0 3 * * *")(lambda ctx, payload: None)
    same = {"tests.sched_twice": {"operation": "tests.sched_twice", "cron": "0 3 * * *"}}
    with override_settings(DURABLE_JOBS={"SCHEDULES": same}):
        assert list(declared_schedules()) == ["tests.sched_twice"]


def test_a_name_declared_twice_differently_is_refused(operations):
    operations.append("tests.sched_clash")
    operation("tests.sched_clash", schedule="0 3 * * *")(lambda ctx, payload: None)
    other = {"tests.sched_clash": {"operation": "tests.sched_clash", "cron": "0 4 * * *"}}
    with override_settings(DURABLE_JOBS={"SCHEDULES": other}):
        with pytest.raises(InputInvalid, match="Schedule 'tests.sched_clash' is declared twice"):
            declared_schedules()
        assert len(problems()) == 1


def test_an_unregistered_operation_is_not_an_error():
    entry = {"elsewhere": {"operation": "another.workers.operation", "every": 60}}
    with override_settings(DURABLE_JOBS={"SCHEDULES": entry}):
        assert list(declared_schedules()) == ["elsewhere"]


def test_schedules_that_are_not_a_dict_are_refused():
    with override_settings(DURABLE_JOBS={"SCHEDULES": ["nightly"]}):
        with pytest.raises(InputInvalid, match=r'DURABLE_JOBS\["SCHEDULES"\] is a list'):
            declared_schedules()


def test_problems_lists_every_bad_schedule():
    bad = {
        "a": {"operation": "op", "cron": "61 * * * *"},
        "b": {"operation": "op", "every": 1, "timezone": "Nowhere/Land"},
        "c": {"operation": "op", "every": 1},
    }
    with override_settings(DURABLE_JOBS={"SCHEDULES": bad}):
        found = problems()
    assert [m.split(":")[0] for m in found] == ["Schedule 'a'", "Schedule 'b'"]


# -- interval ticks -------------------------------------------------------------------------------


def test_interval_ticks_are_anchored():
    spec = interval(30, ANCHOR + timedelta(seconds=7))
    found = list(ticks(spec, utc(2026, 6, 1, 12, 0, 0), utc(2026, 6, 1, 12, 2, 0)))
    assert found == [utc(2026, 6, 1, 12, 0, s) for s in (7, 37)] + [
        utc(2026, 6, 1, 12, 1, s) for s in (7, 37)
    ]
    assert all(t.tzinfo is UTC for t in found)


def test_interval_ticks_exclude_after_and_include_until():
    spec = interval(10)
    assert list(ticks(spec, ANCHOR, ANCHOR + timedelta(seconds=20))) == [
        ANCHOR + timedelta(seconds=10),
        ANCHOR + timedelta(seconds=20),
    ]
    assert next_tick(spec, ANCHOR) == ANCHOR + timedelta(seconds=10)
    assert next_tick(spec, ANCHOR - timedelta(microseconds=1)) == ANCHOR


def test_two_processes_agree_on_interval_ticks():
    spec = interval(7)
    now = utc(2026, 3, 3, 3, 3, 3, 123456)
    first = list(ticks(spec, now, now + timedelta(minutes=1)))
    other = list(ticks(spec, now + timedelta(seconds=13.5), now + timedelta(minutes=2)))
    shared = [t for t in first if t > now + timedelta(seconds=13.5)]
    assert shared == other[: len(shared)] and len(shared) > 5
    assert all((t - ANCHOR) % timedelta(seconds=7) == timedelta(0) for t in first + other)


def test_ticks_before_the_anchor_follow_the_same_step():
    assert next_tick(interval(60), ANCHOR - timedelta(hours=1, seconds=1)) == ANCHOR - timedelta(
        hours=1
    )


def test_a_row_has_the_same_ticks_as_its_spec():
    spec = interval(45)
    row = Schedule(name="i", operation="op", cron="", interval_seconds=45, anchor=ANCHOR)
    after, until = utc(2026, 2, 1), utc(2026, 2, 1, 1)
    assert list(ticks(row, after, until)) == list(ticks(spec, after, until))
    paris = Schedule(name="c", operation="op", cron="0 3 * * *", timezone="Europe/Paris")
    paris.anchor = ANCHOR
    assert next_tick(paris, utc(2026, 7, 1)) == utc(2026, 7, 1, 1)


def test_intervals_ignore_daylight_saving():
    spec = parse_settings_schedule("h", {"operation": "op", "every": 3600, "anchor": ANCHOR})
    found = list(ticks(spec, utc(2026, 11, 1, 3), utc(2026, 11, 1, 9)))  # New York falls back
    assert found == [utc(2026, 11, 1, h) for h in range(4, 10)]


def test_an_interval_without_an_anchor_cannot_tick():
    spec = parse_settings_schedule("i", {"operation": "op", "every": 30})
    with pytest.raises(ValueError, match="no anchor"):
        next_tick(spec, ANCHOR)


def test_naive_bounds_are_refused():
    with pytest.raises(ValueError, match="aware"):
        ticks(interval(1), datetime(2026, 1, 1), ANCHOR)
    with pytest.raises(ValueError, match="aware"):
        newest_ticks(interval(1), ANCHOR, datetime(2026, 1, 1), 1)


# -- cron ticks and daylight saving ---------------------------------------------------------------


def test_cron_follows_the_schedules_zone():
    spec = cron("0 3 * * *", "Europe/Paris")
    assert next_tick(spec, utc(2026, 1, 10)) == utc(2026, 1, 10, 2)  # CET, UTC+1
    assert next_tick(spec, utc(2026, 7, 10)) == utc(2026, 7, 10, 1)  # CEST, UTC+2
    assert next_tick(cron("0 3 * * *"), utc(2026, 7, 10)) == utc(2026, 7, 10, 3)


def test_a_time_that_does_not_exist_fires_once_at_the_jump():
    """New York, 8 March 2026: 02:00 EST becomes 03:00 EDT; 02:30 fires at 03:00 EDT."""
    found = list(ticks(cron("30 2 * * *", "America/New_York"), utc(2026, 3, 7), utc(2026, 3, 10)))
    assert found == [utc(2026, 3, 7, 7, 30), utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 30)]


def test_a_time_that_happens_twice_fires_once_at_its_first_occurrence():
    """New York, 1 November 2026: 02:00 EDT becomes 01:00 EST; 01:30 fires at 01:30 EDT."""
    spec = cron("30 1 * * *", "America/New_York")
    found = list(ticks(spec, utc(2026, 10, 31), utc(2026, 11, 3)))
    assert found == [utc(2026, 10, 31, 5, 30), utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]
    # Counting from inside the repeated hour (01:10 EST) does not go back to 01:30 EDT.
    assert next_tick(spec, utc(2026, 11, 1, 6, 10)) == utc(2026, 11, 2, 6, 30)


def test_a_frequent_expression_fires_in_both_occurrences_of_a_repeated_hour():
    spec = cron("*/30 * * * *", "America/New_York")
    found = list(ticks(spec, utc(2026, 11, 1, 4, 45), utc(2026, 11, 1, 7, 15)))
    # 01:00 and 01:30 EDT, then 01:00 and 01:30 EST, then 02:00 EST.
    assert found == [utc(2026, 11, 1, 5) + timedelta(minutes=30 * n) for n in range(5)]


def test_a_frequent_expression_skips_an_hour_that_does_not_exist():
    spec = cron("*/30 * * * *", "America/New_York")
    found = list(ticks(spec, utc(2026, 3, 8, 6), utc(2026, 3, 8, 8)))
    # 01:30 EST, then 03:00, 03:30 and 04:00 EDT: nothing between 02:00 and 03:00.
    assert found == [utc(2026, 3, 8, 6, 30) + timedelta(minutes=30 * n) for n in range(4)]


def test_paris_daylight_saving_nights():
    spec = cron("30 2 * * *", "Europe/Paris")
    # 29 March 2026: 02:00 CET becomes 03:00 CEST, so 02:30 fires at 03:00 CEST.
    assert list(ticks(spec, utc(2026, 3, 28, 12), utc(2026, 3, 29, 12))) == [utc(2026, 3, 29, 1)]
    # 25 October 2026: 03:00 CEST becomes 02:00 CET; 02:30 fires once, at 02:30 CEST.
    assert list(ticks(spec, utc(2026, 10, 24, 12), utc(2026, 10, 25, 12))) == [
        utc(2026, 10, 25, 0, 30)
    ]


@pytest.mark.parametrize(
    ("expression", "zone"),
    [
        ("30 2 * * *", "America/New_York"),
        ("30 1 * * *", "America/New_York"),
        ("*/30 * * * *", "America/New_York"),
        ("0,30 2 * * *", "Europe/Paris"),
        ("5 */2 * * *", "Australia/Lord_Howe"),
        ("0 0 * * *", "America/Sao_Paulo"),
    ],
)
def test_cron_ticks_do_not_depend_on_where_counting_starts(expression, zone):
    spec = cron(expression, zone)
    start, end = utc(2018, 1, 1), utc(2019, 1, 1)  # Sao Paulo still had daylight saving
    whole = list(ticks(spec, start, end))
    assert whole == sorted(set(whole))
    for i in range(3, len(whole) - 3, max(1, len(whole) // 100)):
        for offset in (timedelta(seconds=-1), timedelta(0), timedelta(minutes=-45)):
            after = whole[i] + offset
            expected = whole[bisect_right(whole, after) : i + 4]
            assert list(ticks(spec, after, whole[i + 3])) == expected
            assert newest_ticks(spec, after, whole[i + 3], 2) == expected[-2:]


# -- tick keys ------------------------------------------------------------------------------------


def test_tick_key_format():
    tick = datetime(2026, 12, 1, 4, 0, tzinfo=timezone(timedelta(hours=1)))
    assert tick_key(NAME, tick) == "schedule:nightly-sales:2026-12-01T03:00:00Z"


def test_the_longest_tick_key_passes_key_validation():
    key = tick_key("n" * validation.NAME_MAX, utc(9998, 12, 31, 23, 59, 59))
    assert validation.idempotency_key(key) == key
    assert len(key) <= validation.KEY_MAX


# -- bounded work ---------------------------------------------------------------------------------


def test_ticks_stop_at_the_limit():
    spec = interval(1)
    year = list(ticks(spec, ANCHOR, ANCHOR + timedelta(days=365)))
    assert len(year) == MAX_TICKS and year[-1] == ANCHOR + timedelta(seconds=MAX_TICKS)
    assert list(ticks(spec, ANCHOR, ANCHOR + timedelta(days=1), limit=3))[-1] == ANCHOR + timedelta(
        seconds=3
    )


def test_the_newest_interval_ticks_are_computed_not_walked():
    spec = interval(1)
    until = utc(9000, 1, 1, 0, 0, 0, 500)
    assert newest_ticks(spec, ANCHOR, until, 3) == [
        until.replace(microsecond=0) - timedelta(seconds=s) for s in (2, 1, 0)
    ]
    assert latest_tick(spec, until) == until.replace(microsecond=0)
    assert newest_ticks(spec, until - timedelta(seconds=2), until, 10) == [
        until.replace(microsecond=0) - timedelta(seconds=1),
        until.replace(microsecond=0),
    ]
    assert newest_ticks(spec, until, until, 10) == []


class CountingCronSim(timetable.CronSim):
    """``CronSim`` that counts the ticks it is asked for."""

    steps = 0

    def __next__(self) -> datetime:
        type(self).steps += 1
        return super().__next__()


@pytest.fixture
def counted(monkeypatch):
    monkeypatch.setattr(timetable, "CronSim", CountingCronSim)
    CountingCronSim.steps = 0
    return CountingCronSim


def test_the_newest_cron_ticks_walk_a_bounded_window(counted):
    spec = cron("* * * * * *", "Europe/Paris")  # every second
    until = utc(2026, 6, 1, 12)
    newest = newest_ticks(spec, until - timedelta(days=365), until, 100)
    assert newest == [until - timedelta(seconds=s) for s in range(99, -1, -1)]
    assert counted.steps < 1_000


def test_the_latest_cron_tick_is_found_years_back(counted):
    leap_day = cron("0 12 29 2 *")
    assert latest_tick(leap_day, utc(2027, 6, 1)) == utc(2024, 2, 29, 12)
    assert latest_tick(leap_day, utc(2024, 2, 29, 12)) == utc(2024, 2, 29, 12)
    assert latest_tick(leap_day, utc(2024, 2, 29, 12), after=utc(2024, 2, 29, 12)) is None
    assert counted.steps < 200


def test_a_dense_month_far_back_is_found_by_halving_the_window(counted):
    january = cron("* * * * 1 *")  # every second of January
    until = utc(2026, 12, 31)
    assert latest_tick(january, until) == utc(2026, 1, 31, 23, 59, 59)
    assert newest_ticks(january, utc(2025, 6, 1), until, 3) == [
        utc(2026, 1, 31, 23, 59, s) for s in (57, 58, 59)
    ]
    assert counted.steps < 2_000


def test_newest_ticks_are_the_tail_of_all_ticks():
    spec = cron("*/7 1-3 * * *", "America/New_York")
    after, until = utc(2026, 10, 30), utc(2026, 11, 3)
    everything = list(ticks(spec, after, until))
    for limit in (1, 5, 50, len(everything), len(everything) + 10):
        assert newest_ticks(spec, after, until, limit) == everything[-limit:]


def test_a_duck_typed_schedule_works():
    row = SimpleNamespace(cron="0 3 * * *", interval_seconds=None, anchor=None, timezone="UTC")
    assert next_tick(row, utc(2026, 1, 1)) == utc(2026, 1, 1, 3)
