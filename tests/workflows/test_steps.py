"""Durable steps on every database: ``ctx.step`` and ``ctx.step_atomically`` under the fence.

Proves: a step recorded by one attempt is not run again by the attempt that reclaimed the job,
which gets the recorded result back (as JSON parsed again); a stale owner's step is refused
with ``LeaseLost`` and writes nothing (through ``ctx.step`` and ``store.record_step``); a name
used twice in one run is refused; a changed sequence of names is ``StepSequenceChanged``; a
result past ``MAX_PAYLOAD_BYTES`` is refused with nothing written; ``step_atomically``'s domain
write commits once with its record, and never when the fence fails, the call raises or the
result cannot be stored.
"""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_durable_jobs.models import JobStep
from django_durable_jobs.rules.errors import InputInvalid, LeaseLost
from django_durable_jobs.worker.context import JobContext, StepSequenceChanged
from tests.support import LEASE, db_state, submission
from tests.testapp.models import DomainRow

pytestmark = pytest.mark.django_db(transaction=True)

STEPS = "tests.wf.steps"  # on_expired="resume": an expired lease is taken over


def written() -> tuple[str, list, list]:
    steps = list(JobStep.objects.order_by("job_id", "position").values())
    return db_state(), steps, list(DomainRow.objects.order_by("id").values())


def first_run(store):
    store.defer(STEPS, submission({"count": 3}))
    [claimed] = store.claim_batch(limit=1, resume_expired=[])
    return JobContext(store, claimed.lease, claimed.job)


def reclaimed(store, rival, clock) -> JobContext:
    """Let ``store``'s lease expire and have ``rival`` take the job over: the next run."""
    clock.advance(LEASE + 1)
    [claimed] = rival.claim_batch(limit=1, resume_expired=[STEPS])
    assert claimed.lease.owner_id == rival.owner_id and claimed.lease.epoch >= 2
    return JobContext(rival, claimed.lease, claimed.job)


class Calls:
    """A step function that counts its calls."""

    def __init__(self, value):
        self.value, self.count = value, 0

    def __call__(self, *args, **kwargs):
        self.count += 1
        return self.value(*args, **kwargs) if callable(self.value) else self.value


def test_a_recorded_step_is_not_run_again_after_a_reclaim(store, rival, clock):
    ctx = first_run(store)
    one, two = Calls((1, "a")), Calls(lambda x, y=0: {"sum": x + y})
    assert ctx.step("one", one) == [1, "a"]  # the stored JSON, parsed again
    assert ctx.step("two", two, 2, y=3) == {"sum": 5}
    recorded = list(JobStep.objects.order_by("position").values_list("position", "name", "epoch"))
    assert recorded == [(0, "one", 1), (1, "two", 1)]

    again = reclaimed(store, rival, clock)
    three = Calls("new")
    assert again.step("one", one) == [1, "a"]
    assert again.step("two", two, 2, y=3) == {"sum": 5}
    assert again.step("three", three) == "new"
    assert (one.count, two.count, three.count) == (1, 1, 1)
    assert rival.recorded_steps(ctx.job_id) == [
        ("one", '[1,"a"]'),
        ("two", '{"sum":5}'),
        ("three", '"new"'),
    ]
    assert JobStep.objects.get(name="three").epoch == 2
    rival.complete(again.lease, "done")


def test_a_stale_owners_step_is_refused_and_writes_nothing(store, rival, clock):
    ctx = first_run(store)
    ctx.step("one", lambda: 1)
    again = reclaimed(store, rival, clock)
    before = written()
    with pytest.raises(LeaseLost) as caught:
        ctx.step("two", lambda: "stale")
    assert caught.value.code == "E_JOB_LEASE_LOST" and ctx.lease_lost
    with pytest.raises(LeaseLost):
        store.record_step(ctx.lease, 1, "two", "stale")
    assert written() == before
    assert again.step("one", lambda: "never") == 1
    assert again.step("two", lambda: "fresh") == "fresh"


def test_a_step_of_another_clients_lease_is_refused(store, rival):
    ctx = first_run(store)
    before = written()
    with pytest.raises(LeaseLost):
        rival.record_step(ctx.lease, 0, "one", 1)
    assert written() == before


def test_a_name_used_twice_in_one_run_is_refused(store):
    ctx = first_run(store)
    ctx.step("same", lambda: 1)
    before = written()
    calls = Calls(2)
    with pytest.raises(InputInvalid) as caught:
        ctx.step("same", calls)
    assert "'same' already ran" in caught.value.message and calls.count == 0
    with pytest.raises(InputInvalid) as caught:
        store.record_step(ctx.lease, 1, "same", 2)  # the store refuses it too
    assert "'same'" in caught.value.message
    assert written() == before


@pytest.mark.parametrize(
    ("first", "second", "named"),
    [
        (["a", "b"], ["a", "c"], "'c' in this run but 'b'"),
        (["a", "b"], ["b"], "'b' in this run but 'a'"),
        (["a"], ["x", "a"], "'x' in this run but 'a'"),
    ],
)
def test_a_changed_sequence_of_steps_is_a_clear_error(store, rival, clock, first, second, named):
    ctx = first_run(store)
    for name in first:
        ctx.step(name, lambda: 0)
    again = reclaimed(store, rival, clock)
    before = written()
    with pytest.raises(StepSequenceChanged) as caught:
        for name in second:
            again.step(name, lambda: 1)
    assert caught.value.code == "E_JOB_STEP_SEQUENCE"
    assert named in caught.value.message
    assert written() == before


def test_each_run_may_go_further_along_the_same_sequence(store, rival, clock):
    ctx = first_run(store)
    ctx.step("a", lambda: 0)
    ctx.step("b", lambda: 0)
    again = reclaimed(store, rival, clock)
    assert again.step("a", lambda: 1) == 0  # a run may stop before the recorded end
    third = reclaimed(rival, store, clock)
    assert [third.step(n, lambda: 2) for n in "abc"] == [0, 0, 2]
    assert [name for name, _ in store.recorded_steps(ctx.job_id)] == ["a", "b", "c"]


def test_a_step_result_past_the_payload_cap_is_refused_and_writes_nothing(store):
    ctx = first_run(store)
    before = written()
    with override_settings(DURABLE_JOBS={"MAX_PAYLOAD_BYTES": 100}):
        with pytest.raises(InputInvalid) as caught:
            ctx.step("big", lambda: "x" * 200)
        assert "step 'big'" in caught.value.message
        with pytest.raises(InputInvalid):
            ctx.step("odd", lambda: {1, 2})  # not JSON
        assert written() == before
        assert ctx.step("small", lambda: "x" * 10) == "x" * 10
    assert [s.name for s in JobStep.objects.all()] == ["small"]
    assert not ctx.lease_lost


def test_step_atomically_commits_its_domain_write_once(store, rival, clock):
    ctx = first_run(store)
    calls = Calls(None)

    def write(value):
        calls()
        DomainRow.objects.create(job_id=ctx.job_id, value=value)
        return {"wrote": value}

    assert ctx.step_atomically("write", write, "v1") == {"wrote": "v1"}
    assert list(DomainRow.objects.values_list("value", flat=True)) == ["v1"]
    again = reclaimed(store, rival, clock)
    assert again.step_atomically("write", write, "v2") == {"wrote": "v1"}
    assert calls.count == 1
    assert list(DomainRow.objects.values_list("value", flat=True)) == ["v1"]


def test_step_atomically_writes_nothing_when_the_fence_fails(store, rival, clock):
    ctx = first_run(store)
    reclaimed(store, rival, clock)
    calls = Calls(None)

    def write():
        calls()
        DomainRow.objects.create(job_id=ctx.job_id, value="stale")
        return 1

    before = written()
    with pytest.raises(LeaseLost):
        ctx.step_atomically("write", write)
    assert written() == before and calls.count == 0


def test_step_atomically_rolls_back_its_write_when_the_step_cannot_be_recorded(store):
    ctx = first_run(store)

    def unstorable():
        DomainRow.objects.create(job_id=ctx.job_id, value="rolled back")
        return object()

    def raises():
        DomainRow.objects.create(job_id=ctx.job_id, value="rolled back")
        raise RuntimeError("no")

    before = written()
    with pytest.raises(InputInvalid):
        ctx.step_atomically("write", unstorable)
    with pytest.raises(RuntimeError):
        ctx.step_atomically("write2", raises)
    assert written() == before
    assert ctx.step_atomically("write3", lambda: 3) == 3


def test_a_refused_step_name_or_position_writes_nothing(store):
    ctx = first_run(store)
    before = written()
    for name in ("", " ", "x" * 500, 7, None):
        with pytest.raises(InputInvalid):
            ctx.step(name, lambda: 1)
    for position in (-1, "0", 1.5):
        with pytest.raises(InputInvalid):
            store.record_step(ctx.lease, position, "ok", 1)
    assert written() == before
