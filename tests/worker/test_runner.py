"""The Worker loop run in this process (no signals): what it claims and what it leaves."""

from __future__ import annotations

import pytest

from django_durable_jobs import submit
from django_durable_jobs.models import Job, WorkerProcess
from django_durable_jobs.store import DurableJobStore
from django_durable_jobs.worker import Worker, WorkerOptions
from tests.support import submission

pytestmark = pytest.mark.django_db(transaction=True)


def burst(**options) -> Worker:
    options.setdefault("concurrency", 2)
    worker = Worker(WorkerOptions(burst=True, poll=0.05, lease_seconds=5, **options))
    assert worker.run() == 0
    return worker


def test_burst_runs_registered_jobs_and_leaves_unknown_operations_pending():
    known = [submit("tests.noop", {"n": n}) for n in range(3)]
    stranger = DurableJobStore().defer("elsewhere.only", submission({"n": 1}))

    worker = burst()

    assert {Job.objects.get(pk=j.pk).status for j in known} == {"complete"}
    assert Job.objects.get(pk=stranger.pk).status == "pending"
    assert worker.outcomes == {"complete": 3}
    assert WorkerProcess.objects.get(owner_id=worker.store.owner_id).state() == "stopped"


def test_operation_and_queue_filters_limit_what_is_claimed():
    wanted = submit("tests.noop", {"n": 1}, queue="fast")
    other_queue = submit("tests.noop", {"n": 2}, queue="slow")
    other_op = submit("tests.fail", {"n": 3}, queue="fast")

    burst(operations=["tests.noop"], queues=["fast"])

    statuses = {j.pk: Job.objects.get(pk=j.pk).status for j in (wanted, other_queue, other_op)}
    assert statuses == {wanted.pk: "complete", other_queue.pk: "pending", other_op.pk: "pending"}


def test_failures_are_recorded_with_the_executor_message():
    job = submit("tests.fail", {"message": "upstream said no"})
    worker = burst()
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.error) == ("failed", "RuntimeError: upstream said no")
    assert worker.outcomes == {"failed": 1}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency": 0}, "--concurrency"),
        ({"lease_seconds": 0}, "--lease"),
        ({"poll": -1}, "--poll"),
        ({"max_jobs": 0}, "--max-jobs"),
        ({"grace": -1}, "--grace"),
        ({"operations": ["no.such.op"]}, "Unknown operation"),
    ],
)
def test_bad_options_are_refused_before_anything_starts(options, message):
    with pytest.raises(ValueError, match=message):
        Worker(WorkerOptions(**options))
    assert not WorkerProcess.objects.exists()


def test_a_prefetched_jobs_timeout_counts_from_its_start_not_its_claim():
    # One job thread, one buffered job: the second waits ~1 s behind the first. Its operation's
    # timeout (0.5 s) bounds its own store calls from when it starts; counted from the claim it
    # would already be spent and complete_atomically would refuse with DeadlineExceeded.
    from django_durable_jobs.rules.registry import operation, unregister

    @operation("tests.quick_atomic", timeout=0.5)
    def quick_atomic(ctx, payload):
        return ctx.complete_atomically(lambda execution: '{"ok":true}')

    try:
        first = submit("tests.sleep", {"seconds": 1.0}, priority=10)
        second = submit("tests.quick_atomic", {"n": 1})
        worker = burst(concurrency=1, prefetch=1)
    finally:
        unregister("tests.quick_atomic")
    assert Job.objects.get(pk=first.pk).status == "complete"
    done = Job.objects.get(pk=second.pk)
    assert (done.status, done.result, done.error) == ("complete", '{"ok":true}', None)
    assert worker.claimed == 2


def test_a_failure_message_the_store_would_refuse_does_not_sink_the_flush():
    # Outcomes are written in batches: a message with a lone surrogate (no UTF-8 form) must be
    # made storable, not refuse its whole flush and leave every job in it to expire.
    from django_durable_jobs.rules.registry import operation, unregister

    @operation("tests.unencodable")
    def unencodable(ctx, payload):
        raise RuntimeError("broken \udc80 bytes")

    try:
        bad = submit("tests.unencodable", {"n": 1})
        good = [submit("tests.noop", {"n": n}) for n in range(3)]
        worker = burst(concurrency=4)
    finally:
        unregister("tests.unencodable")
    failed = Job.objects.get(pk=bad.pk)
    assert (failed.status, failed.error) == ("failed", "RuntimeError: broken ? bytes")
    assert {Job.objects.get(pk=j.pk).status for j in good} == {"complete"}
    assert worker.outcomes == {"complete": 3, "failed": 1}
