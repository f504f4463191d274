"""The dashboard: who sees it, what it shows for a prepared mix, its fragment, and its cost."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_durable_jobs import stats
from django_durable_jobs.store import DurableJobStore
from tests.schedule_rows import make_schedule
from tests.support import FakeClock, submission

URL = "/admin/durable_jobs/dashboard/"
BUSY, HOLD = "dash.busy", "dash.hold"

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.admin.urls")]


@pytest.fixture
def viewer(client, django_user_model):
    """Return the test client, logged in as staff holding only ``durable_jobs.view_job``."""
    user = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(user)
    return client


@pytest.fixture
def mix():
    """The prepared mix of :func:`write_mix`."""
    return write_mix()


def write_mix() -> dict:
    """Write a mix through the store: waiting, running, expired, ended; an alive and a vanished
    worker. Return the ids of the jobs the attention list names."""
    past = FakeClock(now=timezone.now() - timedelta(minutes=30))
    gone = DurableJobStore(actor="gone-worker", lease_seconds=10, clock=past)
    live = DurableJobStore(actor="live-worker", lease_seconds=3600)
    gone.register_worker(concurrency=2)
    live.register_worker(concurrency=4)
    n = iter(range(100))

    def job(store, operation, queue):
        return store.defer(operation, submission({"n": next(n)}), queue=queue)

    held = gone.claim(job(gone, HOLD, "default").pk)  # expired 30 min ago; its worker vanished
    live.claim(job(live, BUSY, "fast").pk)
    for queue in ("fast", "fast"):
        job(live, BUSY, queue)
    job(live, HOLD, "default")
    for _ in range(2):
        live.complete(live.claim(job(live, BUSY, "fast").pk), {"ok": True})
    failed = live.claim(job(live, BUSY, "fast").pk)
    live.fail(failed, "boom")
    live.request_cancel(job(live, HOLD, "default").pk)
    make_schedule("nightly", paused_at=timezone.now(), paused_by="alice")
    make_schedule("hourly")
    return {"held": held.job_id, "failed": failed.job_id}


def counts_of(html: str, name: str) -> list[int]:
    """Return the counts of the row named ``name`` of a "jobs per" table."""
    row = re.search(rf'<tr data-name="{re.escape(name)}">(.*?)</tr>', html, re.S)
    assert row, f"no row {name!r}"
    return [int(n) for n in re.findall(r'<td class="dj-num[^"]*">(?:<a [^>]*>)?(\d+)', row[1])]


def attention_of(html: str) -> dict[str, tuple[int, str]]:
    """Return {kind: (count, link)} of the "needs attention" cards."""
    cards = re.findall(
        r'data-kind="([^"]+)">\s*<a href="([^"]+)"><span class="dj-count">(\d+)</span>', html
    )
    return {kind: (int(count), unescape(href)) for kind, href, count in cards}


def test_a_user_who_may_view_jobs_sees_the_dashboard_and_its_links(viewer):
    response = viewer.get(URL)
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    html = response.content.decode()
    assert "<h1>Dashboard</h1>" in html
    assert "<title>Dashboard | Django site admin</title>" in html
    assert 'href="/admin/durable_jobs/job/"' in html
    assert 'href="/admin/durable_jobs/workerprocess/"' in html
    for page in ("/admin/", "/admin/durable_jobs/"):
        assert f'href="{URL}"' in viewer.get(page).content.decode()


def test_nobody_adds_changes_or_deletes_a_dashboard(admin_client):
    html = admin_client.get("/admin/durable_jobs/").content.decode()
    assert f'href="{URL}"' in html
    assert f'href="{URL}add/"' not in html
    assert admin_client.get(f"{URL}add/").status_code == 404


def test_staff_without_the_view_permission_get_403_and_no_link(client, django_user_model):
    user = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_apitoken"))
    client.force_login(user)
    assert client.get(URL).status_code == 403
    assert client.get(f"{URL}?fragment=1").status_code == 403
    assert f'href="{URL}"' not in client.get("/admin/").content.decode()


def test_an_anonymous_visitor_is_sent_to_the_login_page(client):
    response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"] == f"/admin/login/?next={URL}"


def test_object_urls_lead_to_the_jobs_own_page_or_are_404(viewer, mix):
    job_id = mix["failed"]
    for tail in ("change/", "history/", "delete/", ""):
        response = viewer.get(f"{URL}{job_id}/{tail}")
        assert response.status_code == 302
        assert response["Location"] == f"/admin/durable_jobs/job/{job_id}/change/"
    assert viewer.get(f"{URL}00000000-0000-0000-0000-000000000000/change/").status_code == 404
    assert viewer.get(f"{URL}not-an-id/change/").status_code == 404


def test_the_page_shows_the_mix_counted_from_the_rows(viewer, mix):
    html = viewer.get(URL).content.decode()
    # pending, waiting, sleeping, running, lease expired, legacy | complete, failed, cancelled (last 24 h)
    assert counts_of(html, BUSY) == [2, 0, 0, 1, 0, 0, 2, 1, 0]
    assert counts_of(html, HOLD) == [1, 0, 0, 0, 1, 0, 0, 0, 1]
    assert counts_of(html, "fast") == [2, 0, 0, 1, 0, 0, 2, 1, 0]
    assert counts_of(html, "default") == [1, 0, 0, 0, 1, 0, 0, 0, 1]
    queue = re.search(r'<tr data-queue="fast">(.*?)</tr>', html, re.S)[1]
    assert re.findall(r">(\d+)(?: s)?</td>", queue)[:3] == ["2", "2", "1"]  # pending, due, running
    workers = re.findall(r'<tr data-state="(\w+)">.*?</td>(.*?)</tr>', html, re.S)
    cells = {state: re.findall(r'<td class="dj-num">([^<]+)</td>', row) for state, row in workers}
    # processes, and the leases they hold counted from the jobs (none for stopped ones)
    assert cells == {"alive": ["1", "1"], "stale": ["1", "1"], "stopped": ["0", "&ndash;"]}
    assert "gone-worker &middot; 1 of 2 &middot; <strong>vanished holding leases</strong>" in html
    paused = re.search(r'id="dj-paused-h">.*?</section>', html, re.S)[0]
    assert re.findall(r'<a href="([^"]+)">(\w+)</a>', paused) == [
        ("/admin/durable_jobs/schedule/?q=nightly", "nightly")
    ]
    assert "by alice" in paused
    attention = attention_of(html)
    assert {kind: count for kind, (count, _) in attention.items()} == {
        "hold-expired": 1,
        "failed-final": 1,
        "cancel-unacknowledged": 0,
        "vanished-worker": 1,
    }
    # Both history charts title each column with its exact numbers; they add up to the mix.
    for chart in re.findall(r'<svg class="dj-chart dj-columns".*?</svg>', html, re.S):
        ended = re.findall(
            r"<title>\d\d:\d\d: (\d+) complete, (\d+) failed, (\d+) cancelled", chart
        )
        assert [sum(int(column[i]) for column in ended) for i in range(3)] == [2, 1, 1]
    assert "<title>dash.busy: 33.3% (1 failed of 3 ended)</title>" in html


def test_each_attention_count_links_to_a_job_list_of_exactly_those_jobs(viewer, mix):
    attention = attention_of(viewer.get(URL).content.decode())
    for kind, expected in (("hold-expired", "held"), ("failed-final", "failed")):
        count, link = attention[kind]
        assert link == f"/admin/durable_jobs/job/?attention={kind}"
        listed = viewer.get(link).content.decode()
        ids = set(re.findall(r'href="/admin/durable_jobs/job/([0-9a-f-]{36})/change/', listed))
        assert ids == {str(mix[expected])}, kind
        assert count == len(ids)


def test_the_page_shows_what_the_snapshot_says(viewer, mix):
    html = viewer.get(URL).content.decode()
    snap = stats.snapshot()
    for item in snap.attention:
        assert attention_of(html)[item.kind][0] == item.count
    for queue in snap.queues:
        row = re.search(rf'<tr data-queue="{queue.queue}">(.*?)</tr>', html, re.S)[1]
        assert re.findall(r">(\d+)</td>", row)[:3] == [
            str(queue.pending),
            str(queue.due),
            str(queue.running),
        ]


def test_the_fragment_is_the_panels_alone(viewer, mix):
    response = viewer.get(f"{URL}?fragment=1")
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="dj-panels"')
    assert "<html" not in html and "<body" not in html and "dashboard.js" not in html
    assert counts_of(html, BUSY) == [2, 0, 0, 1, 0, 0, 2, 1, 0]


def test_the_page_fetches_nothing_from_outside(viewer, mix):
    html = viewer.get(URL).content.decode()
    html = html.replace('xmlns="http://www.w3.org/2000/svg"', "")  # a name, not an address
    assert "http://" not in html and "https://" not in html
    assert "//" not in " ".join(re.findall(r'(?:src|href)="([^"]*)"', html))
    assert re.search(r'<script src="/static/durable_jobs/dashboard\.js" defer>', html)
    assert 'href="/static/durable_jobs/dashboard.css"' in html
    assert "<script>" not in html  # no inline script either


def test_the_query_count_does_not_grow_with_the_number_of_operations(viewer):
    store = DurableJobStore(actor="counting", lease_seconds=60)

    def add_operations(first: int, last: int) -> int:
        for i in range(first, last):
            operation = f"count.op{i:02d}"
            store.defer(operation, submission({"i": i}, key="waiting"))
            lease = store.claim(store.defer(operation, submission({"i": i}, key="done")).pk)
            store.complete(lease)
        with CaptureQueriesContext(connection) as queries:
            html = viewer.get(URL).content.decode()
        assert html.count('<tr data-name="count.op') == last
        return len(queries)

    assert add_operations(0, 5) == add_operations(5, 50)


def test_a_workflow_s_waiting_job_and_a_sleeping_job_have_their_own_columns(viewer):
    from django_durable_jobs import Workflow

    wf = Workflow("dashboard.flow")
    first = wf.job("tests.wf.echo", {"tag": "a"}, queue="flows")
    wf.job("tests.wf.echo", {"tag": "b"}, after=[first], queue="flows")
    wf.job("tests.wf.echo", {"tag": "c"}, after=[first], queue="flows")
    wf.submit()
    store = DurableJobStore()
    sleeper = store.defer("tests.wf.sleeper", submission({"n": 1}), queue="naps")
    store.sleep(store.claim(sleeper.pk), 3600)

    html = viewer.get(URL).content.decode()

    # pending, waiting, sleeping, running, lease expired, legacy | complete, failed, cancelled
    assert counts_of(html, "tests.wf.echo") == [1, 2, 0, 0, 0, 0, 0, 0, 0]
    assert counts_of(html, "tests.wf.sleeper") == [0, 0, 1, 0, 0, 0, 0, 0, 0]
    assert counts_of(html, "naps") == [0, 0, 1, 0, 0, 0, 0, 0, 0]
