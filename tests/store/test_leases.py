"""The leases room on every database: ``renew_leases`` renews many leases in one statement.

A lease that was taken over, or belongs to another client, is reported lost (None) and is not
revived.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.models import Job
from tests.store.batch_support import backlog, statements
from tests.support import LEASE

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_DELTA = timedelta(seconds=LEASE)


# -- renew_leases ------------------------------------------------------------------------------------


def test_one_statement_renews_every_lease_and_reports_lost_ones(store, rival, clock):
    backlog(store, 5)
    claimed = store.claim_batch(limit=5, resume_expired=[])
    gone = claimed[0]
    Job.objects.filter(pk=gone.job_id).update(lease_expires_at=clock())  # expired just now
    store.request_cancel(claimed[1].job_id)
    clock.advance(3)
    with CaptureQueriesContext(connection) as queries:
        rows = store.renew_leases([c.lease for c in claimed])
    assert len(statements(queries.captured_queries)) == 2  # one UPDATE, one read back
    assert rows[0] is None  # an expired lease cannot revive itself
    assert rows[1].cancellation_requested_at is not None
    for claim, row in zip(claimed[1:], rows[1:], strict=True):
        assert row.lease_expires_at == clock() + LEASE_DELTA
        assert Job.objects.get(pk=claim.job_id).lease_expires_at == clock() + LEASE_DELTA
    assert rival.renew_leases([claimed[2].lease]) == [None]
    assert store.renew_leases([]) == []
