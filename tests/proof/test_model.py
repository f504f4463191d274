"""Fast tests of the state machine's reference model itself (no database).

The model is only as good as what it predicts; these pin the rules it is built from (SPEC §2-§6)
on small hand-made histories, so a mistake in it shows here rather than as a puzzling failure of
the machine.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import pytest

from tests.proof.model import (
    IDEMPOTENCY_CONFLICT,
    INPUT_INVALID,
    LEASE_LOST,
    NOT_RECLAIMABLE,
    Attempt,
    Mismatch,
    ModelSchedule,
    Refused,
    StoreModel,
    tick_key,
)

pytestmark = [pytest.mark.proof]

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
OP = "tests.steps"


def model() -> StoreModel:
    return StoreModel(lease_seconds=10.0, now=T0, resumable=frozenset({OP}))


def refused(m: StoreModel, code: str, call) -> None:
    """Require ``call`` to be refused with ``code`` and to leave the model ``m`` unchanged."""
    before = copy.deepcopy(m)
    with pytest.raises(Refused) as caught:
        call()
    assert caught.value.code == code
    assert m == before


def test_only_the_current_lease_of_its_own_client_writes() -> None:
    m = model()
    lease = m.insert(0, OP, None, "{}", "j1")
    m.heartbeat(0, lease)
    refused(m, LEASE_LOST, lambda: m.heartbeat(1, lease))  # another client's lease
    refused(m, LEASE_LOST, lambda: m.complete(1, lease, "1"))
    m.advance(10)  # the lease ends at its expiry instant
    refused(m, LEASE_LOST, lambda: m.heartbeat(0, lease))
    assert m.ownership(m.jobs["j1"]) == "expired"


def test_a_reclaim_supersedes_the_expired_attempt_and_fences_it_out() -> None:
    m = model()
    first = m.insert(0, OP, None, "{}", "j1")
    m.checkpoint(0, first, '{"done":1}', valid=True)
    m.advance(11)
    second = m.claim(1, "j1")
    job = m.jobs["j1"]
    assert (second.epoch, job.attempts, job.owner, job.checkpoint) == (2, 2, 1, '{"done":1}')
    assert job.history == [Attempt(1, 0, "interrupted")]
    refused(m, LEASE_LOST, lambda: m.complete(0, first, "1"))  # the stale lease
    m.complete(1, second, '"ok"')
    assert job.history[-1] == Attempt(2, 1, "complete") and job.progress == 100.0


def test_claim_next_takes_the_best_jobs_in_claim_order_ties_in_any_order() -> None:
    m = model()
    m.defer(OP, None, "{}", "low")
    m.defer(OP, None, "{}", "high", priority=5)
    m.advance(1)
    m.defer(OP, None, "{}", "later")
    with pytest.raises(Mismatch):
        m.claim_next(0, 1, None, ["low"])  # "high" comes first
    with pytest.raises(Mismatch):
        m.claim_next(0, 2, None, ["high"])  # two were claimable
    leases = m.claim_next(0, 2, None, ["high", "low"])
    assert [lease.job_id for lease in leases] == ["high", "low"]
    m.defer(OP, None, "{}", "tie-a")
    m.defer(OP, None, "{}", "tie-b")
    m.claim_next(1, 1, None, ["tie-b"])  # same priority, run_after and creation time
    assert m.jobs["tie-b"].owner == 1 and m.jobs["tie-a"].status == "pending"


def test_expired_leases_are_resumed_only_for_resumable_operations() -> None:
    m = model()
    m.insert(0, "tests.hold", None, "{}", "held")
    m.insert(0, OP, None, "{}", "resumed")
    m.advance(11)
    assert [job.id for job in m.claimable(m.resumable)] == ["resumed"]
    assert {job.id for job in m.claimable(frozenset({"tests.hold", OP}))} == {"held", "resumed"}
    assert m.request_retry("held") is True  # an expired lease may be retried
    assert {job.id for job in m.claimable(frozenset())} == {"held"}


def test_requests() -> None:
    m = model()
    m.defer(OP, None, "{}", "pending")
    assert m.request_retry("pending") is False  # nothing ended, nothing to retry
    assert m.request_cancel("pending") is True
    assert m.jobs["pending"].status == "cancelled"
    assert m.request_cancel("pending") is False  # ended: the result is kept
    lease = m.insert(0, OP, None, "{}", "running")
    refused(m, INPUT_INVALID, lambda: m.cancel(0, lease))  # no request to acknowledge
    assert m.request_cancel("running") is True
    assert m.jobs["running"].status == "running"
    refused(m, LEASE_LOST, lambda: m.complete_atomically(0, lease, "1", fault=False))
    m.complete(0, lease, "1")  # a request does not block completion
    refused(m, NOT_RECLAIMABLE, lambda: m.request_retry("running"))  # complete: never reopened
    refused(m, NOT_RECLAIMABLE, lambda: m.retry_atomically(0, "running"))


def test_retry_clears_the_outcome_and_keeps_the_checkpoint() -> None:
    m = model()
    lease = m.insert(0, OP, None, "{}", "j1")
    m.checkpoint(0, lease, "[1]", valid=True)
    m.request_cancel("j1")
    m.fail(0, lease, "boom")
    again = m.retry_atomically(2, "j1")
    job = m.jobs["j1"]
    assert (again.epoch, job.attempts, job.status, job.owner) == (2, 2, "running", 2)
    assert (job.error, job.cancel_requested, job.checkpoint) == (None, False, "[1]")
    assert job.history == [Attempt(1, 0, "failed")]  # no interrupted row: the attempt ended


def test_release_hands_claims_back() -> None:
    m = model()
    m.defer(OP, None, "{}", "fresh")
    (lease,) = m.claim_next(0, 1, None, ["fresh"])
    assert m.release(1, [lease]) == 0  # not that client's claim
    assert m.release(0, [lease]) == 1
    job = m.jobs["fresh"]
    assert (job.status, job.epoch, job.attempts, job.owner) == ("pending", 1, 0, None)
    assert job.history == [Attempt(1, 0, "released")]
    first = m.claim(1, "fresh")
    m.advance(11)
    resumed = m.claim(2, "fresh")
    assert m.release(2, [first, resumed, resumed]) == 1  # stale: skipped; twice: once
    assert (job.status, job.attempts, job.lease_expires, job.retry_requested) == (
        "running",
        1,
        m.now,
        True,
    )


def test_submissions_coalesce_or_conflict() -> None:
    m = model()
    assert m.defer(OP, "k", "{}", "a") == "a"
    assert m.defer(OP, "k", "{}", "b") == "a"  # identical: the earlier job
    refused(m, IDEMPOTENCY_CONFLICT, lambda: m.defer(OP, "k", "[]", "c"))
    assert m.insert(0, OP, "k", "{}", "d") is None
    refused(m, IDEMPOTENCY_CONFLICT, lambda: m.plan_defer_many(OP, [("x", "1"), ("x", "2")]))
    assert m.plan_defer_many(OP, [("k", "{}"), (None, "{}")]) == ["a", None]
    with pytest.raises(Mismatch):
        m.defer_many(OP, [("k", "{}")], ["not-a"])
    m.defer_many(OP, [("y", "1"), ("y", "1")], ["e", "e"])
    assert m.jobs["e"].key == "y"


def test_a_schedule_enqueues_each_tick_once_skipping_while_its_job_runs() -> None:
    m = model()
    every = timedelta(seconds=30)
    m.schedules.append(ModelSchedule("s", OP, "{}", T0, every, T0))
    ids = iter(f"tick-{n}" for n in range(10))
    assert m.tick(lambda key: next(ids)) == ([], 0)
    m.advance(30)
    assert m.tick(lambda key: next(ids)) == ([tick_key("s", T0 + every)], 0)
    m.advance(30)
    assert m.tick(lambda key: next(ids)) == ([], 1)  # tick-0 is still pending
    m.request_cancel("tick-0")
    m.advance(95)  # 12:02:35: the ticks of 12:01:30 and 12:02:00 were missed
    keys, skipped = m.tick(lambda key: next(ids))
    # Catch-up "latest": of the missed ticks only 12:02:00 is enqueued; 12:02:30 is on time but
    # skipped, the job of 12:02:00 being pending.
    assert (keys, skipped) == ([tick_key("s", T0 + 4 * every)], 1)
    assert m.schedules[0].last_tick == T0 + 5 * every


def test_a_first_attempt_released_goes_back_to_pending_without_a_retry_request() -> None:
    m = model()
    lease = m.insert(0, "tests.hold", None, "{}", "j1")
    m.advance(11)
    assert m.request_retry("j1") is True
    assert m.release(0, [lease]) == 1
    job = m.jobs["j1"]
    assert (job.status, job.retry_requested, job.attempts) == ("pending", False, 0)
    (again,) = m.claim_next(1, 1, frozenset(), ["j1"])
    m.advance(11)
    assert m.claimable(frozenset()) == []  # a held job is left for a person
