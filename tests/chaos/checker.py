"""The chaos run's checker: prove the run's properties from its history and its final tables.

Input (:class:`RunData`): what the harness submitted, the history of fenced writes every worker
logged (``django_durable_jobs.history``, client clock), the audit the database's triggers kept of
every insert and update of the job table (database clock), and the final job, attempt, domain
and schedule rows. :func:`check` returns a :class:`Report`: counts computed from that input, and
every violation found with its evidence. Nothing here trusts the harness's own idea of what
happened, and nothing touches the database (:func:`load_run` reads it).

The properties:

``complete``
    every job the harness submitted, and every tick job, ended ``complete``;
``one-domain-row``
    exactly one ``ChaosRow`` per ``chaos.domain`` job, written by the attempt that completed it
    (same epoch and owner), and none for any other job;
``completed-by-holder``
    exactly one ``complete`` attempt per job, at the job's final epoch and owner; the result
    names that attempt; the database saw exactly one change to ``complete``, made by the epoch
    and owner that held the running row, at the newest epoch the job ever had;
``attempts-recorded``
    every epoch the database saw claimed has exactly one ``JobAttempt`` row (an interrupted
    attempt included), and no attempt row names an epoch never claimed or another owner;
``ticks-once``
    the schedule's tick jobs have distinct keys, one per tick, with no tick missing between the
    first and the last;
``reports-true``
    what the workers logged of each attempt they ended agrees with the tables: an attempt
    reported ``complete`` completed its job at its epoch; one reported ``lease-lost`` did not;
``no-stale-write``
    no write was accepted from an owner whose lease had been taken over: from the history, an
    accepted write by (owner, epoch) whose time is at or after the database recorded a higher
    epoch for that job, or by an owner that never held that epoch; from the audit alone, an
    epoch that went back, or an update that kept (owner, epoch) but changed the status or the
    result after a newer epoch existed.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

DOMAIN, PLAIN, TICK = "chaos.domain", "chaos.plain", "chaos.tick"
OPERATIONS = (DOMAIN, PLAIN, TICK)
RUNNING, COMPLETE = "running", "complete"
TICK_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
ENDINGS = ("outcome", "complete_atomically", "complete")  # the writes that complete a job
EVIDENCE_LIMIT = 50  # violations kept per property (the count is always exact)


@dataclass
class RunData:
    """Everything the checker reads, as plain values (see :func:`load_run`).

    ``submitted`` maps each job id the harness submitted to its operation. ``jobs``,
    ``attempts``, ``chaos_rows`` and ``audit`` are rows as dicts (ids as text); ``history`` the
    history records (``kind``, ``job_id``, ``epoch``, ``owner_id``, ``accepted``, ``at``);
    ``audit`` rows carry ``seq``, ``job_id``, ``old_epoch``, ``new_epoch``, ``old_owner``,
    ``new_owner``, ``old_status``, ``new_status``, ``old_result``, ``new_result`` (booleans: a
    result present) and ``db_at`` (seconds since the epoch, the database's clock).
    ``clock_slack`` is how much coarser than a microsecond the database's clock is (SQLite's
    counts milliseconds). ``reports`` are the attempts the workers logged as ended (``job_id``,
    ``epoch``, ``outcome``: ``complete``, ``lease-lost``, ...).
    """

    submitted: dict[str, str]
    jobs: list[dict[str, Any]]
    attempts: list[dict[str, Any]]
    chaos_rows: list[dict[str, Any]]
    audit: list[dict[str, Any]]
    history: list[dict[str, Any]]
    schedule_name: str | None = None
    schedule_every: int = 1
    clock_slack: float = 0.0
    reports: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Violation:
    """One property that does not hold, for one job (or the run), with what shows it."""

    property: str
    job_id: str
    evidence: str


@dataclass
class Report:
    """What the checker found: counts, and the violations (empty when every property holds)."""

    counts: dict[str, int] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    violation_counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violation_counts

    def add(self, prop: str, job_id: Any, evidence: str) -> None:
        self.violation_counts[prop] = self.violation_counts.get(prop, 0) + 1
        if self.violation_counts[prop] <= EVIDENCE_LIMIT:
            self.violations.append(Violation(prop, str(job_id), evidence))

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "counts": self.counts,
            "violation_counts": self.violation_counts,
            "violations": [asdict(v) for v in self.violations],
        }


def uid(value: Any) -> str:
    """Return a job id in one spelling (the hyphenated UUID) whatever the database wrote."""
    return str(uuid.UUID(str(value)))


def seconds(at: str | float | datetime) -> float:
    """Return a time (ISO 8601 text with an offset, a datetime or seconds) as epoch seconds."""
    if isinstance(at, int | float):
        return float(at)
    if isinstance(at, str):
        at = datetime.fromisoformat(at)
    return at.timestamp()


def check(run: RunData) -> Report:
    """Return the report of ``run``: every property checked, every count computed."""
    report = Report()
    jobs = {uid(j["id"]): j for j in run.jobs if j["operation"] in OPERATIONS}
    attempts: dict[str, list[dict]] = defaultdict(list)
    for a in run.attempts:
        attempts[uid(a["job_id"])].append(a)
    rows: dict[str, list[dict]] = defaultdict(list)
    for r in run.chaos_rows:
        rows[uid(r["job_id"])].append(r)
    audit: dict[str, list[dict]] = defaultdict(list)
    for a in sorted(run.audit, key=lambda a: a["seq"]):
        audit[uid(a["job_id"])].append(a)
    submitted = {uid(k): v for k, v in run.submitted.items()}

    duplicates = lost = 0
    lost += _check_complete(report, submitted, jobs)
    duplicates += _check_domain_rows(report, jobs, rows)
    duplicates += _check_completions(report, jobs, attempts, audit)
    _check_attempts(report, jobs, attempts, audit)
    tick_dups, tick_lost, ticks = _check_ticks(report, run, jobs)
    duplicates += tick_dups
    lost += tick_lost
    _check_audit_epochs(report, audit)
    accepted, refused = _check_history(report, run, audit)
    _check_reports(report, run, jobs)
    logged = {
        (uid(r["job_id"]), r["epoch"], r["owner_id"])
        for r in run.history
        if r["accepted"] and r["kind"] in ENDINGS
    }

    outcomes = Counter(a["outcome"] for job in attempts.values() for a in job)
    report.counts = {
        "jobs": len(submitted),
        "ticks": ticks,
        "complete": sum(1 for j in jobs.values() if j["status"] == COMPLETE),
        "reclaims": sum(
            1
            for rows_ in audit.values()
            for a in rows_
            if a["old_status"] == RUNNING
            and a["new_status"] == RUNNING
            and (a["new_epoch"] or 0) > (a["old_epoch"] or 0)
        ),
        "interrupted_attempts": outcomes.get("interrupted", 0),
        "released_attempts": outcomes.get("released", 0),
        "writes_accepted": accepted,
        "stale_writes_refused": refused,
        "audit_rows": len(run.audit),
        "reports": len(run.reports),
        # Completions the database has but no process logged as accepted: their COMMIT
        # landed while the connection broke (a restart, a partition), so the worker never heard.
        "completions_unlogged": sum(
            1
            for job_id, job in jobs.items()
            if job["status"] == COMPLETE
            and (job_id, job["fencing_epoch"], job["owner_id"]) not in logged
        ),
        "duplicates": duplicates,
        "lost": lost,
    }
    return report


def _check_complete(report: Report, submitted: dict[str, str], jobs: dict[str, dict]) -> int:
    lost = 0
    for job_id, operation in sorted(submitted.items()):
        job = jobs.get(job_id)
        if job is None:
            lost += 1
            report.add("complete", job_id, f"the {operation} job the harness submitted is gone")
        elif job["status"] != COMPLETE:
            lost += 1
            report.add(
                "complete",
                job_id,
                f"{operation} ended {job['status']} at epoch {job['fencing_epoch']}: "
                f"{job.get('error')!r}",
            )
    for job_id, job in sorted(jobs.items()):
        if job_id in submitted or job["status"] == COMPLETE:
            continue
        lost += 1  # a tick, or a job whose submission the harness never heard back from
        report.add(
            "complete", job_id, f"{job['operation']} {job['idempotency_key']} is {job['status']}"
        )
    return lost


def _completed(attempts: list[dict]) -> list[dict]:
    return [a for a in attempts if a["outcome"] == COMPLETE]


def _check_domain_rows(report: Report, jobs: dict[str, dict], rows: dict[str, list]) -> int:
    duplicates = 0
    for job_id, found in sorted(rows.items()):
        job = jobs.get(job_id)
        if job is None or job["operation"] != DOMAIN:
            what = "no job" if job is None else f"a {job['operation']} job"
            report.add("one-domain-row", job_id, f"{len(found)} ChaosRow(s) for {what}")
    for job_id, job in sorted(jobs.items()):
        if job["operation"] != DOMAIN:
            continue
        found = rows.get(job_id, [])
        if len(found) != 1:
            duplicates += max(0, len(found) - 1)
            written = [(r["epoch"], r["owner_id"]) for r in found]
            report.add("one-domain-row", job_id, f"{len(found)} ChaosRows, by {written}")
            continue
        row = found[0]
        holder = (job["fencing_epoch"], job["owner_id"])
        if job["status"] == COMPLETE and (row["epoch"], row["owner_id"]) != holder:
            report.add(
                "one-domain-row",
                job_id,
                f"the row names epoch {row['epoch']} owner {row['owner_id']}, the job was "
                f"completed at epoch {holder[0]} by {holder[1]}",
            )
    return duplicates


def _check_completions(
    report: Report, jobs: dict[str, dict], attempts: dict[str, list], audit: dict[str, list]
) -> int:
    duplicates = 0
    for job_id, job in sorted(jobs.items()):
        if job["status"] != COMPLETE:
            continue
        holder = (job["fencing_epoch"], job["owner_id"])
        done = _completed(attempts.get(job_id, []))
        if len(done) != 1:
            duplicates += max(0, len(done) - 1)
            report.add(
                "completed-by-holder",
                job_id,
                f"{len(done)} complete attempts: {[(a['epoch'], a['owner_id']) for a in done]}",
            )
        for a in done:
            if (a["epoch"], a["owner_id"]) != holder:
                report.add(
                    "completed-by-holder",
                    job_id,
                    f"complete attempt at epoch {a['epoch']} by {a['owner_id']}, the job "
                    f"holds epoch {holder[0]} owner {holder[1]}",
                )
        result = _parsed(job.get("result"))
        if not isinstance(result, dict) or (result.get("epoch"), result.get("owner")) != holder:
            report.add(
                "completed-by-holder",
                job_id,
                f"the result {job.get('result')!r} does not name the holder, epoch {holder[0]} "
                f"owner {holder[1]}",
            )
        changes = [a for a in audit.get(job_id, []) if a["new_status"] == COMPLETE]
        completions = [a for a in changes if a["old_status"] != COMPLETE]
        if len(completions) != 1:
            duplicates += max(0, len(completions) - 1)
            report.add(
                "completed-by-holder",
                job_id,
                f"the database saw {len(completions)} changes to complete (audit "
                f"{[a['seq'] for a in completions]})",
            )
        newest = max((a["new_epoch"] or 0 for a in audit.get(job_id, [])), default=0)
        for a in completions:
            kept = (a["old_epoch"], a["old_owner"]) == (a["new_epoch"], a["new_owner"])
            if a["old_status"] != RUNNING or not kept or (a["new_epoch"], a["new_owner"]) != holder:
                report.add(
                    "completed-by-holder",
                    job_id,
                    f"audit {a['seq']}: {a['old_status']} epoch {a['old_epoch']} owner "
                    f"{a['old_owner']} -> complete epoch {a['new_epoch']} owner {a['new_owner']}",
                )
            elif a["new_epoch"] != newest:
                report.add(
                    "completed-by-holder",
                    job_id,
                    f"audit {a['seq']}: completed at epoch {a['new_epoch']}, the job reached "
                    f"epoch {newest}",
                )
    return duplicates


def _parsed(text: str | None) -> Any:
    try:
        return json.loads(text) if text is not None else None
    except ValueError:
        return None


def _claims(audit_rows: list[dict]) -> dict[int, str | None]:
    """Return, per epoch the database saw a job claimed at, the owner that claimed it."""
    claims: dict[int, str | None] = {}
    for a in audit_rows:
        if (a["new_epoch"] or 0) > (a["old_epoch"] or 0):
            claims[a["new_epoch"]] = a["new_owner"]
    return claims


def _check_attempts(
    report: Report, jobs: dict[str, dict], attempts: dict[str, list], audit: dict[str, list]
) -> None:
    for job_id, job in sorted(jobs.items()):
        claims = _claims(audit.get(job_id, []))
        expected = set(range(1, job["fencing_epoch"] + 1))
        if set(claims) != expected:
            report.add(
                "attempts-recorded",
                job_id,
                f"the audit saw claims at epochs {sorted(claims)}, the job is at epoch "
                f"{job['fencing_epoch']}",
            )
        per_epoch = Counter(a["epoch"] for a in attempts.get(job_id, []))
        ended = set(expected)
        if job["status"] == RUNNING:  # the newest attempt may still be running
            ended.discard(job["fencing_epoch"])
        missing = sorted(e for e in ended if per_epoch[e] == 0)
        twice = sorted(e for e, n in per_epoch.items() if n > 1)
        unknown = sorted(e for e in per_epoch if e not in expected)
        if missing or twice or unknown:
            report.add(
                "attempts-recorded",
                job_id,
                f"attempt rows per epoch {dict(sorted(per_epoch.items()))}: missing "
                f"{missing}, twice {twice}, never claimed {unknown}",
            )
        for a in attempts.get(job_id, []):
            owner = claims.get(a["epoch"], a["owner_id"])
            if owner != a["owner_id"]:
                report.add(
                    "attempts-recorded",
                    job_id,
                    f"the {a['outcome']} attempt at epoch {a['epoch']} names owner "
                    f"{a['owner_id']}, the database saw {owner} claim it",
                )


def _check_ticks(report: Report, run: RunData, jobs: dict[str, dict]) -> tuple[int, int, int]:
    """Return (duplicate ticks, missing ticks, ticks) of the run's schedule."""
    if run.schedule_name is None:
        return 0, 0, 0
    prefix = f"schedule:{run.schedule_name}:"
    keys = [j["idempotency_key"] for j in jobs.values() if j["operation"] == TICK]
    counted = Counter(keys)
    duplicates = sum(n - 1 for n in counted.values())
    for key, n in sorted(counted.items()):
        if n > 1:
            report.add("ticks-once", key, f"{n} jobs for tick {key}")
    times = []
    for key in counted:
        if not key.startswith(prefix):
            report.add("ticks-once", key, f"a tick job whose key is not {prefix}<time>")
            continue
        times.append(datetime.strptime(key[len(prefix) :], TICK_FORMAT).replace(tzinfo=UTC))
    times.sort()
    step = timedelta(seconds=run.schedule_every)
    missing = 0
    for before, after in zip(times, times[1:], strict=False):
        gap = after - before
        if gap != step:
            missed = int(gap / step) - 1 if gap > step else 0
            missing += max(missed, 0)
            report.add("ticks-once", after.strftime(TICK_FORMAT), f"{gap} after the tick before")
    return duplicates, missing, len(counted)


def _check_reports(report: Report, run: RunData, jobs: dict[str, dict]) -> None:
    for said in run.reports:
        job = jobs.get(uid(said["job_id"]))
        if job is None:
            continue
        completed_here = job["status"] == COMPLETE and job["fencing_epoch"] == said["epoch"]
        if said["outcome"] == COMPLETE and not completed_here:
            report.add(
                "reports-true",
                said["job_id"],
                f"reported complete at epoch {said['epoch']}; the job is {job['status']} at "
                f"epoch {job['fencing_epoch']}",
            )
        elif said["outcome"] == "lease-lost" and completed_here:
            report.add(
                "reports-true",
                said["job_id"],
                f"reported lease-lost at epoch {said['epoch']}, the epoch that completed it",
            )


def _check_audit_epochs(report: Report, audit: dict[str, list]) -> None:
    for job_id, rows in sorted(audit.items()):
        newest = 0
        for a in rows:
            new = a["new_epoch"] or 0
            kept = a["old_status"] is not None and (a["old_epoch"], a["old_owner"]) == (
                a["new_epoch"],
                a["new_owner"],
            )
            changed = (a["old_status"], a["old_result"]) != (a["new_status"], a["new_result"])
            if kept and changed and newest > new:
                report.add(
                    "no-stale-write",
                    job_id,
                    f"audit {a['seq']}: epoch {new} owner {a['new_owner']} changed status "
                    f"{a['old_status']}->{a['new_status']} after epoch {newest} existed",
                )
            elif new < newest:
                report.add(
                    "no-stale-write",
                    job_id,
                    f"audit {a['seq']}: the epoch went back to {new} after {newest}",
                )
            newest = max(newest, new)


def _check_history(report: Report, run: RunData, audit: dict[str, list]) -> tuple[int, int]:
    """Check every accepted write against the audit; return (accepted, refused) counts."""
    superseded: dict[tuple[str, int], tuple[float, int]] = {}  # (job, epoch) -> first newer
    claims: dict[str, dict[int, str | None]] = {}
    for job_id, rows in audit.items():
        claims[job_id] = _claims(rows)
        for a in rows:
            new = a["new_epoch"] or 0
            for epoch in range((a["old_epoch"] or 0), new):
                superseded.setdefault((job_id, epoch), (a["db_at"], a["seq"]))
    accepted = refused = 0
    for record in run.history:
        if not record["accepted"]:
            refused += 1
            continue
        accepted += 1
        job_id, epoch = uid(record["job_id"]), record["epoch"]
        owner = claims.get(job_id, {}).get(epoch)
        if owner != record["owner_id"]:
            report.add(
                "no-stale-write",
                job_id,
                f"{record['kind']} accepted from owner {record['owner_id']} at epoch {epoch}, "
                f"which the database saw claimed by {owner}",
            )
            continue
        newer = superseded.get((job_id, epoch))
        at = seconds(record["at"])
        if newer is not None and at >= newer[0] + run.clock_slack:
            report.add(
                "no-stale-write",
                job_id,
                f"{record['kind']} accepted from owner {record['owner_id']} at epoch {epoch} "
                f"at {at:.6f}, {at - newer[0]:.6f} s after the database recorded a newer "
                f"epoch (audit {newer[1]}, at {newer[0]:.6f})",
            )
    return accepted, refused


# -- reading a run ------------------------------------------------------------------------------


def read_history(folder: Path) -> list[dict[str, Any]]:
    """Return the history records of every ``history-*.jsonl`` file under ``folder``.

    A process killed in the middle of a line leaves it cut: such a last line is skipped.
    """
    records = []
    for path in sorted(folder.glob("history-*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


REPORT = re.compile(r"job ([0-9a-f-]{36}) \S+ attempt=\d+ epoch=(\d+) outcome=([a-z-]+)")


def read_reports(folder: Path) -> list[dict[str, Any]]:
    """Return the attempts the workers' logs (``worker*.log``) report as ended."""
    found = []
    for path in sorted(folder.glob("worker*.log")):
        for match in REPORT.finditer(path.read_text(errors="replace")):
            job_id, epoch, outcome = match.groups()
            found.append({"job_id": job_id, "epoch": int(epoch), "outcome": outcome})
    return found


def load_run(
    using: str,
    audit_table: str,
    folder: Path,
    submitted: dict[str, str],
    *,
    schedule_name: str | None,
    schedule_every: int,
    clock_slack: float,
) -> RunData:
    """Return the run's data: the final tables of ``using``, its audit, the history files."""
    from django.db import connections

    from django_durable_jobs.models import Job, JobAttempt
    from tests.testapp.models import ChaosRow

    jobs = list(
        Job.objects.using(using)
        .filter(operation__in=OPERATIONS)
        .values(
            "id",
            "operation",
            "status",
            "fencing_epoch",
            "owner_id",
            "result",
            "error",
            "idempotency_key",
            "attempts",
        )
    )
    ids = [j["id"] for j in jobs]
    attempts = []
    for start in range(0, len(ids), 500):
        attempts += list(
            JobAttempt.objects.using(using)
            .filter(job_id__in=ids[start : start + 500])
            .values("job_id", "epoch", "owner_id", "outcome")
        )
    chaos_rows = list(ChaosRow.objects.using(using).values("job_id", "epoch", "owner_id"))
    columns = (
        "seq, job_id, old_epoch, new_epoch, old_owner, new_owner, old_status, new_status, "
        "old_result, new_result, db_at"
    )
    with connections[using].cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM {audit_table}")  # noqa: S608 - our own table
        names = [c.strip() for c in columns.split(",")]
        audit = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    for a in audit:
        a["db_at"] = float(a["db_at"])
        for side in ("old_result", "new_result"):
            a[side] = None if a[side] is None else bool(a[side])
    return RunData(
        submitted=submitted,
        jobs=[{**j, "id": str(j["id"])} for j in jobs],
        attempts=[{**a, "job_id": str(a["job_id"])} for a in attempts],
        chaos_rows=[{**r, "job_id": str(r["job_id"])} for r in chaos_rows],
        audit=audit,
        history=read_history(folder),
        schedule_name=schedule_name,
        schedule_every=schedule_every,
        clock_slack=clock_slack,
        reports=read_reports(folder),
    )


def summary_lines(report: Report, faults: dict[str, int]) -> Iterable[str]:
    """Return the summary the harness prints: faults, counts, then the violations."""
    counts = report.counts
    yield (
        f"jobs {counts['jobs']} (+{counts['ticks']} ticks), kills {faults.get('kills', 0)}, "
        f"pauses {faults.get('pauses', 0)}, partitions {faults.get('partitions', 0)}, "
        f"restarts {faults.get('restarts', 0)}, reclaims {counts['reclaims']}, stale writes "
        f"refused {counts['stale_writes_refused']}, duplicates {counts['duplicates']}, "
        f"lost {counts['lost']}"
    )
    yield (
        f"writes accepted {counts['writes_accepted']}, interrupted attempts "
        f"{counts['interrupted_attempts']}, released attempts {counts['released_attempts']}, "
        f"completions whose commit no worker heard back {counts['completions_unlogged']}, "
        f"reports checked {counts['reports']}, audit rows {counts['audit_rows']}"
    )
    if report.ok:
        yield "checker: every property holds"
    for prop, n in sorted(report.violation_counts.items()):
        yield f"VIOLATION {prop}: {n}"
    for v in report.violations:
        yield f"  {v.property} {v.job_id}: {v.evidence}"
