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
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from django.db import OperationalError

from django_durable_jobs.models import Job, JobAttempt
from django_durable_jobs.store import DurableJobStore, Submission
from django_durable_jobs.worker.attempt import run
from django_durable_jobs.worker.context import JobContext
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
