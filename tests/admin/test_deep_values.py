"""The job page shows any stored JSON in bounded size and time, and links to the exact text.

Proves: the change page of the biggest input the app accepts (1 MiB, 64 levels deep, wide) stays
under 200 KB of HTML and renders quickly, each payload display ending with a "truncated" marker
and a link to the raw view; the raw view returns the exact stored text (``text/plain;
charset=utf-8``) to whoever may see the page and to nobody else; rows written outside the app
with JSON 10,000 levels deep are listed (under every ownership filter) and shown without a crash,
as stored text with a note and a diagnostic.
"""

from __future__ import annotations

import time

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone
from django.utils.html import escape

from django_durable_jobs.models import Job
from django_durable_jobs.rules.jsontext import DISPLAY_CAP_BYTES
from django_durable_jobs.store import DurableJobStore, Submission
from tests.deep_json import deep_outside_rows, maximal_text, nested_text

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.admin.urls")]

CHANGELIST = "/admin/durable_jobs/job/"
PAGE_BYTES_MAX = 200_000
SECONDS_MAX = 10.0  # generous: the page takes well under a second


def detail_url(job_id) -> str:
    return f"{CHANGELIST}{job_id}/change/"


def raw_url(job_id, field: str) -> str:
    return f"{CHANGELIST}{job_id}/raw/{field}/"


@pytest.fixture
def maximal(near_now) -> Job:
    """A pending job whose input is the biggest the app accepts."""
    store = DurableJobStore(actor="a", lease_seconds=600, clock=near_now)
    job = store.defer("demo.op", Submission(None, "maximal", maximal_text()))
    return Job.objects.get(pk=job.pk)


def timed_get(client, url: str):
    started = time.monotonic()
    response = client.get(url)
    return response, time.monotonic() - started


def test_the_page_of_a_maximal_input_is_small_and_fast(root, maximal):
    response, seconds = timed_get(root, detail_url(maximal.pk))
    assert response.status_code == 200
    html = response.content.decode()
    assert len(response.content) < PAGE_BYTES_MAX, len(response.content)
    assert seconds < SECONDS_MAX
    assert html.count('class="durable-jobs-truncated"') == 2  # pretty and stored text
    assert "… truncated: showing " in html and " of 1,048,576 bytes" in html
    assert html.count(f'<a href="{raw_url(maximal.pk, "proposal")}">') == 2
    assert '<pre class="durable-jobs-json">[\n  {\n    &quot;k&quot;: {' in html


def test_every_payload_display_is_capped(root, near_now):
    store = DurableJobStore(actor="a", lease_seconds=600, clock=near_now)
    job = store.defer("demo.op", Submission(None, "all-three", maximal_text()))
    lease = store.claim(job.pk)
    store.checkpoint(lease, maximal_text())
    store.complete(lease, [nested_text(10)] * 40_000)  # about 1 MiB of result text
    response, seconds = timed_get(root, detail_url(job.pk))
    assert response.status_code == 200 and seconds < SECONDS_MAX
    assert len(response.content) < 7 * DISPLAY_CAP_BYTES + 50_000  # six displays and the page
    for field in ("proposal", "checkpoint", "result"):
        assert raw_url(job.pk, field) in response.content.decode()


def test_a_small_value_is_shown_whole_without_a_marker_or_link(root, near_now):
    store = DurableJobStore(actor="a", lease_seconds=600, clock=near_now)
    job = store.defer("demo.op", Submission(None, "small", '{"a": [1, 2]}'))
    html = root.get(detail_url(job.pk)).content.decode()
    assert "durable-jobs-truncated" not in html and "/raw/" not in html
    assert f'<pre class="durable-jobs-raw">{escape(chr(123) + chr(34))}a' in html


# -- the raw view ---------------------------------------------------------------------------------


def test_the_raw_view_returns_the_exact_stored_text(root, near_now, maximal):
    store = DurableJobStore(actor="a", lease_seconds=600, clock=near_now)
    lease = store.claim(maximal.pk)
    store.checkpoint(lease, '{"emoji": "🦄", "sep": "\u2028"}')
    # An escaped lone surrogate is refused today; a row stored before that rule still shows.
    checkpoint = '{"emoji": "🦄", "raw": "\\ud800", "sep": "\u2028"}'
    Job.objects.filter(pk=maximal.pk).update(checkpoint=checkpoint)
    response, seconds = timed_get(root, raw_url(maximal.pk, "proposal"))
    assert response.status_code == 200 and seconds < SECONDS_MAX
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response.content == maximal.proposal.encode("utf-8")
    assert root.get(raw_url(maximal.pk, "checkpoint")).content == checkpoint.encode("utf-8")
    assert root.get(raw_url(maximal.pk, "result")).status_code == 404  # none stored
    assert root.get(raw_url(maximal.pk, "error")).status_code == 404  # not a payload
    assert root.get(raw_url(maximal.pk, "owner_id")).status_code == 404
    assert root.get(raw_url("00000000-0000-0000-0000-000000000000", "proposal")).status_code == 404


def test_the_raw_view_needs_the_permission_to_see_the_job(client, django_user_model, maximal):
    url = raw_url(maximal.pk, "proposal")
    anonymous = client.get(url)
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
    staff = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(staff)
    assert client.get(url).status_code == 403
    assert client.get(detail_url(maximal.pk)).status_code == 403  # the same as the page
    staff.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(django_user_model.objects.get(pk=staff.pk))
    assert client.get(detail_url(maximal.pk)).status_code == 200
    assert client.get(url).content == maximal.proposal.encode("utf-8")


# -- rows written outside the app -----------------------------------------------------------------


@pytest.fixture
def deep_rows() -> dict[str, Job]:
    """Rows 10,000 levels deep in every payload, written as an import would."""
    now = timezone.now()
    deep = nested_text(10_000)
    rows = deep_outside_rows(deep, now=now, operation="demo.op")
    Job.objects.bulk_create(rows.values())
    return rows


def test_deep_rows_written_outside_the_app_are_listed_under_every_filter(root, deep_rows):
    response = root.get(CHANGELIST)
    assert response.status_code == 200
    assert {job.pk for job in response.context["cl"].queryset} >= {r.pk for r in deep_rows.values()}
    for state in ("terminal", "unclaimed", "legacy-unknown", "expired", "current"):
        assert root.get(CHANGELIST, {"ownership": state}).status_code == 200, state
    listed = {
        job.pk
        for job in root.get(CHANGELIST, {"ownership": "legacy-unknown"}).context["cl"].queryset
    }
    assert deep_rows["unchecked"].pk in listed


def test_deep_rows_written_outside_the_app_are_shown_as_stored_text(root, deep_rows):
    for name, row in deep_rows.items():
        response, seconds = timed_get(root, detail_url(row.pk))
        assert response.status_code == 200, name
        assert seconds < SECONDS_MAX
        html = response.content.decode()
        assert "nested 10,000 levels deep, deeper than the 64 this app reads" in html, name
        assert '<pre class="durable-jobs-raw">[[[[' in html
        assert len(response.content) < PAGE_BYTES_MAX
        assert "Row defect: " in html, name
    done = root.get(raw_url(deep_rows["done"].pk, "result"))
    assert done.content == nested_text(10_000).encode("ascii")
