"""A statement that changes or locks job rows by id reads them through the primary key alone.

Found in racing claims on MariaDB: two workers' completion flushes (``record_outcomes``, one
``UPDATE … WHERE id IN (…) AND owner_id = … AND status = 'running' …`` each) were read through
the lease index, ``(status, lease_expires_at)``, which the planner now and then prefers while
running rows churn. Each locked the running rows it passed, the other worker's among them, and
waited for the other's: ``1213 Deadlock found``, and one flush lost. The claim's own UPDATE of
the rows it picked, and a workflow's hand-off, had the same shape.

Every such statement the store issues through a worker's cycle (claim a batch, renew, complete
and fail in one flush, release) and through workflows (release children, count a parent
again, a retry that makes a child wait again, a cancellation) is captured and explained: the
only index it may read is the primary key, whatever the planner's estimates at the time. A
test that waits for the planner's bad choice would pass on most runs; the plan's possible
keys say it cannot happen.

PostgreSQL locks only the rows an UPDATE changes (it checks each row's new version before
locking it) and SQLite runs one writer at a time, so this is MariaDB's test.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_durable_jobs import Workflow
from django_durable_jobs.models import Job
from django_durable_jobs.rules.values import Outcome
from tests.settings import TEST_DB
from tests.support import submission

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        TEST_DB != "mariadb",
        reason="PostgreSQL and SQLite lock only the rows a statement changes",
    ),
]

OP = "rows.by_id"
ECHO, FAIL = "tests.wf.echo", "tests.wf.fail"
TABLE = Job._meta.db_table
BY_IDS = re.compile(r"`id` IN \(")


def _by_ids(sql: str) -> bool:
    """Return True for a statement that changes, or locks for update, job rows by id."""
    if not BY_IDS.search(sql):
        return False
    if sql.startswith(f"UPDATE `{TABLE}`"):
        return True
    return f"FROM `{TABLE}`" in sql and sql.endswith("FOR UPDATE")


def _keys_read(sql: str) -> set[str]:
    """Return the indexes MariaDB's planner may read the job table through for ``sql``."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}")
        columns = [column[0] for column in cursor.description]
        plan = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    return {
        key
        for step in plan
        if step["table"] in (TABLE, "V0")
        for key in (step["possible_keys"] or "").split(",")
    }


def _statements(action: Callable[[], object]) -> list[str]:
    """Run ``action``; return the statements by id it issued (at least one)."""
    with CaptureQueriesContext(connection) as captured:
        action()
    found = [query["sql"] for query in captured.captured_queries if _by_ids(query["sql"])]
    assert found, [query["sql"][:120] for query in captured.captured_queries]
    return found


def _assert_primary_key_only(name: str, action: Callable[[], object]) -> None:
    for sql in _statements(action):
        assert _keys_read(sql) == {"PRIMARY"}, (name, sql[:300], _keys_read(sql))


def test_a_workers_cycle_changes_its_rows_through_the_primary_key_only(store):
    for i in range(8):
        store.defer(OP, submission({"i": i}, key=f"by-id-{i}"))
    claimed: list = []
    _assert_primary_key_only(
        "claim_batch", lambda: claimed.extend(store.claim_batch(operations=[OP], limit=6))
    )
    leases = [c.lease for c in claimed]
    assert len(leases) == 6
    _assert_primary_key_only("renew_leases", lambda: store.renew_leases(leases))
    flush = [Outcome.completed(lease, '"done"') for lease in leases[:3]]
    flush.append(Outcome.failed(leases[3], "boom"))
    _assert_primary_key_only("record_outcomes", lambda: store.record_outcomes(flush))
    _assert_primary_key_only("release", lambda: store.release(leases[4:]))

    statuses = sorted(Job.objects.filter(operation=OP).values_list("status", flat=True))
    assert statuses == ["complete"] * 3 + ["failed"] + ["pending"] * 4


def _submit(store, wf: Workflow) -> dict[str, Job]:
    submitted = store.workflows.submit(wf.graph(), idempotency_key=wf.idempotency_key)
    return {job.node: job for job in submitted.jobs}


def test_a_workflows_hand_offs_change_its_rows_through_the_primary_key_only(store):
    wf = Workflow("rows.by_id.wf")
    top = wf.job(ECHO, {"tag": "top"}, name="top")
    failing = wf.job(FAIL, {}, name="failing")
    left = wf.job(ECHO, {"tag": "left"}, after=[top], name="left")
    right = wf.job(ECHO, {"tag": "right"}, after=[top], name="right")
    wf.job(ECHO, {}, after=[left, right, failing], name="merge", on_upstream_failure="run")
    jobs = _submit(store, wf)

    # The top job's completion releases both sides (two waiting rows by id).
    lease = store.claim(jobs["top"].pk)
    _assert_primary_key_only("release children", lambda: store.complete(lease, "top"))
    # A side's completion counts the merge down (a waiting row by id).
    lease = store.claim(jobs["left"].pk)
    _assert_primary_key_only("count down", lambda: store.complete(lease, "left"))
    # A failed parent's retry makes the merge wait for it again (a locking read by id).
    store.fail(store.claim(jobs["failing"].pk), "boom")
    _assert_primary_key_only("wait again", lambda: store.request_retry(jobs["failing"].pk))
    # Cancelling the workflow asks its running jobs to stop (running rows by id).
    store.claim(jobs["right"].pk)
    workflow_id = jobs["top"].workflow_id
    _assert_primary_key_only("cancel", lambda: store.workflows.cancel(workflow_id, by="ops"))

    after = {name: Job.objects.get(pk=job.pk) for name, job in jobs.items()}
    assert after["right"].cancellation_requested_at is not None
    assert after["merge"].status == "cancelled"
