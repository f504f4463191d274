"""InProcessRunner (``JobManager`` in SPEC §5), on a real database with real threads.

Proves: identical submissions coalesce and never run twice; heartbeats renew the lease so a job
outlasting its lease completes; a cancellation request made elsewhere reaches the executor as
``ctx.cancelled``; the outcome rules (return → complete even after a late request, JobCancelled →
cancelled, exception → failed with its message); a lost lease reaches the executor and its late
outcome never overwrites the new owner's work; ``destroy()`` touches only its own executors;
``cleanup()`` deletes nothing; progress, scope, ``max_jobs`` and ``resume_job``; the contract's
``django_durable_jobs.manager.JobManager`` is the runner under its former name.

Executors block on events (never on blind sleeps); a test waits for a job with ``manager.wait``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from django_durable_jobs.manager import JobManager
from django_durable_jobs.models import Job, JobAttempt
from django_durable_jobs.rules.errors import (
    CapacityReached,
    IdempotencyConflict,
    InputInvalid,
    JobCancelled,
    NotReclaimable,
    ScopeMismatch,
    TransactionOwned,
)
from django_durable_jobs.store import DurableJobStore, Submission
from tests.support import FakeClock, assert_refused, db_state, submission, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

OP = "tests.manager"  # the manager runs any executor; the operation need not be registered
WAIT = 15.0  # upper bound for anything a test waits on; reached only when something is broken


class Gate:
    """An executor that blocks until released, noticing cancellation; counts its calls.

    ``on_cancel="raise"`` acknowledges cancellation with JobCancelled; ``"ignore"`` notes it and
    keeps waiting for ``release``, then returns ``result``.
    """

    def __init__(self, *, on_cancel: str = "raise", result=None) -> None:
        self.on_cancel = on_cancel
        self.result = {"ok": True} if result is None else result
        self.calls = 0
        self.contexts = []
        self.started = threading.Event()
        self.release = threading.Event()
        self.saw_cancel = threading.Event()

    def __call__(self, ctx):
        self.calls += 1
        self.contexts.append(ctx)
        self.started.set()
        deadline = time.monotonic() + WAIT
        while not self.release.is_set():
            if ctx.cancelled:
                self.saw_cancel.set()
                if self.on_cancel == "raise":
                    raise JobCancelled("stopped on request")
            if time.monotonic() > deadline:
                raise AssertionError("the test never released this executor")
            self.release.wait(0.01)
        return self.result


@pytest.fixture
def rig():
    """Make managers and gates; at teardown release every gate and wait for every executor."""
    managers: list[JobManager] = []
    gates: list[Gate] = []

    class Rig:
        def manager(self, **options) -> JobManager:
            options.setdefault("lease_seconds", 0.6)
            m = JobManager(**options)
            managers.append(m)
            return m

        def gate(self, **options) -> Gate:
            g = Gate(**options)
            gates.append(g)
            return g

    yield Rig()
    for g in gates:
        g.release.set()
    for m in managers:
        for job_id in m.running:
            m.wait(job_id, WAIT)


def started(gate: Gate) -> None:
    assert gate.started.wait(WAIT), "the executor never started"


def outcomes(job_id) -> list[tuple[int, str]]:
    return list(
        JobAttempt.objects.filter(job_id=job_id).order_by("epoch").values_list("epoch", "outcome")
    )


# -- coalescing ---------------------------------------------------------------------------------


def test_identical_submissions_coalesce_and_never_run_twice(rig):
    m, other = rig.manager(), rig.manager()
    gate, other_gate = rig.gate(result={"n": 1}), rig.gate()
    sub = submission({"a": 1}, key="k1")

    job_id = m.start_job(OP, gate, sub)
    started(gate)
    assert m.start_job(OP, gate, sub) == job_id  # while it runs
    assert other.start_job(OP, other_gate, sub) == job_id  # from another manager
    gate.release.set()
    job = m.wait(job_id, WAIT)
    assert (job.status, job.result) == ("complete", '{"n":1}')
    assert m.start_job(OP, gate, sub) == job_id  # after it ended
    assert (gate.calls, other_gate.calls) == (1, 0)
    assert Job.objects.count() == 1
    assert outcomes(job_id) == [(1, "complete")]


def test_same_key_with_different_input_is_refused_and_runs_nothing(rig):
    m, gate = rig.manager(), rig.gate()
    job_id = m.start_job(OP, gate, submission({"a": 1}, key="k1"))
    gate.release.set()
    m.wait(job_id, WAIT)
    second = rig.gate()
    assert_refused(
        IdempotencyConflict,
        "E_JOB_IDEMPOTENCY_CONFLICT",
        lambda: m.start_job(OP, second, submission({"a": 2}, key="k1")),
    )
    assert second.calls == 0


def test_start_job_without_a_submission_creates_a_new_job_each_time(rig):
    m = rig.manager()
    gates = [rig.gate(), rig.gate()]
    ids = [m.start_job(OP, g) for g in gates]
    for g in gates:
        g.release.set()
    assert ids[0] != ids[1]
    assert [m.wait(i, WAIT).status for i in ids] == ["complete", "complete"]
    assert [g.calls for g in gates] == [1, 1]


def test_a_non_callable_executor_is_refused_before_anything_is_written(rig):
    m = rig.manager()
    assert_refused(InputInvalid, "E_JOB_INPUT_INVALID", lambda: m.start_job(OP, "not callable"))


def test_start_job_inside_the_callers_transaction_is_refused_with_transaction_owned(rig):
    m, gate = rig.manager(), rig.gate()
    with transaction.atomic():
        assert_refused(TransactionOwned, "E_JOB_TRANSACTION_OWNED", lambda: m.start_job(OP, gate))
    assert gate.calls == 0 and m.running == []
    assert Job.objects.count() == 0


def test_max_jobs_must_be_a_positive_whole_number():
    for bad in (0, -1, 1.5, True, "3"):
        with pytest.raises(InputInvalid) as caught:
            JobManager(max_jobs=bad)
        assert caught.value.code == "E_JOB_INPUT_INVALID"


# -- heartbeats ---------------------------------------------------------------------------------


def test_heartbeats_renew_the_lease_so_a_job_outlasting_its_lease_completes(rig):
    m, gate = rig.manager(lease_seconds=0.6), rig.gate(result={"long": True})
    job_id = m.start_job(OP, gate, submission(key="long"))
    started(gate)
    first = Job.objects.get(pk=job_id)
    renewed = wait_for(
        lambda: Job.objects.filter(pk=job_id, lease_expires_at__gt=first.lease_expires_at).first(),
        "a heartbeat that renews the lease",
        timeout=WAIT,
    )
    assert renewed.heartbeat_at > first.heartbeat_at
    # Run well past the first lease: heartbeats keep it alive, so nobody may take the job.
    wait_for(
        lambda: timezone.now() > first.lease_expires_at + timedelta(seconds=1.2),
        "the first lease to be long gone",
        timeout=WAIT,
    )
    assert m.get_job(job_id).ownership == "current"
    with pytest.raises(NotReclaimable):
        DurableJobStore(actor="thief").claim(job_id)
    gate.release.set()
    job = m.wait(job_id, WAIT)
    assert (job.status, job.fencing_epoch, job.attempts, job.result) == (
        "complete",
        1,
        1,
        '{"long":true}',
    )
    assert outcomes(job_id) == [(1, "complete")]


# -- cancellation -------------------------------------------------------------------------------


def test_cancellation_requested_elsewhere_reaches_the_executor_and_ends_cancelled(rig):
    m, gate = rig.manager(lease_seconds=0.6), rig.gate(on_cancel="raise")
    job_id = m.start_job(OP, gate, submission(key="c1"))
    started(gate)
    assert DurableJobStore(actor="operator").request_cancel(job_id) is True
    asked = time.monotonic()
    assert gate.saw_cancel.wait(WAIT)
    assert time.monotonic() - asked < 2.0  # a heartbeat comes every 0.2 s
    job = m.wait(job_id, WAIT)
    assert job.status == "cancelled"
    assert job.cancellation_requested_at is not None and job.completed_at is not None
    assert outcomes(job_id) == [(1, "cancelled")]
    assert m.report(job_id).outcome == "cancelled"


def test_cancel_job_reaches_its_own_executor_at_once(rig):
    m, gate = rig.manager(lease_seconds=30), rig.gate(on_cancel="raise")  # no heartbeat for 10 s
    job_id = m.start_job(OP, gate)
    started(gate)
    assert m.cancel_job(job_id) is True
    assert gate.saw_cancel.wait(5)
    assert m.wait(job_id, WAIT).status == "cancelled"
    assert m.cancel_job(job_id) is False  # ended: nothing more to request
    assert Job.objects.get(pk=job_id).status == "cancelled"


def test_executor_returning_after_a_late_cancellation_request_completes(rig):
    m, gate = rig.manager(lease_seconds=0.6), rig.gate(on_cancel="ignore", result={"done": True})
    job_id = m.start_job(OP, gate, submission(key="late"))
    started(gate)
    assert m.cancel_job(job_id) is True
    assert gate.saw_cancel.wait(WAIT)
    gate.release.set()
    job = m.wait(job_id, WAIT)
    assert (job.status, job.result, job.progress) == ("complete", '{"done":true}', 100.0)
    assert job.cancellation_requested_at is not None  # the request is kept as evidence
    assert outcomes(job_id) == [(1, "complete")]


def test_executor_exception_fails_the_job_with_its_message(rig):
    m = rig.manager()

    def explode(ctx):
        raise ValueError(f"bad input in {ctx.job_id}")

    job_id = m.start_job(OP, explode, submission(key="boom"))
    job = m.wait(job_id, WAIT)
    assert job.status == "failed"
    assert job.error == f"ValueError: bad input in {job_id}"
    attempt = JobAttempt.objects.get(job_id=job_id)
    assert (attempt.outcome, attempt.error) == ("failed", job.error)


def test_an_async_executor_is_awaited_its_checkpoint_kept_and_its_error_failed(rig):
    m = rig.manager()

    async def count(ctx):
        await asyncio.sleep(0)
        await ctx.acheckpoint({"at": 1})
        return {"sum": sum(ctx.payload["n"])}

    async def explode(ctx):
        await asyncio.sleep(0)
        raise ValueError("async and bad")

    done = m.wait(m.start_job(OP, count, submission({"n": [1, 2, 3]})), WAIT)
    # Before, the unawaited coroutine was taken for the result (and refused as unstorable).
    assert (done.status, done.result, done.checkpoint) == ("complete", '{"sum":6}', '{"at":1}')
    failed = m.wait(m.start_job(OP, explode), WAIT)
    assert (failed.status, failed.error) == ("failed", "ValueError: async and bad")
    assert outcomes(failed.pk) == [(1, "failed")]


def test_job_cancelled_without_a_request_fails_the_job(rig):
    m = rig.manager()

    def quit_early(ctx):
        raise JobCancelled("nobody asked")

    job_id = m.start_job(OP, quit_early)
    job = m.wait(job_id, WAIT)
    assert job.status == "failed" and job.cancellation_requested_at is None
    assert "without a request" in job.error


def test_wait_raises_timeout_error_while_the_executor_runs(rig):
    m, gate = rig.manager(), rig.gate()
    job_id = m.start_job(OP, gate)
    started(gate)
    with pytest.raises(TimeoutError):
        m.wait(job_id, 0.05)
    gate.release.set()
    assert m.wait(job_id, WAIT).status == "complete"


# -- lost leases --------------------------------------------------------------------------------


def test_lost_lease_reaches_the_executor_and_its_late_return_does_not_overwrite(rig):
    clock = FakeClock()
    m = rig.manager(lease_seconds=0.6, clock=clock, actor="stale")
    gate = rig.gate(on_cancel="ignore", result={"stale": True})
    job_id = m.start_job(OP, gate, submission(key="lost"))
    started(gate)
    clock.advance(1)  # the manager's lease expires; its heartbeats cannot revive it
    new_owner = DurableJobStore(actor="fresh", lease_seconds=60, clock=clock)
    lease = new_owner.claim(job_id)
    assert gate.saw_cancel.wait(WAIT)
    assert gate.contexts[0].lease_lost is True
    new_owner.checkpoint(lease, '{"fresh":1}')
    new_owner.complete(lease, {"fresh": True})
    gate.release.set()  # the stale executor now returns its own result
    job = m.wait(job_id, WAIT)
    assert (job.status, job.result, job.checkpoint) == ("complete", '{"fresh":true}', '{"fresh":1}')
    assert (job.fencing_epoch, job.owner_id, job.claimed_by) == (2, new_owner.owner_id, "fresh")
    assert outcomes(job_id) == [(1, "interrupted"), (2, "complete")]
    assert m.report(job_id).outcome == "lease-lost"


def test_stale_executor_stopping_after_a_lost_lease_leaves_the_new_attempt_running(rig):
    clock = FakeClock()
    m = rig.manager(lease_seconds=0.6, clock=clock)
    gate = rig.gate(on_cancel="raise")
    job_id = m.start_job(OP, gate, submission(key="lost2"))
    started(gate)
    clock.advance(1)
    new_owner = DurableJobStore(actor="fresh", lease_seconds=60, clock=clock)
    lease = new_owner.claim(job_id)
    job = m.wait(job_id, WAIT)  # the executor saw ctx.cancelled and raised JobCancelled
    assert gate.saw_cancel.is_set()
    assert (job.status, job.fencing_epoch, job.owner_id) == ("running", 2, new_owner.owner_id)
    assert job.cancellation_requested_at is None and job.error is None
    assert m.report(job_id).outcome == "lease-lost"
    new_owner.complete(lease, {"fresh": True})
    assert outcomes(job_id) == [(1, "interrupted"), (2, "complete")]


# -- destroy and cleanup ------------------------------------------------------------------------


def test_destroy_cancels_only_this_managers_executors(rig):
    a, b = rig.manager(lease_seconds=0.6), rig.manager(lease_seconds=0.6)
    gate_a, gate_b = rig.gate(on_cancel="raise"), rig.gate(on_cancel="raise", result={"b": 1})
    job_a = a.start_job(OP, gate_a, submission(key="a"))
    job_b = b.start_job(OP, gate_b, submission(key="b"))
    started(gate_a)
    started(gate_b)
    a.destroy()
    assert a.wait(job_a, WAIT).status == "cancelled"
    assert not gate_b.contexts[0].cancelled
    row_b = Job.objects.get(pk=job_b)
    assert (row_b.status, row_b.cancellation_requested_at) == ("running", None)
    # b keeps renewing its lease and finishes normally.
    wait_for(
        lambda: Job.objects.filter(pk=job_b, heartbeat_at__gt=row_b.heartbeat_at).exists(),
        "a heartbeat of b after a.destroy()",
        timeout=WAIT,
    )
    gate_b.release.set()
    job = b.wait(job_b, WAIT)
    assert (job.status, job.result, job.cancellation_requested_at) == ("complete", '{"b":1}', None)
    assert not gate_b.saw_cancel.is_set()
    # A destroyed manager starts nothing more.
    assert_refused(InputInvalid, "E_JOB_INPUT_INVALID", lambda: a.start_job(OP, rig.gate()))


def test_cleanup_returns_zero_and_deletes_nothing(rig):
    m = rig.manager()
    done = m.start_job(OP, lambda ctx: {"ok": 1})

    def broken(ctx):
        raise RuntimeError("kept as evidence")

    failed = m.start_job(OP, broken)
    m.wait(done, WAIT)
    m.wait(failed, WAIT)
    DurableJobStore().defer(OP, submission(key="pending"))
    before = db_state()
    assert m.cleanup() == 0
    assert db_state() == before
    assert Job.objects.count() == 3 and JobAttempt.objects.count() == 2


# -- progress, scope, capacity, resume ----------------------------------------------------------


def test_update_progress_only_for_jobs_this_manager_runs(rig):
    m, other = rig.manager(lease_seconds=30), rig.manager(lease_seconds=30)
    gate = rig.gate()
    job_id = m.start_job(OP, gate)
    started(gate)
    assert m.update_progress(job_id, 40) is True
    assert Job.objects.get(pk=job_id).progress == 40.0
    assert m.update_progress(job_id, 250) is True  # clamped
    assert Job.objects.get(pk=job_id).progress == 100.0
    assert other.update_progress(job_id, 5) is False
    with pytest.raises(InputInvalid):
        m.update_progress(job_id, float("nan"))
    assert Job.objects.get(pk=job_id).progress == 100.0
    gate.release.set()
    m.wait(job_id, WAIT)
    pending = m.defer_job(OP, submission(key="p"))
    before = db_state()
    assert m.update_progress(job_id, 10) is False  # it ended
    assert m.update_progress(pending, 10) is False  # nobody runs it
    assert db_state() == before


def test_list_jobs_and_get_job_stay_in_the_managers_scope(rig):
    a, b = rig.manager(scope="tenant-a"), rig.manager(scope="tenant-b")
    job_a = a.defer_job(OP, Submission.of("tenant-a", "k", {"x": 1}))
    job_b = b.defer_job(OP, Submission.of(None, "k", {"x": 1}))  # the manager's scope
    assert Job.objects.get(pk=job_b).scope == "tenant-b"
    assert [j.pk for j in a.list_jobs()] == [job_a]
    assert [j.pk for j in a.list_jobs(status="pending")] == [job_a]
    assert a.list_jobs(status="running") == []
    assert a.get_job(job_a).ownership == "unclaimed"
    assert a.get_job(job_b) is None
    assert a.cancel_job(job_b) is False
    assert Job.objects.get(pk=job_b).status == "pending"
    assert_refused(
        ScopeMismatch,
        "E_JOB_SCOPE_MISMATCH",
        lambda: a.defer_job(OP, Submission.of("tenant-b", "k2", {"x": 1})),
    )
    assert_refused(InputInvalid, "E_JOB_INPUT_INVALID", lambda: a.list_jobs(status="bogus"))


def test_max_jobs_refuses_beyond_capacity_with_capacity_reached(rig):
    clock = FakeClock()  # heartbeats rewrite identical values: db_state() stays comparable
    m = rig.manager(max_jobs=1, lease_seconds=30, clock=clock)
    gate = rig.gate()
    sub = submission(key="first")
    job_id = m.start_job(OP, gate, sub)
    started(gate)
    pending = m.defer_job(OP, submission(key="later"))
    extra = rig.gate()
    before = db_state()
    assert_refused(
        CapacityReached, "E_JOB_CAPACITY_REACHED", lambda: m.start_job(OP, extra, submission())
    )
    assert_refused(CapacityReached, "E_JOB_CAPACITY_REACHED", lambda: m.resume_job(pending, extra))
    assert m.start_job(OP, extra, sub) == job_id  # an identical submission still coalesces
    assert db_state() == before and extra.calls == 0
    gate.release.set()
    m.wait(job_id, WAIT)
    assert m.resume_job(pending, extra) == pending  # a slot is free again
    extra.release.set()
    assert m.wait(pending, WAIT).status == "complete"


def test_resume_job_runs_deferred_work(rig):
    m = rig.manager()
    job_id = m.defer_job(OP, Submission.of(None, "d", {"size": 3}))
    assert Job.objects.get(pk=job_id).status == "pending"
    seen = {}

    def run(ctx):
        seen.update(payload=ctx.payload, attempt=ctx.attempt, checkpoint=ctx.checkpoint_value)
        ctx.checkpoint({"done": ctx.payload["size"]})
        ctx.progress(50)
        return {"size": ctx.payload["size"]}

    assert m.resume_job(job_id, run) == job_id
    job = m.wait(job_id, WAIT)
    assert seen == {"payload": {"size": 3}, "attempt": 1, "checkpoint": None}
    assert (job.status, job.result, job.checkpoint) == ("complete", '{"size":3}', '{"done":3}')


def test_resume_job_takes_over_an_expired_lease_from_its_checkpoint(rig):
    clock = FakeClock()
    crashed = DurableJobStore(actor="crashed", lease_seconds=10, clock=clock)
    job_id = crashed.defer(OP, submission({"size": 5}, key="r")).pk
    old = crashed.claim(job_id)
    crashed.checkpoint(old, '{"done":2}')
    m = rig.manager(lease_seconds=30, clock=clock)
    assert_refused(
        NotReclaimable, "E_JOB_NOT_RECLAIMABLE", lambda: m.resume_job(job_id, rig.gate())
    )  # the lease is live
    clock.advance(11)
    job_id = m.resume_job(job_id, lambda ctx: {"from": ctx.checkpoint_value, "n": ctx.attempt})
    job = m.wait(job_id, WAIT)
    assert (job.status, job.result, job.fencing_epoch) == (
        "complete",
        '{"from":{"done":2},"n":2}',
        2,
    )
    assert outcomes(job_id) == [(1, "interrupted"), (2, "complete")]
    assert_refused(
        NotReclaimable, "E_JOB_NOT_RECLAIMABLE", lambda: m.resume_job(job_id, rig.gate())
    )  # complete is never reopened


def test_job_manager_is_the_in_process_runner_under_its_former_name():
    from django_durable_jobs.worker import InProcessRunner

    assert JobManager is InProcessRunner


def test_start_job_is_refused_while_its_operation_is_paused_and_frees_its_slot(rig):
    # start_job creates its job running: a pause in force holds it as it holds a claim.
    m = rig.manager(max_jobs=1, lease_seconds=30, clock=FakeClock())
    operator = DurableJobStore(actor="operator")
    operator.pause("operation", OP, reason="incident")
    gate = rig.gate()
    error = assert_refused(
        CapacityReached, "E_JOB_CAPACITY_REACHED", lambda: m.start_job(OP, gate, submission())
    )
    assert "held by a pause" in error.message and gate.calls == 0
    operator.resume("operation", OP)
    job_id = m.start_job(OP, gate, submission())  # the refused call kept no slot
    gate.release.set()
    assert m.wait(job_id, WAIT).status == "complete"
