"""Schedule rows at the store: pause and resume, and reconciliation with the code.

Time is the store's clock (a FakeClock), so downtime is a jump of the clock, not a sleep. The
scheduler's pass is in test_ticks.py; the real ``runjobs`` processes are in
tests/worker/test_scheduler.py.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from django_durable_jobs.models import Schedule, WorkerProcess
from django_durable_jobs.rules.errors import InputInvalid
from django_durable_jobs.store import ScheduleNotFound
from tests.store.schedule_support import declare, every, jobs_of, row, worker
from tests.support import LEASE, T0, assert_refused

pytestmark = pytest.mark.django_db(transaction=True)

INVALID = "E_JOB_INPUT_INVALID"


# -- pause and resume ------------------------------------------------------------------------------


def test_pause_and_resume_set_and_clear_paused_at_and_say_whether_they_changed(store, clock):
    worker(clock).reconcile_schedules(declare(flush=every()))
    paused = store.pause_schedule("flush")
    assert (paused.changed, paused.paused_at, paused.paused_by) == (True, T0, "worker-a")
    clock.advance(5)
    again = store.pause_schedule("flush")
    assert (again.changed, again.paused_at) == (False, T0)  # idempotent: the first pause stands
    resumed = store.resume_schedule("flush")
    assert (resumed.changed, resumed.paused_at, resumed.paused_by) == (True, None, "")
    assert store.resume_schedule("flush").changed is False
    assert row("flush").paused_at is None


def test_pausing_a_schedule_that_does_not_exist_is_refused(store):
    error = assert_refused(ScheduleNotFound, INVALID, lambda: store.pause_schedule("nope"))
    assert "'nope'" in error.message
    assert isinstance(error, InputInvalid)
    assert_refused(ScheduleNotFound, INVALID, lambda: store.resume_schedule("nope"))


# -- reconciliation --------------------------------------------------------------------------------


def test_reconcile_inserts_a_row_per_declared_schedule_and_records_them_in_the_worker_row(clock):
    clock.advance(0.75)
    me = worker(clock)
    specs = declare(flush=every(30), nightly={"operation": "tests.tick", "cron": "0 3 * * *"})
    result = me.reconcile_schedules(specs)
    assert result.inserted == ("flush", "nightly")
    flush = row("flush")
    assert (flush.interval_seconds, flush.anchor, flush.last_tick_at) == (30, T0, None)
    assert (flush.definition_hash, flush.removed_at) == (specs["flush"].definition_hash, None)
    assert row("nightly").cron == "0 3 * * *"
    declared = json.loads(WorkerProcess.objects.get(owner_id=me.owner_id).schedules)
    assert declared == {name: spec.definition_hash for name, spec in specs.items()}
    assert str(me.reconcile_schedules(specs)) == "nothing to change"


def test_a_changed_definition_updates_the_row_and_keeps_pause_and_last_tick(store, clock):
    worker(clock).reconcile_schedules(declare(flush=every(30)))
    store.pause_schedule("flush")
    Schedule.objects.filter(name="flush").update(last_tick_at=T0)
    clock.advance(60)
    new = declare(flush=every(45, payload={"x": 1}))
    assert worker(clock).reconcile_schedules(new).updated == ("flush",)
    flush = row("flush")
    assert (flush.interval_seconds, flush.payload, flush.anchor) == (45, '{"x":1}', T0)
    assert (flush.paused_at, flush.last_tick_at) == (T0, T0)
    assert flush.definition_hash == new["flush"].definition_hash


def test_a_schedule_no_live_worker_declares_is_marked_removed_and_kept(clock):
    old = worker(clock, "old")
    old.reconcile_schedules(declare(flush=every(), gone=every()))
    clock.advance(1)
    new = worker(clock, "new")
    # "old" is alive and still declares "gone": nothing is removed yet.
    assert new.reconcile_schedules(declare(flush=every())).removed == ()
    assert row("gone").removed_at is None
    old.worker_stopped()
    clock.advance(1)
    assert new.reconcile_schedules(declare(flush=every())).removed == ("gone",)
    assert row("gone").removed_at == clock.now  # kept, with its history
    assert new.enqueue_due_ticks(clock.now + timedelta(hours=1)).enqueued == 1  # "flush" only
    assert jobs_of("gone") == []
    # Declared again, it is restored.
    assert new.reconcile_schedules(declare(flush=every(), gone=every())).restored == ("gone",)
    assert row("gone").removed_at is None


def test_a_stale_worker_does_not_keep_a_schedule(clock):
    worker(clock, "crashed").reconcile_schedules(declare(gone=every()))
    clock.advance(LEASE + 1)  # its heartbeat is now older than its lease
    assert worker(clock, "new").reconcile_schedules({}).removed == ("gone",)


def test_an_old_worker_does_not_revert_a_newer_live_worker_s_definition(clock):
    old = worker(clock, "old")  # started first
    old.reconcile_schedules(declare(flush=every(30)))
    clock.advance(1)
    new_specs = declare(flush=every(45), added=every(10))
    worker(clock, "new").reconcile_schedules(new_specs)
    assert row("flush").interval_seconds == 45
    # The old worker reconciles again (every minute, or it restarted its scheduler).
    result = old.reconcile_schedules(declare(flush=every(30)))
    assert result.left == ("flush",)
    assert (result.updated, result.removed) == ((), ())
    assert row("flush").interval_seconds == 45
    assert row("added").removed_at is None  # the newer worker declares it


def test_a_newer_worker_updates_what_an_older_one_declares(clock):
    worker(clock, "old").reconcile_schedules(declare(flush=every(30)))
    clock.advance(1)
    assert worker(clock, "new").reconcile_schedules(declare(flush=every(45))).updated == ("flush",)
