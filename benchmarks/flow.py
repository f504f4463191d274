"""Flow-control figures: a 200/s rate limit held by 8 ``runjobs`` processes, and its cost to others.

For each selected database this benchmark recreates a database of its own (``bench_flow_<db>``,
settings ``benchmarks.flow_settings``) and runs 8 real ``manage.py runjobs`` processes against it
in phases of two kinds, each beside phase between two alone phases (alone, beside, alone, beside,
..., alone: ``--rounds`` beside phases):

1. **free alone**: ``--free-jobs`` no-op jobs of an operation without limits, drained by the 8
   workers started with no limit declared anywhere (today's claim path);
2. **free beside limited**: the same free jobs again, submitted together with ``--limited-jobs``
   jobs of ``flowbench.limited`` (``rate_limit="200/s"``), drained by 8 fresh workers.

The workers are started first and the jobs inserted in one transaction once all 8 poll, so the
processes' start-up (seconds of CPU on 2 CPUs) is not measured. A drain rate is the steady one:
the free jobs completed between the 10th and the 90th percentile of their ``completed_at``,
divided by that span, so neither the first claims nor the last stragglers decide it. Each rate is
the median over its phases. A round's share kept is its beside rate over the mean of the two alone
rates measured just before and just after it, so a machine that speeds up or slows down during
the run moves both sides; the share reported is the median of the rounds'. Half-second counts of
one drain vary by half on a 2-CPU machine, so a phase drains 20,000 free jobs by default (with
10,000, single rounds ranged over 40 points; with 20,000 they still range over 30 or more, see
docs/benchmarks.md). Checked from the stored rows: the limited jobs'
``claimed_at`` never put more than 200 starts in any one-second window (sliding: every window
that ends at a start), limited work was still waiting when the measured span ended (else the free
work was not measured beside it), every job completed, and the free jobs beside the limited ones
kept at least 80 % of their drain rate alone. It prints the figures and exits 1 on a miss, 2 when
a database could not be benchmarked.

    .venv/bin/python -m benchmarks.flow                      # sqlite, postgresql and mariadb
    .venv/bin/python -m benchmarks.flow --db postgresql --free-jobs 40000 --limited-jobs 12000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
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
    parser.add_argument("--free-jobs", type=int, default=20000, help="free jobs per phase")
    parser.add_argument(
        "--limited-jobs", type=int, default=6000, help="rate-limited jobs per round"
    )
    parser.add_argument("--rounds", type=int, default=5, help="beside phases (median)")
    parser.add_argument("--threads", type=int, default=4, help="runjobs --concurrency")
    parser.add_argument("--child", choices=DATABASES, help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    dbs = [d.strip().lower() for d in args.db.split(",") if d.strip()]
    if not dbs or any(d not in DATABASES for d in dbs):
        parser.error(f"--db takes a comma-separated subset of {', '.join(DATABASES)}")
    args.dbs = list(dict.fromkeys(dbs))
    if min(args.free_jobs, args.limited_jobs, args.threads, args.rounds) < 1:
        parser.error("job counts, --threads and --rounds must be at least 1")
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
    options += ["--threads", str(args.threads), "--rounds", str(args.rounds)]
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
        f"flowbench.limited at rate_limit='{RATE}/s'; steady drain rates, median of "
        f"{args.rounds} round(s)"
    )
    header = (
        f"{'db':<11} {'free alone/s':>13} {'free beside/s':>14} {'kept':>6} "
        f"{'limited jobs':>13} {'max starts/1s':>14} {'limited s':>10} {'limited/s beside':>17}"
    )
    print(header)
    print("-" * len(header))
    missed = []
    for r in results:
        kept = statistics.median(r["kept_by_round"])
        print(
            f"{r['db']:<11} {r['free_alone_per_s']:>13.0f} {r['free_beside_per_s']:>14.0f} "
            f"{kept:>6.0%} {r['limited_jobs']:>13} {r['most_starts_per_1s']:>14} "
            f"{r['limited_seconds']:>10.2f} {r['limited_beside_per_s']:>17.0f}"
        )
        print(f"{'':<11} rounds, kept: {', '.join(f'{k:.0%}' for k in r['kept_by_round'])}")
        if r["most_starts_per_1s"] > RATE:
            missed.append(f"{r['db']}: {r['most_starts_per_1s']} starts in one second > {RATE}")
        if kept < KEEP_TARGET:
            missed.append(f"{r['db']}: free work kept {kept:.0%} < {KEEP_TARGET:.0%}")
        if r["limited_ran_out"]:
            missed.append(
                f"{r['db']}: the limited work ran out before the free work's measured span "
                "ended; raise --limited-jobs"
            )
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

        free, limited = self.args.free_jobs, self.args.limited_jobs
        alone_rates, beside_rates, kept, limited_rates, starts, spans = [], [], [], [], [], []
        ran_out = False
        log(f"{self.args.child}: {free} free jobs alone, before round 1")
        alone_rates.append(self.phase("alone", {FREE: free}, unlimited=True)[FREE]["per_s"])
        for n in range(1, self.args.rounds + 1):
            log(f"{self.args.child}: round {n}: the same beside {limited} limited jobs")
            beside = self.phase("beside", {FREE: free, LIMITED: limited})
            log(f"{self.args.child}: round {n}: {free} free jobs alone again")
            alone_rates.append(self.phase("alone", {FREE: free}, unlimited=True)[FREE]["per_s"])
            beside_rates.append(beside[FREE]["per_s"])
            # Paired with the phases on either side of it: a machine that speeds up or slows
            # down during the run moves both, and no round is judged against a slower one.
            around = (alone_rates[-2] + alone_rates[-1]) / 2
            kept.append(beside_rates[-1] / around)
            log(
                f"{self.args.child}: round {n}: free alone {alone_rates[-2]:.0f}/s and "
                f"{alone_rates[-1]:.0f}/s, beside {beside_rates[-1]:.0f}/s: kept {kept[-1]:.0%}"
            )
            claimed = beside[LIMITED]["claimed"]
            span_end = beside[FREE]["span"][1]
            during = [at for at in claimed if beside[FREE]["span"][0] <= at <= span_end]
            limited_rates.append(len(during) / max(span_end - beside[FREE]["span"][0], 1e-6))
            ran_out |= max(claimed) <= span_end  # nothing limited left waiting at its end
            starts.append(most_in_window(claimed, 1.0))
            spans.append(max(claimed) - min(claimed))
        return {
            "db": self.args.child,
            "server": server_version(),
            "free_alone_per_s": statistics.median(alone_rates),
            "free_beside_per_s": statistics.median(beside_rates),
            "kept_by_round": kept,
            "limited_beside_per_s": statistics.median(limited_rates),
            "limited_jobs": limited,
            "limited_ran_out": ran_out,
            "most_starts_per_1s": max(starts),
            "limited_seconds": statistics.median(spans),
        }

    def phase(
        self, name: str, jobs: dict[str, int], *, unlimited: bool = False
    ) -> dict[str, dict[str, Any]]:
        """Start 8 workers, then insert ``jobs`` ({operation: count}) at once (one transaction)
        once every worker is up and polling, wait until they are drained; return per operation.

        The workers start first so that the drain measured is that of a running pool: 8 Django
        processes starting on 2 CPUs took most of a 4-second drain, and the rates moved by
        half from run to run.
        """
        from django.db import connection, transaction

        from benchmarks.rows import insert_pending
        from django_durable_jobs.models import Job, JobAttempt, WorkerProcess

        JobAttempt.objects.all().delete()  # the benchmark's own rows: each phase from empty
        Job.objects.all().delete()
        WorkerProcess.objects.all().delete()
        if connection.vendor == "postgresql":  # each phase from the same table, not the
            with connection.cursor() as cursor:  # last phase's dead rows (autovacuum's timing)
                cursor.execute("VACUUM durable_jobs_job, durable_jobs_jobattempt")
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
            while WorkerProcess.objects.filter(stopped_at__isnull=True).count() < WORKERS:
                if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                    raise RuntimeError(f"{name}: the workers did not start")
                time.sleep(0.1)
            time.sleep(1.0)  # past their first claims, polling
            with transaction.atomic():
                for operation, count in jobs.items():
                    insert_pending(operation, [{"i": i} for i in range(count)])
            if connection.vendor == "postgresql":  # statistics that know of the backlog, as
                with connection.cursor() as cursor:  # autovacuum's would soon
                    cursor.execute("ANALYZE durable_jobs_job")
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
        """Return the steady drain rate of ``operation`` (10th to 90th percentile of its
        completions), that span, and every job's ``claimed_at``, as Unix times."""
        from django_durable_jobs.models import Job

        done = Job.objects.filter(operation=operation, status="complete")
        rows = list(done.values_list("claimed_at", "completed_at"))
        claimed = [c.timestamp() for c, _ in rows]
        completed = sorted(c.timestamp() for _, c in rows)
        low, high = len(completed) // 10, len(completed) * 9 // 10
        seconds = max(completed[high - 1] - completed[low], 1e-6) if high - 1 > low else 1e-6
        span = (completed[low], completed[high - 1])
        return {"per_s": (high - 1 - low) / seconds, "span": span, "claimed": claimed}


if __name__ == "__main__":
    sys.exit(main())
