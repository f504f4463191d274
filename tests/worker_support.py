"""Start real ``manage.py runjobs`` processes, signal them, and read what they did.

* :class:`RunJobs` is one ``python -m django runjobs ...`` child in a session of its own, with its
  stdout and stderr in files (so a chatty worker never blocks on a full pipe) that a test can
  search for log lines;
* :class:`WorkerPool` starts such children with small leases and fast polling, and kills every
  one of them (and their own children, for ``--processes``) when the test ends.

The ``workers`` fixture (tests/worker/conftest.py) wraps the pool and depends on
``transactional_db``, so the workers are gone before the test database is flushed. Waiting is
:func:`tests.support.wait_for`.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.db import connection

from django_durable_jobs.models import Job, JobAttempt, WorkerProcess
from tests.support import REPO_ROOT, WAIT_TIMEOUT, wait_for

EXIT_TIMEOUT = 20.0
FAST = ("--lease", "2", "--poll", "0.2")


def job(job_id: Any) -> Job:
    """Return the job row as the database has it now."""
    return Job.objects.get(pk=job_id)


def checkpoint_done(job_id: Any) -> int:
    """Return the ``done`` count of a tests.steps job's checkpoint (0 before the first)."""
    text = job(job_id).checkpoint
    return 0 if text is None else json.loads(text)["done"]


def attempts(job_id: Any) -> list[tuple[str, int, str]]:
    """Return the job's attempt history as (outcome, epoch, owner_id), oldest first."""
    rows = JobAttempt.objects.filter(job_id=job_id).order_by("epoch", "ended_at", "id")
    return [(a.outcome, a.epoch, a.owner_id) for a in rows]


def marker(folder: Path, name: str) -> str | None:
    """Return the text of the marker file an operation wrote, or None when it has not."""
    path = folder / name
    return path.read_text() if path.exists() else None


class RunJobs:
    """One ``runjobs`` child process."""

    def __init__(self, args: list[str], env: dict[str, str], log_dir: Path, name: str) -> None:
        self.name = name
        self.args = args
        self.stdout_path = log_dir / f"{name}.stdout"
        self.stderr_path = log_dir / f"{name}.stderr"
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "django", "runjobs", *args],
                env={**os.environ, **env},
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,  # its own process group: teardown reaches its children
            )
        self.started = time.monotonic()

    def __repr__(self) -> str:
        return f"<runjobs {self.name} pid={self.pid} {' '.join(self.args)}>"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def send(self, signum: int) -> None:
        """Send a real signal to the worker process (not to its children)."""
        os.kill(self.pid, signum)

    def wait(self, timeout: float = EXIT_TIMEOUT) -> int:
        """Wait for the process to exit and return its exit code; fail with its logs if not."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self!r} still running after {timeout:g} s\n{self.logs()}"
            ) from None

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def logs(self) -> str:
        return f"--- stdout of {self.name}:\n{self.stdout()}--- stderr of {self.name}:\n{self.stderr()}"

    def wait_for_log(self, text: str, *, timeout: float = WAIT_TIMEOUT) -> str:
        """Wait until ``text`` appears in the worker's stderr (its log); return the line."""

        def find() -> str | None:
            for line in self.stderr().splitlines():
                if text in line:
                    return line
            if not self.running():
                raise AssertionError(f"{self!r} exited waiting for {text!r}\n{self.logs()}")
            return None

        return wait_for(find, f"{text!r} in the log of {self.name}", timeout=timeout)

    def row(self) -> WorkerProcess | None:
        """Return this process's worker row (None before it registered)."""
        return WorkerProcess.objects.filter(pid=self.pid).order_by("-started_at").first()

    def wait_for_row(self, *, timeout: float = WAIT_TIMEOUT) -> WorkerProcess:
        def registered() -> WorkerProcess | None:
            if not self.running():
                raise AssertionError(f"{self!r} exited before registering\n{self.logs()}")
            return self.row()

        return wait_for(registered, f"the worker row of {self.name}", timeout=timeout)

    def stop_between_heartbeats(self) -> None:
        """SIGSTOP the worker just after a heartbeat cycle committed, so it holds no locks.

        The worker row is the last write of each cycle; the next one is lease/3 seconds away,
        and a ``--concurrency 1`` worker whose slot is taken does not touch the database in
        between. One whose job runs on the event loop still claims for its free thread slot,
        though: on SQLite, where a claim holds the database's write lock, a stop that froze
        one would keep every other writer waiting, so the stop is checked there (the lock
        taken once) and, when it froze a write, undone and tried again at the next cycle.
        """
        for _ in range(10):
            seen = self.wait_for_row().heartbeat_at
            wait_for(
                lambda seen=seen: self.row().heartbeat_at != seen, f"a heartbeat of {self.name}"
            )
            self.send(signal.SIGSTOP)
            if not _sqlite_write_locked():
                return
            self.send(signal.SIGCONT)
        raise AssertionError(f"{self.name} held SQLite's write lock at each of 10 stops")

    def kill_group(self) -> None:
        """Kill the process and anything it started (teardown; the group id is its pid)."""
        for signum in (signal.SIGCONT, signal.SIGKILL):  # SIGCONT first: a stopped process
            try:  # only dies once it runs again
                os.killpg(self.pid, signum)
            except ProcessLookupError:
                break
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _sqlite_write_locked() -> bool:
    """Return True when another connection holds the test database's write lock (SQLite only;
    False elsewhere, where a frozen empty claim locks no row another worker needs)."""
    if connection.vendor != "sqlite":
        return False
    probe = sqlite3.connect(connection.settings_dict["NAME"], timeout=0.5, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:  # "database is locked"
        return True
    finally:
        probe.close()


class WorkerPool:
    """Start ``runjobs`` children for one test; kill whatever is left when it ends."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.workers: list[RunJobs] = []

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for worker in self.workers:
            worker.kill_group()

    def start(self, *args: str, fast: bool = True) -> RunJobs:
        """Start ``runjobs ARGS`` (after ``--lease 2 --poll 0.2`` unless ``fast=False``)."""
        name = f"worker{len(self.workers) + 1}"
        worker = RunJobs([*(FAST if fast else ()), *args], self.env, self.log_dir, name)
        self.workers.append(worker)
        return worker

    def run(self, *args: str, timeout: float = EXIT_TIMEOUT) -> tuple[int, RunJobs]:
        """Start ``runjobs ARGS`` and wait for it to exit; return (exit code, worker)."""
        worker = self.start(*args)
        return worker.wait(timeout), worker
