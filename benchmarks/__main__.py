"""Claim and expiry-scan cost versus the number of terminal rows (SPEC §2).

SPEC §2 promises an index that makes "find the next claimable job" and "find expired leases" cost
the same with 10 million terminal rows as with 100. For each selected database this benchmark:

1. drops and recreates a database of its own, ``bench_durable_jobs``, and migrates it;
2. phase A: seeds 100 terminal rows, a backlog of 50 due pending rows (kept at 50 by deferring one
   row after every claim), 20 pending rows scheduled for tomorrow, 5 running rows with expired
   leases and 5 with live ones; runs ANALYZE; then times ``DurableJobStore.claim_next(limit=1)``
   (each lease is completed, untimed, so the next claim takes the next job) and the expired-lease
   scan ``list(Job.objects.lease_expired(now)[:10])``;
3. phase B: bulk-inserts complete/failed/cancelled rows with realistic text columns until the table
   holds ``--terminal`` terminal rows, runs ANALYZE, and times the same two things again;
4. prints one table for all databases with the B/A ratio of the medians, measured in the same run.

Each database is benchmarked in a child process of its own (Django settings are per process); the
parent prints the table and exits 1 when a claim or scan median grew by more than ``--max-ratio``
from phase A to phase B, 2 when a database could not be benchmarked at all.

    .venv/bin/python -m benchmarks                      # all three databases, 1,000,000 rows
    .venv/bin/python -m benchmarks --db sqlite,postgresql --terminal 200000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DATABASES = ("sqlite", "postgresql", "mariadb")
DEFAULT_TERMINAL = 1_000_000
SETTINGS_MODULE = "benchmarks.settings"

OP_WORK = "bench.work"  # the operation the benchmark claims
OP_HELD = "bench.held"  # expired leases nobody may resume: found by the scan, never claimed
PHASE_A_TERMINAL = 100
PENDING_BACKLOG = 50
SCHEDULED_ROWS = 20
EXPIRED_ROWS = 5
LIVE_ROWS = 5


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Claim and expired-lease scan latency with 100 vs --terminal terminal rows.",
    )
    parser.add_argument(
        "--db",
        default=",".join(DATABASES),
        help="comma-separated databases to benchmark (default: %(default)s)",
    )
    parser.add_argument(
        "--terminal",
        type=int,
        default=DEFAULT_TERMINAL,
        help="terminal rows in phase B (default: %(default)s)",
    )
    parser.add_argument("--claims", type=int, default=200, help="timed claims per phase")
    parser.add_argument("--scans", type=int, default=500, help="timed expiry scans per phase")
    parser.add_argument("--warmup", type=int, default=20, help="untimed claims/scans first")
    parser.add_argument("--batch", type=int, default=5000, help="bulk_create batch size")
    parser.add_argument(
        "--max-ratio",
        type=float,
        default=3.0,
        help="exit 1 when a B/A median ratio exceeds this (default: %(default)s)",
    )
    parser.add_argument(
        "--explain", action="store_true", help="print the query plans of phase B (stderr)"
    )
    parser.add_argument("--seed", type=int, default=2026, help="seed of the generated rows")
    # Internal: the parent runs one child per database.
    parser.add_argument("--child", choices=DATABASES, help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    dbs = [d.strip().lower() for d in args.db.split(",") if d.strip()]
    unknown = [d for d in dbs if d not in DATABASES]
    if unknown or not dbs:
        parser.error(f"--db takes a comma-separated subset of {', '.join(DATABASES)}")
    args.dbs = list(dict.fromkeys(dbs))
    for name in ("claims", "scans", "batch"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.warmup < 0 or args.terminal < 0 or args.max_ratio <= 0:
        parser.error("--warmup and --terminal must be >= 0 and --max-ratio > 0")
    return args


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- parent: one child process per database, then the table ------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_child(args)
    results: list[dict[str, Any]] = []
    broken: list[str] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="durable-jobs-bench-") as tmp:
        for db in args.dbs:
            result_file = Path(tmp) / f"{db}.json"
            command = [
                sys.executable,
                "-m",
                "benchmarks",
                "--child",
                db,
                "--result-file",
                str(result_file),
                "--terminal",
                str(args.terminal),
                "--claims",
                str(args.claims),
                "--scans",
                str(args.scans),
                "--warmup",
                str(args.warmup),
                "--batch",
                str(args.batch),
                "--seed",
                str(args.seed),
            ]
            if args.explain:
                command.append("--explain")
            env = dict(os.environ, DURABLE_JOBS_BENCH_DB=db, DJANGO_SETTINGS_MODULE=SETTINGS_MODULE)
            log(f"== {db} ==")
            code = subprocess.run(command, env=env, cwd=REPO_ROOT, check=False).returncode
            if code != 0 or not result_file.exists():
                log(f"{db}: the benchmark failed (exit {code}); see the output above")
                broken.append(db)
                continue
            results.append(json.loads(result_file.read_text()))
    print_report(results, time.perf_counter() - started)
    regressions = [
        f"{r['db']} {what} median grew {ratio:.2f}x (bound {args.max_ratio:g}x)"
        for r in results
        for what, ratio in (("claim", r["claim_ratio"]), ("scan", r["scan_ratio"]))
        if ratio > args.max_ratio
    ]
    for line in regressions:
        print(f"REGRESSION: {line}")
    if broken:
        print(f"FAILED: no figures for {', '.join(broken)}")
        return 2
    return 1 if regressions else 0


def print_report(results: list[dict[str, Any]], elapsed: float) -> None:
    header = (
        f"{'db':<11} {'phase':<5} {'terminal rows':>13} {'claim median':>12} {'claim p95':>10} "
        f"{'scan median':>11} {'scan p95':>9}"
    )
    print()
    print("claim = DurableJobStore.claim_next(limit=1); scan = Job.objects.lease_expired(now)[:10]")
    print("times in ms per call")
    print(header)
    print("-" * len(header))
    for r in results:
        for phase in r["phases"]:
            c, s = phase["claim_ms"], phase["scan_ms"]
            print(
                f"{r['db']:<11} {phase['phase']:<5} {phase['terminal_rows']:>13,} "
                f"{c['median']:>12.3f} {c['p95']:>10.3f} {s['median']:>11.3f} {s['p95']:>9.3f}"
            )
        a, b = r["phases"]
        print(
            f"{r['db']:<11} {'B/A':<5} {'':>13} {r['claim_ratio']:>11.2f}x "
            f"{b['claim_ms']['p95'] / a['claim_ms']['p95']:>9.2f}x {r['scan_ratio']:>10.2f}x "
            f"{b['scan_ms']['p95'] / a['scan_ms']['p95']:>8.2f}x"
        )
    print()
    for r in results:
        print(
            f"{r['db']}: {r['server']}; inserted {r['inserted']:,} rows in "
            f"{r['insert_seconds']:.1f} s, ANALYZE {r['analyze_seconds']:.1f} s, "
            f"job table {r['table_mb']:.0f} MB; {r['claims']} claims and {r['scans']} scans "
            f"per phase"
        )
    print(f"total {elapsed:.0f} s on {os.cpu_count()} CPU(s)")


# -- child: one database ------------------------------------------------------------------------


def run_child(args: argparse.Namespace) -> int:
    os.environ["DURABLE_JOBS_BENCH_DB"] = args.child
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS_MODULE
    from benchmarks import settings as bench_settings

    recreate_database(args.child, bench_settings.DATABASES["default"])

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    result = Benchmark(args).run()
    Path(args.result_file).write_text(json.dumps(result))
    return 0


def recreate_database(db: str, conf: dict[str, Any]) -> None:
    """Drop and create the benchmark database with the driver (Django is not set up yet)."""
    name = conf["NAME"]
    if db == "sqlite":
        path = Path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    elif db == "postgresql":
        import psycopg

        with psycopg.connect(
            host=conf["HOST"],
            port=int(conf["PORT"]),
            user=conf["USER"],
            dbname="postgres",
            autocommit=True,
        ) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            connection.execute(f'CREATE DATABASE "{name}"')
    else:
        import MySQLdb

        connection = MySQLdb.connect(
            host=conf["HOST"], port=int(conf["PORT"]), user=conf["USER"], passwd=conf["PASSWORD"]
        )
        try:
            cursor = connection.cursor()
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
            cursor.execute(
                f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
            )
        finally:
            connection.close()


def summary(seconds: list[float]) -> dict[str, float]:
    """Return median and p95 (nearest rank) in milliseconds."""
    ordered = sorted(seconds)
    rank = max(1, math.ceil(0.95 * len(ordered)))
    return {
        "median": statistics.median(ordered) * 1000,
        "p95": ordered[rank - 1] * 1000,
        "min": ordered[0] * 1000,
        "max": ordered[-1] * 1000,
    }


class Benchmark:
    """Seed, time phase A, grow the terminal rows, time phase B (Django is set up)."""

    def __init__(self, args: argparse.Namespace) -> None:
        from django.db import connection

        from django_durable_jobs.models import Job
        from django_durable_jobs.store import DurableJobStore

        self.args = args
        self.db = args.child
        self.connection = connection
        self.table = Job._meta.db_table
        self.rng = random.Random(args.seed)
        self.serial = 0  # numbers pending submissions, so their idempotency keys are unique
        self.terminal_serial = 0
        self.worker = DurableJobStore(actor="bench-worker@localhost:1", lease=300.0)

    def run(self) -> dict[str, Any]:
        from django.utils import timezone

        self.seed_live_work(timezone.now())
        self.insert_terminal(PHASE_A_TERMINAL)
        self.analyze()
        phase_a = self.measure("A")
        missing = max(0, self.args.terminal - self.count_terminal())
        log(f"{self.db}: inserting {missing:,} terminal rows in batches of {self.args.batch:,}")
        started = time.perf_counter()
        self.insert_terminal(missing, progress=True)
        insert_seconds = time.perf_counter() - started
        started = time.perf_counter()
        self.analyze()
        analyze_seconds = time.perf_counter() - started
        log(f"{self.db}: inserted in {insert_seconds:.1f} s, ANALYZE took {analyze_seconds:.1f} s")
        phase_b = self.measure("B")
        if self.args.explain:
            self.explain()
        return {
            "db": self.db,
            "server": self.server_version(),
            "phases": [phase_a, phase_b],
            "claim_ratio": phase_b["claim_ms"]["median"] / phase_a["claim_ms"]["median"],
            "scan_ratio": phase_b["scan_ms"]["median"] / phase_a["scan_ms"]["median"],
            "inserted": missing,
            "insert_seconds": insert_seconds,
            "analyze_seconds": analyze_seconds,
            "table_mb": self.table_bytes() / 1e6,
            "claims": self.args.claims,
            "scans": self.args.scans,
        }

    # -- the live part of the table: pending backlog, scheduled, running (expired and live) ------

    def seed_live_work(self, now: datetime) -> None:
        from django_durable_jobs.store import DurableJobStore

        for _ in range(PENDING_BACKLOG):
            self.defer_pending()
        for _ in range(SCHEDULED_ROWS):
            self.defer_pending(run_after=now + timedelta(days=1))
        # Workers that died an hour ago: their leases expired long since. OP_HELD is not in the
        # benchmark's resume list, so these rows are what the scan finds and never get claimed.
        crashed = DurableJobStore(
            actor="crashed@localhost:2", lease=30.0, clock=lambda: now - timedelta(hours=1)
        )
        for _ in range(EXPIRED_ROWS):
            crashed.insert(OP_HELD)
        busy = DurableJobStore(actor="busy@localhost:3", lease=86400.0)
        for _ in range(LIVE_ROWS):
            busy.insert(OP_WORK)

    def defer_pending(self, run_after: datetime | None = None) -> None:
        from django_durable_jobs.store import Submission

        self.serial += 1
        payload = {"report_id": self.serial, "tenant": f"tenant-{self.serial % 50:02d}"}
        submission = Submission.of(None, f"bench-pending-{self.serial}", payload)
        self.worker.defer(OP_WORK, submission, run_after=run_after)

    # -- timing ---------------------------------------------------------------------------------

    def measure(self, phase: str) -> dict[str, Any]:
        from django.utils import timezone

        from django_durable_jobs.models import Job

        terminal = self.count_terminal()
        log(f"{self.db}: phase {phase}: {terminal:,} terminal rows; timing claims")
        perf = time.perf_counter
        claims: list[float] = []
        for i in range(self.args.warmup + self.args.claims):
            started = perf()
            leases = self.worker.claim_next(limit=1, resume_expired=[OP_WORK])
            elapsed = perf() - started
            if len(leases) != 1:
                raise RuntimeError(f"claim_next returned {len(leases)} leases, expected 1")
            self.worker.complete(leases[0], {"rows": i, "ok": True})
            self.defer_pending()  # keep the backlog at PENDING_BACKLOG
            if i >= self.args.warmup:
                claims.append(elapsed)
        log(f"{self.db}: phase {phase}: timing expired-lease scans")
        scans: list[float] = []
        for i in range(self.args.warmup + self.args.scans):
            now = timezone.now()
            started = perf()
            expired = list(Job.objects.lease_expired(now)[:10])
            elapsed = perf() - started
            if len(expired) != EXPIRED_ROWS:
                raise RuntimeError(f"the scan found {len(expired)} rows, expected {EXPIRED_ROWS}")
            if i >= self.args.warmup:
                scans.append(elapsed)
        return {
            "phase": phase,
            "terminal_rows": terminal,
            "claim_ms": summary(claims),
            "scan_ms": summary(scans),
        }

    # -- terminal rows --------------------------------------------------------------------------

    def insert_terminal(self, count: int, *, progress: bool = False) -> None:
        """Append ``count`` terminal rows with the driver's bulk path (COPY on PostgreSQL).

        The ORM's bulk_create spends most of its time compiling SQL in Python (about 8,000 rows/s
        here); the driver paths are several times faster, so 1,000,000 rows stay affordable. The
        first row written is read back through the ORM to prove the encoding matches Django's.
        """
        from django.db import transaction
        from django.utils import timezone

        from django_durable_jobs.models import Job

        fields = Job._meta.concrete_fields
        encoders = [self.encoder(field) for field in fields]
        columns = ", ".join(self.connection.ops.quote_name(f.column) for f in fields)
        now = timezone.now()
        done = 0
        started = reported = time.perf_counter()
        while done < count:
            size = min(self.args.batch, count - done)
            rows = [
                tuple(encode(value) for encode, value in zip(encoders, row, strict=True))
                for row in self.terminal_rows(size, now, fields)
            ]
            with transaction.atomic(), self.connection.cursor() as cursor:
                if self.db == "postgresql":
                    with cursor.cursor.copy(f"COPY {self.table} ({columns}) FROM STDIN") as copy:
                        for row in rows:
                            copy.write_row(row)
                else:
                    marks = ", ".join(["%s"] * len(fields))
                    cursor.executemany(
                        f"INSERT INTO {self.table} ({columns}) VALUES ({marks})", rows
                    )
            if done == 0:
                self.check_round_trip(fields)
            done += size
            if progress and (time.perf_counter() - reported > 10 or done == count):
                reported = time.perf_counter()
                rate = done / (reported - started)
                log(f"{self.db}:   {done:,}/{count:,} rows ({rate:,.0f} rows/s)")

    def encoder(self, field: Any) -> Any:
        """Return how the driver wants ``field``'s Python value (as Django would send it)."""
        from django.db import models

        if self.db == "postgresql":
            return _same  # psycopg adapts UUID and aware datetimes itself
        if isinstance(field, models.UUIDField):
            return str if self.db == "mariadb" else _uuid_hex  # MariaDB: native uuid column
        if isinstance(field, models.DateTimeField):
            return _naive_utc_text  # Django stores naive UTC text on SQLite and MariaDB
        return _same

    def check_round_trip(self, fields: list[Any]) -> None:
        """Read the first loaded row back with the ORM and require the values it was given."""
        from django_durable_jobs.models import Job

        expected = dict(zip((f.attname for f in fields), self.last_batch[0], strict=True))
        got = Job.objects.filter(pk=expected["id"]).values(*expected).first()
        if got != expected:
            raise RuntimeError(f"bulk-loaded row reads back differently: {got} != {expected}")

    def terminal_rows(self, count: int, now: datetime, fields: list[Any]) -> Iterator[tuple]:
        """Yield ``count`` finished jobs as the app leaves them: complete, failed or cancelled.

        Each row is a tuple of Python values in the order of ``fields``; the first row of the last
        batch is kept in ``self.last_batch`` for the round-trip check.
        """
        from django_durable_jobs.models import JobStatus

        names = [f.attname for f in fields]
        rng = self.rng
        self.last_batch = []
        for _ in range(count):
            self.terminal_serial += 1
            n = self.terminal_serial
            pk = uuid.UUID(int=rng.getrandbits(128), version=4)
            scope = "default" if n % 10 < 7 else f"tenant-{n % 50:02d}"
            draw = rng.random()
            status = (
                JobStatus.COMPLETE
                if draw < 0.90
                else JobStatus.FAILED
                if draw < 0.97
                else JobStatus.CANCELLED
            )
            created = now - timedelta(seconds=rng.randrange(3600, 180 * 86400))
            claimed = created + timedelta(seconds=rng.uniform(0.01, 5))
            ended = claimed + timedelta(seconds=rng.uniform(0.05, 300))
            epoch = 1 if rng.random() < 0.95 else rng.randint(2, 4)
            proposal = json.dumps(
                {
                    "object_id": n,
                    "options": {"format": FORMATS[n % len(FORMATS)], "notify": n % 3 == 0},
                    "requested_by": f"user{n % 997}@example.com",
                    "tenant": scope,
                    "window": {"from": "2026-01-01", "to": "2026-06-30"},
                },
                sort_keys=True,
                separators=(",", ":"),
            )
            result = error = checkpoint = cancel_requested = None
            progress = 100.0
            if status == JobStatus.COMPLETE:
                result = json.dumps(
                    {
                        "bytes": rng.randrange(1_000, 50_000_000),
                        "rows": rng.randrange(0, 100_000),
                        "url": f"https://files.example.com/exports/{pk}.csv.gz",
                    },
                    sort_keys=True,
                    separators=(",", ":"),
                )
            else:
                progress = float(rng.randrange(0, 100))
                if status == JobStatus.FAILED:
                    error = ERRORS[n % len(ERRORS)].format(n=n)
                else:
                    cancel_requested = ended - timedelta(seconds=1)
                if rng.random() < 0.5:
                    checkpoint = json.dumps({"cursor": n * 100, "done": int(progress)})
            values = {
                "id": pk,
                "operation": OPERATIONS[n % len(OPERATIONS)],
                "status": str(status),
                "scope": scope,
                "idempotency_key": str(pk) if n % 2 else f"order-{n}",
                "proposal": proposal,
                "proposal_hash": hashlib.sha256(proposal.encode()).hexdigest(),
                "created_at": created,
                "completed_at": ended,
                "heartbeat_at": ended,
                "claimed_at": claimed,
                "claimed_by": f"worker@app-{n % 8}:{1000 + n % 64}",
                "owner_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                "lease_expires_at": ended + timedelta(seconds=30),
                "fencing_epoch": epoch,
                "attempts": epoch,
                "cancellation_requested_at": cancel_requested,
                "retry_requested_at": None,
                "checkpoint": checkpoint,
                "checkpoint_at": None if checkpoint is None else ended,
                "progress": progress,
                "result": result,
                "error": error,
                "queue": QUEUES[n % len(QUEUES)],
                "priority": 0 if n % 20 else 10,
                "run_after": created,
            }
            row = tuple(values[name] for name in names)
            if not self.last_batch:
                self.last_batch.append(row)
            yield row

    def count_terminal(self) -> int:
        from django_durable_jobs.models import TERMINAL_STATUSES, Job

        return Job.objects.filter(status__in=sorted(TERMINAL_STATUSES)).count()

    # -- database specifics ---------------------------------------------------------------------

    def analyze(self) -> None:
        with self.connection.cursor() as cursor:
            if self.db == "postgresql":
                # VACUUM as autovacuum would after a large insert, so it does not run during the
                # timings; ANALYZE refreshes the planner statistics.
                cursor.execute(f'VACUUM (ANALYZE) "{self.table}"')
            elif self.db == "mariadb":
                cursor.execute(f"ANALYZE TABLE `{self.table}`")
                cursor.fetchall()
            else:
                cursor.execute("ANALYZE")

    def table_bytes(self) -> int:
        with self.connection.cursor() as cursor:
            if self.db == "postgresql":
                cursor.execute("SELECT pg_total_relation_size(%s)", [self.table])
            elif self.db == "mariadb":
                cursor.execute(
                    "SELECT data_length + index_length FROM information_schema.tables "
                    "WHERE table_schema = DATABASE() AND table_name = %s",
                    [self.table],
                )
            else:
                cursor.execute(
                    "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()"
                )
            return int(cursor.fetchone()[0])

    def server_version(self) -> str:
        with self.connection.cursor() as cursor:
            if self.db == "sqlite":
                cursor.execute("SELECT 'SQLite ' || sqlite_version()")
            elif self.db == "postgresql":
                cursor.execute("SELECT 'PostgreSQL ' || current_setting('server_version')")
            else:
                cursor.execute("SELECT CONCAT('MariaDB ', VERSION())")
            return str(cursor.fetchone()[0])

    def explain(self) -> None:
        """Print each statement of one real claim and one scan: its time and its plan (stderr)."""
        from django.utils import timezone

        from django_durable_jobs.models import Job

        statements: list[tuple[str, Any, float]] = []

        def record(execute, sql, params, many, context):
            started = time.perf_counter()
            try:
                return execute(sql, params, many, context)
            finally:
                statements.append((sql, params, time.perf_counter() - started))

        with self.connection.execute_wrapper(record):
            leases = self.worker.claim_next(limit=1, resume_expired=[OP_WORK])
            list(Job.objects.lease_expired(timezone.now())[:10])
        for lease in leases:
            self.worker.complete(lease)
            self.defer_pending()
        prefix = "EXPLAIN QUERY PLAN " if self.db == "sqlite" else "EXPLAIN "
        log(f"-- {self.db}: statements of one claim_next(limit=1), then of the scan")
        for sql, params, seconds in statements:
            short = re.sub(r"^SELECT .*? FROM ", "SELECT ... FROM ", sql, flags=re.S)
            log(f"{seconds * 1000:8.3f} ms  {short}")
            if sql.lstrip().upper().startswith("SELECT"):
                with self.connection.cursor() as cursor:
                    cursor.execute(prefix + sql, params)
                    for row in cursor.fetchall():
                        log("            plan: " + " | ".join(str(v) for v in row if v is not None))


def _same(value: Any) -> Any:
    return value


def _uuid_hex(value: uuid.UUID) -> str:
    return value.hex


def _naive_utc_text(value: datetime | None) -> str | None:
    return None if value is None else str(value.replace(tzinfo=None))


OPERATIONS = (
    "reports.rebuild",
    "billing.invoice",
    "mail.send_digest",
    "search.reindex",
    "exports.csv",
    "media.transcode",
)
QUEUES = ("default", "default", "reports", "mail")
FORMATS = ("csv", "xlsx", "pdf", "json")
ERRORS = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/reports/tasks.py", line 88, in rebuild\n'
    "    rows = client.fetch(window)\n"
    '  File "/srv/app/reports/client.py", line 41, in fetch\n'
    "    raise TimeoutError(f'upstream did not answer within {{timeout}} s')\n"
    "TimeoutError: upstream did not answer within 30 s (object {n})",
    "ValueError: invoice {n} has no billable lines",
    "PermissionError: the export bucket refused the upload of object {n}",
    "OperationalError: could not obtain lock on row in relation 'ledger' (object {n})",
)


if __name__ == "__main__":
    sys.exit(main())
