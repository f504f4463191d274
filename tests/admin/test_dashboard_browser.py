"""A real browser watches the dashboard at 1,280 px while a job is submitted behind its back.

Playwright drives Debian's chromium (see tests/admin/test_browser.py) against ``live_server``.
The dashboard refreshes every second here: the new job's count appears without a reload (a mark
left on ``window`` survives), nothing overflows the width, a hidden tab fetches nothing, and
screenshots are saved as test-output/screenshots/dashboard-<database>.png (and -dark.png, in the
admin's dark theme).
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connections
from django.utils import timezone

from django_durable_jobs.admin.dashboard import DashboardAdmin
from django_durable_jobs.store import DurableJobStore
from tests.admin.test_browser import PASSWORD, SCREENSHOTS, _db_name, chromium_page
from tests.admin.test_dashboard import BUSY, write_mix
from tests.support import FakeClock, submission

pytestmark = [pytest.mark.django_db(transaction=True)]
WIDTH = 1280


@pytest.fixture(autouse=True)
def allow_sync_orm_beside_playwright(monkeypatch):
    """Django's documented escape hatch, for this module only (see tests/admin/test_browser.py)."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def write_history() -> None:
    """End a job every three minutes over the last hour, one in four of them failed, so the
    charts have something to draw."""
    clock = FakeClock(now=timezone.now() - timedelta(minutes=62))
    store = DurableJobStore(actor="history", lease_seconds=600, clock=clock)
    for i in range(20):
        operation = ("reports.rebuild", "mail.send", "billing.invoice")[i % 3]
        job = store.defer(operation, submission({"i": i}, key=f"history-{i}"))
        clock.advance(1 + i % 5)  # waited in the queue
        lease = store.claim(job.pk)
        clock.advance(2 + 7 * (i % 4))  # ran
        if i % 4 == 3:
            store.fail(lease, "timeout talking to the mail server")
        else:
            store.complete(lease, {"ok": i})
        clock.advance(180 - 3 - i % 5 - 7 * (i % 4))


def submit_elsewhere() -> None:
    """Submit one more job from another thread (its own connection, closed after), as a web
    request of the application would, while the browser holds the page."""

    def submit():
        try:
            DurableJobStore(actor="late").defer(BUSY, submission({"late": True}, key="late"))
        finally:
            connections.close_all()

    thread = threading.Thread(target=submit)
    thread.start()
    thread.join(30)


# Playwright cannot hide a tab: make the page's document say it is hidden, and tell it so.
SET_HIDDEN = """hidden => {
    Object.defineProperty(document, "hidden", {value: hidden, configurable: true});
    document.dispatchEvent(new Event("visibilitychange"));
}"""


def waiting_of(page, operation: str) -> str:
    return page.locator(f'tr[data-name="{operation}"] td.dj-num').first.inner_text()


# The tables whose right edge lies past their panel's inner right edge (their headings, by panel).
TABLES_PAST_THEIR_PANEL = """
[...document.querySelectorAll('.dj-panel table')].filter(table => {
  const panel = table.closest('.dj-panel');
  const inner = panel.getBoundingClientRect().right - parseFloat(getComputedStyle(panel).paddingRight);
  return table.getBoundingClientRect().right > inner + 0.5;
}).map(table => table.closest('.dj-panel').querySelector('h2').textContent)
"""
# The names in the count tables that the browser wrapped (a text range drawn as several lines).
NAMES_ON_MORE_THAN_ONE_LINE = """
[...document.querySelectorAll('.dj-counts td.dj-name')].filter(cell => {
  const range = document.createRange();
  range.selectNodeContents(cell);
  return new Set([...range.getClientRects()].map(r => Math.round(r.top))).size > 1;
}).map(cell => cell.textContent)
"""


def test_the_dashboard_refreshes_in_place_and_fits_1280_px(live_server, monkeypatch):
    write_mix()
    write_history()
    monkeypatch.setattr(DashboardAdmin, "refresh_seconds", 1)
    get_user_model().objects.create_superuser("oncall", "oncall@example.com", PASSWORD)
    shot = SCREENSHOTS / f"dashboard-{_db_name()}.png"
    dark = SCREENSHOTS / f"dashboard-{_db_name()}-dark.png"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    with chromium_page() as page:
        page.set_viewport_size({"width": WIDTH, "height": 900})
        page.goto(f"{live_server.url}/admin/login/?next=/admin/durable_jobs/dashboard/")
        page.fill("#id_username", "oncall")
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit], button[type=submit]")
        page.wait_for_url("**/admin/durable_jobs/dashboard/")
        before = waiting_of(page, BUSY)
        page.evaluate("window.notReloaded = true")
        page.wait_for_function(
            "document.getElementById('dj-updated').textContent.startsWith('Updated')"
        )

        submit_elsewhere()
        page.wait_for_function(
            f"""document.querySelector('tr[data-name="{BUSY}"] td.dj-num').innerText === '3'"""
        )
        after = waiting_of(page, BUSY)
        kept = page.evaluate("window.notReloaded === true")
        scroll_width = page.evaluate("document.documentElement.scrollWidth")
        spilled = page.evaluate(TABLES_PAST_THEIR_PANEL)
        broken_names = page.evaluate(NAMES_ON_MORE_THAN_ONE_LINE)
        charts = page.locator("svg.dj-chart").count()
        # The app's stylesheet was served (live_server serves static files like runserver).
        styled = page.evaluate(
            "getComputedStyle(document.querySelector('.dj-panel')).borderTopLeftRadius"
        )
        live_text = page.inner_text("#dj-updated")
        page.screenshot(path=str(shot), full_page=True)

        # A hidden tab fetches nothing and says so; shown again, it updates at once.
        fetched = []
        page.evaluate(SET_HIDDEN, True)
        page.on("request", lambda r: fetched.append(r.url) if "fragment=1" in r.url else None)
        page.wait_for_timeout(2500)  # two and a half refresh intervals
        hidden_text, hidden_fetches = page.inner_text("#dj-updated"), len(fetched)
        page.evaluate(SET_HIDDEN, False)
        page.wait_for_function(
            "document.getElementById('dj-updated').textContent.includes('every')"
        )
        shown_fetches = len(fetched)
        page.emulate_media(color_scheme="dark")  # the admin's CSS variables turn dark
        page.screenshot(path=str(dark), full_page=True)

    assert (before, after) == ("2", "3")
    assert kept, "the page was reloaded instead of refreshed in place"
    assert scroll_width <= WIDTH
    assert spilled == [], "a table reaches past the right edge of its panel"
    assert broken_names == [], "an operation or queue name is split over lines"
    assert charts == 5
    assert styled == "4px"
    assert live_text.startswith("Updated ")
    assert shot.stat().st_size > 0
    assert "paused while the tab is hidden" in hidden_text
    assert hidden_fetches == 0
    assert shown_fetches >= 1
