"""The benchmarks run: tiny runs of ours on this test run's database engine.

The overview's benchmark (``python -m benchmarks.stats``) loads a few hundred rows into a database
of its own, ``bench_stats_smoke[_<suffix>]``, dropped afterwards, and prints its table.

The side-by-side benchmark: a tiny run of ours.

It starts ``python -m benchmarks.side_by_side --systems ours`` in a subprocess with a few dozen
jobs and checks the JSON report it writes: drains by one and by two ``runjobs`` processes with
positive throughput and CPU per job, every job complete once (the benchmark's own check), enqueue
and latency figures. It measures nothing against a target and needs none of the ``bench`` extra.

Its database is the benchmark's own, ``bench_cmp_ours_<db>_smoke[_<suffix>]`` (suffix from
``DURABLE_JOBS_TEST_DB_SUFFIX``), dropped afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.databases import database, recreate_database
from benchmarks.systems import database_name
from tests.settings import REPO_ROOT, TEST_DB, TEST_DB_SUFFIX

pytestmark = pytest.mark.processes


def test_side_by_side_smoke_run_of_ours(tmp_path: Path) -> None:
    db = TEST_DB
    suffix = f"smoke_{TEST_DB_SUFFIX}" if TEST_DB_SUFFIX else "smoke"
    command = [sys.executable, "-m", "benchmarks.side_by_side", "--systems", "ours", "--db", db]
    command += ["--drain-jobs", "40", "--processes", "1,2", "--enqueue-jobs", "20"]
    command += ["--bulk-jobs", "200", "--bulk-size", "100", "--latency-jobs", "5"]
    command += ["--poll-latency-jobs", "2", "--timeout", "60", "--no-chart"]
    command += ["--db-suffix", suffix, "--output-dir", str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE",)}
    try:
        run = subprocess.run(
            command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
        )
    finally:
        name = database_name("ours", db, suffix)
        recreate_database(db, database(db, name, "DURABLE_JOBS_TEST_DB"), create=False)
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout}\n{run.stderr[-4000:]}"
    (report_file,) = tmp_path.glob("side-by-side-*.json")
    report = json.loads(report_file.read_text())
    assert report["exit_status"] == 0 and report["problems"] == []
    ours = report["results"][db]["ours"]
    assert ours["status"] == "ok", ours
    drains = ours["drain"]["default"]
    assert sorted(drains) == ["1", "2"]
    for figures in drains.values():
        assert figures["jobs"] == 40
        assert figures["jobs_per_s"] > 0
        assert 0 < figures["jobs_per_s_from_spawn"] < figures["jobs_per_s"]  # start-up counts
        assert 0 < figures["first_start_s"] < figures["spawn_seconds"]
        assert figures["wall_seconds"] > 0
        assert figures["cpu_us_per_job"] > 0
        assert figures["violations"] == []
    idle = ours["idle"]["default"]
    assert idle["cpu_seconds"] > 0 and idle["processes"] == 1
    assert sorted(idle["by_processes"]) == ["1", "2"]  # the start-up of each count drained with
    for processes, figures in drains.items():
        net = figures["cpu_seconds"] - idle["by_processes"][processes]
        assert figures["cpu_us_per_job_net"] == pytest.approx(net / 40 * 1e6)
    assert ours["enqueue"]["single"]["jobs_per_s"] > 0
    assert ours["latency"]["jobs"] == 5  # woken everywhere: NOTIFY, or the watch
    wakeup = {"postgresql": "NOTIFY", "sqlite": "watch 0.04 s", "mariadb": "watch 0.05 s"}[db]
    assert ours["latency"]["wakeup"] == wakeup
    assert ours["latency"]["start_ms"]["p50"] > 0
    assert "django-durable-jobs" in run.stdout
    assert "seconds from the spawn of the worker processes to the first job's start" in run.stdout


def test_stats_benchmark_smoke_run() -> None:
    """``python -m benchmarks.stats`` with a few hundred rows, on a database of its own."""
    db = TEST_DB
    name = f"bench_stats_smoke{'_' + TEST_DB_SUFFIX if TEST_DB_SUFFIX else ''}"
    command = [sys.executable, "-m", "benchmarks.stats", "--db", db, "--terminal", "300"]
    command += ["--runs", "2", "--warmup", "0", "--batch", "100", "--target", "60000"]
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["DURABLE_JOBS_BENCH_DB_NAME"] = name
    try:
        run = subprocess.run(
            command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
        )
    finally:
        recreate_database(db, database(db, name, "DURABLE_JOBS_TEST_DB"), create=False)
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout}\n{run.stderr[-4000:]}"
    (row,) = [line.split() for line in run.stdout.splitlines() if line.startswith(db + " ")]
    assert row[1] == "300"  # finished jobs
    assert int(row[2]) > 0  # queries of one snapshot
    assert all(float(ms) > 0 for ms in row[3:7])


def test_workers_without_a_burst_mode_are_stopped_by_sigterm_once_done(tmp_path: Path) -> None:
    """dj-queue's workers never exit by themselves: the harness sends them SIGTERM once its
    ``until()`` is true, counts exiting by it as success and still reaps their CPU."""
    from benchmarks.systems.harness import WorkerFailed, run_workers

    done = tmp_path / "done"
    spin = "import signal, sys, time\nwhile True: sum(range(10000)); time.sleep(0.001)"
    argv = [sys.executable, "-c", spin]
    checks = []

    def until() -> bool:
        checks.append(1)
        if len(checks) == 10:  # a second of polling: the workers are up and spinning
            done.write_text("")
        return done.exists()

    run = run_workers(argv, dict(os.environ), 2, tmp_path, timeout=30, until=until)
    assert run.cpu_seconds > 0 and len(checks) >= 10
    # A worker that dies on its own before until() is true is a failure, as before.
    with pytest.raises(WorkerFailed, match="exited 3"):
        run_workers(
            [sys.executable, "-c", "raise SystemExit(3)"],
            dict(os.environ),
            1,
            tmp_path,
            timeout=30,
            until=lambda: False,
        )
