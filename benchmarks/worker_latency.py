"""Worker figures: enqueue→start latency with an idle worker, and drain throughput (issue 3).

For each selected database this benchmark drops and recreates a database of its own,
``bench_worker_<db>`` (settings: ``benchmarks.worker_settings``), migrates it, and runs the real
``manage.py runjobs`` as a subprocess against it:

1. **latency, woken** (every database): one idle worker (``--concurrency 4``, default ``--poll
   1`` and ``--watch``); the benchmark submits ``bench.noop`` jobs one at a time with ``submit()``
   from its own process, waits for each to complete, pauses 20-60 ms so the worker is idle again,
   and records ``claimed_at - created_at`` (enqueue→claim) and the executor's own start time minus
   ``created_at`` (enqueue→start). PostgreSQL's NOTIFY wakes the worker; on SQLite and MariaDB its
   watch for new submissions does;
2. **latency, poll only** (every database): the same, but each job is inserted as a valid pending
   row *without* NOTIFY (as behind a transaction pooler) into a worker started with ``--watch 0``,
   so only the poll loop finds it; each lands at a random point of the poll interval, so expect
   about half of it;
3. **drain**: ``--drain-jobs`` pending no-op jobs inserted up front, then one ``runjobs --burst``
   with ``--threads`` job threads; throughput = jobs / (last ``completed_at`` - first
   ``claimed_at``), which leaves out Django's start-up (the wall time is shown too);
4. **async waits**: ``--async-jobs`` jobs of an ``async def`` operation that each awaits
   ``asyncio.sleep(--async-seconds)``, submitted up front, then one ``runjobs --burst
   --async-slots <jobs>`` process (its event loop); the time from the first claim to the last
   completion, and from the spawn of the process (the target: 1,000 one-second waits in 3 s);
5. **floors**: what no worker could beat on this machine. On PostgreSQL, with no worker running,
   a thread of the benchmark LISTENs on a connection of its own and, as each notification
   arrives, runs a one-row claim on that connection (a sketch of the fenced claim: no fairness,
   limits or pauses); its figures, counted from ``created_at`` like the latency's, are the
   commit of ``submit()`` plus the delivery of NOTIFY, then plus one claim. On every database,
   ``--startup-runs`` spawns of a bare Django process (``django.setup()``, then its first query)
   beside as many spawns of ``runjobs --burst`` with one job waiting, to the job's start.

Each database runs in a child process of its own (Django settings are per process). The parent
prints one report and exits 1 when a woken p50 enqueue→start latency misses its target (20 ms
with NOTIFY, 50 ms with the watch), 2 when a database could not be benchmarked.

    .venv/bin/python -m benchmarks.worker_latency                 # sqlite and postgresql
    .venv/bin/python -m benchmarks.worker_latency --db postgresql --latency-jobs 500
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.databases import recreate_database, run_per_database
from benchmarks.systems.harness import summary

REPO_ROOT = Path(__file__).resolve().parent.parent
DATABASES = ("sqlite", "postgresql", "mariadb")
SETTINGS_MODULE = "benchmarks.worker_settings"
OPERATION = "bench.noop"
ASYNC_TARGET_SECONDS = 3.0  # 1,000 jobs awaiting asyncio.sleep(1), first claim to last end
NOTIFY_P50_TARGET_MS = 20.0
WATCH_P50_TARGET_MS = 50.0
WARMUP_JOBS = 10
JOB_TIMEOUT = 30.0
FLOOR_OWNER = "00000000-0000-4000-8000-00000000f100"  # the owner the floor's sketch claims as
# A bare Django process: set up, connect, run one query, print when it was done (Unix time).
BARE_DJANGO = (
    "import time, django; django.setup(); from django.db import connection; "
    "cursor = connection.cursor(); cursor.execute('SELECT 1'); cursor.fetchone(); "
    "print(time.time())"
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.worker_latency",
        description="runjobs enqueue→start latency (idle worker) and drain throughput.",
    )
    parser.add_argument("--db", default="sqlite,postgresql", help="databases (%(default)s)")
    parser.add_argument("--latency-jobs", type=int, default=200, help="jobs timed when woken")
    parser.add_argument("--poll-jobs", type=int, default=50, help="jobs timed by polling only")
    parser.add_argument("--poll", type=float, default=1.0, help="runjobs --poll (%(default)s s)")
    parser.add_argument("--drain-jobs", type=int, default=2000, help="no-op jobs to drain")
    parser.add_argument("--threads", type=int, default=4, help="runjobs --concurrency to drain")
    parser.add_argument("--async-jobs", type=int, default=1000, help="async jobs that wait")
    parser.add_argument("--async-seconds", type=float, default=1.0, help="each one's wait")
    parser.add_argument("--startup-runs", type=int, default=5, help="spawns timed per kind")
    parser.add_argument("--seed", type=int, default=2026, help="seed of the pauses")
    parser.add_argument("--child", choices=DATABASES, help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    dbs = [d.strip().lower() for d in args.db.split(",") if d.strip()]
    if not dbs or any(d not in DATABASES for d in dbs):
        parser.error(f"--db takes a comma-separated subset of {', '.join(DATABASES)}")
    args.dbs = list(dict.fromkeys(dbs))
    counts = (args.latency_jobs, args.poll_jobs, args.drain_jobs, args.threads, args.async_jobs)
    if min(*counts, args.startup_runs) < 1:
        parser.error("job counts, --threads and --startup-runs must be at least 1")
    if not args.poll > 0:
        parser.error("--poll must be positive")
    return args


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- parent: one child process per database, then the report -----------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_child(args)
    options = []
    names = ("latency_jobs", "poll_jobs", "poll", "drain_jobs", "threads", "startup_runs", "seed")
    for name in (*names, "async_jobs", "async_seconds"):
        options += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    results, broken = run_per_database("benchmarks.worker_latency", args.dbs, options, child_env)
    print_report(results, args)
    if broken:
        print(f"FAILED: no figures for {', '.join(broken)}")
        return 2
    missed = False
    for r in results:
        for mode, target in (("notify", NOTIFY_P50_TARGET_MS), ("watch", WATCH_P50_TARGET_MS)):
            woken = r["latency"].get(mode)
            if woken and woken["start_ms"]["p50"] >= target:
                print(f"MISSED: {r['db']} {mode} p50 enqueue→start is not under {target:g} ms")
                missed = True
        waits = r["async"]
        if waits["jobs"] >= 1000 and waits["seconds"] > ASYNC_TARGET_SECONDS:
            print(f"MISSED: {r['db']} async waits took over {ASYNC_TARGET_SECONDS:g} s")
            missed = True
    return 1 if missed else 0


def child_env(db: str) -> dict[str, str]:
    pythonpath = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return dict(
        os.environ,
        DURABLE_JOBS_WORKER_BENCH_DB=db,
        DJANGO_SETTINGS_MODULE=SETTINGS_MODULE,
        PYTHONPATH=pythonpath,
    )


def print_report(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print()
    print("enqueue→start latency with an idle runjobs worker (ms; claim = claimed_at - created_at,")
    print(f"start = executor start - created_at; runjobs --poll {args.poll:g})")
    header = (
        f"{'db':<11} {'wake-up':<10} {'jobs':>5} {'claim p50':>10} {'claim p99':>10} "
        f"{'start p50':>10} {'start p99':>10} {'start max':>10}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        for mode, label in (("notify", "NOTIFY"), ("watch", "watch"), ("poll", "poll only")):
            lat = r["latency"].get(mode)
            if lat:
                c, s = lat["claim_ms"], lat["start_ms"]
                print(
                    f"{r['db']:<11} {label:<10} {lat['jobs']:>5} {c['p50']:>10.1f} "
                    f"{c['p99']:>10.1f} {s['p50']:>10.1f} {s['p99']:>10.1f} {s['max']:>10.1f}"
                )
    print()
    print(f"drain of no-op jobs by one runjobs process with {args.threads} job threads")
    header = f"{'db':<11} {'jobs':>6} {'seconds':>8} {'jobs/s':>8} {'wall s':>7}"
    print(header)
    print("-" * len(header))
    for r in results:
        d = r["drain"]
        print(
            f"{r['db']:<11} {d['jobs']:>6} {d['seconds']:>8.2f} {d['jobs_per_s']:>8.0f} "
            f"{d['wall_seconds']:>7.2f}"
        )
    print()
    print(
        f"{args.async_jobs} async def jobs awaiting asyncio.sleep({args.async_seconds:g}) in one "
        f"runjobs process (--async-slots {args.async_jobs})"
    )
    header = f"{'db':<11} {'jobs':>6} {'first claim→last end s':>23} {'spawn→last end s':>17}"
    print(header)
    print("-" * len(header))
    for r in results:
        a = r["async"]
        print(f"{r['db']:<11} {a['jobs']:>6} {a['seconds']:>23.2f} {a['from_spawn']:>17.2f}")
    print()
    print_floors(results)
    by_db = {r["db"]: r for r in results}
    pg = by_db.get("postgresql")
    if pg and "notify" in pg["latency"]:
        notify, poll = pg["latency"]["notify"]["start_ms"], pg["latency"]["poll"]["start_ms"]
        print(
            f"postgresql: NOTIFY p50 {notify['p50']:.1f} ms vs poll-only p50 {poll['p50']:.0f} ms "
            f"({poll['p50'] / notify['p50']:.0f}x faster); target p50 < "
            f"{NOTIFY_P50_TARGET_MS:g} ms: {'met' if notify['p50'] < NOTIFY_P50_TARGET_MS else 'MISSED'}"
        )
    if pg and "sqlite" in by_db:
        ratio = pg["drain"]["jobs_per_s"] / by_db["sqlite"]["drain"]["jobs_per_s"]
        print(f"drain throughput postgresql / sqlite: {ratio:.2f}x")
    for r in results:
        print(f"{r['db']}: {r['server']}")
    print(f"{os.cpu_count()} CPU(s); Python {sys.version.split()[0]}")


def print_floors(results: list[dict[str, Any]]) -> None:
    """Print what no worker could beat on this machine (see the module's docstring, 5.)."""
    print("floors: what no worker could beat on this machine")
    header = f"{'db':<11} {'from':<7} {'to':<56} {'p50':>8} {'p90':>8}"
    print(header)
    print("-" * len(header))
    for r in results:
        floors, lines = r["floors"], []
        if "notify" in floors:
            notify = floors["notify"]
            heard = "NOTIFY heard on a LISTEN connection (no worker)"
            lines.append(("created", heard, notify["notified_ms"], "ms"))
            lines.append(
                ("created", "a one-row claim run on it at once ends", notify["claimed_ms"], "ms")
            )
        startup = floors["startup"]
        bare = "a bare Django process's first query (django.setup())"
        lines.append(("spawn", bare, startup["bare_s"], "s"))
        lines.append(
            ("spawn", "runjobs --burst starts the one job waiting", startup["runjobs_s"], "s")
        )
        for start, end, figures, unit in lines:
            p50, p90 = (f"{figures[p]:.{1 if unit == 'ms' else 2}f} {unit}" for p in ("p50", "p90"))
            print(f"{r['db']:<11} {start:<7} {end:<56} {p50:>8} {p90:>8}")
    print()


# -- child: one database --------------------------------------------------------------------------


def run_child(args: argparse.Namespace) -> int:
    import django
    from django.conf import settings

    recreate_database(args.child, settings.DATABASES["default"])
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    bench = WorkerBench(args)
    try:
        result = bench.run()
    except BaseException:
        log(f"{args.child}: worker logs kept in {bench.tmp}")
        raise
    shutil.rmtree(bench.tmp, ignore_errors=True)
    Path(args.result_file).write_text(json.dumps(result))
    return 0


class Worker:
    """A ``runjobs`` subprocess writing its log to a file."""

    def __init__(self, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        self.started = time.perf_counter()
        self.started_at = time.time()
        with log_path.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "django", "runjobs", *argv],
                cwd=REPO_ROOT,
                env={**os.environ, **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def wait(self, timeout: float) -> float:
        """Wait for the worker to exit 0; return the wall seconds since it was started."""
        code = self.proc.wait(timeout=timeout)
        if code != 0:
            raise RuntimeError(f"runjobs exited {code}:\n{self.log_path.read_text()[-3000:]}")
        return time.perf_counter() - self.started

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.wait(timeout=60)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


class WorkerBench:
    def __init__(self, args: argparse.Namespace) -> None:
        from django.db import connection

        self.args = args
        self.db = args.child
        self.vendor = connection.vendor
        self.random = random.Random(args.seed)
        self.tmp = Path(tempfile.mkdtemp(prefix=f"bench-worker-{self.db}-"))

    def run(self) -> dict[str, Any]:
        latency: dict[str, Any] = {}
        floors: dict[str, Any] = {}
        if self.vendor == "postgresql":
            log(
                f"{self.db}: {self.args.latency_jobs} jobs claimed on the LISTEN connection (floor)"
            )
            floors["notify"] = self.notify_floor(self.args.latency_jobs)
        worker = Worker(
            ["--concurrency", "4", "--poll", str(self.args.poll)], self.tmp / "idle.log"
        )
        try:
            for _ in range(WARMUP_JOBS):  # the worker is up, connected, listening or watching
                self.run_one(self.submit)
            mode = "notify" if self.vendor == "postgresql" else "watch"
            log(f"{self.db}: {self.args.latency_jobs} jobs woken by {mode}")
            latency[mode] = self.latency(self.submit, self.args.latency_jobs)
            worker.stop()
        finally:
            worker.kill()
        polling = Worker(
            ["--concurrency", "4", "--poll", str(self.args.poll), "--watch", "0"],
            self.tmp / "polling.log",
        )
        try:
            log(f"{self.db}: {self.args.poll_jobs} jobs found by polling only")
            latency["poll"] = self.latency(
                self.insert_silently, self.args.poll_jobs, pause=self.args.poll
            )
            polling.stop()
        finally:
            polling.kill()
        log(f"{self.db}: {self.args.startup_runs} spawns of a bare Django process and of runjobs")
        floors["startup"] = self.startup_floor(self.args.startup_runs)
        log(f"{self.db}: draining {self.args.drain_jobs} jobs with {self.args.threads} threads")
        return {
            "db": self.db,
            "server": self.server_version(),
            "latency": latency,
            "floors": floors,
            "drain": self.drain(),
            "async": self.async_waits(),
        }

    # -- submitting -----------------------------------------------------------------------------

    def submit(self, payload: dict[str, Any]):
        from django_durable_jobs import submit

        return submit(OPERATION, payload).pk

    def insert_silently(self, payload: dict[str, Any], count: int = 1) -> Any:
        """Insert authentic pending rows without NOTIFY; return the last id."""
        from benchmarks.rows import insert_pending

        return insert_pending(OPERATION, [payload] * count)[-1].pk

    # -- latency --------------------------------------------------------------------------------

    def run_one(self, enqueue, pause: float = 0.06) -> tuple[float, float]:
        """Enqueue one job into an idle worker; return (claim ms, start ms) once it completed.

        First pause 20 ms to ``pause`` s, so that the worker is back in its wait (and, for the
        poll-only figures, the job lands at a random point of the poll interval: a job finishing
        wakes the worker, which would otherwise keep every submission at the same phase).
        """
        from django_durable_jobs.models import Job

        time.sleep(self.random.uniform(0.02, pause))
        job_id = enqueue({"n": self.random.random()})
        deadline = time.monotonic() + JOB_TIMEOUT
        while True:
            job = Job.objects.get(pk=job_id)
            if job.status == "complete":
                break
            if job.status != "pending" and job.status != "running":
                raise RuntimeError(f"job {job_id} ended {job.status}: {job.error}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"job {job_id} still {job.status} after {JOB_TIMEOUT:g} s")
            time.sleep(0.002)
        created = job.created_at.timestamp()
        started = json.loads(job.result)["started"]
        return (job.claimed_at.timestamp() - created) * 1000, (started - created) * 1000

    def latency(self, enqueue, jobs: int, pause: float = 0.06) -> dict[str, Any]:
        samples = [self.run_one(enqueue, pause) for _ in range(jobs)]
        return {
            "jobs": jobs,
            "claim_ms": summary([c for c, _ in samples]),
            "start_ms": summary([s for _, s in samples]),
        }

    # -- floors ---------------------------------------------------------------------------------

    def notify_floor(self, jobs: int) -> dict[str, Any]:
        """Submit ``jobs`` jobs one at a time while a thread of this process, on a LISTEN
        connection of its own, claims one job as each notification arrives (no worker runs).

        Return the p50/p90 of NOTIFY's arrival and of that claim's end, in ms after each job's
        ``created_at``; the claimed rows are deleted afterwards.
        """
        import queue
        import threading

        from django.db import connection

        from django_durable_jobs.database.dbvendor import listen_statement
        from django_durable_jobs.models import Job

        raw = connection.Database.connect(**connection.get_connection_params())
        raw.autocommit = True
        raw.execute(listen_statement(connection.alias))
        arrivals: queue.Queue = queue.Queue()
        stop = threading.Event()

        def listen() -> None:
            claim = _sketch_claim()
            while not stop.is_set():
                if list(raw.notifies(timeout=0.2, stop_after=1)):
                    heard = time.time()
                    row = raw.execute(claim, [FLOOR_OWNER]).fetchone()
                    arrivals.put((heard, time.time(), row and str(row[0])))

        thread = threading.Thread(target=listen, daemon=True)
        thread.start()
        samples = []
        try:
            for n in range(WARMUP_JOBS + jobs):
                time.sleep(self.random.uniform(0.02, 0.06))
                job_id = self.submit({"floor": n})
                heard, claimed, got = arrivals.get(timeout=JOB_TIMEOUT)
                if got != str(job_id):
                    raise RuntimeError(f"the floor's claim took {got}, not job {job_id}")
                created = Job.objects.get(pk=job_id).created_at.timestamp()
                if n >= WARMUP_JOBS:
                    samples.append(((heard - created) * 1000, (claimed - created) * 1000))
        finally:
            stop.set()
            thread.join(timeout=5)
            raw.close()
        Job.objects.filter(owner_id=FLOOR_OWNER).delete()
        return {
            "jobs": jobs,
            "notified_ms": summary([heard for heard, _ in samples]),
            "claimed_ms": summary([claimed for _, claimed in samples]),
        }

    def startup_floor(self, runs: int) -> dict[str, Any]:
        """Spawn, ``runs`` times each and in turn, a bare Django process (set up, connect, one
        query) and ``runjobs --burst`` with one job waiting; return the seconds from each spawn
        to the bare process's query and to the job's start."""
        from django_durable_jobs.models import Job

        bare, first = [], []
        env = child_env(self.db)
        for n in range(runs):
            spawned = time.time()
            done = subprocess.run(
                [sys.executable, "-c", BARE_DJANGO],
                cwd=REPO_ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            bare.append(float(done.stdout.split()[-1]) - spawned)
            job_id = self.submit({"startup": n})
            worker = Worker(["--burst"], self.tmp / "startup.log")
            try:
                worker.wait(timeout=60)
            finally:
                worker.kill()
            started = json.loads(Job.objects.get(pk=job_id).result)["started"]
            first.append(started - worker.started_at)
        return {"runs": runs, "bare_s": summary(bare), "runjobs_s": summary(first)}

    # -- drain ----------------------------------------------------------------------------------

    def drain(self) -> dict[str, Any]:
        from django_durable_jobs.models import Job, JobAttempt

        JobAttempt.objects.all().delete()  # a benchmark's own rows: start the drain from empty
        Job.objects.all().delete()
        jobs = self.args.drain_jobs
        self.insert_silently({"drain": True}, count=jobs)
        argv = ["--concurrency", str(self.args.threads), "--burst", "--poll", "0.2"]
        first, last, _, wall = self.burst(argv, "drain", jobs)
        seconds = last - first
        return {
            "jobs": jobs,
            "threads": self.args.threads,
            "seconds": seconds,
            "jobs_per_s": jobs / seconds,
            "wall_seconds": wall,
        }

    # -- async waits ----------------------------------------------------------------------------

    def async_waits(self) -> dict[str, Any]:
        from benchmarks.asyncapp.jobs import ASYNC_SLEEP  # registers it here, to submit
        from django_durable_jobs import submit_many
        from django_durable_jobs.models import Job, JobAttempt

        jobs, seconds = self.args.async_jobs, self.args.async_seconds
        log(f"{self.db}: {jobs} async jobs awaiting asyncio.sleep({seconds:g})")
        JobAttempt.objects.all().delete()
        Job.objects.all().delete()
        for start in range(0, jobs, 10_000):
            count = min(10_000, jobs - start)
            submit_many(ASYNC_SLEEP, [{"seconds": seconds, "n": start + n} for n in range(count)])
        argv = ["--burst", "--async-slots", str(jobs), "--poll", "0.2"]
        env = {"DURABLE_JOBS_BENCH_ASYNC": "1"}
        first, last, worker, wall = self.burst(argv, "async", jobs, env)
        return {
            "jobs": jobs,
            "wait_seconds": seconds,
            "seconds": last - first,
            "from_spawn": last - worker.started_at,
            "wall_seconds": wall,
        }

    def burst(
        self, argv: list[str], name: str, jobs: int, env: dict[str, str] | None = None
    ) -> tuple[float, float, Worker, float]:
        """Run ``runjobs ARGV`` (``--burst``) until it exits; check that all ``jobs`` completed.

        Return the first claim and the last completion (Unix time), the worker and its wall time.
        """
        from django.db.models import Max, Min

        from django_durable_jobs.models import Job

        worker = Worker(argv, self.tmp / f"{name}.log", env)
        try:
            wall = worker.wait(timeout=600)
        finally:
            worker.kill()
        done = Job.objects.filter(status="complete")
        if done.count() != jobs:
            raise RuntimeError(f"{name}: only {done.count()} of {jobs} jobs completed")
        span = done.aggregate(first=Min("claimed_at"), last=Max("completed_at"))
        return span["first"].timestamp(), span["last"].timestamp(), worker, wall

    def server_version(self) -> str:
        from benchmarks.databases import server_version

        return server_version()


def _sketch_claim() -> str:
    """Return the floor's one-row claim: the best pending job, locked and taken in one
    statement with the fence's epoch and attempt counted, owned by its one parameter."""
    from django.db import connection

    from django_durable_jobs.models import Job

    table = connection.ops.quote_name(Job._meta.db_table)
    return (
        f"UPDATE {table} SET status = 'running', owner_id = %s, claimed_at = now(), "
        "heartbeat_at = now(), lease_expires_at = now() + interval '30 seconds', "
        "fencing_epoch = fencing_epoch + 1, attempts = attempts + 1 "
        f"WHERE id = (SELECT id FROM {table} WHERE status = 'pending' AND run_after <= now() "
        "ORDER BY priority DESC, run_after, created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) "
        "RETURNING id"
    )


if __name__ == "__main__":
    sys.exit(main())
