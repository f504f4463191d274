"""Claim and expiry-scan cost versus the number of terminal rows (SPEC §2).

SPEC §2 promises an index that makes "find the next claimable job" and "find expired leases" cost
the same with 10 million terminal rows as with 100. For each selected database engine this
benchmark drops, recreates and migrates two databases of its own (see ``benchmarks/settings.py``):

* phase A, ``bench_durable_jobs_small``: 100 terminal rows;
* phase B, ``bench_durable_jobs``: the same live work, plus complete/failed/cancelled rows with
  realistic text columns bulk-loaded until it holds ``--terminal`` terminal rows.

Both get a backlog of 50 due pending rows (topped up after every claim), 20 pending rows scheduled
for tomorrow, 5 running rows whose leases expired an hour ago and 5 with live leases; both are
ANALYZEd. Then it times ``DurableJobStore.claim_next(limit=1)`` (each lease is completed, untimed,
so the next claim takes the next job) and the expired-lease scan
``list(Job.objects.lease_expired(now)[:10])``, alternating A and B call by call, so that load from
other processes on a shared machine lands on both phases alike and the B/A ratio stays honest.

Each engine runs in a child process of its own (Django settings are per process). The parent prints
one table and exits 1 when a claim or scan median grew by more than ``--max-ratio`` from A to B, 2
when an engine could not be benchmarked at all.

    .venv/bin/python -m benchmarks                      # all three engines, 1,000,000 rows
    .venv/bin/python -m benchmarks --db sqlite,postgresql --terminal 200000 --explain
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import random
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

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

OP_WORK = "bench.work"  # what the benchmark claims
OP_HELD = "bench.held"  # expired leases nobody may resume: the scan finds them, no claim takes them
PHASE_A_TERMINAL = 100
PENDING_BACKLOG = 50
SCHEDULED_ROWS = 20
EXPIRED_ROWS = 5
LIVE_ROWS = 5
HISTORY = timedelta(days=180)  # terminal rows were created over this long, oldest first


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = engines_parser(
        "python -m benchmarks",
        "Claim and expired-lease scan latency with 100 vs --terminal terminal rows.",
    )
    add = parser.add_argument
    add("--terminal", type=int, default=1_000_000, help="phase B terminal rows (%(default)s)")
    add("--claims", type=int, default=200, help="timed claims per phase (%(default)s)")
    add("--scans", type=int, default=500, help="timed expiry scans per phase (%(default)s)")
    add("--warmup", type=int, default=20, help="untimed claims and scans first (%(default)s)")
    add_batch_option(parser)
    add("--max-ratio", type=float, default=3.0, help="exit 1 above this B/A (%(default)s)")
    add("--explain", action="store_true", help="print phase B's statements and plans (stderr)")
    add_seed_and_child_options(parser)
    args = parse_engines(parser, argv)
    if min(args.claims, args.scans, args.batch) < 1 or min(args.warmup, args.terminal) < 0:
        parser.error("--claims, --scans and --batch must be >= 1; --warmup and --terminal >= 0")
    if args.max_ratio <= 0:
        parser.error("--max-ratio must be positive")
    return args


# -- parent: one child process per engine, then the table ---------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_child(args)
    options = ["--terminal", str(args.terminal), "--claims", str(args.claims)]
    options += ["--scans", str(args.scans), "--warmup", str(args.warmup)]
    options += ["--explain"] if args.explain else []
    started = time.perf_counter()
    results, broken = run_engines("benchmarks", args, options)
    print_report(results, time.perf_counter() - started)
    regressions = [
        f"{r['db']} {what} median grew {r[what + '_ratio']:.2f}x (bound {args.max_ratio:g}x)"
        for r in results
        for what in ("claim", "scan")
        if r[what + "_ratio"] > args.max_ratio
    ]
    return exit_status("REGRESSION", regressions, broken)


def print_report(results: list[dict[str, Any]], elapsed: float) -> None:
    header = (
        f"{'db':<11} {'phase':<5} {'terminal rows':>13} {'claim median':>12} {'claim p95':>10} "
        f"{'scan median':>11} {'scan p95':>9}"
    )
    print("\nclaim = DurableJobStore.claim_next(limit=1), with its COMMIT")
    print("scan  = list(Job.objects.lease_expired(now)[:10]); times in ms per call")
    print(header)
    print("-" * len(header))
    for r in results:
        a, b = r["phases"]
        for p in (a, b):
            c, s = p["claim_ms"], p["scan_ms"]
            print(
                f"{r['db']:<11} {p['phase']:<5} {p['terminal_rows']:>13,} {c['median']:>12.3f} "
                f"{c['p95']:>10.3f} {s['median']:>11.3f} {s['p95']:>9.3f}"
            )
        ratios = [
            b[what][stat] / a[what][stat]
            for what in ("claim_ms", "scan_ms")
            for stat in ("median", "p95")
        ]
        print(
            f"{r['db']:<11} {'B/A':<5} {'':>13} {ratios[0]:>11.2f}x {ratios[1]:>9.2f}x "
            f"{ratios[2]:>10.2f}x {ratios[3]:>8.2f}x"
        )
    print()
    for r in results:
        print(
            f"{r['db']}: {r['server']}; loaded {r['inserted']:,} rows in {r['insert_seconds']:.0f} s "
            f"({r['inserted'] / max(r['insert_seconds'], 1e-9):,.0f} rows/s), ANALYZE "
            f"{r['analyze_seconds']:.1f} s, phase B job table {r['table_mb']:,.0f} MB; "
            f"{r['claims']} claims and {r['scans']} scans per phase"
        )
    print_total(elapsed)


# -- child: one engine --------------------------------------------------------------------------


def run_child(args: argparse.Namespace) -> int:
    start_child(args.child)  # both databases, phase B's and phase A's
    return write_result(args, Benchmark(args).run())


class Side:
    """One phase: a database alias and the worker that claims from it."""

    def __init__(self, phase: str, alias: str) -> None:
        from django.db import connections

        from django_durable_jobs.store import DurableJobStore

        self.phase = phase
        self.alias = alias
        self.connection = connections[alias]
        self.worker = DurableJobStore(actor="bench@localhost:1", lease_seconds=300.0, using=alias)


class Benchmark:
    """Seed both phases, grow phase B's terminal rows, then time both phases alternately."""

    def __init__(self, args: argparse.Namespace) -> None:
        from django_durable_jobs.models import Job

        self.args = args
        self.engine = args.child
        self.table = Job._meta.db_table
        self.rng = random.Random(args.seed)
        self.serial = 0  # numbers every generated row, so idempotency keys are unique
        self.a, self.b = Side("A", "small"), Side("B", "default")
        self.history = HISTORY  # terminal rows are spread evenly over this long, up to now

    def run(self) -> dict[str, Any]:
        for side in (self.a, self.b):
            self.seed_live_work(side)
            self.insert_terminal(side, PHASE_A_TERMINAL)
        missing = max(0, self.args.terminal - self.count_terminal(self.b))
        log(f"{self.engine}: loading {missing:,} terminal rows into phase B")
        started = time.perf_counter()
        self.insert_terminal(self.b, missing, progress=True)
        insert_seconds = time.perf_counter() - started
        started = time.perf_counter()
        for side in (self.a, self.b):
            self.analyze(side)
        analyze_seconds = time.perf_counter() - started
        phases = self.measure()
        if self.args.explain:
            self.explain(self.b)
        a, b = phases
        return {
            "db": self.engine,
            "server": self.server_version(),
            "phases": phases,
            "claim_ratio": b["claim_ms"]["median"] / a["claim_ms"]["median"],
            "scan_ratio": b["scan_ms"]["median"] / a["scan_ms"]["median"],
            "inserted": missing,
            "insert_seconds": insert_seconds,
            "analyze_seconds": analyze_seconds,
            "table_mb": self.table_bytes(self.b) / 1e6,
            "claims": self.args.claims,
            "scans": self.args.scans,
        }

    # -- live work: pending backlog, scheduled, running with expired and with live leases --------

    def seed_live_work(self, side: Side) -> None:
        from django.utils import timezone

        from django_durable_jobs.store import DurableJobStore

        now = timezone.now()
        for _ in range(PENDING_BACKLOG):
            self.defer_pending(side)
        for _ in range(SCHEDULED_ROWS):
            self.defer_pending(side, run_after=now + timedelta(days=1))
        crashed = DurableJobStore(
            actor="crashed@localhost:2",
            lease_seconds=30.0,
            using=side.alias,
            clock=lambda: now - timedelta(hours=1),
        )
        for _ in range(EXPIRED_ROWS):
            crashed.insert(OP_HELD)
        busy = DurableJobStore(actor="busy@localhost:3", lease_seconds=86400.0, using=side.alias)
        for _ in range(LIVE_ROWS):
            busy.insert(OP_WORK)

    def defer_pending(self, side: Side, run_after: datetime | None = None) -> None:
        from django_durable_jobs.store import Submission

        self.serial += 1
        payload = {"report_id": self.serial, "tenant": f"tenant-{self.serial % 50:02d}"}
        submission = Submission.of(None, f"pending-{self.serial}", payload)
        side.worker.defer(OP_WORK, submission, run_after=run_after)

    # -- timing ---------------------------------------------------------------------------------

    def claim_once(self, side: Side, i: int) -> float:
        started = time.perf_counter()
        leases = side.worker.claim_next(limit=1, resume_expired=[OP_WORK])
        elapsed = time.perf_counter() - started
        if len(leases) != 1:
            raise RuntimeError(f"claim_next returned {len(leases)} leases, expected 1")
        side.worker.complete(leases[0], {"rows": i, "ok": True})
        self.defer_pending(side)  # keep the backlog at PENDING_BACKLOG
        return elapsed

    def scan_once(self, side: Side, i: int) -> float:
        from django.utils import timezone

        from django_durable_jobs.models import Job

        now = timezone.now()
        started = time.perf_counter()
        expired = list(Job.objects.using(side.alias).lease_expired(now)[:10])
        elapsed = time.perf_counter() - started
        if len(expired) != EXPIRED_ROWS:
            raise RuntimeError(f"the scan found {len(expired)} rows, expected {EXPIRED_ROWS}")
        return elapsed

    def measure(self) -> list[dict[str, Any]]:
        """Time claims, then scans, alternating A and B (ABBA…) so drift hits both alike."""
        counts = {side.phase: self.count_terminal(side) for side in (self.a, self.b)}
        times: dict[str, dict[str, list[float]]] = {"A": {}, "B": {}}
        steps: tuple[tuple[str, int, Callable[[Side, int], float]], ...] = (
            ("claim", self.args.claims, self.claim_once),
            ("scan", self.args.scans, self.scan_once),
        )
        for what, count, once in steps:
            log(f"{self.engine}: timing {count} {what}s per phase, A and B alternately")
            times["A"][what], times["B"][what] = [], []
            for i in range(self.args.warmup + count):
                for side in (self.a, self.b) if i % 2 == 0 else (self.b, self.a):
                    elapsed = once(side, i)
                    if i >= self.args.warmup:
                        times[side.phase][what].append(elapsed)
        return [
            {
                "phase": phase,
                "terminal_rows": counts[phase],
                "claim_ms": summary(times[phase]["claim"]),
                "scan_ms": summary(times[phase]["scan"]),
            }
            for phase in ("A", "B")
        ]

    # -- terminal rows --------------------------------------------------------------------------

    def insert_terminal(self, side: Side, count: int, *, progress: bool = False) -> None:
        """Append ``count`` terminal rows through the driver's bulk path (COPY on PostgreSQL).

        Django's bulk_create spends most of its time compiling SQL in Python (about 8,000 rows/s
        on the reference machine); the driver paths are several times faster, which keeps
        1,000,000 rows affordable. The first row is read back through the ORM to prove that the
        encoding is the one Django uses.
        """
        from django.db import transaction
        from django.utils import timezone

        from django_durable_jobs.models import Job

        fields = Job._meta.concrete_fields
        encoders = [self.encoder(field) for field in fields]
        quote = side.connection.ops.quote_name
        into = f"{quote(self.table)} ({', '.join(quote(f.column) for f in fields)})"
        start = timezone.now() - self.history
        step = self.history / max(count, 1)
        done = 0
        started = reported = time.perf_counter()
        while done < count:
            size = min(self.args.batch, count - done)
            raw = list(self.terminal_rows(size, start + step * done, step, fields))
            rows = [tuple(enc(v) for enc, v in zip(encoders, row, strict=True)) for row in raw]
            with transaction.atomic(using=side.alias), side.connection.cursor() as cursor:
                self.write_rows(cursor, into, len(fields), rows)
                self.after_terminal_batch(side, cursor, raw, fields)
            if done == 0:
                expected = dict(zip((f.attname for f in fields), raw[0], strict=True))
                found = Job.objects.using(side.alias).filter(pk=expected["id"])
                if found.values(*expected).first() != expected:
                    raise RuntimeError(f"a bulk-loaded row reads back differently: {expected}")
            done += size
            if progress and (time.perf_counter() - reported > 15 or done == count):
                reported = time.perf_counter()
                rate = done / (reported - started)
                log(f"{self.engine}:   {done:,}/{count:,} rows ({rate:,.0f} rows/s)")

    def write_rows(self, cursor: Any, into: str, width: int, rows: list[tuple]) -> None:
        """Write encoded ``rows`` of ``width`` values ``into`` "table (columns)" (COPY on PostgreSQL)."""
        if self.engine == "postgresql":
            with cursor.cursor.copy(f"COPY {into} FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            marks = ", ".join(["%s"] * width)
            cursor.executemany(f"INSERT INTO {into} VALUES ({marks})", rows)

    def after_terminal_batch(self, side: Side, cursor: Any, raw: list[tuple], fields: list) -> None:
        """Write more rows for a batch of terminal rows, in its transaction (nothing here)."""

    def encoder(self, field: Any) -> Callable[[Any], Any]:
        """Return how the driver takes ``field``'s Python value (as Django would send it)."""
        from django.db import models

        if self.engine == "postgresql":
            return _same  # psycopg adapts UUIDs and aware datetimes itself
        if isinstance(field, models.UUIDField):
            return str if self.engine == "mariadb" else _uuid_hex  # MariaDB has a uuid type
        if isinstance(field, models.DateTimeField):
            return _naive_utc_text  # Django stores naive UTC on SQLite and MariaDB
        return _same

    def terminal_rows(
        self, count: int, first: datetime, step: timedelta, fields: list[Any]
    ) -> Iterator[tuple]:
        """Yield ``count`` finished jobs as the app leaves them: complete, failed or cancelled.

        Rows come oldest first, ``step`` apart from ``first`` (history accumulates in creation
        order); each is a tuple of Python values in the order of ``fields``.
        """
        names = [f.attname for f in fields]
        rng = self.rng
        for k in range(count):
            self.serial += 1
            n = self.serial
            pk = uuid.UUID(int=rng.getrandbits(128), version=4)
            scope = "default" if n % 10 < 7 else f"tenant-{n % 50:02d}"
            draw = rng.random()
            status = "complete" if draw < 0.90 else "failed" if draw < 0.97 else "cancelled"
            created = first + step * (k + rng.random())
            claimed = created + timedelta(seconds=rng.uniform(0.01, 5))
            ended = claimed + timedelta(seconds=rng.uniform(0.05, 300))
            epoch = 1 if rng.random() < 0.95 else rng.randint(2, 4)
            proposal = _json(
                {
                    "object_id": n,
                    "options": {"format": FORMATS[n % len(FORMATS)], "notify": n % 3 == 0},
                    "requested_by": f"user{n % 997}@example.com",
                    "tenant": scope,
                    "window": {"from": "2026-01-01", "to": "2026-06-30"},
                }
            )
            result = error = checkpoint = cancel_requested = None
            progress = 100.0
            if status == "complete":
                result = _json(
                    {
                        "bytes": rng.randrange(1_000, 50_000_000),
                        "rows": rng.randrange(0, 100_000),
                        "url": f"https://files.example.com/exports/{pk}.csv.gz",
                    }
                )
            else:
                progress = float(rng.randrange(0, 100))
                if status == "failed":
                    error = ERRORS[n % len(ERRORS)].format(n=n)
                else:
                    cancel_requested = ended - timedelta(seconds=1)
                if rng.random() < 0.5:
                    checkpoint = _json({"cursor": n * 100, "done": int(progress)})
            values = {
                "id": pk,
                "operation": OPERATIONS[n % len(OPERATIONS)],
                "status": status,
                "scope": scope,
                "idempotency_key": str(pk) if n % 2 else f"order-{n}",
                "proposal": proposal,
                "proposal_hash": hashlib.sha256(proposal.encode()).hexdigest(),
                "proposal_checked": True,  # the store checked it as it wrote the row
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
                "trace_context": None,
                # Not a workflow's job, never slept.
                "workflow_id": None,
                "node": "",
                "waiting_on": 0,
                "on_upstream_failure": "cancel",
                "released_at": None,
                "sleep_until": None,
                # No flow-control keys: no rate limit, no concurrency key, no window.
                "rate_key": "",
                "concurrency_key": "",
                "unique_key": None,
            }
            yield tuple(values[name] for name in names)

    def count_terminal(self, side: Side) -> int:
        from django_durable_jobs.models import TERMINAL_STATUSES, Job

        return Job.objects.using(side.alias).filter(status__in=sorted(TERMINAL_STATUSES)).count()

    # -- engine specifics -----------------------------------------------------------------------

    def analyze(self, side: Side) -> None:
        with side.connection.cursor() as cursor:
            if self.engine == "postgresql":
                # VACUUM too, as autovacuum would after a large load, so that it does not run
                # during the timings; ANALYZE refreshes the planner statistics.
                cursor.execute(f'VACUUM (ANALYZE) "{self.table}"')
            elif self.engine == "mariadb":
                cursor.execute(f"ANALYZE TABLE `{self.table}`")
                cursor.fetchall()
            else:
                cursor.execute("ANALYZE")

    def table_bytes(self, side: Side) -> int:
        with side.connection.cursor() as cursor:
            if self.engine == "postgresql":
                cursor.execute("SELECT pg_total_relation_size(%s)", [self.table])
            elif self.engine == "mariadb":
                cursor.execute(
                    "SELECT data_length + index_length FROM information_schema.tables "
                    "WHERE table_schema = DATABASE() AND table_name = %s",
                    [self.table],
                )
            else:  # the whole file; the job table is nearly all of it
                cursor.execute(
                    "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()"
                )
            return int(cursor.fetchone()[0])

    def server_version(self) -> str:
        with self.b.connection.cursor() as cursor:
            if self.engine == "sqlite":
                cursor.execute("SELECT 'SQLite ' || sqlite_version()")
            elif self.engine == "postgresql":
                cursor.execute("SELECT 'PostgreSQL ' || current_setting('server_version')")
            else:
                cursor.execute("SELECT CONCAT('MariaDB ', VERSION())")
            return str(cursor.fetchone()[0])

    def explain(self, side: Side) -> None:
        """Print each statement of one real claim and one scan: its time and its plan (stderr)."""
        with self.recorded(side.connection) as statements:
            leases = side.worker.claim_next(limit=1, resume_expired=[OP_WORK])
            self.scan_once(side, 0)
        side.worker.complete(leases[0])
        self.defer_pending(side)
        log(f"-- {self.engine}, phase {side.phase}: the statements of one claim, then of one scan")
        for sql, params, seconds in statements:
            log(f"{seconds * 1000:8.3f} ms  {re.sub(r'^SELECT .*? FROM ', 'SELECT … FROM ', sql)}")
            if sql.lstrip().upper().startswith("SELECT"):
                self.log_plan(side.connection, sql, params)

    @contextlib.contextmanager
    def recorded(self, connection: Any) -> Iterator[list[tuple[str, Any, float]]]:
        """Collect (sql, params, seconds) of each statement run on ``connection`` in the block."""
        statements: list[tuple[str, Any, float]] = []

        def record(execute, sql, params, many, context):
            started = time.perf_counter()
            try:
                return execute(sql, params, many, context)
            finally:
                statements.append((sql, params, time.perf_counter() - started))

        with connection.execute_wrapper(record):
            yield statements

    def log_plan(self, connection: Any, sql: str, params: Any) -> None:
        """Print the plan of ``sql`` on ``connection`` (stderr), a line per row of EXPLAIN."""
        prefix = "EXPLAIN QUERY PLAN " if self.engine == "sqlite" else "EXPLAIN "
        with connection.cursor() as cursor:
            cursor.execute(prefix + sql, params)
            for row in cursor.fetchall():
                log(f"            plan: {' | '.join(str(v) for v in row if v is not None)}")


def _same(value: Any) -> Any:
    return value


def _uuid_hex(value: uuid.UUID) -> str:
    return value.hex


def _naive_utc_text(value: datetime | None) -> str | None:
    return None if value is None else str(value.replace(tzinfo=None))


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


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
