"""Procrastinate in the side-by-side benchmark: PostgreSQL only, no Django.

Workers are ``python -m procrastinate --app=benchmarks.systems.procrastinate_app.app worker
--concurrency 4 [--one-shot]`` (``--one-shot`` is ``wait=False``: exit once the queues are empty).
An idle worker wakes on LISTEN/NOTIFY, Procrastinate's default. Enqueueing is ``task.defer()``,
the bulk path ``task.batch_defer()``. Start and finish times come from Procrastinate's own
``procrastinate_events`` rows (``started``, ``succeeded``), which its triggers write.
"""

from __future__ import annotations

import os
import sys
from argparse import Namespace
from typing import Any

from benchmarks.databases import database, recreate_database
from benchmarks.systems.base import System

APP = "benchmarks.systems.procrastinate_app.app"
CONCURRENCY = "4"
LOAD_BATCH = 1000


def make(db: str, args: Namespace) -> ProcrastinateSystem:
    """Return the system the harness measures on ``db``."""
    if db != "postgresql":
        raise ValueError("Procrastinate runs on PostgreSQL only")
    return ProcrastinateSystem(db, args)


class ProcrastinateSystem(System):
    name = "procrastinate"
    bulk_unavailable = None

    def __init__(self, db: str, args: Namespace) -> None:
        super().__init__(db, args)
        self.conf = database("postgresql", os.environ["BENCH_CMP_DB_NAME"], "BENCH_CMP_DB")
        dsn = (
            f"host={self.conf['HOST']} port={self.conf['PORT']} user={self.conf['USER']} "
            f"dbname={self.conf['NAME']}"
        )
        os.environ["BENCH_CMP_PROCRASTINATE_DSN"] = dsn  # read by procrastinate_app and workers
        self.dsn = dsn
        self._connection: Any = None

    def setup(self) -> None:
        from benchmarks.systems.procrastinate_app import STARTED_TABLE

        recreate_database("postgresql", self.conf)
        self.open()
        from benchmarks.systems.procrastinate_app import app

        app.schema_manager.apply_schema()
        self.execute(
            f"CREATE TABLE {STARTED_TABLE} (job_id bigint PRIMARY KEY, started double precision)"
        )

    def open(self) -> None:
        import psycopg

        from benchmarks.systems.procrastinate_app import app

        app.open()
        self._connection = psycopg.connect(self.dsn, autocommit=True)

    def close(self) -> None:
        from benchmarks.systems.procrastinate_app import app

        if self._connection is not None:
            self._connection.close()
            app.close()
            self._connection = None

    def execute(self, statement: str, *params: Any) -> list[tuple]:
        cursor = self._connection.execute(statement, params or None)
        return cursor.fetchall() if cursor.description else []

    def server_version(self) -> str:
        return self.execute("SELECT version()")[0][0].split(" on ")[0].split(",")[0]

    def enqueue(self, job_payload: dict[str, Any]) -> Any:
        from benchmarks.systems.procrastinate_app import noop

        return noop.defer(record=True, **job_payload)

    def enqueue_many(self, payloads: list[dict[str, Any]]) -> None:
        from benchmarks.systems.procrastinate_app import noop

        noop.batch_defer(*payloads)

    def clear(self) -> None:
        from benchmarks.systems.procrastinate_app import STARTED_TABLE

        self.execute(
            "TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_periodic_defers, "
            f"procrastinate_workers, {STARTED_TABLE} CASCADE"
        )

    def load(self, count: int) -> None:
        from benchmarks.systems.base import payload

        for start in range(0, count, LOAD_BATCH):
            self.enqueue_many([payload(n) for n in range(start, min(start + LOAD_BATCH, count))])

    def analyze(self) -> None:
        self.execute("ANALYZE")

    def worker_argv(self, *, burst: bool) -> list[str]:
        argv = [sys.executable, "-m", "procrastinate", f"--app={APP}", "worker"]
        argv += ["--concurrency", CONCURRENCY]
        return [*argv, "--one-shot"] if burst else argv

    def drain_span(self) -> tuple[float, float, int]:
        first, last = self.execute(
            "SELECT min(at) FILTER (WHERE type = 'started'), "
            "max(at) FILTER (WHERE type = 'succeeded') FROM procrastinate_events"
        )[0]
        done = self.execute("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")
        if first is None:
            return 0.0, 0.0, 0
        return first.timestamp(), last.timestamp(), done[0][0]

    def started_at(self, handle: Any) -> float | None:
        from benchmarks.systems.procrastinate_app import STARTED_TABLE

        rows = self.execute(f"SELECT started FROM {STARTED_TABLE} WHERE job_id = %s", handle)
        if rows:
            return rows[0][0]
        status = self.execute("SELECT status FROM procrastinate_jobs WHERE id = %s", handle)
        if status and status[0][0] not in ("todo", "doing"):
            raise RuntimeError(f"job {handle} ended {status[0][0]}")
        return None
