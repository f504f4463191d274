"""The worker list counts the leases each worker holds from the jobs and filters by state.

Proves: a worker whose stored counter says 1 but owns no running job shows 0 (the counter of a
process killed with ``kill -9`` is never corrected); expired leases it still owns are shown
apart; the state filter selects what ``worker_state`` says of each row, in SQL; workers stopped
more than a day ago are hidden by default and shown on request, never deleted; the list's
query count does not grow with its rows.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_durable_jobs.models import WorkerProcess
from django_durable_jobs.store import DurableJobStore
from tests.support import FakeClock, submission

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.admin.urls")]

LIST = "/admin/durable_jobs/workerprocess/"


def worker(name: str, *, heartbeat_age: float = 1, stopped_age: float | None = None, **extra):
    now = timezone.now()
    return WorkerProcess.objects.create(
        owner_id=f"owner-{name}",
        actor=name,
        host="host",
        pid=1,
        started_at=now - timedelta(days=3),
        heartbeat_at=now - timedelta(seconds=heartbeat_age),
        stopped_at=None if stopped_age is None else now - timedelta(seconds=stopped_age),
        concurrency=1,
        **{"lease_seconds": 30, **extra},
    )


def shown(response) -> dict[str, WorkerProcess]:
    assert response.status_code == 200
    return {w.actor: w for w in response.context["cl"].queryset}


def row(html: str, actor: str) -> str:
    return re.search(rf"<tr>.*?>{actor}<.*?</tr>", html, re.S).group(0)


def test_leases_are_counted_from_the_running_jobs_not_the_stored_counter(root):
    store = DurableJobStore(actor="busy", lease_seconds=3600)
    store.register_worker(concurrency=4)
    for n in range(2):
        store.claim(store.defer("demo.op", submission({"n": n}, key=f"k{n}")).pk)
    done = store.defer("demo.op", submission(key="done"))
    store.complete(store.claim(done.pk))
    worker("killed", leases_held=1)  # its counter says 1; it owns no job
    past = DurableJobStore(actor="lapsed", lease_seconds=10, clock=FakeClock(now=timezone.now()))
    past.clock.now -= timedelta(minutes=5)
    past.register_worker(concurrency=1)
    past.claim(past.defer("demo.op", submission(key="lapsed")).pk)  # expired 5 minutes ago
    html = root.get(LIST).content.decode()
    assert '<td class="field-leases">2<div' in row(html, "busy")
    assert '<td class="field-leases">0<div' in row(html, "killed")
    lapsed = row(html, "lapsed")
    assert re.search(r'<td class="field-leases">0<div[^>]*>\+ 1 expired</div>', lapsed)


def test_the_state_filter_selects_alive_stale_and_stopped_in_sql(root):
    worker("alive", heartbeat_age=5)
    worker("stale", heartbeat_age=120)
    worker("slow-lease", heartbeat_age=120, lease_seconds=600)  # not stale: its own lease
    worker("stopped", stopped_age=60)
    now = timezone.now()
    for state in ("alive", "stale", "stopped"):
        listed = shown(root.get(LIST, {"state": state}))
        expected = {w.actor for w in WorkerProcess.objects.all() if w.state(now) == state}
        assert set(listed) == expected, state
    assert set(shown(root.get(LIST, {"state": "alive"}))) == {"alive", "slow-lease"}
    assert root.get(LIST, {"state": "dead"})["Location"].endswith("?e=1")


def test_workers_stopped_over_a_day_ago_are_hidden_by_default_and_kept(root):
    worker("running", heartbeat_age=5)
    worker("stopped-today", stopped_age=3600)
    worker("stopped-last-week", stopped_age=7 * 86400)
    assert set(shown(root.get(LIST))) == {"running", "stopped-today"}
    assert set(shown(root.get(LIST, {"state": "stopped"}))) == {
        "stopped-today",
        "stopped-last-week",
    }
    assert set(shown(root.get(LIST, {"state": "all"}))) == {
        "running",
        "stopped-today",
        "stopped-last-week",
    }
    assert WorkerProcess.objects.count() == 3
    assert "stopped over a day ago hidden" in root.get(LIST).content.decode()


def list_queries(client) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(LIST).status_code == 200
    return len(queries)


def test_the_worker_list_query_count_does_not_grow_with_its_rows(root):
    for n in range(2):
        worker(f"w{n}", leases_held=1)
    root.get(LIST)  # the session and content types, read once
    few = list_queries(root)
    for n in range(2, 20):
        worker(f"w{n}", leases_held=1)
    assert list_queries(root) == few
