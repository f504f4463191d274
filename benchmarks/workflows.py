"""Workflow figures: what releasing waiting jobs costs the worker, and what steps save.

For each selected database (SQLite and PostgreSQL by default) this benchmark drops and recreates
a database of its own, ``bench_workflows_<db>`` (``benchmarks.worker_settings`` with that name),
migrates it and measures, with real ``runjobs`` processes:

a. **independent**: ``--jobs`` no-op jobs submitted at once (``submit_many``), drained by
   ``--workers`` running ``runjobs`` processes; time = last ``completed_at`` - first
   ``claimed_at``;
b. **fan-out/fan-in**: one workflow of a root, ``--jobs`` children and one fan-in (which reads
   every parent's result through ``ctx.upstream()``), run by the same processes; time = the
   fan-in's ``completed_at`` - the root's ``claimed_at``. The ratio b / a is the cost of the
   hand-offs (target: at most 1.5);
c. **hand-off statements**: in this process, ``record_outcomes`` of 50 claimed parents that
   each release 20 waiting children, against 50 claimed plain jobs (and 50 parents of 5
   children, to show the count does not grow with the children): statements captured with
   ``CaptureQueriesContext``, transactions counted at ``commit``;
d. **resume after steps**: a job records 100 ``ctx.step``s, its worker is SIGKILLed right after
   the 100th; a new worker takes the expired lease over; the steps' own log (fsynced) counts
   how many times each ran.

Each database runs in a child process of its own; the parent prints one table and exits 1 when
the ratio misses its target or a step ran twice, 2 when a database gave no figures.

    .venv/bin/python -m benchmarks.workflows
    .venv/bin/python -m benchmarks.workflows --db postgresql --jobs 2000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.common import summary
from benchmarks.databases import recreate_database, run_per_database

REPO_ROOT = Path(__file__).resolve().parent.parent
DATABASES = ("sqlite", "postgresql", "mariadb")
SETTINGS_MODULE = "benchmarks.worker_settings"
RATIO_TARGET = 1.5
STEPS = 100
CHAIN = 50
NOOP, FAN_IN, STEPPER = "bench.noop", "bench.wf.fan_in", "bench.wf.steps"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.workflows",
        description="Workflow hand-offs against independent jobs, and steps resumed after a kill.",
    )
    parser.add_argument("--db", default="sqlite,postgresql", help="databases (%(default)s)")
    parser.add_argument("--jobs", type=int, default=1000, help="jobs, and children (%(default)s)")
    parser.add_argument("--workers", type=int, default=2, help="runjobs processes (%(default)s)")
    parser.add_argument("--threads", type=int, default=4, help="--concurrency of each")
    parser.add_argument("--child", choices=DATABASES, help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    parser.add_argument("--runjobs", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    dbs = [d.strip().lower() for d in args.db.split(",") if d.strip()]
    if not dbs or any(d not in DATABASES for d in dbs):
        parser.error(f"--db takes a comma-separated subset of {', '.join(DATABASES)}")
    args.dbs = list(dict.fromkeys(dbs))
    if min(args.jobs, args.workers, args.threads) < 1:
        parser.error("--jobs, --workers and --threads must be at least 1")
    return args


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def setup(db: str) -> None:
    """Point Django at this benchmark's own database on ``db`` and register its operations."""
    os.environ["DURABLE_JOBS_WORKER_BENCH_DB"] = db
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS_MODULE
    from django.conf import settings

    settings.DATABASES["default"]["NAME"] = database_name(db, settings.DATABASES["default"])
    import django

    django.setup()
    register()


def database_name(db: str, conf: dict[str, Any]) -> str:
    name = f"bench_workflows_{db}"
    if db == "sqlite":
        return str(Path(conf["NAME"]).with_name(f"{name}.sqlite3"))
    return name


def register() -> None:
    """Register the benchmark's workflow operations (the no-op is ``benchmarks.benchapp``'s)."""
    from django_durable_jobs import operation

    @operation(FAN_IN)
    def fan_in(ctx, payload):
        return {"parents": len(ctx.upstream())}

    @operation(STEPPER, on_expired="resume")
    def steps(ctx, payload):
        for i in range(payload["steps"]):

            def step(i=i):
                with open(payload["log"], "a", encoding="utf-8") as out:
                    out.write(f"{i} {ctx.lease.epoch}\n")
                    out.flush()
                    os.fsync(out.fileno())
                return i

            ctx.step(f"s{i}", step)
        if ctx.lease.epoch == 1:
            Path(payload["marker"]).write_text(str(os.getpid()))
            time.sleep(600)  # SIGKILLed here
        return {"epoch": ctx.lease.epoch}


# -- parent: one child process per database, then the report -----------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.runjobs is not None:
        return run_worker(args)
    if args.child:
        return run_child(args)
    options = ["--jobs", str(args.jobs), "--workers", str(args.workers)]
    options += ["--threads", str(args.threads)]
    results, broken = run_per_database("benchmarks.workflows", args.dbs, options, child_env)
    missed = print_report(results, args)
    for line in missed:
        print(f"MISSED: {line}")
    if broken:
        print(f"FAILED: no figures for {', '.join(broken)}")
        return 2
    return 1 if missed else 0


def child_env(db: str) -> dict[str, str]:
    pythonpath = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=pythonpath)


def print_report(results: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    """Print the tables; return the targets missed."""
    missed = []
    print()
    print(
        f"a/b: {args.jobs} independent no-op jobs vs a workflow of 1 root, {args.jobs} children "
        f"and 1 fan-in, run by {args.workers} runjobs x {args.threads} threads (seconds from the "
        "first claim to the last completion)"
    )
    header = (
        f"{'db':<11} {'independent':>12} {'workflow':>9} {'ratio':>6}  target <= {RATIO_TARGET}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        ratio = r["workflow"]["seconds"] / r["independent"]["seconds"]
        ok = ratio <= RATIO_TARGET
        print(
            f"{r['db']:<11} {r['independent']['seconds']:>12.2f} {r['workflow']['seconds']:>9.2f} "
            f"{ratio:>6.2f}  {'met' if ok else 'MISSED'}"
        )
        if not ok:
            missed.append(f"{r['db']}: workflow / independent {ratio:.2f} > {RATIO_TARGET}")
    print()
    print("where the workflow's time went (seconds)")
    names = ("root", "release", "children", "fan_in_wait", "fan_in")
    header = f"{'db':<11} " + " ".join(f"{name:>11}" for name in names)
    print(header)
    print("-" * len(header))
    for r in results:
        phases = r["workflow"]["phases"]
        print(f"{r['db']:<11} " + " ".join(f"{phases[name]:>11.3f}" for name in names))
    print()
    print(
        f"hand-off latency: a chain of {CHAIN} no-op jobs, each claimed after its parent "
        f"completed (runjobs --poll 0.2)"
    )
    header = f"{'db':<11} {'hop median ms':>14} {'hop p95 ms':>11} {'chain s':>8}"
    print(header)
    print("-" * len(header))
    for r in results:
        c = r["chain"]
        print(
            f"{r['db']:<11} {c['hop_ms']['median']:>14.1f} {c['hop_ms']['p95']:>11.1f} "
            f"{c['seconds']:>8.2f}"
        )
    print()
    print("c: one record_outcomes() call (statements, transactions committed, milliseconds)")
    header = (
        f"{'db':<11} {'completions':<32} {'statements':>10} {'transactions':>12} {'ms':>6}  by kind"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        for label, row in r["flush"].items():
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(row["kinds"].items()))
            print(
                f"{r['db']:<11} {label:<32} {row['statements']:>10} "
                f"{row['transactions']:>12} {row['ms']:>6.1f}  {kinds}"
            )
    print()
    print(f"d: a job of {STEPS} steps, its worker SIGKILLed after the last step, resumed")
    header = (
        f"{'db':<11} {'steps run':>9} {'ran twice':>9} {'after resume':>12} "
        f"{'ms/step':>8} {'resumed in s':>12}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        s = r["steps"]
        print(
            f"{r['db']:<11} {s['runs']:>9} {s['twice']:>9} {s['after_resume']:>12} "
            f"{s['ms_per_step']:>8.1f} {s['resume_seconds']:>12.2f}"
        )
        if s["twice"] or s["after_resume"] or s["status"] != "complete":
            missed.append(f"{r['db']}: steps ran again after the resume ({s})")
    print()
    for r in results:
        print(f"{r['db']}: {r['server']}")
    print(f"{os.cpu_count()} CPU(s); Python {sys.version.split()[0]}")
    return missed


# -- the worker processes -----------------------------------------------------------------------


def run_worker(args: argparse.Namespace) -> int:
    """Run ``runjobs`` with ``args.runjobs`` in this process, the benchmark's operations known."""
    setup(os.environ["DURABLE_JOBS_WORKER_BENCH_DB"])
    from django.core.management import call_command

    call_command("runjobs", *args.runjobs)
    return 0


class Worker:
    """A ``runjobs`` subprocess (through :func:`run_worker`) writing its log to a file."""

    def __init__(self, argv: list[str], log_path: Path) -> None:
        self.log_path = log_path
        with log_path.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.workflows", "--runjobs", *argv],
                cwd=REPO_ROOT,
                env=dict(os.environ),
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        if code != 0:
            raise RuntimeError(f"runjobs exited {code}:\n{self.log_path.read_text()[-3000:]}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


# -- child: one database --------------------------------------------------------------------------


def run_child(args: argparse.Namespace) -> int:
    os.environ["DURABLE_JOBS_WORKER_BENCH_DB"] = args.child
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS_MODULE
    from django.conf import settings

    conf = settings.DATABASES["default"]
    conf["NAME"] = database_name(args.child, conf)
    recreate_database(args.child, conf)
    setup(args.child)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-workflows-{args.child}-"))
    try:
        result = {"db": args.child, **bench(args, tmp)}
    except BaseException:
        log(f"{args.child}: worker logs kept in {tmp}")
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    Path(args.result_file).write_text(json.dumps(result))
    return 0


def bench(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from benchmarks.databases import server_version

    argv = ["--concurrency", str(args.threads), "--poll", "0.2", "--no-schedules"]
    workers = [Worker(argv, tmp / f"worker{n}.log") for n in range(args.workers)]
    try:
        wait_until(lambda: started(args.workers), 60, "the workers to start")
        log(f"{args.child}: {args.jobs} independent jobs")
        independent = drain_independent(args.jobs)
        log(f"{args.child}: a workflow of 1 + {args.jobs} + 1 jobs")
        workflow = drain_workflow(args.jobs)
        log(f"{args.child}: a chain of {CHAIN} jobs")
        chain = hand_off_latency(CHAIN)
        for worker in workers:
            worker.stop()
    finally:
        for worker in workers:
            worker.kill()
    log(f"{args.child}: hand-off statements")
    flush = {
        "50 plain jobs": flush_cost(50, 0),
        "50 parents releasing 5 children": flush_cost(50, 5),
        "50 parents releasing 20 children": flush_cost(50, 20),
        "1 parent releasing 4,999 children": flush_cost(1, 4999),
    }
    log(f"{args.child}: {STEPS} steps, SIGKILL, resume")
    steps = resume_after_steps(tmp)
    return {
        "server": server_version(),
        "independent": independent,
        "workflow": workflow,
        "chain": chain,
        "flush": flush,
        "steps": steps,
    }


def started(count: int) -> bool:
    """Return True once ``count`` workers are registered and running."""
    from django_durable_jobs.models import WorkerProcess

    return WorkerProcess.objects.filter(stopped_at__isnull=True).count() >= count


def wait_until(ready, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up waiting for {what} after {timeout:g} s")
        time.sleep(0.05)


def reset() -> None:
    from django_durable_jobs.models import Job, JobAttempt, JobDependency, JobStep, Workflow

    JobStep.objects.all().delete()
    JobAttempt.objects.all().delete()
    JobDependency.objects.all().delete()
    Job.objects.all().delete()
    Workflow.objects.all().delete()


def drain_independent(jobs: int) -> dict[str, Any]:
    from django.db.models import Max, Min

    from django_durable_jobs import submit_many
    from django_durable_jobs.models import Job

    reset()
    begun = time.perf_counter()
    submit_many(NOOP, [{"n": n} for n in range(jobs)])
    done = Job.objects.filter(status="complete")
    wait_until(lambda: done.count() == jobs, 600, f"{jobs} jobs to complete")
    wall = time.perf_counter() - begun
    span = done.aggregate(first=Min("claimed_at"), last=Max("completed_at"))
    return {"seconds": (span["last"] - span["first"]).total_seconds(), "wall_seconds": wall}


def drain_workflow(children: int) -> dict[str, Any]:
    from django.db.models import Max, Min

    from django_durable_jobs import Workflow
    from django_durable_jobs.models import Job

    reset()
    wf = Workflow("bench.fan")
    root = wf.job(NOOP, {"root": True}, name="root")
    parts = [wf.job(NOOP, {"n": n}, after=[root], name=f"c{n}") for n in range(children)]
    wf.job(FAN_IN, {}, after=parts, name="merge")
    begun = time.perf_counter()
    handle = wf.submit()
    submitted = time.perf_counter() - begun
    jobs = Job.objects.filter(workflow_id=handle.id)
    wait_until(lambda: jobs.filter(node="merge", status="complete").exists(), 600, "the fan-in")
    wall = time.perf_counter() - begun
    first = jobs.get(node="root").claimed_at
    merge = jobs.get(node="merge")
    if json.loads(merge.result) != {"parents": children}:
        raise RuntimeError(f"the fan-in saw {merge.result}")
    if jobs.exclude(status="complete").exists():
        raise RuntimeError("a job of the workflow did not complete")
    root, body = jobs.get(node="root"), jobs.exclude(node__in=("root", "merge"))
    span = body.aggregate(first=Min("claimed_at"), last=Max("completed_at"))
    phases = {  # where the time went: the root, the hand-off, the children, the fan-in
        "root": root.completed_at - first,
        "release": span["first"] - root.completed_at,
        "children": span["last"] - span["first"],
        "fan_in_wait": merge.claimed_at - span["last"],
        "fan_in": merge.completed_at - merge.claimed_at,
    }
    return {
        "seconds": (merge.completed_at - first).total_seconds(),
        "wall_seconds": wall,
        "submit_seconds": submitted,
        "phases": {name: delta.total_seconds() for name, delta in phases.items()},
    }


def hand_off_latency(links: int) -> dict[str, Any]:
    """Run a chain of ``links`` no-op jobs; return how long each waited after its parent."""
    from django_durable_jobs import Workflow
    from django_durable_jobs.models import Job

    reset()
    wf = Workflow("bench.chain")
    last = None
    for n in range(links):
        last = wf.job(NOOP, {"n": n}, after=[] if last is None else [last], name=f"l{n:03}")
    handle = wf.submit()
    jobs = Job.objects.filter(workflow_id=handle.id)
    wait_until(lambda: not jobs.exclude(status="complete").exists(), 600, "the chain")
    rows = sorted(jobs, key=lambda job: job.node)
    hops = [
        (child.claimed_at - parent.completed_at).total_seconds()
        for parent, child in zip(rows, rows[1:], strict=False)
    ]
    return {
        "links": links,
        "hop_ms": summary(hops),
        "seconds": (rows[-1].completed_at - rows[0].claimed_at).total_seconds(),
    }


def flush_cost(parents: int, children: int) -> dict[str, Any]:
    """Claim ``parents`` jobs, each with ``children`` waiting children; complete them all with
    one ``record_outcomes``; return its statements (by kind) and transactions."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from django_durable_jobs import Workflow
    from django_durable_jobs.models import Job
    from django_durable_jobs.rules.outcome import Outcome
    from django_durable_jobs.store import DurableJobStore

    reset()
    if children:
        wf = Workflow(f"bench.flush.{children}")
        for p in range(parents):
            root = wf.job(NOOP, {"p": p}, name=f"p{p}")
            for c in range(children):
                wf.job(NOOP, {"p": p, "c": c}, after=[root], name=f"p{p}c{c}")
        wf.submit()
    else:
        from django_durable_jobs import submit_many

        submit_many(NOOP, [{"p": p} for p in range(parents)])
    store = DurableJobStore(actor="bench", lease_seconds=60)
    claimed = store.claim_batch(limit=parents)
    if len(claimed) != parents:
        raise RuntimeError(f"claimed {len(claimed)} of {parents}")
    outcomes = [Outcome.completed(c.lease, '{"ok":true}') for c in claimed]
    commits = 0
    real_commit = connection.commit

    def counted_commit() -> None:
        nonlocal commits
        commits += 1
        real_commit()

    connection.commit = counted_commit  # counts the transactions record_outcomes commits
    try:
        with CaptureQueriesContext(connection) as captured:
            begun = time.perf_counter()
            recorded = store.record_outcomes(outcomes)
            took = time.perf_counter() - begun
    finally:
        del connection.commit
    if any(r.refusal is not None for r in recorded):
        raise RuntimeError("a completion was refused")
    released = Job.objects.filter(status="pending").count()
    if released != parents * children:
        raise RuntimeError(f"released {released} children, expected {parents * children}")
    kinds = Counter(q["sql"].split(None, 1)[0].upper() for q in captured.captured_queries)
    return {
        "statements": len(captured.captured_queries),
        "transactions": commits,
        "ms": took * 1000,
        "kinds": dict(kinds),
        "released": released,
    }


def resume_after_steps(tmp: Path) -> dict[str, Any]:
    from django_durable_jobs import submit
    from django_durable_jobs.models import Job, JobStep

    reset()
    runs, marker = tmp / "steps.log", tmp / "marker"
    job = submit(STEPPER, {"steps": STEPS, "log": str(runs), "marker": str(marker)})
    lease = 2.0
    argv = ["--concurrency", "1", "--poll", "0.1", "--lease", f"{lease:g}", "--no-schedules"]
    first = Worker(argv, tmp / "steps-first.log")
    try:
        wait_until(marker.exists, 120, "the 100th step")
        killed_at = time.perf_counter()
        first.kill()
    finally:
        first.kill()
    row = Job.objects.get(pk=job.pk)
    begun = Job.objects.get(pk=job.pk).claimed_at
    ms_per_step = (
        (
            JobStep.objects.filter(job=row).order_by("-position")[0].recorded_at - begun
        ).total_seconds()
        * 1000
        / STEPS
    )
    before = runs.read_text().splitlines()
    second = Worker(argv, tmp / "steps-second.log")
    try:
        done = Job.objects.filter(pk=job.pk, status="complete")
        wait_until(done.exists, 120, "the resumed job")
        resumed = time.perf_counter() - killed_at
        second.stop()
    finally:
        second.kill()
    after = runs.read_text().splitlines()
    ran = Counter(line.split()[0] for line in after)
    row = Job.objects.get(pk=job.pk)
    return {
        "runs": len(after),
        "twice": sum(1 for n in ran.values() if n > 1),
        "after_resume": len(after) - len(before),
        "recorded": JobStep.objects.filter(job=row).count(),
        "status": row.status,
        "epoch": row.fencing_epoch,
        "ms_per_step": ms_per_step,
        "resume_seconds": resumed,
    }


if __name__ == "__main__":
    sys.exit(main())
