"""Schedule rows this host cannot read: skipped by the pass, repaired by reconciliation.

Proves: a row whose time zone this host does not know, whose cron expression does not parse, or
whose timing or policies no declaration could have written is *broken* (``row_problem`` names it
and says how to fix it); the scheduler's pass skips it, writes nothing of it, names it in
``TickPass.broken`` and enqueues every other schedule, also those sorting after it;
reconciliation rewrites a broken row from a valid declaration, also when the row's definition
hash still matches, and leaves one it does not own (declared by a newer worker, or by no one
here) as it is; a broken row can be paused and resumed; a name no schedule could have (a NUL
byte, a control character) is "no such schedule" on every database and changes nothing.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings

from django_durable_jobs.models import Job, Schedule
from django_durable_jobs.schedules import declared_schedules, row_problem, tick_key
from django_durable_jobs.store import DurableJobStore, ScheduleNotFound
from tests.schedule_rows import everything
from tests.support import LEASE, T0, FakeClock

pytestmark = pytest.mark.django_db(transaction=True)

INVALID = "E_JOB_INPUT_INVALID"
CRON = {"operation": "tests.tick", "cron": "* * * * *", "overlap": "allow"}
EVERY = {"operation": "tests.tick", "every": 60}

# A stored field changed to what this host cannot read → words the reason must hold.
BREAKS = {
    "unknown-zone": ({"timezone": "Mars/Olympus"}, ["'Mars/Olympus'", "unknown on this host"]),
    "bad-cron": ({"cron": "61 * * * *"}, ["'61 * * * *'", "not a cron expression"]),
    "no-timing": ({"cron": ""}, ["neither a cron expression nor an interval"]),
    "bad-overlap": ({"overlap": "never"}, ["overlap 'never'"]),
    "bad-catch-up": ({"catch_up": "maybe"}, ["catch_up 'maybe'"]),
}


def declare(**schedules):
    with override_settings(DURABLE_JOBS={"SCHEDULES": schedules}):
        return declared_schedules()


def worker(clock: FakeClock, actor: str = "worker-a") -> DurableJobStore:
    store = DurableJobStore(actor=actor, lease_seconds=LEASE, clock=clock)
    store.register_worker(concurrency=1)
    return store


def row(name: str) -> Schedule:
    return Schedule.objects.get(name=name)


def ticked(name: str) -> list[str]:
    prefix = f"schedule:{name}:"
    found = Job.objects.filter(idempotency_key__startswith=prefix)
    return sorted(found.values_list("idempotency_key", flat=True))


def three_schedules(clock: FakeClock, broken: dict) -> DurableJobStore:
    """Declare ``a-first``, ``m-broken`` and ``z-last`` (cron, every minute), then break
    ``m-broken``'s row with ``broken``; return the scheduler's store."""
    worker(clock).reconcile_schedules(
        declare(**{"a-first": CRON, "m-broken": CRON, "z-last": CRON})
    )
    Schedule.objects.filter(name="m-broken").update(**broken)
    return DurableJobStore(actor="scheduler", clock=clock)


# -- the pure check --------------------------------------------------------------------------------


@pytest.mark.parametrize("change, words", BREAKS.values(), ids=list(BREAKS))
def test_row_problem_names_the_schedule_the_field_and_the_fix(clock, change, words):
    worker(clock).reconcile_schedules(declare(nightly=CRON))
    assert row_problem(row("nightly")) is None
    Schedule.objects.filter(name="nightly").update(**change)
    problem = row_problem(row("nightly"))
    assert problem is not None and problem.startswith("Schedule 'nightly': ")
    for word in words:
        assert word in problem
    assert "declaration" in problem and "skips it" in problem


@pytest.mark.parametrize("change", [{"interval_seconds": 0}, {"catch_up_limit": 0}])
def test_an_interval_row_can_be_broken_too(clock, change):
    worker(clock).reconcile_schedules(declare(flush=EVERY))
    Schedule.objects.filter(name="flush").update(**change)
    assert "Schedule 'flush'" in row_problem(row("flush"))


def test_an_interval_reads_whatever_its_zone(clock):
    worker(clock).reconcile_schedules(declare(flush=EVERY))
    Schedule.objects.filter(name="flush").update(timezone="Mars/Olympus")
    assert row_problem(row("flush")) is None  # interval ticks are in absolute time


# -- the pass --------------------------------------------------------------------------------------


@pytest.mark.parametrize("change, words", BREAKS.values(), ids=list(BREAKS))
def test_the_pass_skips_a_broken_row_and_enqueues_the_others(clock, change, words):
    scheduler = three_schedules(clock, change)
    before = Schedule.objects.filter(name="m-broken").values().get()
    now = T0 + timedelta(minutes=1, seconds=1)
    summary = scheduler.enqueue_due_ticks(now)
    assert summary.enqueued == 2
    assert list(summary.broken) == ["m-broken"]
    assert words[0] in summary.broken["m-broken"]
    assert "broken: m-broken" in str(summary)
    tick = T0 + timedelta(minutes=1)
    assert ticked("a-first") == [tick_key("a-first", tick)]
    assert ticked("z-last") == [tick_key("z-last", tick)]  # sorts after the broken one
    assert ticked("m-broken") == []
    assert Schedule.objects.filter(name="m-broken").values().get() == before  # nothing written
    # Every later pass goes on the same way.
    again = scheduler.enqueue_due_ticks(now + timedelta(minutes=1))
    assert (again.enqueued, list(again.broken)) == (2, ["m-broken"])


def test_a_broken_row_ticks_again_once_repaired(clock):
    scheduler = three_schedules(clock, {"timezone": "Mars/Olympus"})
    scheduler.enqueue_due_ticks(T0 + timedelta(minutes=1, seconds=1))
    Schedule.objects.filter(name="m-broken").update(timezone="UTC")
    summary = scheduler.enqueue_due_ticks(T0 + timedelta(minutes=2, seconds=1))
    assert summary.broken == {}
    # Its missed tick (catch-up "latest") and its tick on time; one each for the others.
    assert summary.enqueued == 4
    assert ticked("m-broken") == [
        tick_key("m-broken", T0 + timedelta(minutes=1)),
        tick_key("m-broken", T0 + timedelta(minutes=2)),
    ]


# -- reconciliation --------------------------------------------------------------------------------


@pytest.mark.parametrize("change, words", BREAKS.values(), ids=list(BREAKS))
def test_reconcile_repairs_a_broken_row_whose_declaration_is_valid(clock, change, words):
    me = worker(clock)
    specs = declare(nightly=CRON)
    me.reconcile_schedules(specs)
    Schedule.objects.filter(name="nightly").update(last_tick_at=T0, **change)
    assert row("nightly").definition_hash == specs["nightly"].definition_hash  # hash unchanged
    clock.advance(30)
    result = me.reconcile_schedules(specs)
    assert result.repaired == ("nightly",)
    assert "repaired nightly" in str(result)
    nightly = row("nightly")
    assert row_problem(nightly) is None
    assert (nightly.cron, nightly.timezone, nightly.overlap, nightly.catch_up) == (
        "* * * * *",
        "UTC",
        "allow",
        "latest",
    )
    assert nightly.last_tick_at == T0  # what the scheduler wrote is kept
    assert str(me.reconcile_schedules(specs)) == "nothing to change"


def test_reconcile_leaves_a_broken_row_a_newer_worker_declares(clock):
    old = worker(clock, "old")
    old.reconcile_schedules(declare(nightly=CRON))
    clock.advance(1)
    newer = {**CRON, "timezone": "Europe/Paris"}
    worker(clock, "new").reconcile_schedules(declare(nightly=newer))
    # The newer host knows a zone this one does not (its tzdata is newer).
    Schedule.objects.filter(name="nightly").update(timezone="Mars/Olympus")
    before = everything()
    result = old.reconcile_schedules(declare(nightly=CRON))
    assert (result.left, result.repaired, result.updated) == (("nightly",), (), ())
    assert everything() == before
    assert row_problem(row("nightly")) is not None  # still listed as broken


def test_reconcile_leaves_a_broken_row_it_does_not_declare(clock):
    other = worker(clock, "other")
    other.reconcile_schedules(declare(nightly=CRON))
    Schedule.objects.filter(name="nightly").update(cron="61 * * * *")
    me = worker(clock, "me")
    before = everything()
    assert str(me.reconcile_schedules({})) == "nothing to change"  # "other" still declares it
    assert everything() == before


# -- pause and resume ------------------------------------------------------------------------------


def test_a_broken_row_can_be_paused_and_resumed(store, clock):
    worker(clock).reconcile_schedules(declare(nightly=CRON))
    Schedule.objects.filter(name="nightly").update(timezone="Mars/Olympus")
    assert store.pause_schedule("nightly").changed is True
    assert row("nightly").paused_at == T0
    assert store.resume_schedule("nightly").changed is True
    assert row("nightly").paused_at is None


@pytest.mark.parametrize("name", ["a\x00b", "\x00", "a\nb", "x" * 201], ids=repr)
@pytest.mark.parametrize("verb", ["pause_schedule", "resume_schedule"])
def test_a_name_no_schedule_could_have_is_not_found_and_changes_nothing(store, clock, name, verb):
    worker(clock).reconcile_schedules(declare(nightly=CRON))
    before = everything()
    with pytest.raises(ScheduleNotFound) as caught:
        getattr(store, verb)(name)
    assert caught.value.code == INVALID
    assert repr(name) in caught.value.message and "nightly" in caught.value.message
    assert everything() == before
