"""The admin reads and writes the job tables through ``DURABLE_JOBS['DATABASE']``, never "default".

The test settings define one database, so each test adds a second alias, ``durable_jobs_other``,
for its own duration: a second connection to the same test database. With ``DATABASE`` set to it,
every query the admin makes on a job, attempt or worker row must go through that connection,
while the session and user queries stay on ``default``. Covered: the job list with each filter
and a search, the job page with its attempts, the attempt list (with its operation filter) and
page, the worker list, and both actions, whose writes are checked too.
"""

from __future__ import annotations

import re

import pytest
from django.db import connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_durable_jobs.models import Job, JobAttempt, WorkerProcess
from django_durable_jobs.store import DurableJobStore
from tests.support import db_state, second_alias, submission

OTHER = "durable_jobs_other"

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", OTHER]),
    pytest.mark.urls("tests.admin.urls"),
]
CHANGELIST = "/admin/durable_jobs/job/"
JOB_TABLES = re.compile(r"durable_jobs_(job|jobattempt|workerprocess|capacitygate)\b")


@pytest.fixture(scope="module", autouse=True)
def _second_alias(django_db_setup):
    """Add the alias ``OTHER``: the test database again, through a connection of its own.

    Module-scoped, so it exists before each test's database fixture checks its ``databases``.
    """
    with second_alias(OTHER):
        yield


@pytest.fixture
def other_alias():
    """Make ``OTHER`` the alias of the job tables."""
    with override_settings(DURABLE_JOBS={"DATABASE": OTHER}):
        yield connections[OTHER]


@pytest.fixture
def made(near_now):
    """A failed job with an attempt, a running one, a pending one, and a worker row."""
    store = DurableJobStore(actor="admin-alias", lease_seconds=3600, clock=near_now)
    failed = store.defer("demo.op", submission({"j": "failed"}, key="failed"))
    store.fail(store.claim(failed.pk), "boom")
    running = store.defer("demo.op", submission({"j": "running"}, key="running"))
    store.claim(running.pk)
    pending = store.defer("demo.op", submission({"j": "pending"}, key="pending"))
    store.register_worker(concurrency=1)
    return {"failed": failed.pk, "running": running.pk, "pending": pending.pk}


def _on_each(root, url: str, params: dict | None = None, post: bool = False):
    """Request ``url``; return (response, job-table queries on default, on the other alias)."""
    with (
        CaptureQueriesContext(connections["default"]) as on_default,
        CaptureQueriesContext(connections[OTHER]) as on_other,
    ):
        if post:
            response = root.post(url, params, follow=True)
        else:
            response = root.get(url, params or {})
    assert response.status_code == 200, (url, response.status_code)
    default_sql = [q["sql"] for q in on_default.captured_queries if JOB_TABLES.search(q["sql"])]
    other_sql = [q["sql"] for q in on_other.captured_queries if JOB_TABLES.search(q["sql"])]
    return response, default_sql, other_sql


def _only_other(root, url: str, params: dict | None = None, post: bool = False):
    response, on_default, on_other = _on_each(root, url, params, post)
    assert on_default == [], (url, params, on_default)
    assert on_other, (url, params)
    return response


def test_job_list_filters_search_and_page_read_the_configured_alias(root, made, other_alias):
    for params in (
        {},
        {"status__exact": "failed"},
        {"ownership": "current"},
        {"operation__exact": "demo.op"},
        {"scope__exact": "default"},
        {"queue__exact": "default"},
        {"q": "running"},
        {"q": str(made["pending"])},
    ):
        response = _only_other(root, CHANGELIST, params)
        assert response.context["cl"].result_count >= 1, params
    page = _only_other(root, f"{CHANGELIST}{made['failed']}/change/")
    assert "boom" in page.content.decode()  # the attempt inline


def test_attempt_and_worker_pages_read_the_configured_alias(root, made, other_alias):
    response = _only_other(root, "/admin/durable_jobs/jobattempt/", {"job__operation": "demo.op"})
    assert response.context["cl"].result_count == 1
    attempt = JobAttempt.objects.get()
    _only_other(root, f"/admin/durable_jobs/jobattempt/{attempt.pk}/change/")
    _only_other(root, "/admin/durable_jobs/workerprocess/")
    worker = WorkerProcess.objects.get()
    _only_other(root, f"/admin/durable_jobs/workerprocess/{worker.pk}/change/")


def test_actions_read_and_write_the_configured_alias(root, made, other_alias):
    before = timezone.now()
    selected = [str(made["running"]), str(made["pending"])]
    _only_other(
        root,
        CHANGELIST,
        {"action": "request_cancellation", "index": "0", "_selected_action": selected},
        post=True,
    )
    assert Job.objects.get(pk=made["running"]).cancellation_requested_at >= before
    assert Job.objects.get(pk=made["pending"]).status == "cancelled"
    _only_other(
        root,
        CHANGELIST,
        {"action": "request_retry", "index": "0", "_selected_action": [str(made["failed"])]},
        post=True,
    )
    assert Job.objects.get(pk=made["failed"]).retry_requested_at >= before


def test_an_alias_the_settings_do_not_define_fails_loudly_and_writes_nothing(root, made):
    """A mistyped ``DATABASE`` is an error page, never a silent read of "default"."""
    before = db_state()
    root.raise_request_exception = False
    with override_settings(DURABLE_JOBS={"DATABASE": "no_such_alias"}):
        response = root.get(CHANGELIST)
    assert response.status_code == 500
    assert db_state() == before
