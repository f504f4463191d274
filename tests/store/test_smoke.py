import pytest

from django_durable_jobs.models import Job, JobAttempt
from django_durable_jobs.rules.errors import LeaseLost
from django_durable_jobs.store import DurableJobStore
from tests.support import FakeClock, submission

pytestmark = pytest.mark.django_db(transaction=True)


def test_round_trip():
    clock = FakeClock()
    a = DurableJobStore(actor="a", lease_seconds=10, clock=clock)
    b = DurableJobStore(actor="b", lease_seconds=10, clock=clock)
    job = a.defer("demo.op", submission({"x": 1}, key="k1"))
    assert job.ownership == "unclaimed"
    assert a.defer("demo.op", submission({"x": 1}, key="k1")).pk == job.pk
    lease = a.claim(job.pk)
    a.heartbeat(lease)
    a.checkpoint(lease, '{"step": 1}')
    a.progress(lease, 50)
    clock.advance(11)
    assert a.get(job.pk).ownership == "expired"
    lease_b = b.claim(job.pk)
    for call in (lambda: a.complete(lease, 1), lambda: a.heartbeat(lease)):
        with pytest.raises(LeaseLost):
            call()
    b.complete(lease_b, {"ok": True})
    row = Job.objects.get(pk=job.pk)
    assert row.status == "complete" and row.checkpoint == '{"step": 1}'
    assert list(JobAttempt.objects.values_list("outcome", flat=True).order_by("epoch")) == [
        "interrupted",
        "complete",
    ]
