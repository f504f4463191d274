"""The flow benchmark runs: a tiny run on this test run's database engine.

``python -m benchmarks.flow`` with a few dozen jobs, against a database of its own
(``bench_flow_<db>_smoke[_<suffix>]``, dropped afterwards). It checks that the benchmark runs and
reports, and the one figure that holds at any size: no one-second window held more than 200
starts of the limited operation. The drain-rate target is not judged on so small a run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from benchmarks.databases import database, recreate_database
from tests.settings import REPO_ROOT, TEST_DB, TEST_DB_SUFFIX

pytestmark = pytest.mark.processes


def test_flow_benchmark_smoke_run() -> None:
    suffix = f"smoke_{TEST_DB_SUFFIX}" if TEST_DB_SUFFIX else "smoke"
    command = [sys.executable, "-m", "benchmarks.flow", "--db", TEST_DB]
    command += ["--free-jobs", "60", "--limited-jobs", "250", "--threads", "2", "--rounds", "1"]
    env = {**os.environ, "DURABLE_JOBS_FLOW_BENCH_SUFFIX": suffix}
    try:
        done = subprocess.run(
            command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
        )
    finally:
        recreate_database(
            TEST_DB, database(TEST_DB, f"bench_flow_{TEST_DB}_{suffix}", "db"), create=False
        )
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 1: a drain-rate miss
    row = re.search(rf"^{TEST_DB}\s+\d+\s+\d+\s+\d+%\s+(\d+)\s+(\d+)", done.stdout, re.M)
    assert row, done.stdout
    limited, most = map(int, row.groups())
    assert limited == 250
    assert 0 < most <= 200
    assert "starts in one second" not in done.stdout
