"""A batched claim under contention from several processes: no job claimed twice, capacity never
exceeded.

N client processes (``tests.race_child claim_batch``) start at one instant and loop
``claim_batch(limit=k)`` over one operation's backlog until nothing of it is pending, ending each
batch with ``record_outcomes``:

* an uncapped operation (the one-statement path): every job is claimed by exactly one process,
  once, and ends ``complete`` at epoch 1 with one attempt and one history row, its claimer's;
* the same with ``max_running`` (the row-by-row path behind the capacity gate), each batch held
  for a while before it ends: the operation's running rows, counted by the children right after
  each claim and sampled by the parent throughout, never exceed the limit;
* the first capped claims of an operation, which find its capacity gate missing and insert it
  at once, all go on to claim (on MariaDB a duplicate insert once left them deadlocked).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.test import override_settings

from django_durable_jobs.models import CapacityGate, Job, JobAttempt, JobStatus
from django_durable_jobs.store import DurableJobStore
from tests.race_child import CHILD_TIMEOUT, Children
from tests.settings import TEST_DB
from tests.support import (
    FakeClock,
    db_state,
    live_clock,
    sessions_running,
    submission,
    wait_for,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

UNCAPPED = "races.batch"
CAPPED = "races.capped"


@pytest.fixture
def clock() -> FakeClock:
    """The parent's clock, at the real time (children compare against real-time-based clocks)."""
    return live_clock()


def _backlog(clock: FakeClock, operation: str, total: int) -> set[str]:
    store = DurableJobStore(actor="parent", clock=clock)
    return {
        str(store.defer(operation, submission({"i": i}, key=f"{operation}-{i}")).pk)
        for i in range(total)
    }


def _args(clock: FakeClock, operation: str, limits: list[int], **extra: Any) -> list[dict]:
    later = (clock.now + timedelta(seconds=60)).isoformat()
    return [
        {"operation": operation, "limit": limit, "clock": later, "actor": f"racer-{i}", **extra}
        for i, limit in enumerate(limits)
    ]


def _race_while(children: Children, sample: Callable[[], None], delay: float = 0.2) -> list[dict]:
    """Start the race as ``Children.race`` does, calling ``sample()`` until every child ended."""
    for child in children.children:
        assert child.read() == {"ready": True}
    start_at = time.time() + delay
    for child in children.children:
        child.send(f"go {start_at!r}")
    deadline = time.monotonic() + CHILD_TIMEOUT
    while any(child.proc.poll() is None for child in children.children):
        assert time.monotonic() < deadline, "the racers did not finish"
        sample()
        time.sleep(0.002)  # a polling interval, not a wait for anything
    outcomes = [child.read() for child in children.children]
    for child in children.children:
        child.finish()
    return outcomes


def _claimed_once(outcomes: list[dict], ids: set[str], limits: list[int]) -> dict[str, dict]:
    """Require every job claimed by exactly one child, once, at epoch 1; return its claimer.

    No batch was larger than its limit, and every outcome was recorded.
    """
    failed = [o for o in outcomes if "unexpected" in o or "code" in o]
    assert not failed, failed
    claimed = [job_id for o in outcomes for job_id, _ in o["claimed"]]
    duplicates = [job_id for job_id, n in Counter(claimed).items() if n > 1]
    assert not duplicates, duplicates
    assert set(claimed) == ids
    assert {epoch for o in outcomes for _, epoch in o["claimed"]} == {1}
    assert [o["refused"] for o in outcomes] == [[]] * len(outcomes)
    assert all(o["largest"] <= limit for o, limit in zip(outcomes, limits, strict=True)), outcomes
    return {job_id: o for o in outcomes for job_id, _ in o["claimed"]}


def _complete_once_each(operation: str, claimer: dict[str, dict]) -> None:
    """Every job is complete at epoch 1 after one attempt, with one history row: its claimer's."""
    rows = Job.objects.filter(operation=operation).values_list(
        "id", "status", "owner_id", "fencing_epoch", "attempts", "result"
    )
    assert sorted(
        (str(pk), status, owner, epoch, attempts, json.loads(result))
        for pk, status, owner, epoch, attempts, result in rows
    ) == sorted(
        (job_id, JobStatus.COMPLETE, o["owner_id"], 1, 1, {"by": o["actor"]})
        for job_id, o in claimer.items()
    )
    history = JobAttempt.objects.filter(job__operation=operation).values_list(
        "job_id", "epoch", "outcome", "owner_id"
    )
    assert sorted((str(job_id), *rest) for job_id, *rest in history) == sorted(
        (job_id, 1, "complete", o["owner_id"]) for job_id, o in claimer.items()
    )


def _create_capacity_gate(clock: FakeClock, operation: str) -> None:
    """Have the operation's capacity gate created before the race.

    (``max_running=0``, which used to do it by a claim that takes nothing, is bad input now.)
    Concurrent first creations of a gate are tested on their own
    (``test_first_capped_claims_of_an_operation_do_not_deadlock``).
    """
    CapacityGate.objects.get_or_create(operation=operation)
    assert CapacityGate.objects.filter(operation=operation).exists()


def _nothing_left(clock: FakeClock, operation: str, **kwargs: Any) -> None:
    """One more claim finds nothing and changes nothing."""
    before = db_state()
    late = DurableJobStore(actor="late", clock=clock)
    assert late.claim_batch(operations=[operation], limit=5, **kwargs) == []
    assert db_state() == before


def test_batched_claims_racing_from_processes_take_every_job_exactly_once(db_settings_env, clock):
    total = 300
    ids = _backlog(clock, UNCAPPED, total)
    # Different limits compile different statements; all of them race over the same rows.
    limits = [1, 3, 5, 8, 13, 21]
    args = _args(clock, UNCAPPED, limits, hold=[0.0, 0.005])

    with Children(db_settings_env, "claim_batch", args) as children:
        outcomes = children.race()

    claimer = _claimed_once(outcomes, ids, limits)
    _complete_once_each(UNCAPPED, claimer)
    _nothing_left(clock, UNCAPPED)


def test_batched_claims_with_max_running_never_exceed_it(db_settings_env, clock):
    total, cap = 80, 5
    ids = _backlog(clock, CAPPED, total)
    # Six racers wanting two or three each hold their batches 50-80 ms: far more demand than
    # the limit allows, so claims keep meeting a full operation.
    limits = [2, 3, 2, 3, 2, 3]
    args = _args(clock, CAPPED, limits, max_running=cap, hold=[0.05, 0.08])
    _create_capacity_gate(clock, CAPPED)
    running = Job.objects.filter(operation=CAPPED, status=JobStatus.RUNNING)
    samples: list[int] = []

    with Children(db_settings_env, "claim_batch", args) as children:
        outcomes = _race_while(children, lambda: samples.append(running.count()))

    claimer = _claimed_once(outcomes, ids, limits)
    seen_by_children = [o["most_running"] for o in outcomes]
    assert max(seen_by_children) <= cap, seen_by_children
    assert samples and max(samples) <= cap, Counter(samples)
    # Six racers start at once and none ends a batch within 50 ms, so the limit is reached and
    # (five slots, six racers) some claim finds the operation full: the limit was exercised.
    assert max(seen_by_children + samples) == cap, (seen_by_children, Counter(samples))
    assert sum(o["waits"] for o in outcomes) > 0, "no claim ever met a full operation"
    _complete_once_each(CAPPED, claimer)
    _nothing_left(clock, CAPPED, max_running=cap)


def test_batched_claims_with_a_scope_running_limit_never_exceed_it(db_settings_env, clock):
    total, cap = 60, 4
    quotas = {"SCOPE_QUOTAS": {"default": {"MAX_RUNNING": cap}}}
    ids = _backlog(clock, UNCAPPED, total)
    limits = [2, 3, 2, 3, 2, 3]
    # Holds long enough that the racers overlap even when a loaded machine serialises their
    # claims behind SQLite's write lock (whose busy handler sleeps up to 100 ms between tries).
    args = _args(clock, UNCAPPED, limits, hold=[0.1, 0.15], durable_jobs=quotas)
    running = Job.objects.filter(scope="default", status=JobStatus.RUNNING)
    samples: list[int] = []

    with override_settings(DURABLE_JOBS=quotas):
        with Children(db_settings_env, "claim_batch", args) as children:
            outcomes = _race_while(children, lambda: samples.append(running.count()))
        claimer = _claimed_once(outcomes, ids, limits)
        assert samples and max(samples) <= cap, Counter(samples)
        assert max(o["most_running"] for o in outcomes) <= cap
        # The race tested the limit only if the scope filled up: seen full by the parent or by a
        # racer after its claim, or a claim that came back empty with jobs still pending.
        filled = max(samples) == cap or max(o["most_running"] for o in outcomes) == cap
        assert filled or sum(o["waits"] for o in outcomes) > 0, "the scope never filled up"
        _complete_once_each(UNCAPPED, claimer)
        _nothing_left(clock, UNCAPPED)


class Deadlocked(AssertionError):
    """A racing claim failed with a deadlock instead of claiming."""


@pytest.mark.skipif(
    TEST_DB == "sqlite", reason="SQLite runs one writer at a time: no two claims insert at once"
)
def test_first_capped_claims_of_an_operation_do_not_deadlock(db_settings_env, clock):
    """Two claims that each find an operation's gate missing both get their job, no deadlock.

    This test plays the first claimer of a capped operation: it has inserted the gate row and
    not committed yet. Two racing claims each lock a job, find no gate and insert one, waiting
    for the first; when it commits, both must go on to claim.
    """
    ids = _backlog(clock, CAPPED, 2)
    args = _args(clock, CAPPED, [1, 1], max_running=2)
    with Children(db_settings_env, "claim_batch", args) as children:
        racers = children.children
        for child in racers:
            assert child.read() == {"ready": True}
        with transaction.atomic():
            CapacityGate.objects.create(operation=CAPPED)
            for child in racers:
                child.send(f"go {time.time()!r}")
            wait_for(
                lambda: (
                    sessions_running(f"INSERT INTO %{CapacityGate._meta.db_table}%", waiting=True)
                    + sum(c.proc.poll() is not None for c in racers)
                    >= 2
                ),
                "both claims to wait for the uncommitted gate",
            )
        outcomes = [child.read() for child in racers]

    deadlocks = [o for o in outcomes if "Deadlock" in o.get("unexpected", "")]
    if deadlocks:
        raise Deadlocked(deadlocks)
    claimer = _claimed_once(outcomes, ids, [1, 1])
    assert sorted(len(o["claimed"]) for o in outcomes) == [1, 1], outcomes
    _complete_once_each(CAPPED, claimer)
