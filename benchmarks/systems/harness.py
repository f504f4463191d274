"""The measurements, taken the same way for every system (in the child process of one system).

- **enqueue**: single calls timed one by one; then the bulk path in calls of ``--bulk-size``.
- **latency**: one idle worker; jobs enqueued one at a time after a random pause; enqueue→start is
  the task's own start time minus the time just before the enqueue call.
- **drain**: ``--drain-jobs`` due jobs loaded up front, then N burst worker processes started at
  once; throughput is jobs / (last job finished - first job started) from the system's own table,
  and again counted from the moment the processes were spawned (start-up included); the CPU is
  the user + system time of the worker processes (``os.wait4``), divided by the jobs.
- **idle**: the CPU one worker process spends starting and stopping on an empty queue.
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.systems.base import System, payload

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
JOB_TIMEOUT = 30.0  # seconds one latency job may take
NOTIFY_PAUSE = 0.06  # seconds: the longest pause between latency jobs with a NOTIFY wake-up


def summary(values_ms: list[float]) -> dict[str, float]:
    """Return p50, p90, p99 (nearest rank), max and mean of ``values_ms``."""
    ordered = sorted(values_ms)

    def rank(p: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]

    return {
        "p50": statistics.median(ordered),
        "p90": rank(90),
        "p99": rank(99),
        "max": ordered[-1],
        "mean": statistics.fmean(ordered),
    }


@dataclass
class WorkerRun:
    wall_seconds: float
    cpu_seconds: float


class WorkerFailed(RuntimeError):
    pass


def _log_tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def run_workers(
    argv: list[str],
    env: dict[str, str],
    count: int,
    log_dir: Path,
    timeout: float,
    until: Callable[[], bool] | None = None,
) -> WorkerRun:
    """Run ``count`` copies of ``argv`` at once until all exit 0; return wall and CPU seconds.

    With ``until``, the workers do not exit by themselves: once ``until()`` is true they are sent
    SIGTERM, and exiting by it counts as success. Each child is reaped with ``os.wait4``, whose
    resource usage is that child's own (and that of any children it waited for), so the CPU is
    the workers' and never the benchmark's.
    """
    logs = [log_dir / f"worker-{i}.log" for i in range(count)]
    started = time.perf_counter()
    procs = []
    for path in logs:
        with path.open("w") as out:
            procs.append(
                subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
            )
    pending = dict(zip((p.pid for p in procs), zip(procs, logs, strict=True), strict=True))
    cpu = 0.0
    stopped = False
    try:
        while pending:
            if until is not None and not stopped and until():
                for proc in procs:
                    proc.send_signal(signal.SIGTERM)
                stopped = True
            for pid, (proc, log) in list(pending.items()):
                reaped, status, usage = os.wait4(pid, os.WNOHANG)
                if not reaped:
                    continue
                proc.returncode = os.waitstatus_to_exitcode(status)
                cpu += usage.ru_utime + usage.ru_stime
                del pending[pid]
                if proc.returncode != 0 and not (stopped and proc.returncode == -signal.SIGTERM):
                    raise WorkerFailed(
                        f"{' '.join(argv[1:4])} exited {proc.returncode}:\n{_log_tail(log)}"
                    )
            if pending and time.perf_counter() - started > timeout:
                raise WorkerFailed(f"{len(pending)} worker(s) still running after {timeout:g} s")
            # until() is a query of the system's table: asked 10 times a second, it adds little
            # load beside the drain (whose span is read from the rows, not from this loop).
            time.sleep(0.005 if until is None else 0.1)
    finally:
        for proc, _ in pending.values():
            proc.kill()
            proc.wait(timeout=10)
    return WorkerRun(time.perf_counter() - started, cpu)


@contextmanager
def idle_worker(system: System, log_dir: Path) -> Iterator[subprocess.Popen]:
    """Run one long-running worker of ``system``; stop it with SIGTERM afterwards."""
    log = log_dir / "idle-worker.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            system.worker_argv(burst=False),
            cwd=REPO_ROOT,
            env=system.worker_env("default"),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    if proc.returncode is None or proc.returncode not in (0, -signal.SIGTERM):
        raise WorkerFailed(f"the idle worker exited {proc.returncode}:\n{_log_tail(log)}")


def run_phase(system: System, phase: str, args: Any) -> dict[str, Any]:
    """Run one phase of the benchmark for ``system`` and return its figures."""
    try:
        if phase == "setup":
            system.setup()
            return {
                "server": system.server_version(),
                "series": system.series(),
                "wakeup": system.wakeup,
                "bulk_unavailable": system.bulk_unavailable,
            }
        system.open()
        with tempfile.TemporaryDirectory(prefix=f"bench-cmp-{system.name}-{system.db}-") as tmp:
            log_dir = Path(tmp)
            if phase == "enqueue":
                return enqueue_figures(system, args)
            if phase == "latency":
                jobs = args.poll_latency_jobs if system.poll_seconds else args.latency_jobs
                return latency(system, jobs, args.seed, log_dir)
            if phase == "drain":
                return drain(system, args.series, args.drain_processes, args, log_dir)
            if phase == "idle":
                return idle(system, args.series, args.drain_processes, args, log_dir)
        raise ValueError(f"unknown phase {phase!r}")
    finally:
        system.close()


def _timed(call: Any, *call_args: Any) -> float:
    started = time.perf_counter()
    call(*call_args)
    return time.perf_counter() - started


def enqueue_figures(system: System, args: Any) -> dict[str, Any]:
    """Time ``args.enqueue_jobs`` single enqueues, then the bulk path for ``args.bulk_jobs``."""
    system.clear()
    for n in range(5):  # warm-up: connection, prepared statements, caches
        system.enqueue(payload(n))
    seconds = [_timed(system.enqueue, payload(n)) for n in range(args.enqueue_jobs)]
    result: dict[str, Any] = {
        "single": {
            "jobs": len(seconds),
            "jobs_per_s": len(seconds) / sum(seconds),
            "ms": summary([s * 1000 for s in seconds]),
        }
    }
    system.clear()
    if system.bulk_unavailable:
        result["bulk"] = {"unavailable": system.bulk_unavailable}
        return result
    size = args.bulk_size
    system.enqueue_many([payload(n) for n in range(min(size, 100))])  # warm-up
    system.clear()
    calls = []
    for start in range(0, args.bulk_jobs, size):
        batch = [payload(n) for n in range(start, min(start + size, args.bulk_jobs))]
        calls.append(_timed(system.enqueue_many, batch))
    system.clear()
    result["bulk"] = {
        "jobs": args.bulk_jobs,
        "call_size": size,
        "calls": len(calls),
        "jobs_per_s": args.bulk_jobs / sum(calls),
        "ms_per_call": statistics.fmean(calls) * 1000,
    }
    return result


def latency(system: System, jobs: int, seed: int, log_dir: Path) -> dict[str, Any]:
    """Return enqueue→start latency (ms) of ``jobs`` jobs given one by one to an idle worker.

    Each job waits for a random pause first (20 ms up to 60 ms with NOTIFY, up to the poll
    interval without), so the worker is idle again and a polled job lands at a random point of
    the poll interval.
    """
    rng = random.Random(seed)
    pause = system.poll_seconds or NOTIFY_PAUSE
    system.clear()
    samples = []
    with idle_worker(system, log_dir) as worker:
        for n in range(-(3 if system.poll_seconds else 10), jobs):  # negative: warm-up
            time.sleep(rng.uniform(0.02, pause))
            before = time.time()
            handle = system.enqueue(payload(n))
            deadline = time.monotonic() + JOB_TIMEOUT
            while (started := system.started_at(handle)) is None:
                if worker.poll() is not None:
                    raise WorkerFailed(f"the idle worker exited {worker.returncode}")
                if time.monotonic() > deadline:
                    raise WorkerFailed(f"a job did not start within {JOB_TIMEOUT:g} s")
                time.sleep(0.002)
            if n >= 0:
                samples.append((started - before) * 1000)
    system.clear()
    return {"jobs": jobs, "wakeup": system.wakeup, "start_ms": summary(samples)}


def drain(system: System, series: str, processes: int, args: Any, log_dir: Path) -> dict[str, Any]:
    """Drain ``args.drain_jobs`` no-op jobs with ``processes`` burst workers of ``series``."""
    jobs = args.drain_jobs
    system.clear()
    system.load(jobs)
    system.analyze()
    until = None if system.exits_when_drained else (lambda: system.finished() >= jobs)
    argv, copies = system.workers_argv(processes, burst=True)
    spawned = time.time()
    run = run_workers(argv, system.worker_env(series), copies, log_dir, args.timeout, until)
    first, last, done = system.drain_span()
    if done != jobs:
        raise RuntimeError(f"{done} of {jobs} jobs finished after the workers exited")
    seconds = last - first
    violations = system.verify(jobs)
    system.clear()
    return {
        "series": series,
        "processes": processes,
        "jobs": jobs,
        "seconds": seconds,
        "jobs_per_s": jobs / seconds,
        # Counted from the moment the worker processes were spawned: start-up included.
        "spawn_seconds": last - spawned,
        "jobs_per_s_from_spawn": jobs / (last - spawned),
        # Start-up as the queue sees it: from the spawn to the first job's start (its claim).
        "first_start_s": first - spawned,
        "wall_seconds": run.wall_seconds,
        "cpu_seconds": run.cpu_seconds,
        "cpu_us_per_job": run.cpu_seconds / jobs * 1e6,
        "violations": violations,
    }


def idle(system: System, series: str, processes: int, args: Any, log_dir: Path) -> dict[str, Any]:
    """Return the CPU and wall seconds of ``processes`` burst workers on an empty queue, started
    as the drain starts them: what a drain by as many costs besides its jobs."""
    system.clear()
    until = None if system.exits_when_drained else system.workers_ready
    argv, copies = system.workers_argv(processes, burst=True)
    run = run_workers(argv, system.worker_env(series), copies, log_dir, args.timeout, until)
    return {
        "series": series,
        "processes": processes,
        "cpu_seconds": run.cpu_seconds,
        "wall_seconds": run.wall_seconds,
    }
