"""A pure reference model of the store's contract (SPEC §2-§6): no Django, no database.

The state machine in ``test_state_machine.py`` drives the real ``DurableJobStore`` from three
clients and, for every call, asks this model first what must happen: a result, or the exact
refusal (:class:`Refused` with the ``JobError`` code). After every step it compares every job
of the database with the model's.

Clients are numbered (0, 1, 2); a lease is ``ModelLease(job_id, owner, epoch, expires)`` with the
number of the client it was issued to. Job ids are the real ones: the machine passes the ids it
chose (``job_id=``) or that the store assigned, and the model checks them.

Every method decides on its refusal before it changes anything, so a refused call leaves the
model as it was, as a refused call must leave the database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

LEASE_LOST = "E_JOB_LEASE_LOST"
NOT_RECLAIMABLE = "E_JOB_NOT_RECLAIMABLE"
INPUT_INVALID = "E_JOB_INPUT_INVALID"
IDEMPOTENCY_CONFLICT = "E_JOB_IDEMPOTENCY_CONFLICT"
CAPACITY_REACHED = "E_JOB_CAPACITY_REACHED"

PENDING, RUNNING = "pending", "running"
COMPLETE, FAILED, CANCELLED = "complete", "failed", "cancelled"
TERMINAL = frozenset({COMPLETE, FAILED, CANCELLED})
INTERRUPTED, RELEASED = "interrupted", "released"
UNREQUESTED_CANCEL = "The executor raised JobCancelled without a request."
MISSED_AFTER = timedelta(seconds=10)


class Refused(Exception):
    """The store must refuse this call with a ``JobError`` of ``code`` and change nothing."""

    def __init__(self, code: str, why: str = "") -> None:
        super().__init__(f"{code}: {why}")
        self.code = code


class Mismatch(AssertionError):
    """The store answered something the contract does not allow."""


@dataclass(frozen=True)
class Attempt:
    """One history row: the attempt's epoch, its owner (a client number) and how it ended."""

    epoch: int
    owner: int | None
    outcome: str


@dataclass(frozen=True)
class ModelLease:
    job_id: str
    owner: int
    epoch: int
    expires: datetime


@dataclass
class ModelJob:
    id: str
    operation: str
    key: str
    proposal: str
    created_at: datetime
    run_after: datetime
    priority: int = 0
    status: str = PENDING
    epoch: int = 0
    attempts: int = 0
    owner: int | None = None
    lease_expires: datetime | None = None
    checkpoint: str | None = None
    result: str | None = None
    error: str | None = None
    cancel_requested: bool = False
    retry_requested: bool = False
    progress: float = 0.0
    history: list[Attempt] = field(default_factory=list)

    def claim_order(self) -> tuple:
        """Return the claim order's key (priority desc, run_after, created_at)."""
        return (-self.priority, self.run_after, self.created_at)


@dataclass
class ModelSchedule:
    """An interval schedule with catch-up ``latest`` and overlap ``skip``."""

    name: str
    operation: str
    payload: str
    anchor: datetime
    every: timedelta
    created_at: datetime
    last_tick: datetime | None = None
    last_job: str | None = None

    def ticks(self, after: datetime, until: datetime) -> list[datetime]:
        """Return the ticks ``t`` with ``after < t <= until``, oldest first."""
        if until <= after:
            return []
        first = (after - self.anchor) // self.every + 1
        last = (until - self.anchor) // self.every
        return [self.anchor + k * self.every for k in range(first, last + 1)]


def tick_key(name: str, tick: datetime) -> str:
    """Return the idempotency key of a schedule's tick (``schedule:<name>:<UTC second>Z``)."""
    return f"schedule:{name}:{tick.strftime('%Y-%m-%dT%H:%M:%S')}Z"


@dataclass
class StoreModel:
    """The contract's state: jobs, their attempts, schedules and the shared clock."""

    lease_seconds: float
    now: datetime
    resumable: frozenset[str]
    jobs: dict[str, ModelJob] = field(default_factory=dict)
    schedules: list[ModelSchedule] = field(default_factory=list)

    # -- reading ---------------------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def ownership(self, job: ModelJob) -> str:
        """Return the §2 assessment of ``job`` now (every pending row of the model is authentic)."""
        if job.status in TERMINAL:
            return "terminal"
        if job.status == PENDING:
            return "unclaimed"
        if job.lease_expires <= self.now:
            return "expired"
        return "current"

    def _by_key(self, operation: str, key: str) -> ModelJob | None:
        for job in self.jobs.values():
            if job.operation == operation and job.key == key:
                return job
        return None

    def _require_capacity(self, operation: str, cap: int | None, exclude: str = "") -> None:
        """Refuse one more running job of ``operation`` past ``max_running=cap``.

        Every running row counts, expired ones too, except the job being claimed again.
        """
        running = sum(
            1
            for job in self.jobs.values()
            if job.status == RUNNING and job.operation == operation and job.id != exclude
        )
        if cap is not None and running >= cap:
            raise Refused(CAPACITY_REACHED, f"{running} of {operation} running, cap {cap}")

    def _existing(self, operation: str, key: str | None, proposal: str) -> ModelJob | None:
        """Return the identical earlier submission, or None; refuse a different one."""
        if key is None:
            return None
        job = self._by_key(operation, key)
        if job is not None and job.proposal != proposal:
            raise Refused(IDEMPOTENCY_CONFLICT, f"key {key!r} holds another proposal")
        return job

    # -- submitting ------------------------------------------------------------------------------

    def defer(
        self,
        operation: str,
        key: str | None,
        proposal: str,
        job_id: str,
        *,
        priority: int = 0,
        run_after: datetime | None = None,
    ) -> str:
        """Return the id of the pending job (the earlier identical one, unchanged)."""
        earlier = self._existing(operation, key, proposal)
        if earlier is not None:
            return earlier.id
        self.jobs[job_id] = ModelJob(
            id=job_id,
            operation=operation,
            key=job_id if key is None else key,
            proposal=proposal,
            created_at=self.now,
            run_after=self.now if run_after is None else run_after,
            priority=priority,
        )
        return job_id

    def insert(
        self,
        client: int,
        operation: str,
        key: str | None,
        proposal: str,
        job_id: str,
        cap: int | None = None,
    ) -> ModelLease | None:
        """Create a running job owned by ``client``; None for an identical earlier submission.

        Capacity is checked after coalescing: a repeat is answered even when the limit is full.
        """
        if self._existing(operation, key, proposal) is not None:
            return None
        self._require_capacity(operation, cap)
        expires = self.now + timedelta(seconds=self.lease_seconds)
        self.jobs[job_id] = ModelJob(
            id=job_id,
            operation=operation,
            key=job_id if key is None else key,
            proposal=proposal,
            created_at=self.now,
            run_after=self.now,
            status=RUNNING,
            epoch=1,
            attempts=1,
            owner=client,
            lease_expires=expires,
        )
        return ModelLease(job_id, client, 1, expires)

    def plan_defer_many(self, operation: str, items: list[tuple[str | None, str]]) -> list:
        """Return, per item, the earlier job's id or None for a new job; refuse a conflict.

        A key given twice in the call with different proposals, or one whose earlier job holds
        another proposal, refuses the whole call.
        """
        seen: dict[str, str] = {}
        plan = []
        for key, proposal in items:
            if key is not None and seen.setdefault(key, proposal) != proposal:
                raise Refused(IDEMPOTENCY_CONFLICT, f"key {key!r} twice with other proposals")
            earlier = self._existing(operation, key, proposal)
            plan.append(None if earlier is None else earlier.id)
        return plan

    def defer_many(
        self, operation: str, items: list[tuple[str | None, str]], ids: list[str]
    ) -> None:
        """Apply a ``defer_many`` whose jobs came back with ``ids`` (checked against the plan)."""
        plan = self.plan_defer_many(operation, items)
        if len(ids) != len(items):
            raise Mismatch(f"{len(items)} submissions answered with {len(ids)} jobs")
        fresh: dict[str, str] = {}
        for (key, proposal), earlier, job_id in zip(items, plan, ids, strict=True):
            if earlier is not None:
                if job_id != earlier:
                    raise Mismatch(f"key {key!r}: job {job_id}, expected the earlier {earlier}")
                continue
            if key is not None and key in fresh:
                if fresh[key] != job_id:
                    raise Mismatch(f"key {key!r} given twice made two jobs")
                continue
            if job_id in self.jobs:
                raise Mismatch(f"a new submission answered with the existing job {job_id}")
            self.defer(operation, key, proposal, job_id)
            if key is not None:
                fresh[key] = job_id

    # -- claiming --------------------------------------------------------------------------------

    def _take(self, job: ModelJob, client: int, *, new_attempt: bool) -> ModelLease:
        if job.status == RUNNING and not any(a.epoch == job.epoch for a in job.history):
            job.history.append(Attempt(job.epoch, job.owner, INTERRUPTED))
        expires = self.now + timedelta(seconds=self.lease_seconds)
        job.status, job.owner, job.lease_expires = RUNNING, client, expires
        job.epoch += 1
        job.attempts += 1
        if new_attempt:
            job.result = job.error = None
            job.cancel_requested = job.retry_requested = False
            job.progress = 0.0
        return ModelLease(job.id, client, job.epoch, expires)

    def claim(self, client: int, job_id: str, cap: int | None = None) -> ModelLease:
        """Claim an unclaimed pending job or an expired lease by id (no new-attempt reset)."""
        job = self.jobs[job_id]
        if self.ownership(job) not in ("unclaimed", "expired"):
            raise Refused(NOT_RECLAIMABLE, f"{job.status}, {self.ownership(job)}")
        self._require_capacity(job.operation, cap, exclude=job_id)
        return self._take(job, client, new_attempt=False)

    def claimable(
        self, resume: frozenset[str], operations: frozenset[str] | None = None
    ) -> list[ModelJob]:
        """Return the jobs a ``claim_next`` may take now, in claim order (ties as they come)."""
        found = []
        for job in self.jobs.values():
            if operations is not None and job.operation not in operations:
                continue
            due = job.run_after <= self.now
            pending = job.status == PENDING and job.attempts == 0 and due
            retry = job.status in (FAILED, CANCELLED) and job.retry_requested and due
            expired = job.status == RUNNING and job.lease_expires <= self.now
            resumed = expired and (job.retry_requested or job.operation in resume)
            if pending or retry or resumed:
                found.append(job)
        return sorted(found, key=ModelJob.claim_order)

    def claim_next(
        self,
        client: int,
        limit: int,
        resume: frozenset[str] | None,
        chosen: list[str],
        operations: frozenset[str] | None = None,
    ) -> list[ModelLease]:
        """Take the ``chosen`` jobs, after checking they are the best ``limit`` claimable ones.

        Jobs tied in claim order may be taken in any order; ``chosen`` must be as many as the
        limit allows, distinct, and no job left behind may come strictly before one taken.
        """
        candidates = self.claimable(self.resumable if resume is None else resume, operations)
        if len(chosen) != min(limit, len(candidates)) or len(set(chosen)) != len(chosen):
            raise Mismatch(
                f"claimed {len(chosen)} of {len(candidates)} claimable jobs with limit {limit}"
            )
        by_id = {job.id: job for job in candidates}
        if not set(chosen) <= set(by_id):
            raise Mismatch(f"claimed a job that is not claimable: {set(chosen) - set(by_id)}")
        if chosen:
            worst = max(by_id[i].claim_order() for i in chosen)
            passed = [j for j in candidates if j.id not in chosen and j.claim_order() < worst]
            if passed:
                raise Mismatch(f"job {passed[0].id} came first in claim order but was left")
        # A retry request starts a new attempt (result, error, requests and progress cleared).
        return [self._take(by_id[i], client, new_attempt=by_id[i].retry_requested) for i in chosen]

    # -- owner writes ----------------------------------------------------------------------------

    def holds(self, client: int, lease: ModelLease) -> bool:
        """Return True when ``lease`` is ``client``'s and still the job's live lease."""
        job = self.jobs.get(lease.job_id)
        return (
            job is not None
            and lease.owner == client
            and job.status == RUNNING
            and job.owner == lease.owner
            and job.epoch == lease.epoch
            and job.lease_expires > self.now
        )

    def _fenced(self, client: int, lease: ModelLease) -> ModelJob:
        if not self.holds(client, lease):
            raise Refused(LEASE_LOST, "not the current lease")
        return self.jobs[lease.job_id]

    def heartbeat(self, client: int, lease: ModelLease) -> None:
        self._fenced(client, lease).lease_expires = self.now + timedelta(seconds=self.lease_seconds)

    def checkpoint(self, client: int, lease: ModelLease, value: str, *, valid: bool) -> None:
        if not valid:
            raise Refused(INPUT_INVALID, "checkpoint is not JSON")
        self._fenced(client, lease).checkpoint = value

    def progress(self, client: int, lease: ModelLease, percent: float) -> None:
        self._fenced(client, lease).progress = float(min(100.0, max(0.0, percent)))

    def _end(self, job: ModelJob, status: str, **changes) -> None:
        job.status = status
        for name, value in changes.items():
            setattr(job, name, value)
        job.history.append(Attempt(job.epoch, job.owner, status))

    def complete(self, client: int, lease: ModelLease, result: str) -> None:
        self._end(self._fenced(client, lease), COMPLETE, result=result, progress=100.0)

    def fail(self, client: int, lease: ModelLease, error: str) -> None:
        self._end(self._fenced(client, lease), FAILED, error=error)

    def cancel(self, client: int, lease: ModelLease) -> None:
        job = self._fenced(client, lease)
        if not job.cancel_requested:
            raise Refused(INPUT_INVALID, "no cancellation request to acknowledge")
        self._end(job, CANCELLED)

    def record_outcomes(
        self, client: int, outcomes: list[tuple[ModelLease, str, str | None]]
    ) -> list[str | None]:
        """End each attempt whose lease holds; return per outcome the status or None (lost)."""
        written: list[str | None] = []
        for lease, kind, text in outcomes:
            if not self.holds(client, lease):
                written.append(None)
                continue
            job = self.jobs[lease.job_id]
            if kind == COMPLETE:
                self._end(job, COMPLETE, result=text, progress=100.0)
            elif kind == CANCELLED and job.cancel_requested:
                self._end(job, CANCELLED)
            else:
                self._end(job, FAILED, error=text if kind == FAILED else UNREQUESTED_CANCEL)
            written.append(job.status)
        return written

    def release(self, client: int, leases: list[ModelLease]) -> int:
        """Hand back ``client``'s claims still held (expired or not); return how many.

        A lease listed twice is released once. A first attempt goes back to pending without
        any retry request (pending work needs none).
        """
        count = 0
        for lease in dict.fromkeys(leases):
            job = self.jobs.get(lease.job_id)
            if not (
                job is not None
                and job.status == RUNNING
                and job.owner == client == lease.owner
                and job.epoch == lease.epoch
                and job.attempts > 0
            ):
                continue
            job.history.append(Attempt(job.epoch, job.owner, RELEASED))
            if job.attempts == 1:
                job.status, job.owner, job.lease_expires, job.attempts = PENDING, None, None, 0
                job.retry_requested = False
            else:
                job.lease_expires = self.now
                job.retry_requested = True
                job.attempts -= 1
            count += 1
        return count

    # -- requests and retries --------------------------------------------------------------------

    def request_cancel(self, job_id: str) -> bool:
        job = self.jobs[job_id]
        if job.status in TERMINAL:
            return False
        if job.status == PENDING:
            job.status = CANCELLED
        job.cancel_requested = True
        return True

    def _retry_refusal(self, job: ModelJob) -> None:
        if job.status == COMPLETE:
            raise Refused(NOT_RECLAIMABLE, "complete is never reopened")
        if job.status not in (FAILED, CANCELLED) and self.ownership(job) != "expired":
            raise Refused(NOT_RECLAIMABLE, f"{job.status} has not ended")

    def request_retry(self, job_id: str) -> bool:
        job = self.jobs[job_id]
        if self.ownership(job) in ("unclaimed", "current"):
            return False
        self._retry_refusal(job)
        job.retry_requested = True
        job.run_after = min(job.run_after, self.now)
        return True

    def retry_atomically(
        self, client: int, job_id: str, *, fault: bool = False, cap: int | None = None
    ) -> ModelLease:
        """Start a new attempt; a fault in the caller's bookkeeping changes nothing.

        The bookkeeping runs before the capacity check, so its fault is what the caller sees.
        """
        job = self.jobs[job_id]
        self._retry_refusal(job)
        if fault:
            raise Refused("fault", "retain_outcome raised")
        self._require_capacity(job.operation, cap, exclude=job_id)
        return self._take(job, client, new_attempt=True)

    def refuse_unknown(self, job_id: str) -> None:
        """Refuse a claim or retry of a job no row has."""
        assert job_id not in self.jobs
        raise Refused(NOT_RECLAIMABLE, f"no job {job_id}")

    def complete_atomically(
        self, client: int, lease: ModelLease, receipt: str, *, fault: bool
    ) -> None:
        """Complete under the fence (a cancellation request refuses it); a fault changes nothing."""
        job = self._fenced(client, lease)
        if job.cancel_requested:
            raise Refused(LEASE_LOST, "cancellation was requested")
        if fault:
            raise Refused("fault", "the mutation raised")
        self._end(job, COMPLETE, result=receipt, progress=100.0)

    def finalize_atomically(
        self,
        client: int,
        lease: ModelLease,
        status: str,
        message: str,
        receipt: str | None,
        *,
        fault: bool,
    ) -> str:
        """Return ``finalized`` or ``pending-finalization`` (nothing written)."""
        if not self.holds(client, lease) or fault:
            return "pending-finalization"
        changes: dict = {"error": message or None}
        if receipt is not None:
            changes["result"] = receipt
        self._end(self.jobs[lease.job_id], status, **changes)
        return "finalized"

    # -- schedules -------------------------------------------------------------------------------

    def tick(self, job_of_key) -> tuple[list[str], int]:
        """Run one scheduler pass; return the keys of the ticks it enqueued, and how many it
        skipped (the schedule's last job still pending or running).

        ``job_of_key(key)`` gives the id the store gave a tick's new job.
        """
        enqueued, skipped = [], 0
        for schedule in self.schedules:
            after = schedule.last_tick or schedule.created_at
            cutoff = self.now - MISSED_AFTER
            missed = schedule.ticks(after, cutoff)[-1:]
            older = missed[0] - timedelta(microseconds=1) if missed else cutoff
            dropped = schedule.ticks(after, older)[-1:] if cutoff > after else []
            due = missed + schedule.ticks(max(after, cutoff), self.now)
            if not due:
                if dropped:
                    schedule.last_tick = dropped[0]
                continue
            for tick in due:
                last = self.jobs.get(schedule.last_job) if schedule.last_job else None
                if last is not None and last.status in (PENDING, RUNNING):
                    schedule.last_tick = tick
                    skipped += 1
                    continue
                key = tick_key(schedule.name, tick)
                known = self._by_key(schedule.operation, key)
                job_id = known.id if known is not None else job_of_key(key)
                self.defer(schedule.operation, key, schedule.payload, job_id)
                schedule.last_tick, schedule.last_job = tick, job_id
                enqueued.append(key)
        return enqueued, skipped
