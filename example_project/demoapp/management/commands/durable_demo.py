"""A narrated tour of leases and fencing: two workers, one stalls, the store keeps the truth."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

from django.core.management.base import BaseCommand
from django.utils import timezone

from demoapp.models import Report
from django_durable_jobs.errors import JobError
from django_durable_jobs.execution import Execution, Identity, bind_write_fence
from django_durable_jobs.models import JobAttempt
from django_durable_jobs.store import DurableJobStore, Submission

LEASE = 10.0


class DemoClock:
    """Real time plus whatever the narrator skips ahead, so nobody waits for a lease to expire."""

    def __init__(self) -> None:
        self.skipped = timedelta()

    def __call__(self):
        return timezone.now() + self.skipped

    def skip(self, seconds: float) -> None:
        self.skipped += timedelta(seconds=seconds)


class Command(BaseCommand):
    help = "Run a short narrated story: submit, claim, heartbeat, checkpoint, reclaim, fencing."

    def handle(self, *args, **options) -> None:
        clock = DemoClock()
        submitter = DurableJobStore(actor="web@demo", clock=clock)
        alice = DurableJobStore(actor="worker-alice", lease_seconds=LEASE, clock=clock)
        bob = DurableJobStore(actor="worker-bob", lease_seconds=LEASE, clock=clock)
        key = f"nightly-{uuid.uuid4().hex[:8]}"
        submission = Submission.of(None, key, {"report": "sales", "rows": 1000})

        self.step("1. The web app submits a job (pending, nobody owns it).")
        job = submitter.defer("reports.rebuild", submission)
        self.show(submitter, job.pk)
        again = submitter.defer("reports.rebuild", submission)
        self.say(f"   Submitting the same input again coalesces: same job {again.pk}.")
        try:
            submitter.defer("reports.rebuild", Submission.of(None, key, {"rows": 5}))
        except JobError as exc:
            self.refused("   Different input under the same key is refused", exc)

        self.step(f"2. Worker alice claims it: lease of {LEASE:g} s, fencing epoch 1.")
        lease_a = alice.claim(job.pk)
        alice.heartbeat(lease_a)
        alice.checkpoint(lease_a, json.dumps({"rows_done": 500}))
        alice.progress(lease_a, 50)
        self.say("   alice heartbeats, checkpoints rows_done=500 and reports 50 %.")
        self.show(submitter, job.pk)

        self.step("3. alice stalls (a GC pause, a SIGSTOP, a partition). Time passes: 11 s.")
        clock.skip(LEASE + 1)
        self.show(submitter, job.pk)

        self.step("4. Worker bob reclaims the expired lease: epoch 2, alice's attempt is recorded.")
        lease_b = bob.claim(job.pk)
        resumed = bob.get(job.pk)
        self.say(f"   bob resumes from the checkpoint {resumed.checkpoint}.")
        self.show(submitter, job.pk)

        self.step("5. alice wakes up and tries to finish. Every write she makes is fenced:")
        for name, call in (
            ("complete", lambda: alice.complete(lease_a, {"rows": 1000})),
            ("heartbeat", lambda: alice.heartbeat(lease_a)),
            ("checkpoint", lambda: alice.checkpoint(lease_a, '{"rows_done": 1000}')),
        ):
            try:
                call()
            except JobError as exc:
                self.refused(f"   alice.{name}()", exc)

        self.step("6. bob writes the report and completes the job in ONE transaction.")
        identity = Identity(job.scope, bob.actor, job.operation, job.idempotency_key)
        execution = bind_write_fence(Execution.start(identity), lease_b, job.proposal_hash)

        def write_report(execution: Execution) -> str:
            report = Report.objects.create(job_id=job.pk, rows=1000, built_at=timezone.now())
            return json.dumps({"report_id": report.pk, "rows": report.rows})

        receipt = bob.complete_atomically(execution, write_report)
        self.say(f"   receipt stored as the job's result: {receipt}")
        self.show(submitter, job.pk)

        self.step("7. The evidence: one history row per attempt, never deleted.")
        for attempt in JobAttempt.objects.filter(job_id=job.pk).order_by("epoch"):
            self.say(
                f"   epoch {attempt.epoch}  {attempt.claimed_by:<13} {attempt.outcome:<11} "
                f"{attempt.error or ''}"
            )
        self.say("   Nothing deletes a job or an attempt because it is old: they stay as evidence.")
        self.stdout.write(
            self.style.SUCCESS("\nDone: the stale worker never overwrote the result.")
        )

    def step(self, text: str) -> None:
        self.stdout.write(self.style.MIGRATE_HEADING(f"\n{text}"))

    def say(self, text: str) -> None:
        self.stdout.write(text)

    def refused(self, what: str, exc: JobError) -> None:
        self.stdout.write(f"{what} -> {self.style.ERROR(exc.code)}: {exc.message}")

    def show(self, store: DurableJobStore, job_id) -> None:
        job = store.get(job_id)
        owner = job.claimed_by or "-"
        self.stdout.write(
            f"   job {str(job.pk)[:8]}  status={job.status:<9} ownership={job.ownership:<10} "
            f"owner={owner:<13} epoch={job.fencing_epoch} attempts={job.attempts} "
            f"progress={job.progress:g}%"
        )
