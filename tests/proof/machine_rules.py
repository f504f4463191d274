"""The rules of the store's state machine (run by ``test_state_machine.py``).

Each rule makes one call of the real store from one of three clients, after asking the model
(``tests.proof.model``) what must happen. Leases are drawn from one bundle whatever client they
were issued to, so stale leases (the job was claimed again since) and leases of another client
are used as often as current ones.
"""

from __future__ import annotations

import functools
import json
import random
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    rule,
)

from django_durable_jobs.models import CapacityGate, Job, JobAttempt, Schedule
from django_durable_jobs.rules.errors import JobError
from django_durable_jobs.rules.execution import Execution, Identity, bind_write_fence
from django_durable_jobs.rules.values import Outcome, canonical_json
from django_durable_jobs.rules.vocabulary import proposal_sha256
from django_durable_jobs.store import AttemptOutcome, DurableJobStore, Lease, Submission
from tests.proof.model import (
    CANCELLED,
    COMPLETE,
    FAILED,
    ModelLease,
    ModelSchedule,
    Refused,
    StoreModel,
)
from tests.schedule_rows import make_schedule
from tests.support import T0, FakeClock, db_state

LEASE = 10.0
CLIENTS = 3
RESUMED = "tests.steps"  # registered with on_expired="resume"
HELD = "tests.hold"  # on_expired="hold"
SCHEDULE = "proof-every-30s"

STATS: Counter = Counter()  # examples, steps and refusals of the current test run

# Job and owner ids drawn from a generator reset for every example: ties in claim order are
# broken by id, so random ids would make the runs of one seed differ (and Hypothesis could
# neither replay nor shrink them). The test installs ``fresh_uuid`` as ``uuid.uuid4``.
_IDS = random.Random(0)


def fresh_uuid() -> uuid.UUID:
    """Return the next id of this example's sequence (a version-4 UUID)."""
    return uuid.UUID(int=_IDS.getrandbits(128), version=4)


clients = st.integers(0, CLIENTS - 1)
operations = st.sampled_from([RESUMED, HELD])
keys = st.sampled_from([None, None, "k1", "k2", "k3"])
proposals = st.sampled_from(['{"n":1}', '{"n":2}', '{"n":[1,2,3]}'])
results = st.sampled_from([None, {"ok": True}, [1, 2], "done", 7])
messages = st.sampled_from(["boom", "timeout at step 3", "é ✓"])
caps = st.sampled_from([None, None, 1, 2])  # max_running of a claim, insert or retry


def counted(method: Callable) -> Callable:
    """Count the steps the machine runs (reported in test-output/proof/)."""

    @functools.wraps(method)
    def step(self, *args: Any, **kwargs: Any) -> Any:
        STATS["steps"] += 1
        STATS[f"rule {method.__name__}"] += 1
        return method(self, *args, **kwargs)

    return step


class StoreMachine(RuleBasedStateMachine):
    """Three clients of the store on one clock, checked against ``StoreModel`` at every step."""

    jobs = Bundle("jobs")
    leases = Bundle("leases")

    def __init__(self) -> None:
        super().__init__()
        JobAttempt.objects.all().delete()
        Schedule.objects.all().delete()
        Job.objects.all().delete()
        CapacityGate.objects.all().delete()
        _IDS.seed(0)
        self.clock = FakeClock(now=T0)
        self.clients = [
            DurableJobStore(actor=f"client-{i}", lease_seconds=LEASE, clock=self.clock)
            for i in range(CLIENTS)
        ]
        self.owners = {store.owner_id: i for i, store in enumerate(self.clients)}
        self.model = StoreModel(lease_seconds=LEASE, now=T0, resumable=frozenset({RESUMED}))
        STATS["examples"] += 1

    # -- helpers ---------------------------------------------------------------------------------

    def lease_of(self, lease: Lease) -> ModelLease:
        return ModelLease(
            str(lease.job_id), self.owners[lease.owner_id], lease.epoch, lease.expires_at
        )

    def same_lease(self, real: Lease | None, expected: ModelLease | None) -> None:
        if expected is None:
            assert real is None, f"expected no lease, got {real}"
            return
        assert real is not None, f"expected {expected}, got no lease"
        assert self.lease_of(real) == expected, f"lease {self.lease_of(real)} != {expected}"

    def expect(self, predict: Callable[[], Any], call: Callable[[], Any]) -> tuple[bool, Any, Any]:
        """Ask the model, then the store; return (accepted, predicted, answered).

        When the model predicts a refusal the store must raise that ``JobError`` code and the
        database must be exactly as before.
        """
        try:
            predicted = predict()
        except Refused as refusal:
            before = db_state()
            try:
                answered = call()
            except JobError as exc:
                assert exc.code == refusal.code, f"refused with {exc.code}, expected {refusal}"
            except Exception as exc:  # a fault the rule injected
                assert refusal.code == "fault", f"{type(exc).__name__}: {exc}; expected {refusal}"
            else:
                raise AssertionError(f"expected {refusal}, the store answered {answered!r}")
            assert db_state() == before, f"the refused call ({refusal}) changed the database"
            STATS["refusals"] += 1
            STATS[f"refused {refusal.code}"] += 1
            return False, None, None
        return True, predicted, call()

    def job_row(self, job_id: str) -> Job:
        return Job.objects.get(pk=job_id)

    def identity(self, client: int, job_id: str) -> Identity:
        job = self.model.jobs[job_id]
        return Identity("default", self.clients[client].actor, job.operation, job.key)

    def fenced(self, client: int, lease: Lease, budget: float = 30.0) -> Execution:
        job = self.model.jobs[str(lease.job_id)]
        execution = Execution.start(self.identity(client, job.id), budget=budget)
        return bind_write_fence(execution, lease, proposal_sha256(job.proposal))

    # -- setup -----------------------------------------------------------------------------------

    @initialize()
    def schedule(self) -> None:
        """Declare one interval schedule (every 30 s, catch-up latest, overlap skip)."""
        make_schedule(
            SCHEDULE,
            operation=RESUMED,
            cron="",
            interval_seconds=30,
            anchor=T0,
            payload='{"tick":true}',
            catch_up="latest",
            overlap="skip",
            created_at=T0,
        )
        self.model.schedules.append(
            ModelSchedule(SCHEDULE, RESUMED, '{"tick":true}', T0, timedelta(seconds=30), T0)
        )

    # -- submitting ------------------------------------------------------------------------------

    @rule(
        target=jobs,
        op=operations,
        key=keys,
        proposal=proposals,
        priority=st.sampled_from([0, 0, 5]),
        delay=st.sampled_from([None, None, 5]),
    )
    @counted
    def defer(self, op, key, proposal, priority, delay):
        job_id = str(fresh_uuid())
        run_after = None if delay is None else self.clock() + timedelta(seconds=delay)
        ok, expected, job = self.expect(
            lambda: self.model.defer(
                op, key, proposal, job_id, priority=priority, run_after=run_after
            ),
            lambda: self.clients[0].defer(
                op,
                Submission(None, key, proposal),
                job_id=job_id,
                priority=priority,
                run_after=run_after,
            ),
        )
        if not ok:
            return multiple()
        assert str(job.pk) == expected, f"defer answered job {job.pk}, expected {expected}"
        return expected

    @rule(target=leases, client=clients, op=operations, key=keys, proposal=proposals, cap=caps)
    @counted
    def insert(self, client, op, key, proposal, cap):
        job_id = str(fresh_uuid())
        ok, expected, lease = self.expect(
            lambda: self.model.insert(client, op, key, proposal, job_id, cap),
            lambda: self.clients[client].insert(
                op, submission=Submission(None, key, proposal), job_id=job_id, max_running=cap
            ),
        )
        if not ok:
            return multiple()
        self.same_lease(lease, expected)  # None: an identical submission, nothing claimed
        return multiple() if lease is None else lease

    @rule(
        target=jobs,
        op=operations,
        items=st.lists(st.tuples(keys, proposals), min_size=1, max_size=4),
    )
    @counted
    def defer_many(self, op, items):
        """The bulk path ``submit_many`` takes (``DurableJobStore.defer_many``)."""

        def call() -> list[Job]:
            submissions = [Submission(None, key, proposal) for key, proposal in items]
            return self.clients[1].defer_many(op, submissions)

        ok, _, jobs = self.expect(lambda: self.model.plan_defer_many(op, items), call)
        if not ok:
            return multiple()
        ids = [str(job.pk) for job in jobs]
        self.model.defer_many(op, items, ids)
        return multiple(*dict.fromkeys(ids))

    # -- claiming --------------------------------------------------------------------------------

    @rule(target=leases, client=clients, job_id=jobs, cap=caps)
    @counted
    def claim(self, client, job_id, cap):
        return self._claim(client, job_id, cap)

    @rule(target=leases, client=clients, held=leases, cap=caps)
    @counted
    def reclaim(self, client, held, cap):
        """Claim by id the job of a lease issued earlier: the takeover of an expired lease."""
        return self._claim(client, str(held.job_id), cap)

    def _claim(self, client: int, job_id: str, cap: int | None):
        ok, expected, lease = self.expect(
            lambda: self.model.claim(client, job_id, cap),
            lambda: self.clients[client].claim(job_id, max_running=cap),
        )
        if not ok:
            return multiple()
        self.same_lease(lease, expected)
        return lease

    @rule(
        target=leases,
        client=clients,
        limit=st.integers(1, 3),
        resume=st.sampled_from([None, (), (HELD,), (RESUMED, HELD)]),
        ops=st.sampled_from([None, None, (RESUMED,), (HELD,)]),
        batch=st.booleans(),
    )
    @counted
    def claim_next(self, client, limit, resume, ops, batch):
        store = self.clients[client]
        if batch:
            claimed = store.claim_batch(limit=limit, resume_expired=resume, operations=ops)
            got = [c.lease for c in claimed]
            for c in claimed:  # each lease comes with its row as the claim left it
                assert (c.job.pk, c.job.status, c.job.fencing_epoch) == (
                    c.lease.job_id,
                    "running",
                    c.lease.epoch,
                )
        else:
            got = store.claim_next(limit=limit, resume_expired=resume, operations=ops)
        chosen = [str(lease.job_id) for lease in got]
        expected = self.model.claim_next(
            client,
            limit,
            None if resume is None else frozenset(resume),
            chosen,
            None if ops is None else frozenset(ops),
        )
        for lease, predicted in zip(got, expected, strict=True):
            self.same_lease(lease, predicted)
        return multiple(*got)

    # -- owner writes ----------------------------------------------------------------------------

    @rule(client=clients, lease=leases)
    @counted
    def heartbeat(self, client, lease):
        ok, _, job = self.expect(
            lambda: self.model.heartbeat(client, self.lease_of(lease)),
            lambda: self.clients[client].heartbeat(lease),
        )
        if ok:  # the owner sees requests made meanwhile
            requested = self.model.jobs[str(lease.job_id)].cancel_requested
            assert (job.cancellation_requested_at is not None) == requested

    @rule(client=clients, picked=st.lists(leases, max_size=3))
    @counted
    def renew_leases(self, client, picked):
        rows = self.clients[client].renew_leases(picked)
        for lease, row in zip(picked, rows, strict=True):
            held = self.model.holds(client, self.lease_of(lease))
            assert (row is not None) == held, f"renew of {lease}: row {row}, held {held}"
        for lease in picked:
            if self.model.holds(client, self.lease_of(lease)):
                self.model.heartbeat(client, self.lease_of(lease))

    @rule(client=clients, lease=leases, percent=st.sampled_from([-5, 0, 37.5, 100, 140]))
    @counted
    def progress(self, client, lease, percent):
        self.expect(
            lambda: self.model.progress(client, self.lease_of(lease), percent),
            lambda: self.clients[client].progress(lease, percent),
        )

    @rule(client=clients, lease=leases, value=st.sampled_from(['{"done":1}', "[2]", "{bad"]))
    @counted
    def checkpoint(self, client, lease, value):
        self.expect(
            lambda: self.model.checkpoint(
                client, self.lease_of(lease), value, valid=value != "{bad"
            ),
            lambda: self.clients[client].checkpoint(lease, value),
        )

    @rule(seconds=st.sampled_from([1, 4, 9, 11, 31]))
    @counted
    def advance_clock(self, seconds):
        """Move the shared clock; 11 and 31 s outlive any lease taken before."""
        self.clock.advance(seconds)
        self.model.advance(seconds)

    # -- ending attempts -------------------------------------------------------------------------

    @rule(client=clients, lease=leases, result=results)
    @counted
    def complete(self, client, lease, result):
        self.expect(
            lambda: self.model.complete(client, self.lease_of(lease), canonical_json(result)),
            lambda: self.clients[client].complete(lease, result),
        )

    @rule(client=clients, lease=leases, message=messages)
    @counted
    def fail(self, client, lease, message):
        self.expect(
            lambda: self.model.fail(client, self.lease_of(lease), message),
            lambda: self.clients[client].fail(lease, message),
        )

    @rule(client=clients, lease=leases)
    @counted
    def cancel(self, client, lease):
        self.expect(
            lambda: self.model.cancel(client, self.lease_of(lease)),
            lambda: self.clients[client].cancel(lease),
        )

    @rule(
        client=clients,
        outcomes=st.lists(
            st.tuples(leases, st.sampled_from([COMPLETE, FAILED, CANCELLED]), messages),
            min_size=1,
            max_size=3,
        ),
    )
    @counted
    def record_outcomes(self, client, outcomes):
        """A worker's batched flush: each outcome stands or falls by its own lease."""
        built, planned = [], []
        for lease, kind, message in outcomes:
            if kind == COMPLETE:
                text = canonical_json({"m": message})
                built.append(Outcome.completed(lease, text))
            elif kind == FAILED:
                text = message
                built.append(Outcome.failed(lease, message))
            else:
                text = None
                built.append(Outcome.stopped(lease))  # what a worker sends for JobCancelled
            planned.append((self.lease_of(lease), kind, text))
        recorded = self.clients[client].record_outcomes(built)
        expected = self.model.record_outcomes(client, planned)
        got = [r.status for r in recorded]
        assert got == expected, f"record_outcomes wrote {got}, expected {expected}"
        for r in recorded:
            assert (r.status is None) == (r.refusal is not None)
            if r.refusal is not None:
                assert r.refusal.code == "E_JOB_LEASE_LOST"

    @rule(client=clients, picked=st.lists(leases, max_size=3))
    @counted
    def release(self, client, picked):
        """Claims handed back (a lease may be listed twice: it is released once)."""
        expected = self.model.release(client, [self.lease_of(lease) for lease in picked])
        released = self.clients[client].release(picked)
        assert released == expected, f"released {released}, expected {expected}"

    # -- requests and retries --------------------------------------------------------------------

    @rule(client=clients, job_id=jobs)
    @counted
    def request_cancel(self, client, job_id):
        ok, expected, answered = self.expect(
            lambda: self.model.request_cancel(job_id),
            lambda: self.clients[client].request_cancel(job_id),
        )
        assert answered == expected, f"request_cancel answered {answered}, expected {expected}"

    @rule(client=clients, job_id=jobs)
    @counted
    def request_retry(self, client, job_id):
        ok, expected, answered = self.expect(
            lambda: self.model.request_retry(job_id),
            lambda: self.clients[client].request_retry(job_id),
        )
        if ok:
            assert answered == expected, f"request_retry answered {answered}, expected {expected}"

    @rule(target=leases, client=clients, held=leases, fault=st.booleans(), cap=caps)
    @counted
    def retry_atomically(self, client, held, fault, cap):
        """A new attempt of a lease's job with the caller's bookkeeping; a fault in it rolls
        both back."""
        job_id = str(held.job_id)
        store = self.clients[client]
        execution = Execution.start(self.identity(client, job_id), budget=30.0)
        epoch = self.model.jobs[job_id].epoch
        previous: list[dict] = []

        def retain(row_json: str) -> str:
            previous.append(json.loads(row_json))
            if fault:
                raise RuntimeError("the bookkeeping failed")
            return '{"kept":true}'

        ok, expected, lease = self.expect(
            lambda: self.model.retry_atomically(client, job_id, fault=fault, cap=cap),
            lambda: store.retry_atomically(job_id, execution, retain, max_running=cap),
        )
        if fault and previous:
            assert previous[0]["fencing_epoch"] == epoch, "retain_outcome saw another row"
        if not ok:
            return multiple()
        assert [row["fencing_epoch"] for row in previous] == [epoch], "retain_outcome ran once"
        self.same_lease(lease, expected)
        return lease

    @rule(client=clients)
    @counted
    def unknown_job(self, client):
        """A job id no row has: claims and retries refuse it, requests answer False."""
        store, missing = self.clients[client], str(fresh_uuid())
        for call in (
            lambda: store.claim(missing),
            lambda: store.retry_atomically(
                missing, Execution.start(Identity("default", None, RESUMED, None), budget=30.0)
            ),
        ):
            self.expect(lambda: self.model.refuse_unknown(missing), call)
        assert store.request_cancel(missing) is False
        assert store.request_retry(missing) is False
        assert store.get(missing) is None

    @rule(client=clients, lease=leases, fault=st.booleans())
    @counted
    def complete_atomically(self, client, lease, fault):
        receipt = canonical_json({"receipt": str(lease.job_id)[:8]})

        def mutation(execution: Execution) -> str:
            if fault:
                raise RuntimeError("the domain write failed")
            return receipt

        self.expect(
            lambda: self.model.complete_atomically(
                client, self.lease_of(lease), receipt, fault=fault
            ),
            lambda: self.clients[client].complete_atomically(self.fenced(client, lease), mutation),
        )

    @rule(
        client=clients,
        lease=leases,
        status=st.sampled_from([FAILED, CANCELLED]),
        message=st.sampled_from(["", "stopped"]),
        receipt=st.sampled_from([None, '{"cleaned":1}']),
        fault=st.booleans(),
    )
    @counted
    def finalize_atomically(self, client, lease, status, message, receipt, fault):
        def bookkeeping(execution: Execution) -> str | None:
            if fault:
                raise RuntimeError("bookkeeping failed")
            return receipt

        before = db_state()
        expected = self.model.finalize_atomically(
            client, self.lease_of(lease), status, message, receipt, fault=fault
        )
        done = self.clients[client].finalize_atomically(
            self.fenced(client, lease), AttemptOutcome(status, message), bookkeeping
        )
        assert done.state == expected, (
            f"finalize: {done.state} ({done.reason}), expected {expected}"
        )
        if done.state != "finalized":
            assert db_state() == before, "a pending finalization changed the database"
            STATS["refusals"] += 1

    # -- schedules -------------------------------------------------------------------------------

    @rule(client=clients)
    @counted
    def scheduler_pass(self, client):
        """One scheduler pass at the shared clock's time (ticks every 30 s)."""
        summary = self.clients[client].enqueue_due_ticks()
        keys, skipped = self.model.tick(
            lambda key: str(Job.objects.get(operation=RESUMED, idempotency_key=key).pk)
        )
        assert (summary.enqueued, summary.skipped) == (len(keys), skipped), (
            f"pass {summary}, expected {len(keys)} enqueued and {skipped} skipped"
        )
        assert not summary.refused and not summary.broken, str(summary)

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def agrees_with_the_model(self) -> None:
        """Every job is the model's job: columns, ownership and attempt history; and no job is
        running without an owner and a lease expiry."""
        rows = {str(job.pk): job for job in self.clients[0].list()}
        assert set(rows) == set(self.model.jobs), "the jobs differ from the model's"
        history: dict[str, list] = {job_id: [] for job_id in rows}
        for attempt in JobAttempt.objects.order_by("id"):
            history[str(attempt.job_id)].append(
                (attempt.epoch, self.owners.get(attempt.owner_id), attempt.outcome)
            )
        for job_id, row in rows.items():
            if row.status == "running":  # whatever the model says: no running row is unleased
                assert row.owner_id and row.lease_expires_at, f"job {job_id} runs without a lease"
            job = self.model.jobs[job_id]
            owner = None if row.owner_id is None else self.owners[row.owner_id]
            actual = {
                "status": row.status,
                "epoch": row.fencing_epoch,
                "attempts": row.attempts,
                "owner": owner,
                "lease_expires": row.lease_expires_at,
                "checkpoint": row.checkpoint,
                "result": row.result,
                "error": row.error,
                "cancel_requested": row.cancellation_requested_at is not None,
                "retry_requested": row.retry_requested_at is not None,
                "progress": row.progress,
                "run_after": row.run_after,
                "ownership": row.ownership,
                "history": history[job_id],
            }
            expected = {
                "status": job.status,
                "epoch": job.epoch,
                "attempts": job.attempts,
                "owner": job.owner if job.status != "pending" else None,
                "lease_expires": job.lease_expires,
                "checkpoint": job.checkpoint,
                "result": job.result,
                "error": job.error,
                "cancel_requested": job.cancel_requested,
                "retry_requested": job.retry_requested,
                "progress": job.progress,
                "run_after": job.run_after,
                "ownership": self.model.ownership(job),
                "history": [(a.epoch, a.owner, a.outcome) for a in job.history],
            }
            differ = {k: (actual[k], expected[k]) for k in actual if actual[k] != expected[k]}
            assert not differ, f"job {job_id} (store, model): {differ}"
