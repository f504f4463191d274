"""OpenTelemetry spans, recorded with the SDK's in-memory exporter (docs/tracing.md).

Proves: one producer span per enqueue, a child of the caller's span, whose context the job
stores outside its hashed input; one consumer span per attempt, a root linked to that context,
current while the job's code runs (a span the code makes is its child), ERROR on failure;
a coalesced resubmission makes no job and says so; without a provider, and without the package
at all (a real subprocess that cannot import it), nothing is stored and submitting still works.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import timedelta

import pytest
from django.test import override_settings

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import NoOpTracerProvider, SpanKind, StatusCode  # noqa: E402

from django_durable_jobs import submit, submit_many  # noqa: E402
from django_durable_jobs.manager import JobManager  # noqa: E402
from django_durable_jobs.models import Job  # noqa: E402
from django_durable_jobs.observability import tracing  # noqa: E402
from django_durable_jobs.rules.values import Claimed, canonical_json  # noqa: E402
from django_durable_jobs.rules.vocabulary import proposal_sha256  # noqa: E402
from django_durable_jobs.schedules import declared_schedules  # noqa: E402
from django_durable_jobs.store import DurableJobStore  # noqa: E402
from django_durable_jobs.worker import Worker, WorkerOptions  # noqa: E402
from django_durable_jobs.worker.attempt import context_of, run_and_record  # noqa: E402
from tests.settings import REPO_ROOT  # noqa: E402
from tests.support import T0, FakeClock, submission  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)


class Recorder(InMemorySpanExporter):
    """The spans of one test, and a tracer for the spans the test itself makes."""

    def __init__(self, provider: TracerProvider) -> None:
        super().__init__()
        self.tracer = provider.get_tracer("tests")


@pytest.fixture
def spans():
    """Record this app's spans in memory for the test; the global provider is left alone."""
    provider = TracerProvider()
    recorder = Recorder(provider)
    provider.add_span_processor(SimpleSpanProcessor(recorder))
    tracing.set_tracer_provider(provider)
    yield recorder
    tracing.set_tracer_provider(None)
    provider.shutdown()


def _of(exporter, kind):
    return [span for span in exporter.get_finished_spans() if span.kind == kind]


def _linked(span) -> list[tuple[int, int]]:
    """Return the (trace id, span id) of each span ``span`` links to."""
    return [(link.context.trace_id, link.context.span_id) for link in span.links]


def _ids(span) -> list[tuple[int, int]]:
    return [(span.context.trace_id, span.context.span_id)]


def _carrier_span_id(job: Job) -> int:
    """Return the span id of the traceparent a job stores."""
    traceparent = json.loads(job.trace_context)["traceparent"]
    return int(traceparent.split("-")[2], 16)


def _run_attempt(store: DurableJobStore, job_id, executor) -> None:
    """Run one attempt of a claimed job in this thread, as JobManager does."""
    (lease,) = store.claim_next(operations=["tests.noop"])
    assert lease.job_id == job_id
    claim = Claimed(lease, Job.objects.get(pk=job_id))
    run_and_record(store, context_of(store, claim, threading.Event()), executor, claim)


def test_submit_is_a_producer_span_under_the_callers_span_and_its_context_is_stored(spans):
    with spans.tracer.start_as_current_span("GET /reports") as request:
        job = submit("tests.noop", {"n": 1}, queue="reports", scope="acme")

    (producer,) = _of(spans, SpanKind.PRODUCER)
    assert producer.name == "send reports"
    assert producer.parent.span_id == request.get_span_context().span_id
    assert producer.context.trace_id == request.get_span_context().trace_id
    assert dict(producer.attributes) == {
        "messaging.system": "django_durable_jobs",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "reports",
        "messaging.message.id": str(job.pk),
        "durable_jobs.operation": "tests.noop",
        "durable_jobs.scope": "acme",
        "durable_jobs.coalesced": False,
    }
    stored = Job.objects.get(pk=job.pk)
    assert stored.trace_context == job.trace_context
    assert set(json.loads(stored.trace_context)) == {"traceparent"}
    assert _carrier_span_id(stored) == producer.context.span_id


def test_tracing_leaves_the_proposal_and_its_hash_alone(spans):
    traced = submit("tests.noop", {"b": 2, "a": [1, "é"]}, idempotency_key="same")
    tracing.set_tracer_provider(NoOpTracerProvider())
    plain = submit("tests.noop", {"b": 2, "a": [1, "é"]}, idempotency_key="other")
    # Without spans an identical resubmission still coalesces onto the traced job.
    again = submit("tests.noop", {"a": [1, "é"], "b": 2}, idempotency_key="same")

    rows = Job.objects.in_bulk([traced.pk, plain.pk])
    expected = canonical_json({"a": [1, "é"], "b": 2})
    assert {(r.proposal, r.proposal_hash) for r in rows.values()} == {
        (expected, proposal_sha256(expected))
    }
    assert rows[traced.pk].trace_context is not None and rows[plain.pk].trace_context is None
    assert again.pk == traced.pk
    assert Job.objects.get(pk=traced.pk).trace_context == rows[traced.pk].trace_context


def test_a_django_tasks_enqueue_is_a_producer_span_under_the_callers_span(spans):
    pytest.importorskip("django.tasks")
    from tests.testapp import tasks

    with spans.tracer.start_as_current_span("POST /orders") as request:
        result = tasks.add.using(queue_name="fast").enqueue(2, b=3)

    (producer,) = _of(spans, SpanKind.PRODUCER)
    assert producer.name == "send fast"
    assert producer.parent.span_id == request.get_span_context().span_id
    assert producer.attributes["messaging.message.id"] == str(result.id)
    assert _carrier_span_id(Job.objects.get(pk=result.id)) == producer.context.span_id


def test_a_coalesced_resubmission_makes_no_job_and_its_span_links_to_the_first(spans):
    first = submit("tests.noop", {"n": 1}, idempotency_key="k")
    second = submit("tests.noop", {"n": 1}, idempotency_key="k")

    assert second.pk == first.pk and Job.objects.count() == 1
    one, two = _of(spans, SpanKind.PRODUCER)
    assert (one.attributes["durable_jobs.coalesced"], two.attributes["durable_jobs.coalesced"]) == (
        False,
        True,
    )
    assert two.attributes["messaging.message.id"] == str(first.pk)
    assert _linked(two) == _ids(one)
    assert _carrier_span_id(Job.objects.get(pk=first.pk)) == one.context.span_id


def test_a_refused_enqueue_is_an_error_span(spans):
    submit("tests.noop", {"n": 1}, idempotency_key="k")
    with pytest.raises(Exception, match="different proposal"):
        submit("tests.noop", {"n": 2}, idempotency_key="k")

    refused = _of(spans, SpanKind.PRODUCER)[1]
    assert refused.status.status_code == StatusCode.ERROR
    assert [event.name for event in refused.events] == ["exception"]


def test_submit_many_is_one_batch_span_shared_by_its_jobs(spans):
    earlier = submit("tests.noop", {"n": 0}, idempotency_key="k0")
    spans.clear()

    jobs = submit_many(
        "tests.noop", [{"n": 0}, {"n": 1}, {"n": 2}], idempotency_keys=["k0", None, None]
    )

    (batch,) = _of(spans, SpanKind.PRODUCER)
    assert batch.name == "send default"
    assert batch.attributes["messaging.batch.message_count"] == 3
    assert batch.attributes["durable_jobs.coalesced_count"] == 1
    assert "messaging.message.id" not in batch.attributes
    rows = Job.objects.in_bulk([job.pk for job in jobs])
    assert jobs[0].pk == earlier.pk
    assert {_carrier_span_id(rows[job.pk]) for job in jobs[1:]} == {batch.context.span_id}
    assert _carrier_span_id(rows[earlier.pk]) != batch.context.span_id


def test_each_attempt_is_a_consumer_span_linked_to_the_enqueue_and_parent_of_the_jobs_spans(
    spans,
):
    job = submit("tests.noop", {"n": 1})
    (producer,) = _of(spans, SpanKind.PRODUCER)
    store = DurableJobStore(actor="tracing-test")
    inner = []

    def flaky(ctx):
        with spans.tracer.start_as_current_span("job work") as span:
            inner.append(span)
            if ctx.attempt == 1:
                raise RuntimeError("first attempt fails")
        return {"attempt": ctx.attempt}

    _run_attempt(store, job.pk, flaky)
    assert store.request_retry(job.pk)
    _run_attempt(store, job.pk, flaky)

    assert Job.objects.get(pk=job.pk).status == "complete"
    first, second = _of(spans, SpanKind.CONSUMER)
    for attempt, span in enumerate((first, second), start=1):
        assert span.name == "process default"
        assert span.parent is None  # each attempt is a trace of its own ...
        assert span.context.trace_id != producer.context.trace_id
        assert _linked(span) == _ids(producer)
        assert span.attributes["messaging.message.id"] == str(job.pk)
        assert span.attributes["durable_jobs.attempt"] == attempt
        assert span.attributes["durable_jobs.fencing_epoch"] == attempt
        assert span.attributes["durable_jobs.operation"] == "tests.noop"
        assert span.attributes["durable_jobs.scope"] == "default"
        assert span.attributes["messaging.operation.type"] == "process"
        work = inner[attempt - 1]
        assert work.parent.span_id == span.context.span_id  # ... the parent of the job's spans
    assert first.status.status_code == StatusCode.ERROR
    assert first.status.description == "RuntimeError: first attempt fails"
    assert first.attributes["durable_jobs.outcome"] == "failed"
    assert first.attributes["error.type"] == "builtins.RuntimeError"
    assert [event.name for event in first.events] == ["exception"]
    assert second.status.status_code == StatusCode.UNSET
    assert second.attributes["durable_jobs.outcome"] == "complete"


def test_the_worker_makes_one_consumer_span_per_attempt(spans):
    ok = submit("tests.noop", {"n": 1})
    bad = submit("tests.fail", {"message": "no"})
    producers = {s.attributes["messaging.message.id"]: s for s in _of(spans, SpanKind.PRODUCER)}

    Worker(WorkerOptions(burst=True, poll=0.05, lease_seconds=5, concurrency=2)).run()

    consumers = {s.attributes["messaging.message.id"]: s for s in _of(spans, SpanKind.CONSUMER)}
    assert set(consumers) == {str(ok.pk), str(bad.pk)}
    for job_id, span in consumers.items():
        assert _linked(span) == _ids(producers[job_id])
    assert consumers[str(ok.pk)].status.status_code == StatusCode.UNSET
    assert consumers[str(bad.pk)].status.status_code == StatusCode.ERROR


def test_job_manager_start_job_traces_its_insert_and_its_attempt(spans):
    manager = JobManager(actor="tracing-test")
    try:
        job_id = manager.start_job("tests.manager", lambda ctx: "done", submission({"n": 1}))
        assert manager.wait(job_id, timeout=15).status == "complete"
    finally:
        manager.destroy()

    (producer,) = _of(spans, SpanKind.PRODUCER)
    (consumer,) = _of(spans, SpanKind.CONSUMER)
    assert producer.attributes["messaging.message.id"] == str(job_id)
    assert _linked(consumer) == _ids(producer)
    assert _carrier_span_id(Job.objects.get(pk=job_id)) == producer.context.span_id


def test_an_attempt_that_lost_its_lease_is_an_error_span(spans):
    clock = FakeClock()
    manager = JobManager(actor="stale", lease_seconds=0.6, clock=clock)
    running, lost = threading.Event(), threading.Event()

    def wait_for_loss(ctx):
        running.set()
        assert lost.wait(15)
        return "too late"

    try:
        job_id = manager.start_job("tests.manager", wait_for_loss, submission({"n": 1}))
        assert running.wait(15)
        clock.advance(1)  # the lease expires and another client takes the job over
        DurableJobStore(actor="fresh", lease_seconds=60, clock=clock).claim(job_id)
        manager.heartbeat_once()  # the manager learns its lease is lost
        lost.set()
        manager.wait(job_id, timeout=15)
    finally:
        manager.destroy()

    (consumer,) = _of(spans, SpanKind.CONSUMER)
    assert consumer.attributes["durable_jobs.lease_lost"] is True
    assert consumer.attributes["error.type"] == "lease_lost"
    assert consumer.status.status_code == StatusCode.ERROR


def test_a_schedule_tick_is_a_root_producer_span(spans):
    clock = FakeClock()
    store = DurableJobStore(actor="scheduler", clock=clock)
    store.register_worker(concurrency=1)
    with override_settings(
        DURABLE_JOBS={"SCHEDULES": {"flush": {"operation": "tests.tick", "every": 60}}}
    ):
        store.reconcile_schedules(declared_schedules())
    assert store.enqueue_due_ticks(T0 + timedelta(seconds=60)).enqueued == 1

    (producer,) = _of(spans, SpanKind.PRODUCER)
    job = Job.objects.get()
    assert producer.parent is None
    assert producer.attributes["messaging.message.id"] == str(job.pk)
    assert _carrier_span_id(job) == producer.context.span_id


def test_without_a_tracer_provider_nothing_is_stored(spans):
    tracing.set_tracer_provider(NoOpTracerProvider())
    job = submit("tests.noop", {"n": 1})
    jobs = submit_many("tests.noop", [{"n": 2}])

    Worker(WorkerOptions(burst=True, poll=0.05, lease_seconds=5)).run()

    assert list(Job.objects.filter(pk__in=[job.pk, jobs[0].pk]).values_list("trace_context")) == [
        (None,),
        (None,),
    ]
    assert set(Job.objects.values_list("status", flat=True)) == {"complete"}
    assert spans.get_finished_spans() == ()


def test_a_damaged_trace_context_only_drops_the_link(spans):
    job = submit("tests.noop", {"n": 1})
    Job.objects.filter(pk=job.pk).update(trace_context='{"traceparent": "garbage"')

    Worker(WorkerOptions(burst=True, poll=0.05, lease_seconds=5)).run()

    (consumer,) = _of(spans, SpanKind.CONSUMER)
    assert consumer.links == ()
    assert Job.objects.get(pk=job.pk).status == "complete"


ABSENT = """
import sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
import django
django.setup()
from django_durable_jobs import submit, submit_many, tracing
from django_durable_jobs.models import Job
from django_durable_jobs.worker import Worker, WorkerOptions
assert not tracing.installed()
assert tracing.producer("x", queue="q", scope="s") is tracing.producer("y", queue="r", scope="t")
job = submit("tests.noop", {"absent": 1})
many = submit_many("tests.noop", [{"absent": 2}])
Worker(WorkerOptions(burst=True, poll=0.05, lease_seconds=5, operations=["tests.noop"])).run()
rows = Job.objects.filter(pk__in=[job.pk, many[0].pk])
print(sorted({(row.status, row.trace_context) for row in rows}))
print("opentelemetry" in sys.modules and sys.modules["opentelemetry"] is not None)
"""


def test_without_the_package_submitting_and_running_work_and_store_no_context(db_settings_env):
    result = subprocess.run(
        [sys.executable, "-c", ABSENT],
        env={**os.environ, **db_settings_env},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == ["[('complete', None)]", "False"]
