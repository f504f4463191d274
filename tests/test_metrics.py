"""Prometheus metrics (``django_durable_jobs.metrics``): the gauges, the worker's counters, the web view.

* The exposition parses with Prometheus' own text parser, and its gauges agree with
  ``stats.snapshot()`` and with counts made from the rows, for a prepared mix of jobs and workers.
* The counters of stale writes and lost leases, driven by a real store whose lease ran out:
  a checkpoint, a progress report, a heartbeat and an outcome each refused with ``LeaseLost``.
* Without prometheus-client, nothing of it is imported, and ``runjobs --metrics-port`` refuses
  with the extra to install.
* The web view: 401 without or with a bad token, 403 without ``view_job``, 200 with it.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest
from django.core.management import CommandError, call_command

from django_durable_jobs import metrics
from django_durable_jobs.models import Job
from django_durable_jobs.rules.errors import LeaseLost
from django_durable_jobs.rules.values import Claimed, Outcome
from django_durable_jobs.stats import snapshot
from django_durable_jobs.store import DurableJobStore
from django_durable_jobs.worker.context import JobContext
from django_durable_jobs.worker.held import Held
from django_durable_jobs.worker.holdings import Holdings
from django_durable_jobs.worker.reports import report_recorded
from tests.support import LEASE, REPO_ROOT, live_clock, submission

prometheus_client = pytest.importorskip(
    "prometheus_client", reason="the metrics extra (prometheus-client) is not installed"
)
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from django_durable_jobs.metrics.collector import exposition  # noqa: E402


def families(text: str) -> dict:
    """Return {family name: {labels as a sorted tuple: value}} of an exposition."""
    found: dict = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


@pytest.fixture
def registry():
    """Record into a registry of this test's own; recording is off again afterwards."""
    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    metrics.enable(registry)
    yield registry
    metrics.disable()


def sample(registry, name: str, **labels) -> float:
    return registry.get_sample_value(name, labels) or 0.0


# -- the gauges ------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_exposition_parses_and_its_gauges_agree_with_the_snapshot_and_the_rows():
    clock = live_clock()
    store = DurableJobStore(actor="metrics-test", lease_seconds=LEASE, clock=clock)
    for n in range(3):
        store.defer("tests.noop", submission({"n": n}))
    store.defer("tests.fail", submission({"n": 9}))
    Job.objects.filter(operation="tests.fail").update(queue="slow")
    running = store.defer("tests.steps", submission({"n": 1}))
    store.claim(running.pk)
    done = store.defer("tests.noop", submission({"n": 7}))
    store.complete(store.claim(done.pk), {"ok": True})
    store.register_worker(concurrency=2, operations=["tests.noop"])

    found = families(exposition().decode())
    taken = snapshot()

    assert found["durable_jobs_stats_up"] == {(): 1.0}
    rows = Counter(
        (j.status, j.queue, j.operation)
        for j in Job.objects.filter(status__in=["pending", "running"])
    )
    jobs = {
        (dict(k)["status"], dict(k)["queue"], dict(k)["operation"]): v
        for k, v in found["durable_jobs_jobs"].items()
    }
    assert jobs == {k: float(v) for k, v in rows.items()}
    assert jobs == {
        ("pending", "default", "tests.noop"): 3.0,
        ("pending", "slow", "tests.fail"): 1.0,
        ("running", "default", "tests.steps"): 1.0,
    }
    ended = found["durable_jobs_jobs_ended_last_24h"]
    assert ended == {
        (("operation", "tests.noop"), ("queue", "default"), ("status", "complete")): 1.0
    }
    assert found["durable_jobs_workers"] == {
        (("state", "alive"),): float(taken.workers.alive),
        (("state", "stale"),): float(taken.workers.stale),
        (("state", "stopped"),): float(taken.workers.stopped),
    }
    assert taken.workers.alive == 1
    lags = {dict(k)["queue"]: v for k, v in found["durable_jobs_queue_lag_seconds"].items()}
    assert set(lags) == {q.queue for q in taken.queues} == {"default", "slow"}
    for queue in taken.queues:  # two snapshots a moment apart
        assert lags[queue.queue] == pytest.approx(queue.lag_seconds, abs=2.0)
    due = {dict(k)["queue"]: v for k, v in found["durable_jobs_queue_due_jobs"].items()}
    assert due == {"default": 3.0, "slow": 1.0}
    attention = {dict(k)["kind"]: v for k, v in found["durable_jobs_attention_jobs"].items()}
    assert attention == {item.kind: float(item.count) for item in taken.attention}


@pytest.mark.django_db(transaction=True)
def test_waiting_and_sleeping_jobs_are_exported_as_statuses():
    from tests.test_stats import parked_work

    parked_work(live_clock(-60))
    found = families(exposition().decode())
    jobs = {
        (dict(k)["status"], dict(k)["queue"], dict(k)["operation"]): v
        for k, v in found["durable_jobs_jobs"].items()
    }
    assert jobs == {
        ("pending", "flow", "tests.wf.echo"): 1.0,
        ("waiting", "flow", "tests.wf.echo"): 2.0,
        ("sleeping", "nap", "tests.wf.sleeper"): 2.0,
    }
    due = {dict(k)["queue"]: v for k, v in found["durable_jobs_queue_due_jobs"].items()}
    assert due == {"flow": 1.0, "nap": 1.0}  # the sleep that is over is due; waiting is not


# -- the worker's counters, with a real store ------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_writes_refused_for_a_lost_lease_are_counted_by_kind(registry, clock):
    store = DurableJobStore(actor="metrics-test", lease_seconds=LEASE, clock=clock)
    job = store.defer("tests.steps", submission({"n": 1}))
    lease = store.claim(job.pk)
    claim = Claimed(lease, Job.objects.get(pk=job.pk))
    ctx = JobContext(store, lease, claim.job)
    metrics.claimed("tests.steps")
    metrics.attempt_started(claim.job, lambda: clock())
    clock.advance(LEASE + 1)  # the lease ran out: every fenced write is refused

    with pytest.raises(LeaseLost):
        ctx.checkpoint({"done": 1})
    with pytest.raises(LeaseLost):
        ctx.progress(50)
    holdings = Holdings(store)
    holdings.add(Held(claim))
    assert holdings.renew() == 1  # held, but not renewed: the row says the lease is gone
    (recorded,) = store.record_outcomes([Outcome.completed(lease, "1")])
    metrics.attempt_ended(report_recorded(claim, recorded, 0.2))

    stale = "durable_jobs_stale_writes_refused_total"
    for write in ("checkpoint", "progress", "heartbeat", "outcome"):
        assert sample(registry, stale, operation="tests.steps", write=write) == 1.0, write
    assert sample(registry, "durable_jobs_leases_lost_total", operation="tests.steps") == 1.0
    lost = {"operation": "tests.steps", "outcome": "lease-lost"}
    assert sample(registry, "durable_jobs_attempts_total", **lost) == 1.0
    assert sample(registry, "durable_jobs_claims_total", operation="tests.steps") == 1.0
    count = "durable_jobs_attempt_duration_seconds_count"
    assert sample(registry, count, operation="tests.steps") == 1.0
    assert (
        sample(registry, "durable_jobs_attempt_duration_seconds_sum", operation="tests.steps")
        == 0.2
    )
    latency = "durable_jobs_enqueue_to_start_seconds_count"
    assert sample(registry, latency, operation="tests.steps") == 1.0


def test_the_hooks_do_nothing_while_recording_is_off():
    metrics.disable()
    metrics.claimed("tests.noop")  # no recorder: no error, nothing kept
    assert metrics.current() is None


def test_without_metrics_the_worker_never_imports_prometheus_client():
    code = (
        "import sys, django; django.setup()\n"
        "import django_durable_jobs.worker.runner, django_durable_jobs.management.commands.runjobs\n"
        "assert 'prometheus_client' not in sys.modules, 'imported'\n"
    )
    env = {"DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


# -- runjobs refusals ------------------------------------------------------------------------------


def test_metrics_port_without_the_extra_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed
    with pytest.raises(CommandError, match=r'pip install "django-durable-jobs\[metrics\]"'):
        call_command("runjobs", "--metrics-port", "9100", "--burst")


@pytest.mark.parametrize("port", ["0", "70000"])
def test_a_metrics_port_out_of_range_is_refused(port):
    with pytest.raises(CommandError, match=r"--metrics-port must be within 1-65535"):
        call_command("runjobs", "--metrics-port", port, "--burst")


@pytest.mark.django_db(transaction=True)
def test_a_metrics_port_in_use_is_refused_with_what_to_do():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(CommandError, match=r"cannot listen on 127\.0\.0\.1:\d+.*free port"):
            call_command("runjobs", "--metrics-port", str(port), "--burst")
    assert metrics.current() is None  # nothing left recording


# -- the web view ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_web_view_needs_a_token_with_view_job(client):
    from django_durable_jobs.models.tokens import create_token
    from tests.api.support import make_user

    watcher = create_token(make_user("watcher", ("view_job",)), "default", "prometheus").token
    nobody = create_token(make_user("nobody", ()), "default", "prometheus").token
    DurableJobStore(actor="metrics-test").defer("tests.noop", submission({"n": 1}))

    anonymous = client.get("/jobs/metrics")
    assert anonymous.status_code == 401
    assert anonymous["WWW-Authenticate"].startswith("Bearer")
    assert b"Authorization: Bearer" in anonymous.content
    bad = client.get("/jobs/metrics", HTTP_AUTHORIZATION="Bearer djt_000000000000_" + "x" * 43)
    assert bad.status_code == 401
    refused = client.get("/jobs/metrics", HTTP_AUTHORIZATION=f"Bearer {nobody}")
    assert (refused.status_code, refused.content) == (
        403,
        b"Permission durable_jobs.view_job is required to read the metrics.\n",
    )
    allowed = client.get("/jobs/metrics", HTTP_AUTHORIZATION=f"Bearer {watcher}")
    assert allowed.status_code == 200
    assert allowed["Content-Type"].startswith("text/plain; version=0.0.4")
    found = families(allowed.content.decode())
    key = (("operation", "tests.noop"), ("queue", "default"), ("status", "pending"))
    assert found["durable_jobs_jobs"] == {key: 1.0}
    assert client.post("/jobs/metrics", HTTP_AUTHORIZATION=f"Bearer {watcher}").status_code == 405
