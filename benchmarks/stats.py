"""The overview's cost: ``stats.snapshot()`` and ``manage.py jobs stats --json`` at a million rows.

For each selected engine this drops, recreates and migrates a database of its own,
``bench_durable_jobs_stats`` (``benchmarks/settings.py``), and loads ``--terminal`` finished jobs
(90% complete, 7% failed, 3% cancelled, six operations, three queues) spread evenly over the last
``--days`` days up to now, each with its attempt row: at the defaults, 1,000,000 jobs and as many
attempts over 30 days, about 33,000 a day and 1,400 an hour, so the windows the snapshot reads
(the last day, the last hour) are full. The live work of ``python -m benchmarks`` comes on top
(50 due pending, 20 scheduled, 5 expired and 5 live leases), with 5 alive, 2 stale and 500 stopped
workers and 3 schedules (one paused). Then it times ``snapshot()`` and ``call_command("jobs",
"stats", "--json")`` (in process, output discarded) alternately, and prints the median and p95
of each, with the number of queries of one snapshot.

    .venv/bin/python -m benchmarks.stats                      # all three engines, 1,000,000 rows
    .venv/bin/python -m benchmarks.stats --db sqlite --terminal 100000 --explain

``--reuse`` times again the rows an earlier run left (the windows then end that much earlier
than now). Exit 1 when a median is above ``--target`` milliseconds (300), 2 when an engine failed.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
import uuid
from datetime import timedelta
from typing import Any

from benchmarks.__main__ import Benchmark
from benchmarks.common import (
    add_batch_option,
    add_seed_and_child_options,
    engines_parser,
    exit_status,
    log,
    parse_engines,
    print_total,
    run_engines,
    start_child,
    summary,
    write_result,
)

DB_NAME = "bench_durable_jobs_stats"  # dropped and recreated by each run


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = engines_parser(
        "python -m benchmarks.stats",
        "snapshot() and `jobs stats --json` latency with --terminal finished jobs.",
    )
    add = parser.add_argument
    add("--terminal", type=int, default=1_000_000, help="finished jobs (%(default)s)")
    add("--days", type=float, default=30.0, help="spread over this many days (%(default)s)")
    add("--runs", type=int, default=30, help="timed calls of each (%(default)s)")
    add("--warmup", type=int, default=3, help="untimed calls first (%(default)s)")
    add_batch_option(parser)
    add("--target", type=float, default=300.0, help="exit 1 above this median, ms (%(default)s)")
    add("--explain", action="store_true", help="print each statement's time and plan (stderr)")
    add(
        "--reuse",
        action="store_true",
        help="time the rows an earlier run loaded (its database must still hold them)",
    )
    add_seed_and_child_options(parser)
    args = parse_engines(parser, argv)
    if min(args.runs, args.batch) < 1 or args.warmup < 0 or args.terminal < 0 or args.days <= 0:
        parser.error("--runs and --batch must be >= 1, --warmup and --terminal >= 0, --days > 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_child(args)
    options = ["--terminal", str(args.terminal), "--days", str(args.days)]
    options += ["--runs", str(args.runs), "--warmup", str(args.warmup)]
    options += ["--explain"] if args.explain else []
    options += ["--reuse"] if args.reuse else []
    db_name = os.environ.get("DURABLE_JOBS_BENCH_DB_NAME") or DB_NAME
    started = time.perf_counter()
    results, broken = run_engines(
        "benchmarks.stats", args, options, DURABLE_JOBS_BENCH_DB_NAME=db_name
    )
    print_report(results, time.perf_counter() - started)
    slow = [
        f"{r['db']} {what} median {r[what]['median']:.0f} ms (target {args.target:g} ms)"
        for r in results
        for what in ("snapshot_ms", "command_ms", "dashboard_ms")
        if r[what]["median"] > args.target
    ]
    return exit_status("TOO SLOW", slow, broken)


def print_report(results: list[dict[str, Any]], elapsed: float) -> None:
    header = (
        f"{'db':<11} {'finished jobs':>13} {'queries':>7} {'snapshot median':>15} "
        f"{'p95':>7} {'jobs stats --json median':>24} {'p95':>7} {'dashboard median':>16} "
        f"{'p95':>7}"
    )
    print(
        "\nsnapshot = stats.snapshot(); jobs stats --json = call_command in process; "
        "dashboard = the admin page rendered for a superuser; ms per call"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        s, c, d = r["snapshot_ms"], r["command_ms"], r["dashboard_ms"]
        print(
            f"{r['db']:<11} {r['terminal_rows']:>13,} {r['queries']:>7} {s['median']:>15.1f} "
            f"{s['p95']:>7.1f} {c['median']:>24.1f} {c['p95']:>7.1f} {d['median']:>16.1f} "
            f"{d['p95']:>7.1f}"
        )
    print()
    for r in results:
        print(
            f"{r['db']}: {r['server']}; {r['terminal_rows']:,} finished jobs over {r['days']:g} "
            f"days ({r['last_day']:,} in the last day), loaded in {r['insert_seconds']:.0f} s; "
            f"{r['runs']} calls of each"
        )
    print_total(elapsed)


def run_child(args: argparse.Namespace) -> int:
    start_child(args.child, ["default"], recreate=not args.reuse)
    args.claims = args.scans = 1  # read by Benchmark, unused here
    return write_result(args, StatsBenchmark(args).run_stats())


class StatsBenchmark(Benchmark):
    """Phase B of the terminal-rows benchmark, each finished job with its attempt row."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.history = timedelta(days=args.days)

    def run_stats(self) -> dict[str, Any]:
        from django.utils import timezone

        from django_durable_jobs.models import Job, JobAttempt

        side = self.b
        insert_seconds = 0.0
        if not self.args.reuse:
            self.seed_live_work(side)
            self.seed_workers_and_schedules()
            log(f"{self.engine}: loading {self.args.terminal:,} finished jobs and their attempts")
            started = time.perf_counter()
            self.insert_terminal(side, self.args.terminal, progress=True)
            insert_seconds = time.perf_counter() - started
            self.analyze(side)
            if self.engine == "postgresql":
                with side.connection.cursor() as cursor:
                    cursor.execute(f'VACUUM (ANALYZE) "{JobAttempt._meta.db_table}"')
        last_day = Job.objects.filter(completed_at__gte=timezone.now() - timedelta(days=1)).count()
        queries = self.count_queries()
        times = self.measure_stats()
        if self.args.explain:
            self.explain_snapshot()
        return {
            "db": self.engine,
            "server": self.server_version(),
            "terminal_rows": self.count_terminal(side),
            "days": self.args.days,
            "last_day": last_day,
            "insert_seconds": insert_seconds,
            "queries": queries,
            "runs": self.args.runs,
            "snapshot_ms": summary(times["snapshot"]),
            "command_ms": summary(times["command"]),
            "dashboard_ms": summary(times["dashboard"]),
        }

    def seed_workers_and_schedules(self) -> None:
        from django.utils import timezone

        from django_durable_jobs.models import Schedule, WorkerProcess

        now = timezone.now()

        def worker(i: int, heartbeat, stopped=None) -> WorkerProcess:
            return WorkerProcess(
                owner_id=str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
                actor=f"worker@app-{i % 8}:{1000 + i}",
                host=f"app-{i % 8}",
                pid=1000 + i,
                started_at=heartbeat - timedelta(hours=1),
                heartbeat_at=heartbeat,
                stopped_at=stopped,
                lease_seconds=30.0,
                concurrency=4,
            )

        rows = [worker(i, now) for i in range(5)]
        rows += [worker(5 + i, now - timedelta(minutes=10)) for i in range(2)]
        rows += [
            worker(7 + i, now - timedelta(hours=i), now - timedelta(hours=i)) for i in range(500)
        ]
        WorkerProcess.objects.bulk_create(rows)
        Schedule.objects.bulk_create(
            Schedule(
                name=f"schedule-{i}",
                operation="reports.rebuild",
                cron="0 3 * * *",
                anchor=now,
                definition_hash="0" * 64,
                declared_at=now,
                paused_at=now if i == 0 else None,
                paused_by="ops" if i == 0 else "",
                created_at=now,
                updated_at=now,
            )
            for i in range(3)
        )

    def after_terminal_batch(self, side, cursor, raw: list[tuple], fields: list) -> None:
        """Write each finished job's attempt: its span, outcome, worker and a small snapshot."""
        from django_durable_jobs.models import JobAttempt

        names = [f.attname for f in fields]
        at = {name: names.index(name) for name in names}
        columns = [f for f in JobAttempt._meta.concrete_fields if not f.primary_key]
        encoders = [self.encoder(f.target_field if f.is_relation else f) for f in columns]
        rows = []
        for row in raw:
            values = {
                "job_id": row[at["id"]],
                "epoch": row[at["fencing_epoch"]],
                "owner_id": row[at["owner_id"]],
                "claimed_by": row[at["claimed_by"]],
                "started_at": row[at["claimed_at"]],
                "ended_at": row[at["completed_at"]],
                "outcome": row[at["status"]],
                "error": row[at["error"]],
                "error_class": "",
                "traceback": None,
                "snapshot": json.dumps({"status": row[at["status"]]}),
            }
            rows.append(
                tuple(enc(values[f.attname]) for enc, f in zip(encoders, columns, strict=True))
            )
        quote = side.connection.ops.quote_name
        into = f"{quote(JobAttempt._meta.db_table)} ({', '.join(quote(f.column) for f in columns)})"
        self.write_rows(cursor, into, len(columns), rows)

    def snapshot_once(self) -> float:
        from django_durable_jobs.stats import snapshot

        started = time.perf_counter()
        snapshot()
        return time.perf_counter() - started

    def command_once(self) -> float:
        from django.core.management import call_command

        started = time.perf_counter()
        call_command("jobs", "stats", "--json", stdout=io.StringIO())
        return time.perf_counter() - started

    def dashboard_once(self) -> float:
        """Return the time the admin's dashboard takes to answer a superuser, page rendered."""
        from django.contrib import admin
        from django.contrib.auth.models import User
        from django.test import RequestFactory

        from django_durable_jobs.models import Dashboard

        request = RequestFactory().get("/admin/durable_jobs/dashboard/")
        request.user = User(username="bench", is_active=True, is_staff=True, is_superuser=True)
        started = time.perf_counter()
        response = admin.site._registry[Dashboard].changelist_view(request)
        response.render()
        elapsed = time.perf_counter() - started
        assert response.status_code == 200, response.status_code
        return elapsed

    def measure_stats(self) -> dict[str, list[float]]:
        log(
            f"{self.engine}: timing {self.args.runs} snapshots, `jobs stats --json` and "
            "dashboards alternately"
        )
        times: dict[str, list[float]] = {"snapshot": [], "command": [], "dashboard": []}
        onces = (
            ("snapshot", self.snapshot_once),
            ("command", self.command_once),
            ("dashboard", self.dashboard_once),
        )
        for i in range(self.args.warmup + self.args.runs):
            for what, once in onces:
                elapsed = once()
                if i >= self.args.warmup:
                    times[what].append(elapsed)
        return times

    def count_queries(self) -> int:
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        from django_durable_jobs.stats import snapshot

        with CaptureQueriesContext(connection) as captured:
            snapshot()
        return len(captured)

    def explain_snapshot(self) -> None:
        """Print each statement of one snapshot: its time and its plan (stderr)."""
        from django.db import connection

        from django_durable_jobs.stats import snapshot

        with self.recorded(connection) as statements:
            snapshot()
        for sql, params, seconds in statements:
            log(f"{seconds * 1000:8.3f} ms  {sql[:160]}")
            self.log_plan(connection, sql, params)


if __name__ == "__main__":
    sys.exit(main())
