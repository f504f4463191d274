"""The chaos run's short profile, on this run's test database: faults injected, history checked.

``python -m tests.chaos`` runs as a child process against the pytest test database
(``--database``), for about 20 seconds: three ``runjobs`` workers with 2-second leases over a few
hundred jobs and a one-second schedule, while the harness SIGKILLs and restarts workers, stops
one past its lease and resumes it, cuts one off from the database server for longer than its
lease (where network namespaces can be made; not on SQLite) and, only with
``DURABLE_JOBS_TEST_RESTART_SERVERS=1``, restarts the server. The checker must find no
violation, and the faults must really have happened: kills, reclaims and refused stale writes
(a chaos test that injected nothing would prove nothing). The long runs are ``make chaos``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.chaos import audit
from tests.settings import REPO_ROOT, TEST_DB

pytestmark = [pytest.mark.proof, pytest.mark.processes]

SEED = 20261202
SECONDS = 20


def partition_expected() -> bool:
    if TEST_DB == "sqlite":
        return False
    from tests.proof import netns

    return netns.unavailable_reason() is None


@pytest.fixture
def borrowed(transactional_db, db_settings_env):
    """Yield the env of a child using this run's test database; remove the audit after it."""
    yield {**os.environ, **db_settings_env}
    audit.remove()  # the harness removes it; this covers a harness that died first


def test_a_short_chaos_run_injects_every_fault_and_the_checker_finds_no_violation(
    borrowed, tmp_path
):
    folder = tmp_path / "run"
    argv = [sys.executable, "-m", "tests.chaos", "--db", TEST_DB]
    argv += ["--database", borrowed["DURABLE_JOBS_DB_NAME"], "--seconds", str(SECONDS)]
    argv += ["--workers", "3", "--concurrency", "3", "--lease", "2", "--kill-every", "3"]
    argv += ["--jobs", "300", "--seed", str(SEED), "--drain-timeout", "20"]
    argv += ["--output", str(folder)]
    done = subprocess.run(
        argv, cwd=REPO_ROOT, env=borrowed, capture_output=True, text=True, timeout=150
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["ok"] and summary["violations"] == [], output
    assert summary["drained"] and summary["worker_exits"] == [], output

    counts, faults = summary["counts"], summary["faults"]
    assert counts["jobs"] >= 200 and counts["ticks"] >= SECONDS // 2, output
    assert counts["complete"] == counts["jobs"] + counts["ticks"], output
    assert (counts["duplicates"], counts["lost"]) == (0, 0), output
    assert faults["kills"] > 0 and faults["pauses"] > 0, output
    assert faults["partitions"] == (1 if partition_expected() else 0), output
    restart = TEST_DB != "sqlite" and os.environ.get("DURABLE_JOBS_TEST_RESTART_SERVERS") == "1"
    assert faults["restarts"] == (1 if restart else 0), output
    assert counts["reclaims"] > 0 and counts["interrupted_attempts"] > 0, output
    assert counts["stale_writes_refused"] > 0, output
    assert summary["backlog_min"] > 0, output  # the queue never ran dry during the faults
    assert _audit_tables() == []  # the harness removed what it added to the test database


def _audit_tables() -> list[str]:
    from django.db import connection

    return [name for name in connection.introspection.table_names() if "chaos_audit" in name]
