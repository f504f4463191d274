"""The job list scans: badges, short ids, the first line of an error, a truthful sort arrow, and
scheduled jobs hidden or shown.

Proves: each status has its coloured badge; a job shows the first eight hex characters of its
id, the whole id on hover and in its link; a failed job shows the first line of its error, cut,
and other jobs none; the sort arrow sits on "created", the column the list is ordered by; the
scheduled-jobs filter hides completed schedule ticks by default and its choices select exactly
the jobs a schedule's key names, while a search or a status shows every job.
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from django_durable_jobs.admin.format import STATUS_COLOURS
from django_durable_jobs.models import Job
from django_durable_jobs.store import DurableJobStore
from tests.support import submission

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.admin.urls")]

JOBS = "/admin/durable_jobs/job/"


def row(html: str, pk) -> str:
    (found,) = [tr for tr in html.split("<tr") if f"/{pk}/change/" in tr]
    return found


def listed(response) -> set[str]:
    assert response.status_code == 200
    return {job.idempotency_key for job in response.context["cl"].queryset}


def test_each_status_has_its_coloured_badge(root, near_now):
    store = DurableJobStore(actor="w", lease_seconds=600, clock=near_now)
    pending = store.defer("demo.op", submission(key="p")).pk
    failed = store.defer("demo.op", submission(key="f")).pk
    store.fail(store.claim(failed), "boom")
    html = root.get(JOBS).content.decode()
    for pk, status in ((pending, "pending"), (failed, "failed")):
        colour = STATUS_COLOURS[status]
        assert re.search(
            rf'<span class="durable-jobs-badge" style="background:{colour};[^>]*>{status}<',
            row(html, pk),
        )
    assert STATUS_COLOURS["failed"] != STATUS_COLOURS["complete"]


def test_a_short_id_with_the_whole_id_on_hover_and_in_the_link(root, near_now):
    job_id = uuid.uuid4()
    DurableJobStore(clock=near_now).defer("demo.op", submission(key="id"), job_id=job_id)
    html = root.get(JOBS).content.decode()
    cells = row(html, job_id)
    assert f'href="{JOBS}{job_id}/change/"' in cells
    short = job_id.hex[:8]
    assert f'<span class="durable-jobs-id" title="{job_id}">{short}</span>' in cells


def test_a_failed_job_shows_the_first_line_of_its_error_cut(root, near_now):
    store = DurableJobStore(actor="w", lease_seconds=600, clock=near_now)
    failed = store.defer("demo.op", submission(key="f")).pk
    long_line = "ConnectionError: " + "the upstream refused " * 10
    store.fail(store.claim(failed), f"\n{long_line}\nsecond line <b>")
    running = store.defer("demo.op", submission(key="r")).pk
    store.claim(running)
    html = root.get(JOBS).content.decode()
    cell = re.search(r'<td class="field-last_error">(.*?)</td>', row(html, failed), re.S).group(1)
    assert cell == long_line[:79] + "…"
    assert '<td class="field-last_error">-</td>' in row(html, running)


def test_the_sort_arrow_sits_on_created_the_order_the_list_uses(root, near_now):
    DurableJobStore(clock=near_now).defer("demo.op", submission(key="one"))
    html = root.get(JOBS).content.decode()
    sorted_headers = re.findall(r'<th scope="col" class="([^"]*sorted[^"]*)"', html)
    assert sorted_headers == ["sortable column-created sorted descending"], sorted_headers
    assert root.get(JOBS).context["cl"].get_ordering_field_columns() == {4: "desc"}


@pytest.fixture
def scheduled(near_now):
    """Two schedule ticks (complete and failed), a job of another key, and a lookalike key."""
    store = DurableJobStore(actor="w", lease_seconds=600, clock=near_now)
    tick = "schedule:cleanup:{}"
    for n, outcome in enumerate(("complete", "failed")):
        at = (timezone.now() - timedelta(minutes=n)).strftime("%Y-%m-%dT%H:%M:%SZ")
        lease = store.claim(store.defer("demo.op", submission(key=tick.format(at))).pk)
        if outcome == "complete":
            store.complete(lease)
        else:
            store.fail(lease, "boom")
    done = store.defer("demo.op", submission(key="by-hand"))
    store.complete(store.claim(done.pk))
    store.defer("demo.op", submission(key="pending"))
    return {
        job.status: job.idempotency_key
        for job in Job.objects.filter(idempotency_key__startswith="schedule:")
    }


def test_completed_schedule_ticks_are_hidden_by_default(root, scheduled):
    assert listed(root.get(JOBS)) == {scheduled["failed"], "by-hand", "pending"}
    assert "completed ticks hidden" in root.get(JOBS).content.decode()


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("all", {"complete", "failed", "by-hand", "pending"}),
        ("only", {"complete", "failed"}),
        ("hide", {"by-hand", "pending"}),
    ],
)
def test_the_scheduled_choices(root, scheduled, choice, expected):
    keys = {scheduled.get(name, name) for name in expected}
    assert listed(root.get(JOBS, {"scheduled": choice})) == keys


def test_a_search_a_status_or_a_schedule_shows_completed_ticks(root, scheduled):
    tick = scheduled["complete"]
    assert listed(root.get(JOBS, {"q": tick})) == {tick}
    assert listed(root.get(JOBS, {"status__exact": "complete"})) == {tick, "by-hand"}
    assert listed(root.get(JOBS, {"schedule": "cleanup"})) == {tick, scheduled["failed"]}


def test_an_unknown_scheduled_choice_is_reported(root):
    assert root.get(JOBS, {"scheduled": "some"})["Location"].endswith("?e=1")
