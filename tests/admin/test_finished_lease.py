"""A finished job's last lease is evidence, not a live lease: the admin never says "in 59 min".

A job that completed, failed or was cancelled a moment ago keeps the expiry of its last lease,
which is still in the future. The list's *lease expires* column shows ``-`` for it, and the job
page says no lease is held (keeping the stored time); a running job still shows its live lease.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from django_durable_jobs.admin.format import moment
from django_durable_jobs.models import Job
from django_durable_jobs.store import DurableJobStore
from tests.support import FakeClock, submission

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.admin.urls")]

CHANGELIST = "/admin/durable_jobs/job/"


@pytest.fixture
def jobs():
    """A running job and a complete, a failed and a cancelled one, each with an hour of lease."""
    store = DurableJobStore(actor="w", lease_seconds=3600, clock=FakeClock(now=timezone.now()))
    made = {}
    for name in ("running", "complete", "failed", "cancelled"):
        made[name] = store.defer("demo.op", submission({"j": name}, key=name)).pk
    store.claim(made["running"])
    store.complete(store.claim(made["complete"]), {"ok": True})
    store.fail(store.claim(made["failed"]), "boom")
    lease = store.claim(made["cancelled"])
    store.request_cancel(made["cancelled"])
    store.cancel(lease)
    for name in ("complete", "failed", "cancelled"):
        job = Job.objects.get(pk=made[name])
        assert job.status == name and job.lease_expires_at > timezone.now()
    return made


def _row(html: str, pk) -> str:
    """Return the one list row that links to job ``pk``."""
    (row,) = [tr for tr in html.split("<tr") if f"/{pk}/change/" in tr]
    return row


def test_the_list_shows_no_lease_expiry_for_finished_jobs(root, jobs):
    html = root.get(CHANGELIST).content.decode()
    assert "expires in 59 min" in _row(html, jobs["running"])
    for name in ("complete", "failed", "cancelled"):
        row = _row(html, jobs[name])
        assert '<td class="field-lease">-</td>' in row, name
        assert "in 59 min" not in row and "in 60 min" not in row, name


def test_the_job_page_says_a_finished_job_holds_no_lease(root, jobs):
    running = root.get(f"{CHANGELIST}{jobs['running']}/change/").content.decode()
    assert "in 59 min" in running
    assert "no lease is held" not in running
    for name in ("complete", "failed", "cancelled"):
        html = root.get(f"{CHANGELIST}{jobs[name]}/change/").content.decode()
        expires = moment(Job.objects.get(pk=jobs[name]).lease_expires_at)
        assert "in 59 min" not in html and "in 60 min" not in html, name
        assert f"no lease is held: the job is {name}; the last one ran to {expires}" in html
