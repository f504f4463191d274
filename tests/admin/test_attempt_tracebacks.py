"""The admin shows each failed attempt's exception class and its traceback, escaped in a <pre>."""

from __future__ import annotations

import pytest
from django.utils.html import escape

from django_durable_jobs.models import JobAttempt
from django_durable_jobs.store import DurableJobStore
from tests.support import submission

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.admin.urls")]


@pytest.fixture
def attempt(near_now) -> JobAttempt:
    store = DurableJobStore(actor="w", lease_seconds=600, clock=near_now)
    job = store.defer("demo.op", submission(key="tb"))
    try:
        raise ValueError("<script>alert(1)</script>")
    except ValueError as exc:
        store.fail(store.claim(job.pk), exc)
    return JobAttempt.objects.get(job_id=job.pk)


def _pre(text: str) -> str:
    return f'<pre class="durable-jobs-raw">{escape(text)}</pre>'


def test_the_job_page_lists_the_class_and_the_escaped_traceback(root, attempt):
    html = root.get(f"/admin/durable_jobs/job/{attempt.job_id}/change/").content.decode()
    assert "builtins.ValueError" in html
    failure = f'<pre class="durable-jobs-failure-traceback">{escape(attempt.traceback)}</pre>'
    assert failure in html  # the failure at the top of the page
    assert f'<pre class="durable-jobs-traceback">{escape(attempt.traceback)}</pre>' in html
    assert "<script>alert(1)</script>" not in html


def test_the_attempt_page_and_list_show_them_too(root, attempt):
    page = root.get(f"/admin/durable_jobs/jobattempt/{attempt.pk}/change/").content.decode()
    assert _pre(attempt.traceback) in page and "builtins.ValueError" in page
    assert "<script>alert(1)</script>" not in page
    listing = root.get("/admin/durable_jobs/jobattempt/").content.decode()
    assert '<td class="field-error_class">builtins.ValueError</td>' in listing
