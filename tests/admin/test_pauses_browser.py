"""A real browser pauses a queue from the dashboard, sees it held, and resumes it, at 1,280 px.

Playwright drives Debian's chromium (see tests/admin/test_browser.py) against ``live_server``.
Screenshots go to test-output/screenshots/flow/: the dashboard's flow panels, the pause
confirmation, a held-back job's page and the history of pauses.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from django_durable_jobs.models import Job, JobPause, RateBucket
from django_durable_jobs.rules import flow, registry
from django_durable_jobs.store import DurableJobStore
from tests.admin.test_browser import PASSWORD, SCREENSHOTS, _db_name, chromium_page
from tests.support import submission

pytestmark = [pytest.mark.django_db(transaction=True)]
WIDTH = 1280
SHOTS = SCREENSHOTS / "flow"
LIMITED = "payments.charge"


@pytest.fixture(autouse=True)
def allow_sync_orm_beside_playwright(monkeypatch):
    """Django's documented escape hatch, for this module only (see tests/admin/test_browser.py)."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture
def limited():
    @registry.operation(
        LIMITED,
        rate_limit="10/m",
        max_running_per_key=1,
        concurrency_key=lambda payload: payload["customer"],
    )
    def charge(ctx, payload):
        return None

    yield LIMITED
    registry.unregister(LIMITED)


def write_scene() -> str:
    """Pending mail held by a pause, charges held by a full bucket and a busy customer."""
    store = DurableJobStore(actor="app")
    for n in range(4):
        store.defer("mail.send", submission({"to": f"user{n}@example.com"}), queue="mail")
    store.pause(
        "operation", "reports.rebuild", scope="acme", reason="acme asked us to stop", by="ops:kim"
    )
    store.defer("reports.rebuild", submission({"n": 1}, scope="acme"))
    held = None
    for n, customer in enumerate(["cus_42", "cus_42", "cus_7"]):
        job = store.defer(LIMITED, submission({"n": n, "customer": customer}), queue="payments")
        Job.objects.filter(pk=job.pk).update(concurrency_key=customer)
        held = held or job.pk
    busy = store.defer(LIMITED, submission({"n": 9, "customer": "cus_42"}), queue="payments")
    Job.objects.filter(pk=busy.pk).update(concurrency_key="cus_42")
    DurableJobStore(actor="worker-1", lease_seconds=600).claim(busy.pk)  # cus_42 is at work
    now = timezone.now()
    # The claim above logged its start in the bucket: fill the bucket's log.
    RateBucket.objects.update_or_create(
        id=flow.bucket_id("operation", LIMITED),
        defaults={
            "target": "operation",
            "name": LIMITED,
            "starts": json.dumps([(now - timedelta(seconds=5 * i)).timestamp() for i in range(10)]),
        },
    )
    return str(held)


def test_pause_from_the_dashboard_then_see_the_held_job_and_the_history(live_server, limited):
    held = write_scene()
    get_user_model().objects.create_superuser("oncall", "oncall@example.com", PASSWORD)
    SHOTS.mkdir(parents=True, exist_ok=True)
    db = _db_name()

    with chromium_page() as page:
        page.set_viewport_size({"width": WIDTH, "height": 900})
        page.goto(f"{live_server.url}/admin/login/?next=/admin/durable_jobs/dashboard/")
        page.fill("#id_username", "oncall")
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit], button[type=submit]")
        page.wait_for_url("**/admin/durable_jobs/dashboard/")

        page.click(".dj-pause-form summary")
        page.select_option(".dj-pause-form select[name=target]", "queue")
        page.fill(".dj-pause-form input[name=name]", "mail")
        page.fill(".dj-pause-form input[name=reason]", "mail provider returns 503s (INC-311)")
        page.click(".dj-pause-form input[type=submit]")
        page.wait_for_selector("text=Pause queue mail in every scope?")
        page.screenshot(path=str(SHOTS / f"pause-confirmation-{db}.png"), full_page=True)
        page.click("input[value='Yes, pause it']")
        page.wait_for_url("**/admin/durable_jobs/dashboard/")
        page.wait_for_selector("tr[data-pause] >> text=mail provider returns 503s")
        flow_panels = page.locator(".dj-flow")
        flow_panels.screenshot(path=str(SHOTS / f"dashboard-flow-{db}.png"))
        page.screenshot(path=str(SHOTS / f"dashboard-{db}.png"), full_page=True)
        scroll_width = page.evaluate("document.documentElement.scrollWidth")
        message = page.inner_text("ul.messagelist")

        page.goto(f"{live_server.url}/admin/durable_jobs/job/{held}/change/")
        page.wait_for_selector(".durable-jobs-banner-held")
        banners = page.locator(".durable-jobs-banner-held").all_inner_texts()
        page.screenshot(path=str(SHOTS / f"held-job-{db}.png"))

        page.goto(f"{live_server.url}/admin/durable_jobs/jobpause/")
        page.screenshot(path=str(SHOTS / f"pause-history-{db}.png"))

        page.goto(f"{live_server.url}/admin/durable_jobs/dashboard/")
        page.locator("tr[data-pause] >> text=mail provider").wait_for()
        page.locator("tr:has-text('mail provider') input[value='Resume…']").click()
        page.wait_for_selector("text=Resume queue mail in every scope?")
        page.click("input[value='Yes, resume it']")
        page.wait_for_url("**/admin/durable_jobs/dashboard/")
        resumed = page.inner_text("ul.messagelist")

    assert scroll_width <= WIDTH
    assert message.startswith("Paused queue mail in every scope")
    assert any("Rate limit 10/m" in b for b in banners)
    assert any("Key cus_42" in b for b in banners)
    assert resumed.startswith("Resumed queue mail in every scope")
    mail = JobPause.objects.get(name="mail")
    assert (mail.active, mail.paused_by, mail.resumed_by) == (None, "admin:oncall", "admin:oncall")
