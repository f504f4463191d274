"""Flow-control figures: a 200/s rate limit held by 8 ``runjobs`` processes, and its cost to others.

For each selected database this benchmark recreates a database of its own (``bench_flow_<db>``,
settings ``benchmarks.flow_settings``) and runs 8 real ``manage.py runjobs`` processes against it:

1. **free alone**: ``--free-jobs`` no-op jobs of an operation without limits, drained by the 8
   workers started with no limit declared anywhere (today's claim path); drain rate = jobs /
   (last ``completed_at`` - first ``claimed_at``);
2. **free beside limited**: the same free jobs again, submitted together with ``--limited-jobs``
   jobs of ``flowbench.limited`` (``rate_limit="200/s"``), drained by 8 fresh workers.

Checked from the stored rows: the limited jobs' ``claimed_at`` never put more than 200 starts in
any one-second window (sliding: every window that ends at a start), every job completed, and the
free jobs beside the limited ones kept at least 80 % of their drain rate alone. It prints the
figures and exits 1 on a miss, 2 when a database could not be benchmarked.

    .venv/bin/python -m benchmarks.flow                      # sqlite, postgresql and mariadb
    .venv/bin/python -m benchmarks.flow --db postgresql --free-jobs 5000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks.databases import recreate_database, run_per_database

REPO_ROOT = Path(__file__).resolve().parent.parent
DATABASES = ("sqlite", "postgresql", "mariadb")
SETTINGS_MODULE = "benchmarks.flow_settings"
WORKERS = 8
RATE = 200  # flowbench.limited's rate_limit, per second
KEEP_TARGET = 0.80
TIMEOUT = 300.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.flow",
        description="A 200/s rate limit across 8 runjobs processes, and its cost to free work.",
    )
    parser.add_argument("--db", default=",".join(DATABASES), help="databases (%(default)s)")
    parser.add_argument("--free-jobs", type=int, default=3000, help="free jobs per phase")
    parser.add_argument("--limited-jobs", type=int, default=800, help="rate-limited jobs")
    parser.add_argument("--threads", type=int, default=4, help="runjobs --concurrency")
    parser.add_argument("--child", choices=DATABASES, help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    dbs = [d.strip().lower() for d in args.db.split(",") if d.strip()]
    if not dbs or any(d not in DATABASES for d in dbs):
        parser.error(f"--db takes a comma-separated subset of {', '.join(DATABASES)}")
    args.dbs = list(dict.fromkeys(dbs))
    if min(args.free_jobs, args.limited_jobs, args.threads) < 1:
        parser.error("job counts and --threads must be at least 1")
    return args


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def most_in_window(starts: list[float], seconds: float) -> int:
    """Return the most ``starts`` in any window ``(t - seconds, t]`` (t: every start)."""
    ordered = sorted(starts)
    most = first = 0
    for last, at in enumerate(ordered):
        while ordered[first] <= at - seconds:
            first += 1
        most = max(most, last - first + 1)
    return most


# -- parent ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_child(args)
    options = ["--free-jobs", str(args.free_jobs), "--limited-jobs", str(args.limited_jobs)]
    options += ["--threads", str(args.threads)]
    results, broken = run_per_database("benchmarks.flow", args.dbs, options, child_env)
    missed = print_report(results, args)
    if broken:
        print(f"FAILED: no figures for {', '.join(broken)}")
        return 2
    return 1 if missed else 0


def child_env(db: str) -> dict[str, str]:
    pythonpath = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return dict(
        os.environ,
        DURABLE_JOBS_FLOW_BENCH_DB=db,
        DJANGO_SETTINGS_MODULE=SETTINGS_MODULE,
        PYTHONPATH=pythonpath,
    )


def print_report(results: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    print()
    print(
        f"flow control: {WORKERS} runjobs processes x {args.threads} threads; "
        f"flowbench.limited at rate_limit='{RATE}/s'"
    )
    header = (
        f"{'db':<11} {'free alone/s':>13} {'free beside/s':>14} {'kept':>6} "
        f"{'limited jobs':>13} {'max starts/1s':>14} {'limited s':>10}"
    )
    print(header)
    print("-" * len(header))
    missed = []
    for r in results:
        kept = r["free_beside_per_s"] / r["free_alone_per_s"]
        print(
            f"{r['db']:<11} {r['free_alone_per_s']:>13.0f} {r['free_beside_per_s']:>14.0f} "
            f"{kept:>6.0%} {r['limited_jobs']:>13} {r['most_starts_per_1s']:>14} "
            f"{r['limited_seconds']:>10.2f}"
        )
        if r["most_starts_per_1s"] > RATE:
            missed.append(f"{r['db']}: {r['most_starts_per_1s']} starts in one second > {RATE}")
        if kept < KEEP_TARGET:
            missed.append(f"{r['db']}: free work kept {kept:.0%} < {KEEP_TARGET:.0%}")
    print()
    for r in results:
        print(f"{r['db']}: {r['server']}")
    print(f"{os.cpu_count()} CPU(s); Python {sys.version.split()[0]}")
    for miss in missed:
        print(f"MISSED: {miss}")
    if results and not missed:
        print(f"targets met: <= {RATE} starts in any 1 s window; free work kept >= 80 %")
    return missed


# -- child: one database --------------------------------------------------------------------------


def run_child(args: argparse.Namespace) -> int:
    import django
    from django.conf import settings

    recreate_database(args.child, settings.DATABASES["default"])
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-flow-{args.child}-"))
    try:
        result = FlowBench(args, tmp).run()
    except BaseException:
        log(f"{args.child}: worker logs kept in {tmp}")
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    Path(args.result_file).write_text(json.dumps(result))
    return 0


class FlowBench:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args = args
        self.tmp = tmp

    def run(self) -> dict[str, Any]:
        from benchmarks.databases import server_version
        from benchmarks.flowapp.jobs import FREE, LIMITED

        log(f"{self.args.child}: {self.args.free_jobs} free jobs alone")
        alone = self.phase("alone", {FREE: self.args.free_jobs}, unlimited=True)
        log(f"{self.args.child}: the same beside {self.args.limited_jobs} limited jobs")
        beside = self.phase("beside", {FREE: self.args.free_jobs, LIMITED: self.args.limited_jobs})
        starts = beside[LIMITED]["claimed"]
        return {
            "db": self.args.child,
            "server": server_version(),
            "free_alone_per_s": alone[FREE]["per_s"],
            "free_beside_per_s": beside[FREE]["per_s"],
            "limited_jobs": len(starts),
            "most_starts_per_1s": most_in_window(starts, 1.0),
            "limited_seconds": max(starts) - min(starts),
        }

    def phase(
        self, name: str, jobs: dict[str, int], *, unlimited: bool = False
    ) -> dict[str, dict[str, Any]]:
        """Insert ``jobs`` ({operation: count}), drain them with 8 workers, return per operation."""
        from benchmarks.rows import insert_pending
        from django_durable_jobs.models import Job, JobAttempt

        JobAttempt.objects.all().delete()  # the benchmark's own rows: each phase from empty
        Job.objects.all().delete()
        for operation, count in jobs.items():
            insert_pending(operation, [{"i": i} for i in range(count)])
        total = sum(jobs.values())
        argv = ["--concurrency", str(self.args.threads), "--poll", "0.05", "--no-schedules"]
        workers = []
        try:
            for n in range(WORKERS):
                out = (self.tmp / f"{name}-{n}.log").open("w")
                workers.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "django", "runjobs", *argv],
                        cwd=REPO_ROOT,
                        env={**os.environ, "DURABLE_JOBS_FLOW_BENCH_UNLIMITED": "1"}
                        if unlimited
                        else dict(os.environ),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )
            deadline = time.monotonic() + TIMEOUT
            while Job.objects.filter(status="complete").count() < total:
                if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                    raise RuntimeError(f"{name}: the workers did not complete {total} jobs")
                time.sleep(0.2)
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.terminate()
            for worker in workers:
                try:
                    worker.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    worker.kill()
        return {operation: self.figures(operation) for operation in jobs}

    def figures(self, operation: str) -> dict[str, Any]:
        from django.db.models import Max, Min

        from django_durable_jobs.models import Job

        done = Job.objects.filter(operation=operation, status="complete")
        span = done.aggregate(first=Min("claimed_at"), last=Max("completed_at"))
        seconds = max((span["last"] - span["first"]) / timedelta(seconds=1), 1e-6)
        claimed = [at.timestamp() for at in done.values_list("claimed_at", flat=True)]
        return {"per_s": done.count() / seconds, "claimed": claimed}


if __name__ == "__main__":
    sys.exit(main())
