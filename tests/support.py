"""Shared test helpers: a movable clock, proof that nothing changed, and waiting with a deadline."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, connections
from django.utils import timezone

from django_durable_jobs.models import CapacityGate, Job, JobAttempt
from django_durable_jobs.rules.errors import JobError
from django_durable_jobs.rules.execution import Execution, Identity, bind_write_fence
from django_durable_jobs.store import DurableJobStore, Submission
from tests.settings import REPO_ROOT

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
LEASE = 10.0  # the lease_seconds of the ``store`` and ``rival`` fixtures (tests/conftest.py)
WAIT_TIMEOUT = 30.0  # generous: CI machines are slow; conditions normally hold within seconds

T = TypeVar("T")


@dataclass
class FakeClock:
    """A clock tests move by hand; the stores built with one share its time."""

    now: datetime = T0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self) -> datetime:
        with self.lock:
            return self.now

    def advance(self, seconds: float) -> datetime:
        with self.lock:
            self.now = self.now + timedelta(seconds=seconds)
            return self.now


def live_clock(offset: float = 0.0) -> FakeClock:
    """Return a FakeClock starting at the wall clock (plus ``offset`` seconds).

    For code that compares with the real time: ``assert_write_fence``, the API, ``submit()`` and
    child processes.
    """
    return FakeClock(now=timezone.now() + timedelta(seconds=offset))


def sessions_running(statement: str, *, waiting: bool = False) -> int:
    """Return how many other sessions on the test database run a statement LIKE ``statement``.

    With ``waiting``, on PostgreSQL only those waiting for a lock. MariaDB's PROCESSLIST may not
    say that a statement waits (INNODB_TRX may still say RUNNING), so there it counts every such
    statement under way: callers use it while holding what those statements must wait for.
    """
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_stat_clear_snapshot()")  # else frozen per transaction
            state = "wait_event_type = 'Lock'" if waiting else "state = 'active'"
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                f"AND pid <> pg_backend_pid() AND {state} AND query LIKE %s",
                [statement],
            )
        else:
            cursor.execute(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() "
                "AND ID <> CONNECTION_ID() AND COMMAND = 'Query' AND INFO LIKE %s",
                [statement],
            )
        return cursor.fetchone()[0]


def in_one_window(seconds: float, margin: float = 15.0) -> None:
    """Wait, when fewer than ``margin`` seconds are left of the current window of ``seconds``,
    until the next one begins.

    Windows aligned to the clock (a minute starts at :00): the submission-rate windows, whose
    count a test's calls straddling a boundary found reset half-way (seen on CI: a sixth call
    in a "5/m" window at 03:15:00.17 accepted); the overview's per-minute history, whose
    buckets two reads straddling a minute's start find shifted by one.
    """
    left = seconds - time.time() % seconds
    if left < margin:
        time.sleep(left + 0.05)


def wait_for(
    condition: Callable[[], T],
    what: str,
    *,
    timeout: float = WAIT_TIMEOUT,
    interval: float = 0.02,
    diagnose: Callable[[], str] | None = None,
) -> T:
    """Return the first truthy value of ``condition()``; fail after ``timeout`` seconds.

    Tests wait on a condition, never on a blind sleep. ``diagnose`` adds to the failure message
    (a worker's log, say).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            message = f"timed out after {timeout:g} s waiting for {what}"
            raise AssertionError(f"{message}\n{diagnose()}" if diagnose else message)
        time.sleep(interval)


def db_state() -> str:
    """Return a canonical dump of every job, attempt and gate row: equal dumps, equal database."""
    jobs = [
        {f.attname: getattr(j, f.attname) for f in Job._meta.concrete_fields}
        for j in Job.objects.order_by("id")
    ]
    attempts = list(JobAttempt.objects.order_by("id").values())
    gates = list(CapacityGate.objects.order_by("operation").values())
    return json.dumps([jobs, attempts, gates], cls=DjangoJSONEncoder, sort_keys=True)


def assert_refused(error: type[JobError], code: str, call) -> JobError:
    """Run ``call``, require ``error`` with ``code``, and prove nothing was written."""
    before = db_state()
    with pytest.raises(error) as caught:
        call()
    assert caught.value.code == code
    assert db_state() == before
    return caught.value


def submission(payload: Any = None, key: str | None = None, scope: str | None = None) -> Submission:
    return Submission.of(scope, key, {"n": 1} if payload is None else payload)


def execution_for(
    store: DurableJobStore,
    job: Job,
    lease=None,
    *,
    budget: float = 5.0,
    actor: str | None = None,
) -> Execution:
    """Return an execution acting for ``job``, fenced by ``lease`` when given."""
    identity = Identity(job.scope, actor or store.actor, job.operation, job.idempotency_key)
    execution = Execution.start(identity, budget=budget)
    if lease is not None:
        execution = bind_write_fence(execution, lease, job.proposal_hash, using=store.using)
    return execution


def run_python(code: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in a new Python process with Django set up on the test database."""
    prelude = "import django; django.setup()\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        env={**os.environ, **env},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextlib.contextmanager
def second_alias(name: str):
    """Add the database alias ``name``: the test database again, through a connection of its own.

    Use it in a module-scoped fixture, so the alias exists before each test's database fixture
    checks its ``databases``.
    """
    connections.settings[name] = {**connections.settings["default"]}
    try:
        yield
    finally:
        connections[name].close()
        try:
            del connections[name]
        except AttributeError:
            pass
        del connections.settings[name]
