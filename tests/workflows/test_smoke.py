"""A first run of workflows, steps and sleep through a real worker loop in this process."""

from __future__ import annotations

import time

import pytest

from django_durable_jobs import Workflow, chain, chord, group
from django_durable_jobs.models import Job, JobAttempt, JobStep
from django_durable_jobs.worker import Worker, WorkerOptions
from django_durable_jobs.workflows import Signature

pytestmark = pytest.mark.django_db(transaction=True)


def burst(**options) -> Worker:
    options.setdefault("concurrency", 2)
    worker = Worker(WorkerOptions(burst=True, poll=0.05, lease_seconds=5, **options))
    assert worker.run() == 0
    return worker


def test_a_fan_out_and_fan_in_runs_in_order_and_the_merge_sees_every_parent(tmp_path):
    log = tmp_path / "log"
    wf = Workflow("smoke.fan", idempotency_key="k1")
    fetch = wf.job("tests.wf.echo", {"tag": "fetch", "log": str(log)}, name="fetch")
    parts = [
        wf.job("tests.wf.echo", {"tag": f"p{i}", "log": str(log)}, after=[fetch], name=f"p{i}")
        for i in range(3)
    ]
    wf.job("tests.wf.echo", {"tag": "merge", "log": str(log)}, after=parts, name="merge")
    handle = wf.submit()
    statuses = [job.status for job in handle.jobs]
    assert statuses == ["pending", "waiting", "waiting", "waiting", "waiting"]

    burst()

    jobs = {job.node: job for job in Job.objects.filter(workflow_id=handle.id)}
    assert {job.status for job in jobs.values()} == {"complete"}
    merge = jobs["merge"]
    import json

    result = json.loads(merge.result)
    assert sorted(result["upstream"]) == ["p0", "p1", "p2"]
    lines = log.read_text().split("\n")
    assert lines[0].startswith("run fetch") and lines[-2].startswith("run merge")
    again = wf.submit()
    assert again.id == handle.id and not again.created


def test_a_failed_parent_cancels_its_descendants_and_retry_reruns_only_them(tmp_path):
    wf = Workflow("smoke.fail")
    a = wf.job("tests.wf.echo", {"tag": "a"}, name="a")
    b = wf.job("tests.wf.fail", {"tag": "b"}, after=[a], name="b")
    c = wf.job("tests.wf.echo", {"tag": "c"}, after=[b], name="c")
    wf.job("tests.wf.echo", {"tag": "d"}, after=[c], name="d")
    handle = wf.submit()
    burst()
    jobs = {job.node: job for job in Job.objects.filter(workflow_id=handle.id)}
    assert [jobs[n].status for n in "abcd"] == ["complete", "failed", "cancelled", "cancelled"]
    assert "'b'" in jobs["c"].error and "'c'" in jobs["d"].error
    from django_durable_jobs.store import DurableJobStore

    answer = DurableJobStore().workflows.retry(handle.id)
    assert answer.changed["retried"] == [jobs["b"].pk]
    jobs = {job.node: job for job in Job.objects.filter(workflow_id=handle.id)}
    assert [jobs[n].status for n in "abcd"] == ["complete", "failed", "waiting", "waiting"]


def test_steps_are_not_rerun_and_sleep_gives_the_attempt_back(tmp_path):
    log = tmp_path / "log"
    from django_durable_jobs import submit

    job = submit("tests.wf.sleeper", {"seconds": 0.3, "log": str(log)})
    burst()
    row = Job.objects.get(pk=job.pk)
    assert row.status == "sleeping" and row.attempts == 0 and row.owner_id is None
    time.sleep(0.4)
    burst()
    row = Job.objects.get(pk=job.pk)
    assert row.status == "complete", row.error
    assert log.read_text().split("\n").count("before") == 1
    outcomes = list(JobAttempt.objects.filter(job=row).values_list("outcome", flat=True))
    assert outcomes == ["slept", "complete"]
    assert JobStep.objects.filter(job=row).count() == 1


def test_canvas_builds_the_same_graph():
    flow = chain(
        Signature("tests.wf.echo", {"tag": "a"}),
        chord(
            group(("tests.wf.echo", {"tag": "b"}), ("tests.wf.echo", {"tag": "c"})),
            Signature("tests.wf.echo", {"tag": "d"}),
        ),
    )
    handle = flow.workflow("smoke.canvas").submit()
    burst()
    jobs = Job.objects.filter(workflow_id=handle.id)
    assert {job.status for job in jobs} == {"complete"}
