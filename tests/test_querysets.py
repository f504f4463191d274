"""The database's ownership assessment (``with_ownership``) agrees with the Python one (§2)."""

from __future__ import annotations

import itertools
import uuid
from datetime import timedelta

import pytest

from django_durable_jobs.models import Job
from django_durable_jobs.rules.vocabulary import assess_ownership, proposal_sha256
from tests.support import T0

pytestmark = pytest.mark.django_db(transaction=True)

NOW = T0 + timedelta(hours=1)
GOOD = '{"n": 1}'
PROPOSALS = {
    "good": (GOOD, proposal_sha256(GOOD)),
    "wrong-hash": (GOOD, "0" * 64),
    "not-json": ("{oops", proposal_sha256("{oops")),
    "nan": ('{"n": NaN}', proposal_sha256('{"n": NaN}')),
    "missing": (None, ""),
    "multibyte": ('{"name": "Zoë €"}', proposal_sha256('{"name": "Zoë €"}')),
}
STATUSES = ["pending", "running", "complete", "failed", "cancelled", "orphaned"]
OWNERS = [None, "", "owner-a"]
LEASES = [None, NOW - timedelta(seconds=1), NOW, NOW + timedelta(seconds=30)]
COUNTERS = [(0, 0), (1, 1)]
# True: the app checked the proposal as it wrote the row; None: a row written any other way.
CHECKED = [True, None]


def every_kind_of_row() -> list[Job]:
    rows = []
    combos = itertools.product(STATUSES, OWNERS, LEASES, COUNTERS, PROPOSALS.items(), CHECKED)
    for n, combo in enumerate(combos):
        status, owner, lease, (epoch, attempts), (_, (text, digest)), checked = combo
        rows.append(
            Job(
                id=uuid.UUID(int=n + 1),
                operation="sql.op",
                status=status,
                scope="default",
                idempotency_key=f"k{n}",
                proposal=text,
                proposal_hash=digest,
                proposal_checked=checked,
                created_at=T0,
                run_after=T0,
                owner_id=owner,
                lease_expires_at=lease,
                fencing_epoch=epoch,
                attempts=attempts,
            )
        )
    return rows


def test_the_sql_assessment_agrees_with_python_for_every_kind_of_row():
    Job.objects.bulk_create(every_kind_of_row(), batch_size=500)
    disagreements = []
    for job in Job.objects.with_ownership(NOW):
        expected = assess_ownership(job, NOW)
        if job.ownership_sql != expected:
            disagreements.append((job.status, job.owner_id, job.lease_expires_at, job.proposal))
    assert Job.objects.count() == 6 * 3 * 4 * 2 * len(PROPOSALS) * len(CHECKED)
    assert disagreements == []


def test_filtering_by_each_state_partitions_the_table():
    Job.objects.bulk_create(every_kind_of_row(), batch_size=500)
    states = ("terminal", "unclaimed", "legacy-unknown", "expired", "current")
    counts = {s: Job.objects.with_ownership_state(s, NOW).count() for s in states}
    assert all(counts.values()), counts
    assert sum(counts.values()) == Job.objects.count()
