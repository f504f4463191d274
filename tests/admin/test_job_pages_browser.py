"""A real browser at 1,280 px: a failed job's page leads with its error, the lists fit the screen.

Playwright drives Debian's chromium (see ``test_browser.py``) against ``live_server``. A failed
job's page shows the error and the traceback of its last failed attempt within the first 720 px;
the job list and the worker list show every column without a horizontal scroll. Screenshots
go to test-output/screenshots/ (``job-failed-<db>.png`` and its dark-theme twin,
``job-retry-confirm-<db>.png``, ``job-list-<db>.png``, ``worker-list-<db>.png``) for a person to
look at. The Retry button is clicked through its confirmation as a person would.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from django_durable_jobs.store import DurableJobStore
from tests.admin.test_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    PASSWORD,
    SCREENSHOTS,
    _db_name,
    allow_sync_orm_beside_playwright,  # noqa: F401 (an autouse fixture)
)
from tests.support import FakeClock, submission

pytestmark = [pytest.mark.django_db(transaction=True)]

WIDTH, FOLD = 1280, 720


def failing_call(depth: int) -> None:
    if depth == 0:
        raise ValueError("invoice 4711 has no customer; the export cannot continue")
    failing_call(depth - 1)


@pytest.fixture
def jobs():
    """Return a failed job with a traceback, among jobs of every kind a list shows."""
    now = timezone.now()
    earlier = FakeClock(now=now - timedelta(minutes=3))
    worker = DurableJobStore(actor="worker@app-server-01:4242", lease_seconds=300, clock=earlier)
    worker.register_worker(concurrency=4, operations=["reports.export_invoices"])
    failed = worker.defer("reports.export_invoices", submission({"month": "2026-11"}, key="nov"))
    lease = worker.claim(failed.pk)
    earlier.advance(95)
    try:
        failing_call(12)
    except ValueError as exc:
        worker.fail(lease, exc)
    live = DurableJobStore(actor="worker@app-server-02:777", lease_seconds=3600)
    live.register_worker(concurrency=2)
    for n in range(3):
        job = live.defer("billing.charge_customers", submission({"n": n}, key=f"charge-{n}"))
        running = live.claim(job.pk)
        live.progress(running, 30 * n)
    done = live.defer("mail.send_digest", submission({"d": 1}, key="digest"))
    live.complete(live.claim(done.pk), {"sent": 12})
    for n in range(4):
        waiting = live.defer(
            "search.reindex_everything_for_a_long_name", submission({"n": n}, key=f"p{n}")
        )
    get_user_model().objects.create_superuser("oncall", "oncall@example.com", PASSWORD)
    return {"failed": failed, "pending": waiting}


def _log_in(page, url: str) -> None:
    page.goto(f"{url}/admin/login/?next=/admin/")
    page.fill("#id_username", "oncall")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit], button[type=submit]")
    page.wait_for_url(f"{url}/admin/")


@pytest.fixture
def browser_page():
    """Yield a 1,280 x 720 page of Debian's chromium; no ORM call may run while it is open
    (see ``test_browser.chromium_page``): the test's data is made before it opens."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": FOLD})
            page.set_default_timeout(15_000)
            yield page
        finally:
            browser.close()


@pytest.mark.skipif(
    not __import__("os").access(CHROMIUM, __import__("os").X_OK), reason=f"{CHROMIUM} is missing"
)
def test_failed_job_page_and_lists_at_1280_px(live_server, jobs, browser_page):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    db = _db_name()
    page = browser_page
    _log_in(page, live_server.url)

    page.goto(f"{live_server.url}/admin/durable_jobs/job/")
    table = page.locator("#result_list").bounding_box()
    scroll_width = page.evaluate("document.documentElement.scrollWidth")
    page.screenshot(path=str(SCREENSHOTS / f"job-list-{db}.png"), full_page=True)
    assert table["x"] + table["width"] <= WIDTH, table
    assert scroll_width <= WIDTH, scroll_width
    assert _hidden_width(page) == 0

    page.goto(f"{live_server.url}/admin/durable_jobs/job/{jobs['failed'].pk}/change/")
    error = page.locator(".durable-jobs-failure-error").first.bounding_box()
    trace = page.locator(".durable-jobs-failure-traceback").first.bounding_box()
    page.screenshot(path=str(SCREENSHOTS / f"job-failed-{db}.png"))
    page.screenshot(path=str(SCREENSHOTS / f"job-failed-full-{db}.png"), full_page=True)
    assert error is not None and error["y"] < FOLD, error
    assert trace is not None and trace["y"] < FOLD, trace

    page.emulate_media(color_scheme="dark")
    page.reload()
    page.screenshot(path=str(SCREENSHOTS / f"job-failed-dark-{db}.png"))
    page.emulate_media(color_scheme="light")
    page.reload()

    page.click("button.durable-jobs-button-retry")
    page.wait_for_url("**/request/retry/")
    page.screenshot(path=str(SCREENSHOTS / f"job-retry-confirm-{db}.png"))
    page.click("input[type=submit][value='Yes, request a retry']")
    page.wait_for_url(f"**/{jobs['failed'].pk}/change/")
    said = page.locator("ul.messagelist li").first.inner_text()
    banners = " ".join(page.locator(".durable-jobs-banner").all_inner_texts())
    assert said == f"1 retry request recorded ({jobs['failed'].pk}).", said
    assert "Retry requested at" in banners

    page.goto(f"{live_server.url}/admin/durable_jobs/job/{jobs['pending'].pk}/change/")
    notice = page.locator(".durable-jobs-banner-waiting")
    page.screenshot(path=str(SCREENSHOTS / f"job-pending-{db}.png"))
    assert "No running worker has registered the operation" in notice.inner_text()
    assert notice.bounding_box()["y"] < FOLD

    page.goto(f"{live_server.url}/admin/durable_jobs/workerprocess/")
    table = page.locator("#result_list").bounding_box()
    scroll_width = page.evaluate("document.documentElement.scrollWidth")
    page.screenshot(path=str(SCREENSHOTS / f"worker-list-{db}.png"), full_page=True)
    assert table["x"] + table["width"] <= WIDTH, table
    assert scroll_width <= WIDTH, scroll_width
    assert _hidden_width(page) == 0


def _hidden_width(page) -> int:
    """Return how many pixels of the results table its box hides (the admin lets it scroll
    sideways inside the list, where the page's own width does not show it)."""
    return page.evaluate(
        "(() => { const box = document.querySelector('.results');"
        " return box.scrollWidth - box.clientWidth; })()"
    )
