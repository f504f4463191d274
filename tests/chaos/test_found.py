"""What the chaos run found, each pinned by a test of its own on every database.

``ctx.complete_atomically`` whose COMMIT landed while the database went away
    Found by the 10-minute MariaDB run (seed 6262): the server shut down just as a
    ``chaos.domain`` job's ``complete_atomically`` committed, so the worker never heard back. Its
    retry waited for the server; meanwhile the heartbeat renewed the worker's leases, found that
    row no longer running (it was complete, by this very attempt) and cancelled the execution as
    lost. The retry then stopped on the cancelled execution (``ExecutionStopped``) before it could
    see that the completion it was retrying was already its own, and the worker logged the job as
    ``lease-lost``. The database was right (complete, one domain row, one complete attempt; the
    checker counted it among the completions no worker heard back); the worker's report, its log
    line and its lease-lost metrics were wrong.

The worker's batched completion whose COMMIT landed while the database went away
    The same loss on the worker's own path: a completer flush commits, its answer is lost, the
    completer writes the outcome again and ``record_outcomes`` refused it (``LeaseLost``: the
    row was no longer running), so the attempt that completed the job was reported
    ``lease-lost``. Seen in the chaos runs' counts of completions no worker heard back. The
    completer now reads the row of a completion the store refused: complete at the outcome's
    epoch and owner with its result, it is reported complete. The store's contract is unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from django.db import OperationalError

from django_durable_jobs.models import Job, JobAttempt
from django_durable_jobs.rules.values import Outcome
from django_durable_jobs.store import DurableJobStore, Submission
from django_durable_jobs.worker.attempt import run
from django_durable_jobs.worker.completer import Completer, Finished
from django_durable_jobs.worker.context import JobContext
from django_durable_jobs.worker.held import Held
from django_durable_jobs.worker.reports import AttemptEnd
from tests.support import LEASE
from tests.testapp.models import ChaosRow

pytestmark = [pytest.mark.proof, pytest.mark.django_db(transaction=True)]


class AnswerLost(DurableJobStore):
    """A store whose first ``complete_atomically`` commits, then loses its answer.

    ``meanwhile()`` runs between the commit and the error: what the worker's other threads did
    while the executor's retry waited for the database.
    """

    meanwhile: Callable[[], None] = staticmethod(lambda: None)
    answered = False

    def complete_atomically(self, execution, mutation):
        receipt = super().complete_atomically(execution, mutation)
        if not self.answered:
            self.answered = True
            self.meanwhile()
            raise OperationalError("server closed the connection unexpectedly")
        return receipt


def test_a_completion_whose_answer_was_lost_is_still_this_attempts_after_its_lease_was_lost(clock):
    store = AnswerLost(actor="worker-a", lease_seconds=LEASE, clock=clock)
    job = store.defer("chaos.domain", Submission.of(None, "answer-lost", {"steps": 0}))
    lease = store.claim(job.pk)
    ctx = JobContext(store, lease, Job.objects.get(pk=job.pk), retry_until=lambda: True)

    def heartbeat():
        # The worker's heartbeat renews its leases: the row is complete, so the lease is gone,
        # and the worker tells the executor so (``Held.lose()``).
        assert store.renew_leases([lease]) == [None]
        ctx.cancel_event.set()
        ctx.lease_lost = True

    store.meanwhile = heartbeat

    def executor(ctx):
        def mutation(execution):
            row = ChaosRow.objects.create(job_id=ctx.job_id, epoch=1, owner_id=lease.owner_id)
            return json.dumps({"row": row.pk})

        return json.loads(ctx.complete_atomically(mutation))

    assert run(ctx, executor) is None  # it completed the job itself: nothing else to record
    assert ctx.completed is True
    stored = Job.objects.get(pk=job.pk)
    assert (stored.status, stored.fencing_epoch, stored.owner_id) == ("complete", 1, lease.owner_id)
    assert ChaosRow.objects.filter(job_id=job.pk).count() == 1
    outcomes = list(JobAttempt.objects.filter(job_id=job.pk).values_list("epoch", "outcome"))
    assert outcomes == [(1, "complete")]


def test_a_flush_whose_answer_was_lost_reports_the_completion_it_wrote(store):
    class FlushAnswerLost(type(store)):
        answered = False

        def record_outcomes(self, outcomes):
            recorded = super().record_outcomes(outcomes)
            if not self.answered:
                self.answered = True
                raise OperationalError("server closed the connection unexpectedly")
            return recorded

    store.__class__ = FlushAnswerLost
    for n in range(2):
        store.defer("chaos.plain", Submission.of(None, f"flush-{n}", {}))
    done, failed = store.claim_batch(limit=2, resume_expired=[])
    reports = {}
    completer = Completer(
        store,
        on_recorded=lambda held, report: reports.update({held.lease.job_id: report}),
        retry_until=lambda: True,
    )
    completer.flush(
        [
            Finished(Held(done), Outcome.completed(done.lease, '{"n": 0}'), 0.1),
            Finished(Held(failed), Outcome.failed(failed.lease, "gave up"), 0.1),
        ]
    )
    assert reports[done.lease.job_id].outcome == AttemptEnd.COMPLETE
    assert Job.objects.get(pk=done.lease.job_id).status == "complete"
    # Only finished work is looked up: a failure written again stays refused as before.
    assert reports[failed.lease.job_id].outcome == AttemptEnd.LEASE_LOST
    assert Job.objects.get(pk=failed.lease.job_id).status == "failed"
