"""The workflow chaos proof's harness and checker (used by tests/workflows/test_chaos.py).

:func:`submit_workflows` submits the run's graphs: fan-outs of 20 children with a fan-in, and
chains, every node a ``tests.wfchaos.node`` job that records several ``ctx.step``s.
:class:`WorkflowChaos` starts ``runjobs`` processes (``tests.chaos.faults.Fleet``, with the
history of fenced writes of ``tests/chaos/settings.py``), SIGSTOPs one of them past its lease
while it is in the middle of a step and of a job's last part, SIGKILLs others and restarts them,
then lets the rest drain. :func:`check` proves the properties from the final tables, the audit
of the job table (``tests/chaos/audit.py``), the history files and the step log: it reuses the
chaos run's checker (``tests/chaos/checker.py``) for what holds of any job, and adds what
holds of workflows and steps:

``released-once``
    a child with parents left ``waiting`` once (the audit saw one change waiting -> pending),
    at the time its last parent completed (its ``released_at`` is that parent's
    ``completed_at``: the same transaction), and no attempt of it started before;
``fan-in``
    every node saw, through ``ctx.upstream()``, exactly its parents' stored results;
``complete``
    every job of every workflow completed, with the step results its code computes;
``step-once``
    a recorded step never ran again: no run of it began after its ``recorded_at`` or at a later
    epoch than the one that recorded it, exactly one run at that epoch, and every step that ran
    was recorded;
``stale-refused``
    the paused worker's late writes were refused (a step record and a completion, each at an
    epoch the database had superseded), and it had none accepted after its lease was taken.
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos import audit as audit_room
from tests.chaos import checker
from tests.chaos.faults import Fleet, Worker

OPERATION = "tests.wfchaos.node"
FAN_OUT = 20
ENDINGS = ("outcome", "complete", "complete_atomically")
# A worker is paused only in a step or last part that has this many seconds still to go.
MARGIN = 0.1
# How far the step log's clock (the worker's time.time()) may be ahead of the store's: one host.
CLOCK_SLACK = 0.05


def node_payload(log: Path, tag: str, *, step_seconds: float, tail_seconds: float) -> dict:
    return {
        "log": str(log),
        "tag": tag,
        "steps": 3,
        "step_seconds": step_seconds,
        "tail_seconds": tail_seconds,
    }


def submit_workflows(log: Path, *, step_seconds: float = 0.3, tail_seconds: float = 0.5) -> list:
    """Submit the run's workflows; return their handles.

    Two fan-outs of :data:`FAN_OUT` children and a fan-in (the first goes on into a chain of
    three), and a chain of eight.
    """
    from django_durable_jobs import Workflow

    serial = iter(range(1_000))

    def payload(tag: str) -> dict:
        # Lengths vary by node, so the jobs one worker claimed together drift apart.
        n = next(serial)
        step, tail = step_seconds * (0.6 + 0.2 * (n % 5)), tail_seconds * (0.6 + 0.3 * (n % 3))
        return node_payload(log, tag, step_seconds=round(step, 3), tail_seconds=round(tail, 3))

    handles = []
    for name, tail in (("wfchaos.fan-a", 3), ("wfchaos.fan-b", 0)):
        wf = Workflow(name, idempotency_key=name)
        root = wf.job(OPERATION, payload(f"{name}:root"), name="root")
        parts = [
            wf.job(OPERATION, payload(f"{name}:c{i:02}"), after=[root], name=f"c{i:02}")
            for i in range(FAN_OUT)
        ]
        last = wf.job(OPERATION, payload(f"{name}:merge"), after=parts, name="merge")
        for i in range(tail):
            last = wf.job(OPERATION, payload(f"{name}:t{i}"), after=[last], name=f"t{i}")
        handles.append(wf.submit())
    wf = Workflow("wfchaos.chain", idempotency_key="wfchaos.chain")
    last = None
    for i in range(8):
        after = [] if last is None else [last]
        last = wf.job(OPERATION, payload(f"chain:{i}"), after=after, name=f"link{i}")
    handles.append(wf.submit())
    return handles


def read_log(path: Path) -> list[dict[str, Any]]:
    """Return the step log's lines; a line cut by a SIGKILL is skipped."""
    if not path.exists():
        return []
    lines = []
    for text in path.read_text(errors="replace").splitlines():
        try:
            lines.append(json.loads(text))
        except ValueError:
            continue
    return lines


@dataclass
class WorkflowChaos:
    """One run: its worker processes, the faults done to them, and what the harness saw."""

    folder: Path
    env: dict[str, str]
    log: Path
    workers: int = 3
    concurrency: int = 3
    lease: float = 2.0
    seed: int = 0
    notes: list[str] = field(default_factory=list)
    paused_pid: int | None = None
    paused_at: dict[str, Any] = field(default_factory=dict)  # what it was doing when stopped
    kills: int = 0

    def __post_init__(self) -> None:
        args = ["--lease", f"{self.lease:g}", "--poll", "0.2", "--grace", "10"]
        args += ["--concurrency", str(self.concurrency), "--no-schedules"]
        self.fleet = Fleet(self.folder, self.env, args, self.workers)
        self.rng = random.Random(self.seed)
        self.start = time.monotonic()

    def say(self, text: str) -> None:
        self.notes.append(f"{time.monotonic() - self.start:6.2f}s {text}")

    def left(self) -> int:
        from django.db import DatabaseError, connections

        from django_durable_jobs.models import Job

        try:
            return Job.objects.filter(operation=OPERATION).exclude(status="complete").count()
        except DatabaseError:
            connections.close_all()
            return -1

    def run(self, *, fault_seconds: float, kill_every: float, drain_timeout: float) -> bool:
        """Start the workers; for ``fault_seconds``, kill one every ``kill_every`` seconds or so
        (restarting it a little later) and pause one once (:meth:`pause_if_caught`); then
        resume and restart everything and wait for every job to complete.

        Return True when every job completed before ``drain_timeout`` ran out.
        """
        self.fleet.start_all()
        self.start = time.monotonic()
        end = self.start + fault_seconds
        next_kill = self.start + self.rng.uniform(1.0, 1.5) * kill_every
        resume_at: float | None = None
        spare_until = 0.0  # the paused worker is not killed before its late writes are made
        while (now := time.monotonic()) < end or resume_at is None or now < spare_until:
            if resume_at is None and now - self.start > 1.5:
                if self.pause_if_caught():
                    resume_at = now + self.lease + 2.5
                    spare_until = resume_at + 3.0
            if resume_at is not None and now >= resume_at:
                self.fleet.resume_all()
            if now >= spare_until:
                self.fleet.protected.clear()
            if now >= next_kill and now < end:
                victim = self.fleet.kill(self.rng.randrange(self.workers), self.rng.uniform(0.2, 1))
                if victim is not None:
                    self.kills += 1
                    self.say(f"SIGKILL {victim.name} (pid {victim.proc.pid})")
                next_kill = now + self.rng.uniform(0.5, 1.5) * kill_every
            if now > end + 30:
                self.say("no worker was caught in a step and a last part at once")
                break
            self.fleet.tend()
            time.sleep(0.02)
        self.fleet.resume_all()
        self.fleet.tend(restart_all=True)
        self.say("faults over")
        deadline = time.monotonic() + drain_timeout
        while time.monotonic() < deadline:
            self.fleet.tend()
            if self.left() == 0:
                self.say("drained")
                return True
            time.sleep(0.3)
        self.say(f"not drained: {self.left()} jobs left")
        return False

    def pause_if_caught(self) -> bool:
        """SIGSTOP a worker caught in the middle of a step of one job and the last part of
        another (the step log says so); return True when one was."""
        doing = self._doing()
        for worker in list(self.fleet.workers.values()):
            if worker.proc.poll() is not None or worker.paused:
                continue
            mine = doing.get(worker.proc.pid, {})
            if {line["what"] for line in mine.values()} == {"step", "tail"}:
                self._stop(worker, mine)
                return True
        return False

    def _stop(self, worker: Worker, doing: dict) -> None:
        worker.proc.send_signal(signal.SIGSTOP)
        worker.paused = True
        self.fleet.done["pause"] += 1
        self.paused_pid = worker.proc.pid
        self.paused_at = doing
        self.fleet.protected.add(worker.slot)
        what = sorted((line["what"], line.get("step"), job[:8]) for job, line in doing.items())
        self.say(f"SIGSTOP {worker.name} (pid {worker.proc.pid}) in {what}")

    def _doing(self) -> dict[int, dict[str, dict]]:
        """Return, per pid, per job, the last line each of its running attempts logged: only
        a step or a last part with at least :data:`MARGIN` seconds still to go."""
        now = time.time()
        latest: dict[int, dict[str, dict]] = defaultdict(dict)
        for line in read_log(self.log):
            latest[line["pid"]][line["job"]] = line
        return {
            pid: {
                job: line
                for job, line in jobs.items()
                if line["t"] <= now < line["t"] + line["seconds"] - MARGIN
            }
            for pid, jobs in latest.items()
        }

    def stop(self) -> list[str]:
        return self.fleet.stop(timeout=20)


# -- reading and checking a run -----------------------------------------------------------------


@dataclass
class WorkflowRun:
    """What the checker reads: the final rows, the audit, the history and the step log."""

    jobs: list[dict[str, Any]]
    edges: list[tuple[str, str]]
    attempts: list[dict[str, Any]]
    steps: list[dict[str, Any]]
    audit: list[dict[str, Any]]
    history: list[dict[str, Any]]
    log: list[dict[str, Any]]
    clock_slack: float
    paused_pid: int | None


def load(folder: Path, log: Path, paused_pid: int | None) -> WorkflowRun:
    """Read the run's rows from the default database and its files from ``folder``."""
    from django.db import connection

    from django_durable_jobs.models import Job, JobAttempt, JobDependency, JobStep

    jobs = list(
        Job.objects.filter(operation=OPERATION).values(
            "id",
            "operation",
            "status",
            "fencing_epoch",
            "owner_id",
            "result",
            "error",
            "idempotency_key",
            "attempts",
            "workflow_id",
            "node",
            "released_at",
            "completed_at",
            "waiting_on",
        )
    )
    edges = [
        (str(p), str(c)) for p, c in JobDependency.objects.values_list("parent_id", "child_id")
    ]
    attempts = list(
        JobAttempt.objects.filter(job__operation=OPERATION).values(
            "job_id", "epoch", "owner_id", "outcome", "started_at", "ended_at"
        )
    )
    steps = list(
        JobStep.objects.filter(job__operation=OPERATION).values(
            "job_id", "position", "name", "result", "epoch", "recorded_at"
        )
    )
    columns = (
        "seq, job_id, old_epoch, new_epoch, old_owner, new_owner, old_status, new_status, "
        "old_result, new_result, db_at"
    )
    names = [c.strip() for c in columns.split(",")]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM {audit_room.TABLE}")  # noqa: S608 - our own table
        audit = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    for a in audit:
        a["db_at"] = float(a["db_at"])
        for side in ("old_result", "new_result"):
            a[side] = None if a[side] is None else bool(a[side])
    return WorkflowRun(
        jobs=[{**j, "id": str(j["id"])} for j in jobs],
        edges=edges,
        attempts=[{**a, "job_id": str(a["job_id"])} for a in attempts],
        steps=[{**s, "job_id": str(s["job_id"])} for s in steps],
        audit=audit,
        history=checker.read_history(folder),
        log=read_log(log),
        clock_slack=audit_room.CLOCK_SLACK[connection.vendor],
        paused_pid=paused_pid,
    )


def check(run: WorkflowRun) -> checker.Report:
    """Return the report of ``run``: the chaos checker's properties, then the workflow ones."""
    report = checker.Report()
    uid = checker.uid
    jobs = {uid(j["id"]): j for j in run.jobs}
    attempts: dict[str, list[dict]] = defaultdict(list)
    for a in run.attempts:
        attempts[uid(a["job_id"])].append(a)
    audit: dict[str, list[dict]] = defaultdict(list)
    for a in sorted(run.audit, key=lambda a: a["seq"]):
        if uid(a["job_id"]) in jobs:
            audit[uid(a["job_id"])].append(a)
    parents: dict[str, list[str]] = defaultdict(list)
    for parent, child in run.edges:
        if uid(child) in jobs:
            parents[uid(child)].append(uid(parent))

    for job_id, job in sorted(jobs.items()):
        if job["status"] != checker.COMPLETE:
            report.add("complete", job_id, f"{job['node']} is {job['status']}: {job['error']!r}")
    checker._check_completions(report, jobs, attempts, audit)
    checker._check_attempts(report, jobs, attempts, audit)
    checker._check_audit_epochs(report, audit)
    history = [r for r in run.history if uid(r["job_id"]) in jobs]
    shim = checker.RunData({}, [], [], [], [], history, clock_slack=run.clock_slack)
    accepted, refused = checker._check_history(report, shim, audit)

    _check_released(report, jobs, parents, attempts, audit)
    _check_upstream(report, jobs, parents)
    reran, resumed = _check_steps(report, jobs, run.steps, run.log)
    late = _check_paused(report, run, jobs, audit)

    outcomes = Counter(a["outcome"] for rows in attempts.values() for a in rows)
    report.counts = {
        "jobs": len(jobs),
        "complete": sum(1 for j in jobs.values() if j["status"] == checker.COMPLETE),
        "children": len(parents),
        "releases": sum(
            1
            for rows in audit.values()
            for a in rows
            if (a["old_status"], a["new_status"]) == ("waiting", "pending")
        ),
        "reclaims": sum(
            1
            for rows in audit.values()
            for a in rows
            if a["old_status"] == "running"
            and a["new_status"] == "running"
            and (a["new_epoch"] or 0) > (a["old_epoch"] or 0)
        ),
        "interrupted_attempts": outcomes.get("interrupted", 0),
        "steps_recorded": len(run.steps),
        "step_runs": sum(1 for line in run.log if line["what"] == "step"),
        "steps_rerun_unrecorded": reran,
        "steps_resumed": resumed,
        "writes_accepted": accepted,
        "stale_writes_refused": refused,
        **late,
    }
    return report


def _check_released(
    report: checker.Report,
    jobs: dict[str, dict],
    parents: dict[str, list[str]],
    attempts: dict[str, list[dict]],
    audit: dict[str, list[dict]],
) -> None:
    completed_db = {  # the database's clock when each job became complete
        job_id: min(a["db_at"] for a in rows if a["new_status"] == checker.COMPLETE)
        for job_id, rows in audit.items()
        if any(a["new_status"] == checker.COMPLETE for a in rows)
    }
    for job_id, job in sorted(jobs.items()):
        mine = parents.get(job_id, [])
        releases = [
            a
            for a in audit.get(job_id, [])
            if a["old_status"] == "waiting" and a["new_status"] != "waiting"
        ]
        if not mine:
            if releases or not any(a["old_status"] is None for a in audit.get(job_id, [])):
                report.add("released-once", job_id, f"a root job left waiting {len(releases)}x")
            continue
        if len(releases) != 1 or releases[0]["new_status"] != "pending":
            seen = [(a["seq"], a["new_status"]) for a in releases]
            report.add("released-once", job_id, f"{job['node']} left waiting: {seen}")
            continue
        ends = [jobs[p]["completed_at"] for p in mine if p in jobs]
        if len(ends) != len(mine) or None in ends:
            report.add("released-once", job_id, f"{job['node']}: a parent never completed")
            continue
        last = max(ends)
        if job["released_at"] != last:
            report.add(
                "released-once",
                job_id,
                f"{job['node']} released at {job['released_at']}, its last parent completed "
                f"at {last}",
            )
        missing = [p for p in mine if p not in completed_db]
        if missing or releases[0]["db_at"] + 1e-9 < max(completed_db[p] for p in mine):
            report.add(
                "released-once",
                job_id,
                f"{job['node']} released (audit {releases[0]['seq']}) before a parent completed",
            )
        early = [
            a for a in attempts.get(job_id, []) if a["started_at"] is None or a["started_at"] < last
        ]
        if early:
            report.add(
                "released-once",
                job_id,
                f"{job['node']}: attempts started before the last parent completed at {last}: "
                f"{[(a['epoch'], a['started_at']) for a in early]}",
            )


def _check_upstream(
    report: checker.Report, jobs: dict[str, dict], parents: dict[str, list[str]]
) -> None:
    for job_id, job in sorted(jobs.items()):
        result = checker._parsed(job["result"])
        if not isinstance(result, dict):
            continue  # reported as not complete
        expected = {
            jobs[p]["node"]: checker._parsed(jobs[p]["result"])
            for p in parents.get(job_id, [])
            if p in jobs
        }
        if result.get("upstream") != expected:
            report.add(
                "fan-in",
                job_id,
                f"{job['node']} saw upstream {sorted(result.get('upstream') or {})}, its "
                f"parents are {sorted(expected)} (or their results differ)",
            )
        tag = result.get("tag", "")
        if result.get("steps") != [f"{tag}:s{i}" for i in range(3)]:
            report.add("complete", job_id, f"{job['node']} returned steps {result.get('steps')}")


def _check_steps(
    report: checker.Report, jobs: dict[str, dict], steps: list[dict], log: list[dict]
) -> tuple[int, int]:
    """Check every recorded step against its runs; return (unrecorded runs run again, steps an
    attempt found recorded by an earlier one and did not run)."""
    uid = checker.uid
    runs: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for line in log:
        if line["what"] == "step":
            runs[(uid(line["job"]), line["step"])].append(line)
    recorded = {(uid(s["job_id"]), s["name"]): s for s in steps}
    reran = resumed = 0
    for job_id, job in sorted(jobs.items()):
        names = sorted(s["name"] for s in steps if uid(s["job_id"]) == job_id)
        if job["status"] == checker.COMPLETE and names != ["s0", "s1", "s2"]:
            report.add("step-once", job_id, f"{job['node']} recorded steps {names}")
    for key, step in sorted(recorded.items()):
        job_id, name = key
        ran = runs.get(key, [])
        at = [line["epoch"] for line in ran]
        later = [e for e in at if e > step["epoch"]]
        if later:
            report.add(
                "step-once",
                job_id,
                f"step {name} recorded at epoch {step['epoch']} ran again at epochs {later}",
            )
        recorded_at = checker.seconds(step["recorded_at"])
        after = [line["epoch"] for line in ran if line["t"] > recorded_at + CLOCK_SLACK]
        if after:
            report.add(
                "step-once",
                job_id,
                f"step {name} recorded at {step['recorded_at']} began again after that, at "
                f"epochs {after}",
            )
        if at.count(step["epoch"]) != 1:
            report.add(
                "step-once",
                job_id,
                f"step {name} recorded at epoch {step['epoch']} ran {at.count(step['epoch'])}x "
                f"at that epoch (runs at {at})",
            )
        reran += sum(1 for e in at if e < step["epoch"])
        if step["epoch"] < jobs[job_id]["fencing_epoch"]:
            resumed += 1
    for key, ran in sorted(runs.items()):
        if key not in recorded:
            report.add("step-once", key[0], f"step {key[1]} ran {len(ran)}x, never recorded")
    return reran, resumed


def _check_paused(
    report: checker.Report, run: WorkflowRun, jobs: dict[str, dict], audit: dict[str, list]
) -> dict[str, int]:
    """Check the paused worker's writes after its leases were taken over; return counts."""
    if run.paused_pid is None:
        report.add("stale-refused", "-", "no worker was paused")
        return {}
    uid = checker.uid
    claimed_at: dict[tuple[str, int], float] = {}  # (job, epoch) -> when a newer epoch began
    for job_id, rows in audit.items():
        for a in rows:
            for epoch in range(a["old_epoch"] or 0, a["new_epoch"] or 0):
                claimed_at.setdefault((job_id, epoch), a["db_at"])
    mine = [r for r in run.history if r["pid"] == run.paused_pid and uid(r["job_id"]) in jobs]
    stale = [r for r in mine if (uid(r["job_id"]), r["epoch"]) in claimed_at]
    late = [
        r for r in stale if checker.seconds(r["at"]) >= claimed_at[(uid(r["job_id"]), r["epoch"])]
    ]
    for r in late:
        if r["accepted"]:
            report.add(
                "stale-refused",
                r["job_id"],
                f"{r['kind']} accepted from the paused worker at epoch {r['epoch']} after a "
                f"newer epoch began",
            )
    refused = Counter(r["kind"] for r in late if not r["accepted"])
    return {
        "paused_late_step_refused": refused.get("step", 0),
        "paused_late_completion_refused": sum(refused.get(k, 0) for k in ENDINGS),
        "paused_late_refused": sum(refused.values()),
    }
