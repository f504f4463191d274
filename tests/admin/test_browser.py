"""A real browser triages a stuck job in the admin: filter to expired, request cancellation.

Playwright drives Debian's chromium at /usr/bin/chromium (installed by ``scripts/ensure-browser``;
Playwright never downloads a browser) against pytest-django's ``live_server`` serving tests.urls.
It logs in, filters the Job changelist to expired leases, runs the *Request cancellation* action
on one job, sees the confirmation, then the banner on the job's page, and saves a screenshot under
test-output/screenshots/. The database proves the request was recorded through the store and the
job is still running (its owner decides when to stop).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from django_durable_jobs.models import Job
from django_durable_jobs.store import DurableJobStore
from tests.support import REPO_ROOT, FakeClock, submission

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = REPO_ROOT / "test-output" / "screenshots"
PASSWORD = "correct horse battery staple"

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not os.access(CHROMIUM, os.X_OK),
        reason=f"{CHROMIUM} is missing: scripts/ensure-browser could not install Debian's "
        "chromium (needs root and apt); the real-browser admin test cannot run",
    ),
]


@pytest.fixture(autouse=True)
def allow_sync_orm_beside_playwright(monkeypatch):
    """Set Django's documented escape hatch for this module only, not for the whole session.

    Playwright's sync API runs an asyncio loop in the test thread; with the variable set, Django's
    async-unsafe check does not refuse sync ORM calls made while that loop exists.
    """
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture
def triage_jobs():
    """Return an expired running job, plus a live running job and a pending one around it."""
    now = timezone.now()
    past = FakeClock(now=now - timedelta(minutes=30))
    old = DurableJobStore(actor="vanished-worker", lease_seconds=10, clock=past)
    live = DurableJobStore(actor="live-worker", lease_seconds=3600)
    expired = old.defer("demo.stuck", submission({"n": 1}, key="stuck"))
    old.claim(expired.pk)  # the lease ran out ten seconds later, half an hour ago
    current = live.defer("demo.busy", submission({"n": 2}, key="busy"))
    live.claim(current.pk)
    pending = live.defer("demo.waiting", submission({"n": 3}, key="waiting"))
    return {"expired": expired, "current": current, "pending": pending}


@contextmanager
def chromium_page():
    """Yield a page of Debian's chromium driven by Playwright's sync API.

    No ORM call may run inside this block: Playwright switches greenlets, and Django would open a
    second connection there that nothing closes (PostgreSQL then refuses to drop the test
    database). Set data up before it and assert on the database after it.
    """
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(15_000)
            yield page
        finally:
            browser.close()


def test_triage_cancels_an_expired_job_from_the_admin(live_server, triage_jobs):
    get_user_model().objects.create_superuser("oncall", "oncall@example.com", PASSWORD)
    expired_pk = triage_jobs["expired"].pk
    checkbox = f"input.action-select[value='{expired_pk}']"
    shot = SCREENSHOTS / f"admin-cancel-expired-{_db_name()}.png"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    with chromium_page() as page:
        page.goto(f"{live_server.url}/admin/login/?next=/admin/")
        page.fill("#id_username", "oncall")
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit], button[type=submit]")
        page.wait_for_url(f"{live_server.url}/admin/")

        page.goto(f"{live_server.url}/admin/durable_jobs/job/")
        page.locator("#changelist-filter a[href*='ownership=expired']").first.click()
        page.wait_for_url("**ownership=expired**")
        rows = page.locator("#result_list tbody tr")
        # Only the stuck job: the live and the pending ones are filtered out.
        assert rows.count() == 1
        assert rows.first.locator(checkbox).count() == 1

        page.check(checkbox)
        page.select_option("select[name=action]", "request_cancellation")
        page.click("button[name=index], input[name=index]")
        message = page.locator("ul.messagelist li").first
        message.wait_for()
        confirmation = message.inner_text()

        page.goto(f"{live_server.url}/admin/durable_jobs/job/{expired_pk}/change/")
        banner = page.locator(".durable-jobs-banner")
        banner.first.wait_for()
        banners = " ".join(banner.all_inner_texts())
        page.screenshot(path=str(shot), full_page=True)

    assert "cancellation request" in confirmation
    assert "Cancellation requested" in banners
    assert shot.stat().st_size > 0
    job = Job.objects.get(pk=expired_pk)
    assert job.cancellation_requested_at is not None
    assert (job.status, job.fencing_epoch, job.claimed_by) == ("running", 1, "vanished-worker")
    others = Job.objects.filter(pk__in=[triage_jobs["current"].pk, triage_jobs["pending"].pk])
    assert [j.cancellation_requested_at for j in others] == [None, None]


def _db_name() -> str:
    return Path(settings.DATABASES["default"]["ENGINE"]).suffix.lstrip(".") or "db"
