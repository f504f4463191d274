"""Fuzzing the store: generated arguments for every public method of ``DurableJobStore``.

Proves, on every database, for constructor arguments, operations, scopes, keys, proposals,
checkpoints, results, job ids, limits, status filters, queues, priorities, times, leases (real,
forged field by field, or not leases at all), page queries and cursors, that each call either

- is refused with a ``JobError`` carrying a stable ``E_...`` code and a message, and the database
  (every job, attempt, gate and schedule row) is exactly as before; or
- is accepted and wrote what it says (the stored proposal, checkpoint, result, progress, lease).

Nothing else may escape: no database error, no ``TypeError`` / ``ValueError`` /
``ValidationError`` / ``OverflowError`` from a value the caller handed in. The existing refusal
tests (``tests/store/test_bad_input.py``, ``test_contract_refusals.py``) pin each documented
refusal by hand; these add breadth from generated input. Each example starts from the same few
rows (pending, running, failed, complete), rebuilt so no example depends on another.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import transaction
from hypothesis import event, example, given
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from django_durable_jobs.models import CapacityGate, Job, JobAttempt, Schedule
from django_durable_jobs.rules import validation
from django_durable_jobs.rules.errors import JobError, TransactionOwned
from django_durable_jobs.rules.execution import Execution, Identity, bind_write_fence
from django_durable_jobs.rules.values import Outcome, canonical_json
from django_durable_jobs.store import (
    AttemptOutcome,
    DurableJobStore,
    Lease,
    PageQuery,
    Submission,
    assert_write_fence,
)
from tests.proof import strategies as fz
from tests.support import LEASE, T0, FakeClock, db_state, execution_for, submission

pytestmark = [pytest.mark.proof, pytest.mark.django_db(transaction=True)]

OP = "fuzz.op"
SCOPE = "fuzz-tenant"
ACTOR = "fuzz-reader"


# -- the rows every example starts from ------------------------------------------------------------


@dataclasses.dataclass
class World:
    clock: FakeClock
    store: DurableJobStore  # unscoped, actor "fuzz"
    rival: DurableJobStore
    reader: DurableJobStore  # scoped, with an actor: list_page needs both
    pending: Job
    lease: Lease  # a live lease of ``store``
    failed: Job
    complete: Job
    requested: bool = False  # set when an example wrote before its fuzzed call

    def job_ids(self) -> list[Any]:
        return [self.pending.pk, self.lease.job_id, self.failed.pk, self.complete.pk]


def fresh_world() -> World:
    """Empty the job tables and lay down one job of each kind, at T0."""
    JobAttempt.objects.all().delete()
    Job.objects.all().delete()
    CapacityGate.objects.all().delete()
    clock = FakeClock()
    store = DurableJobStore(actor="fuzz", lease_seconds=LEASE, clock=clock)
    rival = DurableJobStore(actor="rival", lease_seconds=LEASE, clock=clock)
    reader = DurableJobStore(scope=SCOPE, actor=ACTOR, lease_seconds=LEASE, clock=clock)
    pending = store.defer(OP, submission({"n": 1}, key="pending"))
    for n in range(3):
        reader.defer(OP, submission({"page": n}, key=f"page-{n}"))
    lease = store.insert(OP, submission=submission({"n": 3}, key="running"))
    failed = store.defer(OP, submission({"n": 4}, key="failed"))
    store.fail(store.claim(failed.pk), "boom")
    complete = store.defer(OP, submission({"n": 5}, key="complete"))
    store.complete(store.claim(complete.pk), {"ok": True})
    return World(clock, store, rival, reader, pending, lease, failed, complete)


_kept: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def _forget_the_world():
    """Each test starts from flushed tables: no world of an earlier test is kept."""
    _kept.clear()
    yield
    _kept.clear()


def world_for_example() -> World:
    """Return the previous example's world when it left the rows untouched, else a fresh one.

    A refusal is proven to change nothing, so its world serves the next example as it is (the
    clock moved back to T0); rebuilding it for every example would cost a dozen commits.
    """
    world = _kept.get("world")
    if world is None or not _kept.get("untouched"):
        world = fresh_world()
    world.clock.now = T0
    world.requested = False
    _kept.update(world=world, untouched=False)
    return world


def untouched(flag: bool) -> None:
    """Record whether this example left the world's rows as it found them (a refusal)."""
    _kept["untouched"] = flag


def state() -> str:
    """Return every row a refusal must leave alone: jobs, attempts, gates and schedules."""
    schedules = list(Schedule.objects.order_by("name").values())
    return db_state() + json.dumps(schedules, default=str, sort_keys=True)


def attempt(call, what: Any, label: str = "") -> tuple[bool, Any]:
    """Run ``call``; return (True, value) when accepted, (False, error) when refused.

    A refusal must be a ``JobError`` with an ``E_`` code and a message that wrote nothing; any
    other exception propagates and fails the test with Hypothesis' smallest example.
    """
    before = state()
    try:
        value = call()
    except JobError as exc:
        note_event(f"{label} refused: {exc.code}")
        assert not isinstance(exc, TransactionOwned), "the test ran inside an atomic block"
        assert isinstance(exc.code, str) and exc.code.startswith("E_"), (what, exc)
        assert exc.message, (what, exc)
        assert state() == before, f"refusing {what!r} ({exc.code}) changed the database"
        return False, exc
    note_event(f"{label} accepted")
    return True, value


def note_event(text: str) -> None:
    """Count ``text`` in Hypothesis' statistics (``--hypothesis-show-statistics``)."""
    if currently_in_test_context():
        event(text)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- strategies of this module -------------------------------------------------------------------


def forged(world: World, data: st.DataObject) -> Any:
    """Return the live lease, a copy with some fields replaced, or something else entirely."""
    rnd = data.draw(st.randoms(use_true_random=True), label="lease kind")
    kind = rnd.choice(["real", "real", "real", "forged", "forged", "other"])
    if kind == "real":
        return world.lease
    if kind == "other":
        return data.draw(st.one_of(fz.anything(), st.just(world.lease.job_id)), label="not a lease")
    replacements = {
        "job_id": st.one_of(fz.job_ids(), st.sampled_from(world.job_ids())),
        "owner_id": st.one_of(fz.names(), st.just(world.rival.owner_id)),
        "epoch": st.one_of(fz.integers(), fz.scalars()),
        "expires_at": fz.scalars(),
    }
    fields = data.draw(st.sets(st.sampled_from(sorted(replacements)), min_size=1), label="fields")
    changes = {f: data.draw(replacements[f], label=f) for f in sorted(fields)}
    return dataclasses.replace(world.lease, **changes)


# -- the constructor -----------------------------------------------------------------------------

CLOCKS = {
    "fake": lambda: FakeClock(),
    "naive": lambda: lambda: datetime(2026, 1, 1),
    "text": lambda: lambda: "2026-01-01T00:00:00Z",
    "far future": lambda: lambda: datetime(9998, 12, 31, 23, 59, tzinfo=UTC),
    "past 9998": lambda: lambda: datetime.max.replace(tzinfo=UTC),
    "year 1": lambda: lambda: datetime(1, 1, 1, tzinfo=UTC),
    "not callable": lambda: 5,
    "none": lambda: None,
}


STORE_ARGUMENTS = {
    "scope": (st.sampled_from([None, SCOPE, "b"]), fz.names()),
    "actor": (st.sampled_from([None, "a", "worker@host:1"]), fz.names()),
    "lease_seconds": (
        st.one_of(st.floats(0.001, 30 * 86400), st.integers(1, 30 * 86400)),
        st.one_of(fz.floats(), fz.integers(), fz.scalars(), st.floats(30 * 86400, 1e20)),
    ),
    "using": (st.just("default"), st.one_of(fz.names(), fz.anything())),
    "clock": (st.sampled_from(["fake", "far future"]), st.sampled_from(sorted(CLOCKS))),
}
FOUND = {"scope": None, "actor": None, "lease_seconds": 30.0, "using": "default", "clock": "fake"}


@fz.fuzz_settings(30)
@given(kwargs=fz.arguments(**STORE_ARGUMENTS))
# Found by this fuzz, each a crash before the fix: a lease too long to add to the clock
# (OverflowError at the claim), a database alias of a type no dict key can be (TypeError), a
# clock that cannot be called (TypeError at the first write).
@example(kwargs={**FOUND, "lease_seconds": 1e300})
@example(kwargs={**FOUND, "lease_seconds": 3e11})
@example(kwargs={**FOUND, "lease_seconds": 30 * 86400, "clock": "far future"})
@example(kwargs={**FOUND, "using": ["default"]})
@example(kwargs={**FOUND, "clock": "not callable"})
def test_a_store_is_built_or_refused_and_a_built_one_claims_within_its_lease(kwargs):
    """Construction changes nothing; a store that was built can submit and claim, or refuses."""
    before = state()
    built, store = attempt(
        lambda: DurableJobStore(**{**kwargs, "clock": CLOCKS[kwargs["clock"]]()}),
        kwargs,
        "constructor",
    )
    assert state() == before, "constructing a store wrote to the database"
    if not built:
        return
    done, job = attempt(lambda: store.defer(OP, submission(key="k")), "defer", "built store: defer")
    if not done:
        return
    assert Job.objects.get(pk=job.pk).scope == (kwargs["scope"] or "default")
    claimed, lease = attempt(lambda: store.claim(job.pk), "claim", "built store: claim")
    if claimed:
        row = Job.objects.get(pk=job.pk)
        assert (row.status, row.owner_id, row.fencing_epoch) == ("running", store.owner_id, 1)
        assert row.lease_expires_at == lease.expires_at
        assert lease.expires_at - row.claimed_at == timedelta(seconds=store.lease_seconds)
    JobAttempt.objects.all().delete()
    Job.objects.filter(pk=job.pk).delete()


# -- submissions ---------------------------------------------------------------------------------

SUBMIT_METHODS = ["defer", "insert", "find_submission", "defer_many"]
SUBMIT_ARGUMENTS = {
    "operation": (st.sampled_from([OP, "other.op"]), fz.names()),
    "scope": (st.sampled_from([None, SCOPE]), fz.names()),
    "key": (st.one_of(st.none(), fz.plausible_names()), fz.names()),
    "proposal": (fz.plausible_json(), fz.json_texts()),
    "submission": (st.just("a Submission"), fz.anything()),
    "job_id": (st.one_of(st.none(), st.uuids()), fz.job_ids()),
    "queue": (st.one_of(st.none(), fz.plausible_names()), fz.names()),
    "priority": (st.integers(-100, 100), st.one_of(fz.integers(), fz.scalars())),
    "run_after": (
        st.one_of(st.none(), fz.plausible_times()),
        st.one_of(fz.datetimes(), fz.scalars()),
    ),
    "max_running": (st.one_of(st.none(), st.integers(1, 5)), fz.scalars()),
    "copies": (st.integers(0, 3), fz.anything()),
}


VALID_SUBMISSION = {
    "operation": OP,
    "scope": None,
    "key": None,
    "proposal": "{}",
    "submission": "a Submission",
    "job_id": None,
    "queue": None,
    "priority": 0,
    "run_after": None,
    "max_running": None,
    "copies": 1,
}
# Version 10 with the NCS variant: MariaDB's UUID column refused to store it (OperationalError
# 1292) while SQLite and PostgreSQL did; found by this fuzz, now refused on every database.
UNSTORABLE_ID = "53b18c4d-1fd1-a5b7-0325-49c700a04cde"


@fz.fuzz_settings(60)
@given(
    method=st.sampled_from(SUBMIT_METHODS),
    scoped=st.booleans(),
    args=fz.arguments(**SUBMIT_ARGUMENTS),
)
@example(method="defer", scoped=False, args={**VALID_SUBMISSION, "job_id": UNSTORABLE_ID})
@example(method="insert", scoped=True, args={**VALID_SUBMISSION, "job_id": UNSTORABLE_ID})
# find_submission(operation, None) raised AttributeError; found by this fuzz.
@example(method="find_submission", scoped=False, args={**VALID_SUBMISSION, "submission": None})
def test_a_submission_is_stored_exactly_or_refused_without_a_write(method, scoped, args):
    world = world_for_example()
    store = world.reader if scoped else world.store
    operation, job_id, queue = args["operation"], args["job_id"], args["queue"]
    priority, run_after = args["priority"], args["run_after"]
    sub = args["submission"]
    if sub == "a Submission":
        sub = Submission(args["scope"], args["key"], args["proposal"])
    if method == "defer":
        call = lambda: store.defer(  # noqa: E731
            operation, sub, job_id=job_id, queue=queue, priority=priority, run_after=run_after
        )
    elif method == "insert":
        call = lambda: store.insert(  # noqa: E731
            operation, submission=sub, max_running=args["max_running"], job_id=job_id
        )
    elif method == "find_submission":
        call = lambda: store.find_submission(operation, sub)  # noqa: E731
    else:
        copies = args["copies"]
        many = [sub] * copies if isinstance(copies, int) else copies
        call = lambda: store.defer_many(  # noqa: E731
            operation, many, queue=queue, priority=priority, run_after=run_after
        )
    earlier = set(Job.objects.values_list("pk", flat=True))
    accepted, value = attempt(call, (method, args), method)
    untouched(not accepted or method == "find_submission")
    if not accepted:
        return
    if method == "find_submission":
        assert set(Job.objects.values_list("pk", flat=True)) == earlier, "a read wrote a row"
        return
    jobs = value if method == "defer_many" else [value]
    given = list(many) if method == "defer_many" else [sub]  # hostile copies: the list itself
    assert len(jobs) == len(given)
    for job, sub in zip(jobs, given, strict=True):
        if job is None:  # insert of an identical earlier submission: nothing claimed
            continue
        pk = job.job_id if method == "insert" else job.pk
        row = Job.objects.get(pk=pk)
        assert row.operation == operation and row.proposal_hash == sha256(row.proposal)
        if sub is None:  # no submission (insert's default): an empty proposal, a fresh key
            assert row.proposal == "{}"
            sub = Submission(None, None, "{}")  # noqa: PLW2901 - what None stands for
        assert row.proposal == sub.proposal
        assert row.scope == (sub.scope or store.scope or "default")
        if sub.idempotency_key is not None:
            assert row.idempotency_key == sub.idempotency_key
        if pk in earlier:
            continue  # an identical earlier submission, returned unchanged
        if job_id is not None and method != "defer_many":
            assert pk == validation.job_id(job_id)
        if method == "insert":
            assert (row.status, row.fencing_epoch, row.owner_id) == ("running", 1, store.owner_id)
        else:
            assert (row.status, row.fencing_epoch, row.owner_id) == ("pending", 0, None)
            assert row.queue == (queue or "default") and row.priority == priority
            if run_after is not None:
                assert row.run_after == run_after


# -- reads, claims, requests and owner writes on existing rows -----------------------------------

READS = {"get", "list", "page", "purge_older_than"}
CALLS = [
    "get",
    "list",
    "claim",
    "claim_next",
    "request_cancel",
    "request_cancel_result",
    "request_retry",
    "request_retry_result",
    "page",
    "purge_older_than",
    "heartbeat",
    "checkpoint",
    "progress",
    "cancel",
    "complete",
    "fail",
    "renew_leases",
    "release",
    "record_outcomes",
    "pause_schedule",
    "resume_schedule",
]


def _call(world: World, method: str, data: st.DataObject):  # noqa: C901 - one branch per method
    """Return (callable, check) for ``method`` with drawn arguments; check runs when accepted."""
    store = world.store
    draw = data.draw
    job_id = lambda: draw(fz.sometimes(st.sampled_from(world.job_ids()), fz.job_ids()))  # noqa: E731
    names = lambda: draw(  # noqa: E731
        fz.sometimes(
            st.one_of(st.none(), st.lists(st.sampled_from([OP, "default", "x.y"]), max_size=2)),
            st.one_of(st.lists(fz.names(), max_size=3), fz.anything()),
        )
    )
    none = lambda value: None  # noqa: E731
    if method == "get":
        return (lambda j=job_id(): store.get(j)), none
    if method == "list":
        status = draw(fz.sometimes(st.sampled_from(["pending", "running", None]), fz.names()))
        return (lambda: store.list(status)), none
    if method == "claim":
        j, cap = job_id(), draw(fz.sometimes(st.none(), st.one_of(fz.integers(), fz.scalars())))

        def claimed(lease):
            row = Job.objects.get(pk=lease.job_id)
            assert (row.owner_id, row.fencing_epoch) == (store.owner_id, lease.epoch)

        return (lambda: store.claim(j, max_running=cap)), claimed
    if method == "claim_next":
        kwargs = {
            "operations": names(),
            "queues": names(),
            "limit": draw(fz.sometimes(st.integers(1, 5), st.one_of(fz.integers(), fz.scalars()))),
            "max_running": draw(fz.sometimes(st.none(), st.one_of(fz.integers(), fz.scalars()))),
            "resume_expired": names(),
        }

        def claimed_all(leases):
            for lease in leases:
                assert Job.objects.get(pk=lease.job_id).owner_id == store.owner_id

        return (lambda: store.claim_next(**kwargs)), claimed_all
    if method.startswith("request_"):
        j = job_id()
        return (lambda: getattr(store, method)(j)), none
    if method == "page":
        kwargs = {
            "operation": draw(fz.sometimes(st.sampled_from([None, OP]), fz.names())),
            "status": draw(fz.sometimes(st.sampled_from([None, "pending"]), fz.names())),
            "ownership": draw(fz.sometimes(st.sampled_from([None, "current"]), fz.names())),
            "limit": draw(fz.sometimes(st.integers(1, 100), fz.scalars())),
            "after": draw(fz.sometimes(st.none(), fz.page_cursors())),
        }
        return (lambda: store.page(**kwargs)), none
    if method == "purge_older_than":
        cutoff = draw(fz.sometimes(fz.plausible_times(), st.one_of(fz.datetimes(), fz.scalars())))

        def nothing_purged(count):
            assert count == 0

        return (lambda: store.purge_older_than(cutoff)), nothing_purged
    if method in ("pause_schedule", "resume_schedule"):
        name = draw(fz.sometimes(st.just("nightly"), fz.names()))
        return (lambda: getattr(store, method)(name)), none
    lease = forged(world, data)
    if method == "heartbeat":
        return (lambda: store.heartbeat(lease)), none
    if method == "checkpoint":
        value = draw(fz.sometimes(fz.plausible_json(), fz.json_texts()))

        def checkpointed(_):
            assert Job.objects.get(pk=world.lease.job_id).checkpoint == value

        return (lambda: store.checkpoint(lease, value)), checkpointed
    if method == "progress":
        percent = draw(
            fz.sometimes(st.floats(-10, 200), st.one_of(fz.floats(), fz.integers(), fz.scalars()))
        )

        def progressed(_):
            stored = Job.objects.get(pk=world.lease.job_id).progress
            assert stored == pytest.approx(min(100.0, max(0.0, float(percent))))

        return (lambda: store.progress(lease, percent)), progressed
    if method == "cancel":
        if draw(st.booleans(), label="request first"):
            world.requested = store.request_cancel(world.lease.job_id)
        return (lambda: store.cancel(lease)), none
    if method == "complete":
        result = draw(fz.sometimes(fz.json_values(), fz.anything()))

        def completed(_):
            row = Job.objects.get(pk=world.lease.job_id)
            assert row.status == "complete" and row.result == canonical_json(result)

        return (lambda: store.complete(lease, result)), completed
    if method == "fail":
        error = draw(fz.sometimes(fz.nasty_text(), fz.anything()))

        def failed(_):
            row = Job.objects.get(pk=world.lease.job_id)
            assert row.status == "failed" and row.error

        return (lambda: store.fail(lease, error)), failed
    count = draw(st.integers(0, 3), label="how many")
    if method in ("renew_leases", "release"):
        leases = [forged(world, data) for _ in range(count)]
        if draw(fz.chance(0.25), label="not a list"):
            leases = draw(fz.anything(), label="leases")
        return (lambda: getattr(store, method)(leases)), none
    outcomes = [
        Outcome(
            forged(world, data),
            draw(fz.sometimes(st.sampled_from(["complete", "failed", "cancelled"]), fz.names())),
            result_json=draw(fz.sometimes(fz.plausible_json(), fz.json_texts())),
            error=draw(fz.sometimes(st.sampled_from([None, "boom"]), fz.nasty_text())),
        )
        for _ in range(count)
    ]
    if draw(fz.chance(0.25), label="not a list"):
        outcomes = draw(fz.anything(), label="outcomes")
    return (lambda: store.record_outcomes(outcomes)), none


@fz.fuzz_settings(120)
@given(data=st.data(), method=st.sampled_from(CALLS))
def test_every_call_on_existing_rows_writes_what_it_says_or_refuses_without_a_write(data, method):
    world = world_for_example()
    if data.draw(fz.chance(0.25), label="lease expired"):
        world.clock.advance(LEASE + 1)
    call, check = _call(world, method, data)
    before = state() if method in READS else None
    accepted, value = attempt(call, method, method)
    if method in READS:  # a read leaves the world as it was, accepted or not: keep it
        assert state() == before, f"{method} is a read but wrote"
        untouched(True)
    else:
        untouched(not accepted and not world.requested)
    if accepted:
        check(value)


# -- pages and the atomic outcomes, with executions ----------------------------------------------


def tampered(cursor: str, data: st.DataObject) -> str:
    """Return ``cursor`` with one character replaced, or cut short, or lengthened."""
    at = data.draw(st.integers(0, len(cursor) - 1), label="at")
    how = data.draw(st.sampled_from(["flip", "cut", "append"]), label="how")
    if how == "cut":
        return cursor[:at]
    if how == "append":
        return cursor + data.draw(fz.nasty_text(4), label="tail")
    return cursor[:at] + ("A" if cursor[at] != "A" else "B") + cursor[at + 1 :]


@fz.fuzz_settings(30)
@given(
    data=st.data(),
    operation=fz.sometimes(st.just(OP), fz.names()),
    status=fz.sometimes(st.sampled_from([None, "pending"]), fz.names()),
    limit=fz.sometimes(st.integers(1, 3), st.one_of(fz.integers(), fz.scalars())),
    cap=fz.sometimes(st.integers(100, 1_048_576), st.one_of(fz.integers(), fz.scalars())),
    identity=st.tuples(
        fz.sometimes(st.just(SCOPE), fz.names()),
        fz.sometimes(st.just(ACTOR), fz.names()),
        fz.sometimes(st.just(OP), fz.names()),
    ),
)
def test_list_page_of_fuzzed_queries_reads_or_refuses(
    data, operation, status, limit, cap, identity
):
    """Queries, identities and cursors (real, tampered, forged) page or refuse, never write."""
    world = world_for_example()
    own = Execution.start(Identity(SCOPE, ACTOR, OP), budget=5.0)
    cursor = world.reader.list_page(PageQuery(OP, limit=1), own).next_cursor
    assert cursor
    kind = data.draw(st.sampled_from(["none", "real", "tampered", "forged"]), label="cursor")
    after = {
        "none": lambda: None,
        "real": lambda: cursor,
        "tampered": lambda: tampered(cursor, data),
        "forged": lambda: data.draw(fz.page_cursors(), label="forged"),
    }[kind]()
    query = PageQuery(operation, status=status, limit=limit, max_payload_bytes=cap, after=after)
    execution = Execution.start(Identity(*identity), budget=5.0)
    accepted, page = attempt(
        lambda: world.reader.list_page(query, execution), query, f"list_page ({kind} cursor)"
    )
    untouched(True)  # a refusal wrote nothing (attempt() proved it), and a page is a read
    if accepted:
        assert after is None or after == cursor  # a forged or tampered one is refused
        assert len(page.candidates) <= limit
        assert all(job.scope == SCOPE and job.operation == operation for job in page.candidates)


EXECUTION_ARGUMENTS = {
    "scope": (st.sampled_from(["default", SCOPE]), st.one_of(fz.names(), fz.anything())),
    "actor": (st.sampled_from(["fuzz", ACTOR, None]), st.one_of(fz.names(), fz.anything())),
    "operation": (st.just(OP), st.one_of(fz.names(), fz.anything())),
    "budget": (
        st.one_of(st.floats(0.5, 60), st.sampled_from([1e300, float("inf")])),
        st.one_of(fz.floats(), fz.integers(), fz.scalars()),
    ),
    "deadline": (st.none(), st.one_of(fz.floats(), fz.scalars())),
    "cancel_event": (st.none(), st.one_of(fz.scalars(), st.just("cancelled"))),
    "max_bytes": (st.none(), st.one_of(fz.integers(), fz.scalars())),
}
BOUNDED = ["claim", "defer", "request_cancel", "list_page"]


@fz.fuzz_settings(40)
@given(method=st.sampled_from(BOUNDED), args=fz.arguments(**EXECUTION_ARGUMENTS))
# A deadline that is not a number raised TypeError, and a cancel_event without is_set()
# AttributeError, both from Execution.start; found by this fuzz.
@example(
    method="claim",
    args={
        **{k: None for k in EXECUTION_ARGUMENTS},
        "scope": "default",
        "operation": OP,
        "budget": 5.0,
        "deadline": "soon",
    },
)
@example(
    method="claim",
    args={
        **{k: None for k in EXECUTION_ARGUMENTS},
        "scope": "default",
        "operation": OP,
        "budget": 5.0,
        "cancel_event": 5,
    },
)
def test_bounded_calls_with_fuzzed_executions_run_or_refuse(method, args):
    """Execution.start's arguments, then a store call bounded by the execution it made."""
    world = world_for_example()
    cancel_event = args["cancel_event"]
    if cancel_event == "cancelled":
        cancel_event = threading.Event()
        cancel_event.set()
    started, execution = attempt(
        lambda: Execution.start(
            Identity(args["scope"], args["actor"], args["operation"]),
            budget=args["budget"],
            deadline=args["deadline"],
            cancel_event=cancel_event,
            max_bytes=args["max_bytes"],
        ),
        args,
        "Execution.start",
    )
    if not started:
        untouched(True)
        return
    store = world.reader if method == "list_page" else world.store
    call = {
        "claim": lambda: store.claim(world.pending.pk, execution=execution),
        "defer": lambda: store.defer(OP, submission(key="bounded"), execution=execution),
        "request_cancel": lambda: store.request_cancel(world.pending.pk, execution=execution),
        "list_page": lambda: store.list_page(PageQuery(OP), execution),
    }[method]
    accepted, _ = attempt(call, (method, args), f"bounded {method}")
    untouched(not accepted or method == "list_page")
    if accepted and method == "claim":
        assert Job.objects.get(pk=world.pending.pk).owner_id == store.owner_id


FENCE_ARGUMENTS = {
    "hash": (
        st.just("real"),
        st.one_of(st.text("0123456789abcdef", min_size=64, max_size=64), fz.names(), fz.scalars()),
    ),
    "using": (st.just("default"), st.one_of(fz.names(), fz.anything())),
    "scope": (st.just("default"), fz.names()),
    "operation": (st.just(OP), fz.names()),
    "key": (st.sampled_from(["running", None]), fz.names()),
    "expired": (st.just(False), st.just(True)),
}


@fz.fuzz_settings(40)
@given(data=st.data(), args=fz.arguments(**FENCE_ARGUMENTS))
def test_a_write_fence_of_fuzzed_parts_passes_only_for_the_live_lease(data, args):
    """bind_write_fence, then assert_write_fence in the caller's transaction: pass or refuse."""
    world = world_for_example()
    if args["expired"]:
        world.clock.advance(LEASE + 1)
    lease = forged(world, data)
    running = Job.objects.get(pk=world.lease.job_id)
    proposal_hash = running.proposal_hash if args["hash"] == "real" else args["hash"]
    identity = Identity(args["scope"], "fuzz", args["operation"], args["key"])
    execution = Execution.start(identity, budget=5.0)
    bound, fenced = attempt(
        lambda: bind_write_fence(execution, lease, proposal_hash, clock=world.clock),
        (lease, proposal_hash),
        "bind_write_fence",
    )
    untouched(True)  # neither call writes: attempt() and the comparison below prove it
    if not bound:
        return
    before = state()

    def guarded_write() -> None:
        with transaction.atomic():
            assert_write_fence(fenced, using=args["using"])

    passed, _ = attempt(guarded_write, args, "assert_write_fence")
    assert state() == before
    if passed:  # only the live lease of the running job, as issued, with its own identity
        real = world.lease  # expires_at is the holder's note, not authority: the row's counts
        assert (lease.job_id, lease.owner_id, lease.epoch) == (
            real.job_id,
            real.owner_id,
            real.epoch,
        )
        assert not args["expired"]
        assert proposal_hash == running.proposal_hash and args["using"] == "default"


ATOMIC = ["complete_atomically", "retry_atomically", "finalize_atomically"]


@fz.fuzz_settings(30)
@given(
    data=st.data(),
    method=st.sampled_from(ATOMIC),
    returned=fz.sometimes(fz.plausible_json(), st.one_of(fz.json_texts(), fz.anything())),
)
def test_atomic_outcomes_with_fuzzed_receipts_commit_whole_or_not_at_all(data, method, returned):
    world = world_for_example()
    store = world.store
    running = Job.objects.get(pk=world.lease.job_id)
    fenced = execution_for(store, running, world.lease)
    receipt = lambda *args: returned  # noqa: E731
    if method == "complete_atomically":
        accepted, value = attempt(
            lambda: store.complete_atomically(fenced, receipt), returned, method
        )
        untouched(not accepted)
        if accepted:
            row = Job.objects.get(pk=running.pk)
            assert (row.status, row.result) == ("complete", returned)
    elif method == "retry_atomically":
        job_id = data.draw(fz.sometimes(st.just(world.failed.pk), fz.job_ids()), label="id")
        failed = Job.objects.get(pk=world.failed.pk)
        execution = execution_for(store, failed)
        accepted, lease = attempt(
            lambda: store.retry_atomically(job_id, execution, receipt), job_id, method
        )
        untouched(not accepted)
        if accepted:
            row = Job.objects.get(pk=lease.job_id)
            assert (row.status, row.owner_id, row.fencing_epoch) == (
                "running",
                store.owner_id,
                lease.epoch,
            )
    else:
        outcome = data.draw(
            st.one_of(
                st.builds(
                    AttemptOutcome,
                    status=fz.sometimes(st.sampled_from(["failed", "cancelled"]), fz.names()),
                    message=fz.sometimes(fz.nasty_text(), fz.anything()),
                ),
                fz.anything(),
            ),
            label="outcome",
        )
        before = state()
        result = store.finalize_atomically(fenced, outcome, receipt)  # never raises
        untouched(result.state != "finalized")
        if result.state == "finalized":
            row = Job.objects.get(pk=running.pk)
            assert row.status == outcome.status
            if returned is not None:
                assert row.result == returned
        else:
            assert result.state == "pending-finalization" and result.reason
            assert result.reason.startswith("E_"), result.reason  # a refusal, not a crash
            assert state() == before


# -- what this fuzz found, pinned ----------------------------------------------------------------


def test_the_crashes_this_fuzz_found_are_refusals_or_records_now(store):
    """Each of these raised a TypeError, ValidationError, DataError, EmptyResultSet or
    UnicodeEncodeError (or, in ``finalize_atomically``, was reported as one) before the fix."""
    waiting = store.defer(OP, submission(key="waiting"))
    lease = store.insert(OP, submission=submission(key="running"))
    forged = [
        dataclasses.replace(lease, job_id=str(lease.job_id)),
        dataclasses.replace(lease, job_id=str(lease.job_id) + "\x00"),
        dataclasses.replace(lease, epoch=2**64),
        dataclasses.replace(lease, epoch=fz.Opaque()),
        dataclasses.replace(lease, owner_id=None),
    ]
    for bad in forged:
        for call in (store.heartbeat, lambda b: store.renew_leases([b]), store.cancel):
            ok, error = attempt(lambda call=call, bad=bad: call(bad), bad)
            assert not ok and error.code == "E_JOB_INPUT_INVALID"
    for not_a_list in (None, 5, fz.Opaque()):
        for call in (store.renew_leases, store.release, store.record_outcomes):
            ok, error = attempt(lambda call=call, v=not_a_list: call(v), not_a_list)
            assert not ok and error.code == "E_JOB_INPUT_INVALID"
    assert store.claim_next(operations=[], resume_expired=[]) == []  # was EmptyResultSet
    for not_names in ({"operations": False}, {"queues": 5}, {"resume_expired": b"x"}):
        ok, error = attempt(lambda kw=not_names: store.claim_next(**kw), not_names)  # TypeError
        assert not ok and error.code == "E_JOB_INPUT_INVALID"
    assert store.claim_next(queues=[], resume_expired=[]) == []
    assert Job.objects.get(pk=waiting.pk).status == "pending"
    store.fail(lease, "undecodable \udc80 name, nul \x00 byte")  # was UnicodeEncodeError
    assert Job.objects.get(pk=lease.job_id).error == "undecodable ? name, nul \ufffd byte"
    other = store.insert(OP, submission=submission(key="finalized"))
    job = Job.objects.get(pk=other.job_id)
    done = store.finalize_atomically(
        execution_for(store, job, other), AttemptOutcome("failed", "lone \ud800"), lambda e: None
    )
    assert done.state == "finalized", done.reason  # was pending-finalization: UnicodeEncodeError
    fenced = execution_for(store, Job.objects.get(pk=waiting.pk), store.claim(waiting.pk))
    with transaction.atomic():  # an alias not in DATABASES was ConnectionDoesNotExist
        ok, error = attempt(lambda: assert_write_fence(fenced, using="nope"), "nope")
    assert not ok and error.code == "E_JOB_INPUT_INVALID"
    forged_id = dataclasses.replace(fenced.write_fence.lease, job_id="not-a-uuid")
    ok, error = attempt(lambda: bind_write_fence(fenced, forged_id, "0" * 64), forged_id)
    assert not ok and error.code == "E_JOB_INPUT_INVALID"  # was a ValidationError at the check
    assert Job.objects.get(pk=other.job_id).error == "lone ?"
