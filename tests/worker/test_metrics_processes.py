"""``runjobs --metrics-port``: a real worker serves its counters over HTTP while it runs.

With ``--processes 2`` the parent serves what both children recorded, summed: the counters of N
jobs add up to N whichever child ran them, and stay there after a child is killed and replaced.
At the parent's exit the directory the children recorded in is gone. A worker frozen with
SIGSTOP past its lease counts, once thawed, the lease it lost and the outcome the store refused.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import urllib.request
from pathlib import Path
from urllib.error import URLError

import pytest

from django_durable_jobs import submit
from django_durable_jobs.models import Job
from tests.support import wait_for

pytest.importorskip(
    "prometheus_client", reason="the metrics extra (prometheus-client) is not installed"
)
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

pytestmark = pytest.mark.processes

JOBS = 12
STARTED = re.compile(r"worker process (\d) started: pid (\d+)")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scrape(port: int) -> dict[str, float] | None:
    """Return {sample name with labels: value} from the endpoint, or None while it is not up."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except (URLError, ConnectionError):
        return None
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}"] = sample.value
    return found


def total(found: dict[str, float], name: str, **labels: str) -> float:
    """Return the sum of the samples of ``name`` whose labels include ``labels``."""
    wanted = [f"{k}={v}" for k, v in labels.items()]
    return sum(
        value
        for key, value in found.items()
        if key.startswith(name + "{") and all(w in key for w in wanted)
    )


def all_done() -> bool:
    return Job.objects.filter(status="complete").count() == JOBS


def test_the_parent_serves_both_childrens_counters_summed(workers):
    for n in range(JOBS):
        submit("tests.noop", {"n": n})
    port = free_port()
    parent = workers.start(
        "--processes", "2", "--concurrency", "2", "--restart-delay", "0.1", "--no-schedules",
        "--metrics-port", str(port),
    )  # fmt: skip
    folder = parent.wait_for_log("record their metrics in").rsplit(" in ", 1)[1]
    wait_for(all_done, f"{JOBS} jobs complete")

    def counted():
        found = scrape(port)
        done = found and total(found, "durable_jobs_attempts_total", outcome="complete")
        return found if done == JOBS else None

    found = wait_for(counted, f"{JOBS} completed attempts in the scrape")
    assert total(found, "durable_jobs_claims_total", operation="tests.noop") == JOBS
    assert total(found, "durable_jobs_attempt_duration_seconds_count") == JOBS
    assert total(found, "durable_jobs_enqueue_to_start_seconds_count") == JOBS
    assert found["durable_jobs_stats_up{}"] == 1.0
    assert total(found, "durable_jobs_jobs", status="pending") == 0
    assert total(found, "durable_jobs_jobs_ended_last_24h", status="complete") == JOBS

    # A child killed and replaced: what it counted is still counted.
    first = parent.wait_for_log("worker process 1 started")
    parent_pid = parent.pid
    child = int(STARTED.search(first).group(2))
    assert child != parent_pid
    os.kill(child, signal.SIGKILL)
    parent.wait_for_log(f"replacing pid {child}")
    again = scrape(port)
    assert total(again, "durable_jobs_attempts_total", outcome="complete") == JOBS

    parent.send(signal.SIGTERM)
    assert parent.wait() == 0, parent.logs()
    assert not Path(folder).exists()
    # Children that must import prometheus-client afresh, in the served folder: never forked.
    assert "(forked)" not in parent.stderr()


def test_a_lone_worker_serves_its_own_counters(workers):
    for n in range(3):
        submit("tests.noop", {"n": n})
    port = free_port()
    worker = workers.start("--no-schedules", "--metrics-port", str(port))
    wait_for(lambda: Job.objects.filter(status="complete").count() == 3, "3 jobs complete")

    def counted():
        found = scrape(port)
        done = found and total(found, "durable_jobs_attempts_total", outcome="complete")
        return found if done == 3 else None

    found = wait_for(counted, "3 completed attempts in the scrape")
    assert total(found, "durable_jobs_claims_total") == 3
    assert total(found, "durable_jobs_workers", state="alive") == 1
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.logs()
    assert scrape(port) is None  # the endpoint went with it


def test_a_frozen_worker_counts_its_lost_lease_and_refused_write(workers, tmp_path):
    from django_durable_jobs.rules.vocabulary import Ownership
    from django_durable_jobs.store import DurableJobStore

    job_id = submit("tests.sleep", {"seconds": 1.0, "markers": str(tmp_path)}).pk
    port = free_port()
    stale = workers.start("--concurrency", "1", "--no-schedules", "--metrics-port", str(port))
    wait_for(lambda: (tmp_path / f"started-{job_id}-1").exists(), "attempt 1 to start")
    stale.stop_between_heartbeats()
    operator = DurableJobStore()
    wait_for(lambda: operator.get(job_id).ownership == Ownership.EXPIRED, "the lease to expire")
    assert operator.request_retry(job_id) is True
    workers.start("--concurrency", "1", "--no-schedules")
    wait_for(lambda: Job.objects.get(pk=job_id).status == "complete", "the rescuer to finish")

    stale.send(signal.SIGCONT)
    stale.wait_for_log(f"job {job_id} tests.sleep attempt=1 epoch=1 outcome=lease-lost")
    found = scrape(port)
    assert total(found, "durable_jobs_leases_lost_total", operation="tests.sleep") == 1
    refused = "durable_jobs_stale_writes_refused_total"
    assert total(found, refused, operation="tests.sleep", write="outcome") == 1
    assert total(found, "durable_jobs_attempts_total", outcome="lease-lost") == 1
    assert total(found, "durable_jobs_attempts_total", outcome="complete") == 0
