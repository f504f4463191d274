"""Hand-offs between a workflow's jobs on every database, driven through the store's fences.

Proves: a child is released (``waiting`` → ``pending``, ``released_at`` set once) only when its
last parent completes, whether its parents complete in separate calls or together in one
``record_outcomes`` batch, and releasing costs the same statements for 3 children as for 30;
``store.upstream()`` and ``ctx.upstream()`` key parents' results by name, or id; a stale
owner's completion of a parent is refused with ``LeaseLost`` and leaves the child waiting with
its count unchanged; a parent failing for good (or cancelled) cancels its waiting descendants
with a reason naming it, while a retry policy's failure changes nothing and
``on_upstream_failure="run"`` lets the child run; ``request_cancel`` of a pending or waiting
job, and a running one's acknowledged cancellation, cascade; ``store.workflows.cancel``
cancels every unended job (running ones by request); ``store.workflows.retry`` runs again what
failed or was cancelled and re-releases what waits on it, never a completed job.
"""

from __future__ import annotations

import json
import random

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_durable_jobs import Workflow
from django_durable_jobs.models import Job, JobAttempt, JobDependency
from django_durable_jobs.models import Workflow as WorkflowRow
from django_durable_jobs.rules.errors import InputInvalid, LeaseLost, NotReclaimable
from django_durable_jobs.rules.values import Outcome
from django_durable_jobs.store.workflows import WorkflowNotFound
from django_durable_jobs.worker.context import JobContext
from tests.support import LEASE, assert_refused, db_state

pytestmark = pytest.mark.django_db(transaction=True)

ECHO, FAIL, FLAKY = "tests.wf.echo", "tests.wf.fail", "tests.wf.flaky"


def submit(store, wf: Workflow) -> dict[str, Job]:
    """Submit ``wf`` through ``store`` (its clock); return its jobs by name."""
    submitted = store.workflows.submit(wf.graph(), idempotency_key=wf.idempotency_key)
    return {job.node: job for job in submitted.jobs}


def row(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def state(job: Job) -> tuple[str, int]:
    found = row(job)
    return found.status, found.waiting_on


def claim(store, job: Job):
    """Claim ``job`` (pending, due again, or an expired lease) and return its lease."""
    return store.claim(job.pk)


def outcomes(job: Job) -> list[str]:
    rows = JobAttempt.objects.filter(job_id=job.pk).order_by("epoch", "id")
    return list(rows.values_list("outcome", flat=True))


def diamond(store) -> dict[str, Job]:
    wf = Workflow("wf.diamond")
    top = wf.job(ECHO, {"tag": "top"}, name="top")
    left = wf.job(ECHO, {"tag": "left"}, after=[top], name="left")
    right = wf.job(ECHO, {"tag": "right"}, after=[top], name="right")
    wf.job(ECHO, {"tag": "merge"}, after=[left, right], name="merge")
    return submit(store, wf)


# -- release ---------------------------------------------------------------------------------------


def test_a_diamond_releases_its_merge_only_when_both_sides_completed(store, clock):
    jobs = diamond(store)
    store.complete(claim(store, jobs["top"]), {"n": 0})
    assert state(jobs["left"]) == state(jobs["right"]) == ("pending", 0)
    assert row(jobs["left"]).released_at == clock()
    assert state(jobs["merge"]) == ("waiting", 2)

    left, right = claim(store, jobs["left"]), claim(store, jobs["right"])
    clock.advance(1)
    store.complete(left, {"n": 1})
    merge = row(jobs["merge"])
    assert (merge.status, merge.waiting_on, merge.released_at) == ("waiting", 1, None)
    assert_refused(NotReclaimable, "E_JOB_NOT_RECLAIMABLE", lambda: store.claim(jobs["merge"].pk))
    assert store.claim_next(limit=5, resume_expired=[]) == []

    clock.advance(1)
    released = clock()
    store.complete(right, {"n": 2})
    merge = row(jobs["merge"])
    assert (merge.status, merge.waiting_on, merge.released_at) == ("pending", 0, released)
    clock.advance(1)
    [lease] = store.claim_next(limit=5, resume_expired=[])
    assert lease.job_id == merge.pk
    assert store.upstream(merge.pk) == {"left": {"n": 1}, "right": {"n": 2}}
    store.complete(lease, None)
    assert row(jobs["merge"]).released_at == released  # set once


def test_parents_completing_in_one_batch_release_their_child_once(store, clock):
    wf = Workflow("wf.fan_in")
    parents = [wf.job(ECHO, {"tag": i}, name=f"p{i}") for i in range(4)]
    wf.job(ECHO, {}, after=parents, name="all")
    wf.job(ECHO, {}, after=parents[:2], name="first_two")
    wf.job(ECHO, {}, after=parents[2:], name="last_two")
    jobs = submit(store, wf)
    claimed = {c.job_id: c.lease for c in store.claim_batch(limit=10, resume_expired=[])}
    assert set(claimed) == {jobs[f"p{i}"].pk for i in range(4)}

    batch = [Outcome.completed(claimed[jobs[f"p{i}"].pk], json.dumps(i)) for i in range(3)]
    assert [r.status for r in store.record_outcomes(batch)] == ["complete"] * 3
    assert state(jobs["first_two"]) == ("pending", 0)
    assert state(jobs["last_two"]) == ("waiting", 1)
    assert state(jobs["all"]) == ("waiting", 1)

    [last] = store.record_outcomes([Outcome.completed(claimed[jobs["p3"].pk], "3")])
    assert last.status == "complete"
    assert state(jobs["all"]) == state(jobs["last_two"]) == ("pending", 0)
    assert store.upstream(jobs["all"].pk) == {f"p{i}": i for i in range(4)}


def test_a_whole_fan_in_completing_in_one_batch_releases_it(store):
    wf = Workflow("wf.batch")
    parents = [wf.job(ECHO, {"tag": i}, name=f"p{i}") for i in range(5)]
    wf.job(ECHO, {}, after=parents, name="merge")
    jobs = submit(store, wf)
    claimed = store.claim_batch(limit=10, resume_expired=[])
    results = store.record_outcomes([Outcome.completed(c.lease, "1") for c in claimed])
    assert {r.status for r in results} == {"complete"}
    merge = row(jobs["merge"])
    assert (merge.status, merge.waiting_on) == ("pending", 0)
    assert merge.released_at is not None


def fan_out(store, children: int) -> tuple[dict[str, Job], object]:
    wf = Workflow(f"wf.fan_out_{children}")
    top = wf.job(ECHO, {}, name="top")
    for i in range(children):
        wf.job(ECHO, {"i": i}, after=[top], name=f"c{i}")
    jobs = submit(store, wf)
    return jobs, claim(store, jobs["top"])


def test_releasing_costs_the_same_statements_for_3_children_as_for_30(store):
    small, small_lease = fan_out(store, 3)
    large, large_lease = fan_out(store, 30)
    with CaptureQueriesContext(connection) as few:
        store.complete(small_lease, None)
    with CaptureQueriesContext(connection) as many:
        store.complete(large_lease, None)
    assert len(many.captured_queries) == len(few.captured_queries)
    assert Job.objects.filter(workflow_id=large["top"].workflow_id, status="pending").count() == 30


# -- upstream ----------------------------------------------------------------------------------


def test_upstream_is_keyed_by_name_or_by_id_and_read_by_ctx(store):
    wf = Workflow("wf.upstream")
    named = wf.job(ECHO, {}, name="named")
    unnamed = wf.job(ECHO, {})
    wf.job(ECHO, {}, after=[named, unnamed], name="child")
    jobs = {job.node or "unnamed": job for job in submit(store, wf).values()}
    for name, value in (("named", {"a": [1, 2]}), ("unnamed", "text")):
        store.complete(claim(store, jobs[name]), value)
    expected = {"named": {"a": [1, 2]}, str(jobs["unnamed"].pk): "text"}
    assert store.upstream(jobs["child"].pk) == expected
    [claimed] = store.claim_batch(limit=1, resume_expired=[])
    ctx = JobContext(store, claimed.lease, claimed.job)
    assert ctx.upstream() == expected
    assert store.upstream(jobs["named"].pk) == {}  # no parents


# -- stale owners ------------------------------------------------------------------------------


def test_a_stale_owners_completion_is_refused_and_the_child_keeps_waiting(store, rival, clock):
    wf = Workflow("wf.stale")
    parent = wf.job(ECHO, {}, name="parent")
    other = wf.job(ECHO, {}, name="other")
    wf.job(ECHO, {}, after=[parent, other], name="child")
    jobs = submit(store, wf)
    store.complete(claim(store, jobs["other"]), "o")
    stale = claim(store, jobs["parent"])
    clock.advance(LEASE + 1)
    taken = rival.claim(jobs["parent"].pk)
    assert taken.epoch == stale.epoch + 1
    assert state(jobs["child"]) == ("waiting", 1)

    assert_refused(LeaseLost, "E_JOB_LEASE_LOST", lambda: store.complete(stale, "stale"))
    before = db_state()
    [result] = store.record_outcomes([Outcome.completed(stale, '"stale"')])
    assert isinstance(result.refusal, LeaseLost)
    assert db_state() == before
    child = row(jobs["child"])
    assert (child.status, child.waiting_on, child.released_at) == ("waiting", 1, None)

    rival.complete(taken, "fresh")
    assert state(jobs["child"]) == ("pending", 0)
    assert store.upstream(jobs["child"].pk) == {"parent": "fresh", "other": "o"}


# -- failure -----------------------------------------------------------------------------------


def test_a_parent_failing_for_good_cancels_its_waiting_descendants_naming_it(store):
    wf = Workflow("wf.fail")
    a = wf.job(ECHO, {}, name="a")
    b = wf.job(FAIL, {}, after=[a], name="b")
    c = wf.job(ECHO, {}, after=[b], name="c")
    wf.job(ECHO, {}, after=[c], name="d")
    wf.job(ECHO, {}, after=[b], name="runs", on_upstream_failure="run")
    wf.job(ECHO, {}, after=[a], name="sibling")
    jobs = submit(store, wf)
    store.complete(claim(store, jobs["a"]), None)
    store.fail(claim(store, jobs["b"]), "boom")

    c, d = row(jobs["c"]), row(jobs["d"])
    assert (c.status, d.status) == ("cancelled", "cancelled")
    assert "'b'" in c.error and str(jobs["b"].pk) in c.error and "failed" in c.error
    assert "'c'" in d.error and "was cancelled" in d.error
    assert c.completed_at is not None and outcomes(jobs["c"]) == []
    assert state(jobs["runs"]) == ("pending", 0)
    assert state(jobs["sibling"]) == ("pending", 0)
    assert store.upstream(jobs["runs"].pk) == {"b": None}  # ran anyway, nothing to read


def test_a_retry_policys_failure_does_not_touch_the_children(store, clock):
    wf = Workflow("wf.flaky")
    flaky = wf.job(FLAKY, {}, name="flaky")
    wf.job(ECHO, {}, after=[flaky], name="child")
    jobs = submit(store, wf)
    first = claim(store, jobs["flaky"])
    store.fail(first, "first attempt fails")
    assert row(jobs["flaky"]).retry_requested_at is not None
    child = row(jobs["child"])
    assert (child.status, child.waiting_on, child.error) == ("waiting", 1, None)

    [second] = store.claim_next(limit=5, resume_expired=[])
    assert second.job_id == jobs["flaky"].pk
    store.complete(second, {"attempt": 2})
    assert state(jobs["child"]) == ("pending", 0)
    assert outcomes(jobs["flaky"]) == ["failed", "complete"]


def test_the_last_failure_of_a_retry_policy_cancels_the_children(store):
    wf = Workflow("wf.flaky_out")
    flaky = wf.job(FLAKY, {}, name="flaky")
    wf.job(ECHO, {}, after=[flaky], name="child")
    jobs = submit(store, wf)
    store.fail(claim(store, jobs["flaky"]), "one")
    [again] = store.claim_next(limit=5, resume_expired=[])
    store.fail(again, "two")
    child = row(jobs["child"])
    assert child.status == "cancelled" and "'flaky'" in child.error


# -- cancellation ------------------------------------------------------------------------------


def chain_of_three(store, name: str = "wf.chain") -> dict[str, Job]:
    wf = Workflow(name)
    a = wf.job(ECHO, {}, name="a")
    b = wf.job(ECHO, {}, after=[a], name="b")
    wf.job(ECHO, {}, after=[b], name="c")
    wf.job(ECHO, {}, name="free")
    return submit(store, wf)


def test_cancelling_a_pending_job_cascades_to_its_waiting_descendants(store):
    jobs = chain_of_three(store)
    assert store.request_cancel(jobs["a"].pk)
    assert [row(jobs[n]).status for n in ("a", "b", "c", "free")] == [
        "cancelled",
        "cancelled",
        "cancelled",
        "pending",
    ]
    assert "'a'" in row(jobs["b"]).error and "'b'" in row(jobs["c"]).error


def test_cancelling_a_waiting_job_cascades_and_spares_its_parent(store):
    jobs = chain_of_three(store)
    assert store.request_cancel(jobs["b"].pk)
    assert [row(jobs[n]).status for n in ("a", "b", "c")] == ["pending", "cancelled", "cancelled"]
    store.complete(claim(store, jobs["a"]), None)  # b ended: nothing to release
    assert [row(jobs[n]).status for n in ("b", "c")] == ["cancelled", "cancelled"]
    assert row(jobs["b"]).released_at is None


def test_a_running_jobs_acknowledged_cancellation_cascades(store):
    jobs = chain_of_three(store)
    lease = claim(store, jobs["a"])
    assert store.request_cancel(jobs["a"].pk)
    assert state(jobs["b"]) == ("waiting", 1)  # a request only: a still runs
    store.cancel(lease)
    assert [row(jobs[n]).status for n in ("a", "b", "c")] == ["cancelled"] * 3


def test_cancelling_a_workflow_cancels_every_unended_job(store, clock):
    wf = Workflow("wf.cancel")
    done = wf.job(ECHO, {}, name="done")
    running = wf.job(ECHO, {}, name="running")
    wf.job(ECHO, {}, name="pending")
    wf.job(ECHO, {}, after=[running], name="waiting")
    wf.job(ECHO, {}, after=[done], name="released")
    jobs = submit(store, wf)
    store.complete(claim(store, jobs["done"]), "kept")
    lease = claim(store, jobs["running"])

    answer = store.workflows.cancel(jobs["done"].workflow_id, by="alice")
    assert set(answer.changed["cancelled"]) == {
        jobs[n].pk for n in ("pending", "waiting", "released")
    }
    assert answer.changed["requested"] == [jobs["running"].pk]
    after = {n: row(j) for n, j in jobs.items()}
    assert after["done"].status == "complete" and after["done"].result == '"kept"'
    assert after["running"].status == "running"
    assert after["running"].cancellation_requested_at == clock()
    for name in ("pending", "waiting", "released"):
        assert after[name].status == "cancelled" and "alice" in after[name].error
    workflow = WorkflowRow.objects.get(pk=jobs["done"].workflow_id)
    assert (workflow.cancel_requested_at, workflow.requested_by) == (clock(), "alice")

    store.cancel(lease)
    assert row(jobs["running"]).status == "cancelled"
    again = store.workflows.cancel(jobs["done"].workflow_id)
    assert again.count == 0


def test_cancel_and_retry_of_an_unknown_workflow_are_refused(store):
    import uuid

    for call in (store.workflows.cancel, store.workflows.retry):
        error = assert_refused(InputInvalid, "E_JOB_INPUT_INVALID", lambda c=call: c(uuid.uuid4()))
        assert isinstance(error, WorkflowNotFound)


def test_a_scoped_store_cannot_cancel_another_scopes_workflow(store, clock):
    from django_durable_jobs.store import DurableJobStore

    jobs = chain_of_three(store)
    other = DurableJobStore(scope="elsewhere", clock=clock)
    assert_refused(
        WorkflowNotFound,
        "E_JOB_INPUT_INVALID",
        lambda: other.workflows.cancel(jobs["a"].workflow_id),
    )


# -- retry -------------------------------------------------------------------------------------


def test_retrying_a_workflow_reruns_what_failed_and_re_releases_what_waits(store):
    wf = Workflow("wf.retry")
    a = wf.job(ECHO, {}, name="a")
    b = wf.job(FAIL, {}, after=[a], name="b")
    c = wf.job(ECHO, {}, after=[b], name="c")
    wf.job(ECHO, {}, after=[c, a], name="d")
    jobs = submit(store, wf)
    store.complete(claim(store, jobs["a"]), "a")
    store.fail(claim(store, jobs["b"]), "boom")
    assert [row(jobs[n]).status for n in "abcd"] == ["complete", "failed", "cancelled", "cancelled"]
    epoch_of_a = row(jobs["a"]).fencing_epoch

    answer = store.workflows.retry(jobs["a"].workflow_id, by="bob")
    assert answer.changed == {
        "retried": [jobs["b"].pk],
        "pending": [],
        "waiting": sorted([jobs["c"].pk, jobs["d"].pk], key=str),
    }
    assert [state(jobs[n]) for n in "abcd"] == [
        ("complete", 0),
        ("failed", 0),
        ("waiting", 1),
        ("waiting", 1),
    ]
    assert row(jobs["c"]).error is None

    [lease] = store.claim_next(limit=5, resume_expired=[])
    assert lease.job_id == jobs["b"].pk and row(jobs["b"]).attempts == 2
    store.complete(lease, "b")
    assert state(jobs["c"]) == ("pending", 0)
    store.complete(claim(store, jobs["c"]), "c")
    store.complete(claim(store, jobs["d"]), "d")
    assert [row(jobs[n]).status for n in "abcd"] == ["complete"] * 4
    assert (row(jobs["a"]).attempts, row(jobs["a"]).fencing_epoch) == (1, epoch_of_a)
    assert outcomes(jobs["a"]) == ["complete"]
    assert outcomes(jobs["b"]) == ["failed", "complete"]
    assert outcomes(jobs["c"]) == outcomes(jobs["d"]) == ["complete"]
    assert store.upstream(jobs["d"].pk) == {"a": "a", "c": "c"}
    assert store.workflows.retry(jobs["a"].workflow_id).count == 0  # nothing left to retry


def test_a_retried_job_that_ran_before_waits_again_then_runs_as_a_retry(store, clock):
    wf = Workflow("wf.rerun")
    a = wf.job(FAIL, {}, name="a")
    wf.job(FAIL, {}, after=[a], name="b", on_upstream_failure="run")
    jobs = submit(store, wf)
    store.fail(claim(store, jobs["a"]), "a failed")
    assert state(jobs["b"]) == ("pending", 0)  # ran anyway
    store.sleep(claim(store, jobs["b"]), 1)  # b slept once before it failed
    clock.advance(1)
    [lease] = store.claim_next(limit=5, resume_expired=[])
    assert row(jobs["b"]).sleep_until is not None
    store.fail(lease, "b failed")

    answer = store.workflows.retry(jobs["a"].workflow_id)
    assert answer.changed["retried"] == [jobs["a"].pk]
    assert answer.changed["waiting"] == [jobs["b"].pk]
    b = row(jobs["b"])
    assert (b.status, b.waiting_on, b.attempts, b.retry_requested_at) == ("waiting", 1, 1, None)
    [lease] = store.claim_next(limit=5, resume_expired=[])
    assert lease.job_id == jobs["a"].pk  # b waits: not claimable
    store.complete(lease, "a")
    b = row(jobs["b"])
    assert (b.status, b.sleep_until, b.run_after) == ("sleeping", None, clock())  # due now
    [lease] = store.claim_next(limit=5, resume_expired=[])
    assert lease.job_id == jobs["b"].pk and row(jobs["b"]).attempts == 2
    store.complete(lease, "b")
    assert outcomes(jobs["b"]) == ["slept", "failed", "complete"]
    assert outcomes(jobs["a"]) == ["failed", "complete"]


def test_retrying_a_cancelled_workflow_reruns_its_cancelled_jobs(store):
    jobs = chain_of_three(store, "wf.cancelled")
    store.workflows.cancel(jobs["a"].workflow_id)
    answer = store.workflows.retry(jobs["a"].workflow_id)
    assert set(answer.changed["pending"]) == {jobs["a"].pk, jobs["free"].pk}
    assert [state(jobs[n]) for n in ("a", "b", "c")] == [
        ("pending", 0),
        ("waiting", 1),
        ("waiting", 1),
    ]
    for name in ("a", "b", "c"):
        store.complete(claim(store, jobs[name]), name)
    assert row(jobs["c"]).status == "complete"


def test_retry_recounts_a_waiting_child_that_heard_of_a_failure_it_runs_after(store):
    # "run" lowered the child's count when its parent failed; the retried parent completing
    # must not lower it again and release the child before its other parent completed.
    wf = Workflow("wf.recount")
    failing = wf.job(FAIL, {}, name="failing")
    slow = wf.job(ECHO, {}, name="slow")
    wf.job(ECHO, {}, after=[failing, slow], name="child", on_upstream_failure="run")
    jobs = submit(store, wf)
    store.fail(claim(store, jobs["failing"]), "boom")
    assert state(jobs["child"]) == ("waiting", 1)  # slow is still to come

    answer = store.workflows.retry(jobs["slow"].workflow_id)
    assert answer.changed["retried"] == [jobs["failing"].pk]
    assert state(jobs["child"]) == ("waiting", 2)  # both parents are to come again
    [lease] = store.claim_next(limit=1, operations=[FAIL], resume_expired=[])
    store.complete(lease, "fixed")
    assert state(jobs["child"]) == ("waiting", 1)
    store.complete(claim(store, jobs["slow"]), "slow")
    assert state(jobs["child"]) == ("pending", 0)
    assert store.upstream(jobs["child"].pk) == {"failing": "fixed", "slow": "slow"}


def test_cancelling_a_workflow_stops_a_retry_its_policy_scheduled(store, clock):
    wf = Workflow("wf.cancel_retry")
    flaky = wf.job(FLAKY, {}, name="flaky")
    wf.job(ECHO, {}, after=[flaky], name="child")
    jobs = submit(store, wf)
    store.fail(claim(store, jobs["flaky"]), "first attempt fails")
    assert row(jobs["flaky"]).retry_requested_at is not None  # not ended for good
    answer = store.workflows.cancel(jobs["flaky"].workflow_id)
    assert set(answer.changed["cancelled"]) == {jobs["flaky"].pk, jobs["child"].pk}
    clock.advance(60)
    assert store.claim_next(limit=5, resume_expired=[]) == []
    flaky_row = row(jobs["flaky"])
    assert (flaky_row.status, flaky_row.retry_requested_at) == ("cancelled", None)
    assert outcomes(jobs["flaky"]) == ["failed"]


def test_a_retry_request_of_a_failed_parent_counts_it_again_for_a_waiting_child(store):
    wf = Workflow("wf.request_retry")
    failing = wf.job(FAIL, {}, name="failing")
    slow = wf.job(ECHO, {}, name="slow")
    wf.job(ECHO, {}, after=[failing, slow], name="child", on_upstream_failure="run")
    jobs = submit(store, wf)
    store.fail(claim(store, jobs["failing"]), "boom")
    assert state(jobs["child"]) == ("waiting", 1)
    assert store.request_retry(jobs["failing"].pk)
    assert state(jobs["child"]) == ("waiting", 2)  # the failed parent is to come again
    assert not store.request_retry(jobs["failing"].pk) or state(jobs["child"]) == ("waiting", 2)
    [lease] = store.claim_next(limit=1, operations=[FAIL], resume_expired=[])
    store.complete(lease, "fixed")
    assert state(jobs["child"]) == ("waiting", 1)
    store.complete(claim(store, jobs["slow"]), "slow")
    assert state(jobs["child"]) == ("pending", 0)


def test_retrying_a_workflow_retries_a_job_whose_lease_expired(store, rival, clock):
    wf = Workflow("wf.expired")
    lost = wf.job(ECHO, {}, name="lost")  # not resumable: an expired lease waits for a retry
    wf.job(ECHO, {}, after=[lost], name="child")
    jobs = submit(store, wf)
    claim(store, jobs["lost"])
    clock.advance(LEASE + 1)
    assert rival.claim_next(limit=5) == []
    answer = store.workflows.retry(jobs["lost"].workflow_id)
    assert answer.changed["retried"] == [jobs["lost"].pk]
    [lease] = rival.claim_next(limit=5)
    assert lease.job_id == jobs["lost"].pk
    rival.complete(lease, "ok")
    assert state(jobs["child"]) == ("pending", 0)
    assert outcomes(jobs["lost"]) == ["interrupted", "complete"]


def test_a_retry_request_cannot_run_a_job_before_its_parents_completed(store):
    jobs = chain_of_three(store, "wf.early")
    assert store.request_cancel(jobs["b"].pk)  # waiting: cancelled at once, never ran
    error = assert_refused(
        NotReclaimable, "E_JOB_NOT_RECLAIMABLE", lambda: store.request_retry(jobs["b"].pk)
    )
    assert "'a'" in error.message and "retry the workflow" in error.message
    assert store.claim_next(limit=5, operations=[ECHO], resume_expired=[]) != []  # a, free
    assert row(jobs["b"]).status == "cancelled"


def test_a_retry_request_of_a_job_that_ran_after_a_failure_is_accepted(store):
    wf = Workflow("wf.ran_after")
    failing = wf.job(FAIL, {}, name="failing")
    wf.job(FAIL, {}, after=[failing], name="child", on_upstream_failure="run")
    jobs = submit(store, wf)
    store.fail(claim(store, jobs["failing"]), "boom")
    store.fail(claim(store, jobs["child"]), "child boom")
    assert store.request_retry(jobs["child"].pk)
    [lease] = store.claim_next(limit=5, resume_expired=[])
    assert lease.job_id == jobs["child"].pk


def test_a_workflows_state_follows_its_jobs(store):
    from django_durable_jobs.rules.graph import state_of

    wf = Workflow("wf.state")
    flaky = wf.job(FLAKY, {}, name="flaky")
    wf.job(ECHO, {}, after=[flaky], name="child")
    jobs = submit(store, wf)
    wid = jobs["flaky"].workflow_id

    def now() -> str:
        return state_of(store.workflows.jobs(wid))

    assert now() == "running"
    store.fail(claim(store, jobs["flaky"]), "one")
    assert now() == "running"  # a retry is to come
    store.workflows.cancel(wid)
    assert now() == "cancelled"
    store.workflows.retry(wid)
    assert now() == "running"
    [lease] = store.claim_next(limit=1, operations=[FLAKY], resume_expired=[])
    store.fail(lease, "two")  # its policy's last attempt
    assert now() == "failed"
    store.workflows.retry(wid)
    [lease] = store.claim_next(limit=1, operations=[FLAKY], resume_expired=[])
    store.complete(lease, "ok")
    store.complete(claim(store, jobs["child"]), "ok")
    assert now() == "complete"


def test_a_workflow_whose_last_job_will_be_retried_is_still_running(store):
    from django_durable_jobs.rules.graph import state_of

    wf = Workflow("wf.state_one")
    wf.job(FLAKY, {}, name="flaky")
    jobs = submit(store, wf)
    store.fail(claim(store, jobs["flaky"]), "one")
    assert state_of(store.workflows.jobs(jobs["flaky"].workflow_id)) == "running"


# -- lock order ----------------------------------------------------------------------------------


def test_cancelling_a_workflow_never_deadlocks_with_a_completion_releasing_a_child(store, clock):
    # A completion locks the parent, then its children (hand_off). A workflow cancel that
    # locked every job in id order would hold a child with a smaller id while waiting for the
    # parent: each would wait for the other. Here a transaction plays the completion's part.
    import threading
    import time

    from django.db import transaction

    for attempt in range(50):
        wf = Workflow("wf.locks", idempotency_key=f"locks-{attempt}")
        parent = wf.job(ECHO, {}, name="parent")
        for i in range(6):
            wf.job(ECHO, {}, after=[parent], name=f"c{i}")
        jobs = submit(store, wf)
        lower = [j for n, j in jobs.items() if n != "parent" and str(j.pk) < str(jobs["parent"].pk)]
        if lower:
            break
    child = lower[0]
    lease = claim(store, jobs["parent"])
    locked_parent, go_on = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def completion() -> None:
        from django.db import connection

        try:
            with transaction.atomic():
                Job.objects.select_for_update().get(pk=jobs["parent"].pk)
                locked_parent.set()
                go_on.wait(10)
                Job.objects.select_for_update().get(pk=child.pk)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            locked_parent.set()
            connection.close()

    answers = []

    def cancel() -> None:
        from django.db import connection

        try:
            answers.append(store.workflows.cancel(jobs["parent"].workflow_id))
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            connection.close()

    holder = threading.Thread(target=completion)
    holder.start()
    assert locked_parent.wait(10)
    canceller = threading.Thread(target=cancel)
    canceller.start()
    time.sleep(0.5)  # let the cancel reach the parent's lock
    go_on.set()
    holder.join(30)
    canceller.join(30)
    assert not failures, failures
    assert not holder.is_alive() and not canceller.is_alive()
    [answer] = answers
    assert answer.changed["requested"] == [jobs["parent"].pk]
    assert row(child).status == "cancelled"
    store.cancel(lease)


def test_a_cancel_that_cannot_lock_the_jobs_in_time_is_refused_writing_nothing(store, monkeypatch):
    # Row locks (PostgreSQL, MariaDB): the cancel never waits for a row; it tries again until
    # LOCKED_JOBS_SECONDS passed. SQLite locks the whole database: the cancel waits its turn.
    import threading

    from django.db import connection, transaction

    from django_durable_jobs.rules.errors import DeadlineExceeded
    from django_durable_jobs.store import workflows as workflow_room

    monkeypatch.setattr(workflow_room, "LOCKED_JOBS_SECONDS", 0.3)
    jobs = chain_of_three(store, "wf.held")
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        from django.db import connection as own

        try:
            with transaction.atomic():
                Job.objects.select_for_update().get(pk=jobs["a"].pk)
                locked.set()
                release.wait(2 if own.vendor == "sqlite" else 30)
        finally:
            locked.set()
            own.close()

    holder = threading.Thread(target=hold)
    holder.start()
    assert locked.wait(10)
    try:
        if connection.vendor == "sqlite":
            answer = store.workflows.cancel(jobs["a"].workflow_id)  # after the holder's commit
            assert len(answer.changed["cancelled"]) == 4
        else:
            before = db_state()
            with pytest.raises(DeadlineExceeded) as caught:
                store.workflows.cancel(jobs["a"].workflow_id)
            assert caught.value.code == "E_JOB_DEADLINE_EXCEEDED"
            assert "nothing was written" in caught.value.message
            assert db_state() == before
    finally:
        release.set()
        holder.join(30)
    answer = store.workflows.cancel(jobs["a"].workflow_id)
    assert {row(j).status for j in jobs.values()} == {"cancelled"}


def test_parents_completing_at_once_in_separate_transactions_release_their_child_once(store):
    import threading

    wf = Workflow("wf.race")
    parents = [wf.job(ECHO, {"i": i}, name=f"p{i}") for i in range(8)]
    wf.job(ECHO, {}, after=parents, name="merge")
    wf.job(ECHO, {}, after=parents[:4], name="half")
    jobs = submit(store, wf)
    leases = {c.job_id: c.lease for c in store.claim_batch(limit=10, resume_expired=[])}
    start = threading.Barrier(len(leases))
    failures: list[BaseException] = []

    def complete(lease) -> None:
        from django.db import connection

        try:
            start.wait(10)
            store.complete(lease, str(lease.job_id))
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=complete, args=(lease,)) for lease in leases.values()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures
    for name in ("merge", "half"):
        child = row(jobs[name])
        assert (child.status, child.waiting_on) == ("pending", 0)
        assert child.released_at is not None
    upstream = store.upstream(jobs["merge"].pk)
    assert upstream == {f"p{i}": str(jobs[f"p{i}"].pk) for i in range(8)}


# -- any graph, any order ----------------------------------------------------------------------


@st.composite
def graphs_and_orders(draw):
    """A random DAG (parents are earlier nodes) and a seeded order of completions.

    A ``random.Random`` of a drawn seed, not ``st.randoms()``: how many numbers a run draws
    depends on the database (which jobs a batch released), and Hypothesis wants each example
    to draw the same data when it replays it.
    """
    size = draw(st.integers(min_value=1, max_value=9))
    parents = [
        sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else [] for i in range(size)
    ]
    return parents, random.Random(draw(st.integers(0, 2**32)))


def in_order(claimed: list) -> list:
    """Return claims in node order: what the seeded shuffle starts from, whatever the ids."""
    return sorted(claimed, key=lambda c: int(c.job.node[1:]))


def check_counts(workflow_id) -> None:
    """Every waiting job counts its parents not yet complete; every other one has none left."""
    jobs = {job.pk: job for job in Job.objects.filter(workflow_id=workflow_id)}
    edges = JobDependency.objects.filter(workflow_id=workflow_id).values_list(
        "parent_id", "child_id"
    )
    open_parents = {pk: 0 for pk in jobs}
    for parent, child in edges:
        if jobs[parent].status != "complete":
            open_parents[child] += 1
    for pk, job in jobs.items():
        if job.status == "waiting":
            assert job.waiting_on == open_parents[pk] > 0, (job.node, job.waiting_on)
            assert job.released_at is None
        else:
            assert open_parents[pk] == 0, f"{job.node} is {job.status} before its parents completed"
            assert job.released_at is not None


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(graphs_and_orders())
def test_any_graph_completed_in_any_order_and_batching_releases_each_job_once(store, case):
    parents, rnd = case
    wf = Workflow("wf.any")
    nodes = []
    for i, ps in enumerate(parents):
        nodes.append(wf.job(ECHO, {"i": i}, name=f"n{i}", after=[nodes[p] for p in ps]))
    submitted = store.workflows.submit(wf.graph())
    workflow_id = submitted.workflow.pk
    check_counts(workflow_id)
    done = 0
    while done < len(parents):
        claimed = store.claim_batch(limit=50, resume_expired=[])
        assert claimed, "nothing claimable while jobs wait"
        foreign = [
            (c.job.node, c.job.workflow.name, c.job.created_at, c.job.status)
            for c in claimed
            if c.job.workflow_id != workflow_id
        ]
        assert not foreign, (foreign, WorkflowRow.objects.values_list("name", "created_at"))
        claimed = in_order(claimed)
        rnd.shuffle(claimed)
        while claimed:
            cut = rnd.randint(1, len(claimed))
            batch, claimed = claimed[:cut], claimed[cut:]
            outcomes = [Outcome.completed(c.lease, json.dumps(c.job.node)) for c in batch]
            assert {r.status for r in store.record_outcomes(outcomes)} == {"complete"}
            done += len(batch)
            check_counts(workflow_id)
    attempts = JobAttempt.objects.filter(job__workflow_id=workflow_id)
    assert sorted(attempts.values_list("outcome", flat=True)) == ["complete"] * len(parents)
    for i, ps in enumerate(parents):
        job = submitted.jobs[i]
        assert store.upstream(job.pk) == {f"n{p}": f"n{p}" for p in ps}


@st.composite
def graphs_with_failures(draw):
    """A random DAG whose jobs may fail, each child cancelled or run after a failed parent."""
    parents, rnd = draw(graphs_and_orders())
    fails = [draw(st.booleans()) for _ in parents]
    runs = [draw(st.booleans()) for _ in parents]
    return parents, fails, runs, rnd


def check_hand_offs(workflow_id) -> None:
    """Waiting jobs count what they wait for; released ones waited for all; cancelled had cause."""
    jobs = {job.pk: job for job in Job.objects.filter(workflow_id=workflow_id)}
    edges = JobDependency.objects.filter(workflow_id=workflow_id).values_list(
        "parent_id", "child_id"
    )
    parents_of: dict = {pk: [] for pk in jobs}
    for parent, child in edges:
        parents_of[child].append(jobs[parent])
    for pk, job in jobs.items():
        runs = job.on_upstream_failure == "run"
        done = [
            p.status == "complete" or (runs and p.status in ("failed", "cancelled"))
            for p in parents_of[pk]
        ]
        if job.status == "waiting":
            assert job.waiting_on == done.count(False) > 0, job.node
            assert runs or not any(p.status in ("failed", "cancelled") for p in parents_of[pk])
        elif job.status == "cancelled":
            assert not runs and any(p.status in ("failed", "cancelled") for p in parents_of[pk])
            assert not JobAttempt.objects.filter(job_id=pk).exists(), job.node
        else:
            assert all(done), f"{job.node} is {job.status} before its parents ended"


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(graphs_with_failures())
def test_any_graph_with_failures_cancels_or_runs_each_descendant_as_it_says(store, case):
    parents, fails, runs, rnd = case
    wf = Workflow("wf.any_failing")
    nodes = []
    for i, ps in enumerate(parents):
        nodes.append(
            wf.job(
                FAIL if fails[i] else ECHO,
                {"i": i},
                name=f"n{i}",
                after=[nodes[p] for p in ps],
                on_upstream_failure="run" if runs[i] else "cancel",
            )
        )
    workflow_id = store.workflows.submit(wf.graph()).workflow.pk
    check_hand_offs(workflow_id)
    while claimed := store.claim_batch(limit=50, resume_expired=[]):
        claimed = in_order(claimed)
        rnd.shuffle(claimed)
        while claimed:
            cut = rnd.randint(1, len(claimed))
            batch, claimed = claimed[:cut], claimed[cut:]
            outcomes = [
                Outcome.failed(c.lease, "boom")
                if c.job.operation == FAIL
                else Outcome.completed(c.lease, "1")
                for c in batch
            ]
            store.record_outcomes(outcomes)
            check_hand_offs(workflow_id)
    statuses = set(Job.objects.filter(workflow_id=workflow_id).values_list("status", flat=True))
    assert statuses <= {"complete", "failed", "cancelled"}, statuses
