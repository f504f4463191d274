"""django-durable-jobs side by side with django-tasks-db, dj-queue and Procrastinate, in one run.

For each database (PostgreSQL, SQLite, MariaDB) and each system that runs on it, this benchmark
drops and recreates a database of the system's own, ``bench_cmp_<system>_<db>``, on the same
server, and measures, the same way for every system (see ``benchmarks/systems/harness.py``):

- **enqueue**: single calls (``submit()``, ``task.enqueue()``, ``task.defer()``) and the bulk path
  (``submit_many()``, dj-queue's ``enqueue_all()``, Procrastinate's ``batch_defer()``;
  django-tasks-db has none);
- **latency**: enqueue→start with one idle worker (NOTIFY where the system listens, else its
  default poll interval);
- **drain**: ``--drain-jobs`` no-op jobs by 1, 2, 4 and 8 worker processes started at once, as
  each system's docs say to run them (N copies of its worker command; ours: one ``runjobs
  --processes N``): throughput from the system's own start and finish timestamps, and again from
  the spawn of the processes (start-up included), wall time, and the worker processes' CPU per
  job (their rusage, from ``os.wait4``), net of the CPU the same processes take to start and
  stop on an empty queue.

Each system runs in child processes with its own settings (Django settings are per process); the
drains of all systems alternate, process count by process count, so load from elsewhere on the
machine lands on all of them alike. The parent prints ours, theirs and ours ÷ theirs, writes a JSON
report and a PNG chart under ``test-output/bench/`` and, with ``--update-docs``, copies the chart
to ``docs/img/benchmarks.png``.

Exit status: 2 when our figures could not be produced, 1 when a drain of ours broke a promise
(a job not ``complete``, ``attempts`` or ``fencing_epoch`` not 1, not exactly one ``JobAttempt``
row), 0 otherwise. A competitor that cannot be benchmarked is reported, never fatal.

    .venv/bin/python -m benchmarks.side_by_side
    .venv/bin/python -m benchmarks.side_by_side --db postgresql --drain-jobs 500 --processes 1,2
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.databases import ENGINES, OUTPUT_DIR, REPO_ROOT
from benchmarks.systems import SYSTEMS, database_name, missing_requirements

DOCS_CHART = REPO_ROOT / "docs" / "img" / "benchmarks.png"
PHASES = ("setup", "enqueue", "latency", "drain", "idle")


def _list(value: str) -> list[str]:
    return list(dict.fromkeys(v.strip().lower() for v in value.split(",") if v.strip()))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.side_by_side",
        description="django-durable-jobs vs django-tasks-db, dj-queue and Procrastinate: drain, CPU per "
        "job, enqueue and latency, measured the same way in one run.",
    )
    add = parser.add_argument
    add("--systems", default=",".join(SYSTEMS), help="systems to run (%(default)s)")
    add("--db", default="postgresql,sqlite,mariadb", help="databases (%(default)s)")
    add("--drain-jobs", type=int, default=4000, help="no-op jobs per drain (%(default)s)")
    add("--processes", default="1,2,4,8", help="worker process counts to drain with (%(default)s)")
    add("--enqueue-jobs", type=int, default=1000, help="timed single enqueues (%(default)s)")
    add("--bulk-jobs", type=int, default=10000, help="jobs enqueued in bulk (%(default)s)")
    add("--bulk-size", type=int, default=1000, help="jobs per bulk call (%(default)s)")
    add("--latency-jobs", type=int, default=200, help="latency jobs, NOTIFY (%(default)s)")
    add("--poll-latency-jobs", type=int, default=40, help="latency jobs, polling (%(default)s)")
    add("--timeout", type=float, default=900.0, help="seconds one worker run may take")
    add("--seed", type=int, default=2026, help="seed of the pauses between latency jobs")
    add("--db-suffix", default="", help="appended to the database names: bench_cmp_<s>_<db>_<x>")
    add("--output-dir", type=Path, default=OUTPUT_DIR / "bench", help="where reports go")
    add("--no-chart", action="store_true", help="write no PNG chart (no matplotlib needed)")
    add("--update-docs", action="store_true", help=f"copy the chart to {DOCS_CHART}")
    add("--child", help=argparse.SUPPRESS)  # internal: SYSTEM:DB
    add("--phase", choices=PHASES, help=argparse.SUPPRESS)
    add("--series", default="default", help=argparse.SUPPRESS)
    add("--drain-processes", type=int, default=1, help=argparse.SUPPRESS)
    add("--result-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.system_names = _list(args.systems)
    args.dbs = _list(args.db)
    if not args.system_names or not set(args.system_names) <= set(SYSTEMS):
        parser.error(f"--systems takes a comma-separated subset of {','.join(SYSTEMS)}")
    if not args.dbs or not set(args.dbs) <= set(ENGINES):
        parser.error(f"--db takes a comma-separated subset of {','.join(ENGINES)}")
    try:
        args.process_counts = [int(p) for p in _list(args.processes)]
    except ValueError:
        parser.error("--processes takes comma-separated whole numbers, e.g. 1,2,4,8")
    counts = [args.drain_jobs, args.enqueue_jobs, args.bulk_jobs, args.bulk_size]
    counts += [args.latency_jobs, args.poll_latency_jobs, *args.process_counts]
    if not args.process_counts or min(counts) < 1:
        parser.error("job counts, --bulk-size and --processes must be at least 1")
    if not args.timeout > 0:
        parser.error("--timeout must be positive")
    if args.no_chart and args.update_docs:
        parser.error("--update-docs needs the chart; drop --no-chart")
    return args


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_child(args)
    from benchmarks.systems import report

    run = SideBySide(args)
    run.execute()
    data = run.report()
    print(report.format_report(data))
    args.output_dir.mkdir(parents=True, exist_ok=True)
    stem = args.output_dir / f"side-by-side-{data['started'].replace(':', '')}"
    if not args.no_chart:
        chart = report.write_chart(data, stem.with_suffix(".png"))
        data["chart"] = str(chart) if chart else None
        if chart and args.update_docs:
            DOCS_CHART.parent.mkdir(parents=True, exist_ok=True)
            DOCS_CHART.write_bytes(chart.read_bytes())
            print(f"chart copied to {DOCS_CHART.relative_to(REPO_ROOT)}")
    stem.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n")
    print(f"report: {stem.with_suffix('.json')}")
    for problem in data["problems"]:
        print(problem)
    return data["exit_status"]


class SideBySide:
    """The parent process: runs every phase in a child process and gathers the figures."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.started = datetime.now(UTC)
        self.clock = time.monotonic()
        self.results: dict[str, dict[str, dict[str, Any]]] = {}
        for db in args.dbs:
            self.results[db] = {}
            for name in args.system_names:
                info = SYSTEMS[name]
                entry: dict[str, Any] = {"label": info.label, "status": "ok"}
                if db not in info.databases:
                    entry.update(status="n/a", reason=f"does not run on {db}")
                elif missing := missing_requirements(info):
                    reason = f"cannot import {', '.join(missing)}"
                    if "django.tasks" in missing:
                        reason += " (django.tasks is Django >= 6.0's)"
                    reason += "; install the bench extra: scripts/install-bench .venv/bin/python"
                    entry.update(status="not installed", reason=reason)
                self.results[db][name] = entry

    def live(self, db: str) -> list[str]:
        return [name for name, entry in self.results[db].items() if entry["status"] == "ok"]

    def execute(self) -> None:
        a = self.args
        for db in a.dbs:
            for name in self.live(db):
                setup = self.child(name, db, "setup")
                if setup:
                    self.results[db][name].update(setup, drain={}, idle={})
            for phase in ("enqueue", "latency"):
                for name in self.live(db):
                    if (figures := self.child(name, db, phase)) is not None:
                        self.results[db][name][phase] = figures
            for processes in a.process_counts:
                for name in self.live(db):
                    for series in list(self.results[db][name]["series"]):
                        if self.results[db][name]["status"] != "ok":
                            break
                        extra = ["--series", series, "--drain-processes", str(processes)]
                        if (figures := self.child(name, db, "drain", *extra)) is not None:
                            drains = self.results[db][name]["drain"].setdefault(series, {})
                            drains[str(processes)] = figures
                            if figures["violations"]:
                                for violation in figures["violations"]:
                                    log(
                                        f"VIOLATION: {name} on {db}, {processes} process(es): "
                                        f"{violation}"
                                    )
            # Start-up and stop on an empty queue, by 1 process (the table's column) and by
            # each count drained with (what the net CPU per job leaves out).
            idle_counts = sorted({1, *a.process_counts})
            for name in self.live(db):
                for series in list(self.results[db][name]["series"]):
                    for processes in idle_counts:
                        if self.results[db][name]["status"] != "ok":
                            break
                        extra = ["--series", series, "--drain-processes", str(processes)]
                        figures = self.child(name, db, "idle", *extra)
                        if figures is None:
                            continue
                        idle = self.results[db][name]["idle"]
                        if processes == 1:  # the first
                            idle[series] = {**figures, "by_processes": {}}
                        idle[series]["by_processes"][str(processes)] = figures["cpu_seconds"]

    def child_env(self, name: str, db: str) -> dict[str, str]:
        info = SYSTEMS[name]
        pythonpath = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
        env = dict(
            os.environ,
            BENCH_CMP_DB=db,
            BENCH_CMP_DB_NAME=database_name(name, db, self.args.db_suffix),
            BENCH_CMP_CONN_MAX_AGE="0",
            PYTHONPATH=pythonpath,
        )
        env.pop("DURABLE_JOBS_DB_NAME", None)
        if info.settings:
            env["DJANGO_SETTINGS_MODULE"] = info.settings
        else:
            env.pop("DJANGO_SETTINGS_MODULE", None)
        return env

    def child(self, name: str, db: str, phase: str, *extra: str) -> dict[str, Any] | None:
        """Run one phase of ``name`` on ``db`` in a child process; None (and noted) if it failed."""
        a = self.args
        options = [
            f"--drain-jobs={a.drain_jobs}",
            f"--enqueue-jobs={a.enqueue_jobs}",
            f"--bulk-jobs={a.bulk_jobs}",
            f"--bulk-size={a.bulk_size}",
            f"--latency-jobs={a.latency_jobs}",
            f"--poll-latency-jobs={a.poll_latency_jobs}",
            f"--timeout={a.timeout}",
            f"--seed={a.seed}",
        ]
        started = time.monotonic()
        log(f"== {db}: {name} {phase} {' '.join(extra)}".rstrip())
        with tempfile.TemporaryDirectory(prefix="bench-cmp-") as tmp:
            result_file = Path(tmp) / "result.json"
            command = [sys.executable, "-m", "benchmarks.side_by_side", "--child", f"{name}:{db}"]
            command += ["--phase", phase, "--result-file", str(result_file), *options, *extra]
            try:
                code = subprocess.run(
                    command,
                    env=self.child_env(name, db),
                    cwd=REPO_ROOT,
                    stdout=sys.stderr,  # stdout carries the report only
                    timeout=a.timeout * 2 + 600,
                    check=False,
                ).returncode
            except subprocess.TimeoutExpired:
                code = "timeout"
            if code == 0 and result_file.exists():
                log(f"   done in {time.monotonic() - started:.1f} s")
                return json.loads(result_file.read_text())
        entry = self.results[db][name]
        entry.update(
            status="failed",
            reason=f"the {phase} phase failed (exit {code}), so it has no figures from there on",
        )
        log(f"NOT BENCHMARKED: {entry['label']} on {db}: {entry['reason']}; see the output above")
        return None

    def report(self) -> dict[str, Any]:
        """Return the whole run as one JSON-serialisable report, with its exit status."""
        from benchmarks.systems import report

        for systems in self.results.values():
            for entry in systems.values():
                for series, runs in entry.get("drain", {}).items():
                    idle = entry.get("idle", {}).get(series, {}).get("by_processes", {})
                    for p, figures in runs.items():
                        if (start_up := idle.get(p)) is not None:
                            net = figures["cpu_seconds"] - start_up
                            figures["cpu_us_per_job_net"] = net / figures["jobs"] * 1e6
        problems = []
        ours_broken = [
            db
            for db, systems in self.results.items()
            if systems.get("ours", {}).get("status") not in (None, "ok")
        ]
        if ours_broken:
            problems.append(f"FAILED: no figures of ours for {', '.join(ours_broken)}")
        violations = [
            f"VIOLATION: ours on {db}, {p} process(es): {v}"
            for db, systems in self.results.items()
            for p, figures in systems.get("ours", {}).get("drain", {}).get("default", {}).items()
            for v in figures["violations"]
        ]
        problems += violations
        data = {
            "started": self.started.isoformat(timespec="seconds"),
            "seconds": round(time.monotonic() - self.clock, 1),
            "machine": report.machine(),
            "options": {
                k: (str(v) if isinstance(v, Path) else v)
                for k, v in vars(self.args).items()
                if k not in ("child", "phase", "series", "drain_processes", "result_file")
            },
            "results": self.results,
            "problems": problems,
            "exit_status": 2 if ours_broken else 1 if violations else 0,
        }
        data["ratios"] = report.ratios(data)
        return data


def run_child(args: argparse.Namespace) -> int:
    """Run one phase of one system on one database; write its figures to ``--result-file``."""
    from benchmarks.systems.harness import run_phase

    name, db = args.child.split(":")
    system = importlib.import_module(SYSTEMS[name].module).make(db, args)
    result = run_phase(system, args.phase, args)
    Path(args.result_file).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
