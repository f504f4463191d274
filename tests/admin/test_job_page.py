"""The job page tells the job's story: summary, failure, timeline, notices, and two buttons.

Proves: the summary (status and ownership badges, attempt ``n of max``, progress, the lease
holder and until when, times to the second with durations); a failed job's error and the
traceback of its last failed attempt at the top; the attempts as a timeline, the running one
and a released one included; large payloads collapsed; the row defect shown only when there is
one, under that name; the notice for a pending job no live worker can run; the Cancel and Retry
buttons (a confirmation step, then the list's action; POST only, CSRF, permissions, a refusal
that leaves the database as it was); and a query count that does not grow with the attempts.
"""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_durable_jobs.models import Job, WorkerProcess
from django_durable_jobs.rules import registry
from django_durable_jobs.rules.retry import RetryPolicy
from django_durable_jobs.store import DurableJobStore
from tests.support import FakeClock, db_state, submission

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.admin.urls")]

JOBS = "/admin/durable_jobs/job/"
RETRIED = "page.retried"
SECOND = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"


def page(client, pk) -> str:
    response = client.get(f"{JOBS}{pk}/change/")
    assert response.status_code == 200
    return response.content.decode()


def story(html: str) -> str:
    return html.split('<section class="durable-jobs-story">')[1].split("</section>")[0]


@pytest.fixture
def retried():
    registry.operation(RETRIED, retry=RetryPolicy(max_attempts=3))(lambda ctx, payload: None)
    yield RETRIED
    registry.unregister(RETRIED)


@pytest.fixture
def store(near_now) -> DurableJobStore:
    return DurableJobStore(actor="worker@host:7", lease_seconds=600, clock=near_now)


# -- the summary and the failure -----------------------------------------------------------------


def test_the_summary_of_a_running_job(root, store, retried):
    lease = store.claim(store.defer(retried, submission(key="run")).pk)
    store.progress(lease, 40)
    store.register_worker(concurrency=1, operations=[retried])
    top = story(page(root, lease.job_id))
    assert re.search(r'class="durable-jobs-badge"[^>]*>running<', top)
    assert re.search(r'class="durable-jobs-badge"[^>]*>current<', top)
    assert "<dd>1 of 3 " in top  # attempt n of max: the retry policy's
    assert "width:40%" in top
    assert "worker@host:7 (its worker is alive), until " in top
    assert re.search(rf"<dt>created</dt><dd>{SECOND}</dd>", top)
    assert re.search(rf"<dt>started</dt><dd>{SECOND} <span[^>]*>0 s after</span>", top)
    assert "<dt>running for</dt>" in top


def test_a_failed_job_leads_with_its_error_and_the_last_failed_attempts_traceback(root, store):
    job = store.defer("demo.op", submission(key="fails"))
    store.fail(store.claim(job.pk), "first: no traceback")
    store.request_retry(job.pk)
    second = DurableJobStore(actor="w2", lease_seconds=600, clock=store.clock)
    try:
        raise KeyError("customer 4711 <missing>")
    except KeyError as exc:
        second.fail(second.claim_next(operations=["demo.op"])[0], exc)
    top = story(page(root, job.pk))
    failure = top.split('class="durable-jobs-failure"')[1].split('class="durable-jobs-timeline"')[0]
    assert "Error of attempt 2" in failure and "builtins.KeyError" in failure
    assert "customer 4711 &lt;missing&gt;" in failure
    assert re.search(
        r'<pre class="durable-jobs-failure-traceback">Traceback \(most recent', failure
    )
    assert "<missing>" not in top
    assert "ran " in top and " in all" in top  # durations to the second


def test_a_failure_without_a_traceback_says_so(root, store):
    job = store.defer("demo.op", submission(key="plain"))
    store.fail(store.claim(job.pk), "the remote said no")
    top = story(page(root, job.pk))
    assert '<pre class="durable-jobs-failure-error">the remote said no</pre>' in top
    assert "No traceback was recorded" in top


def test_a_job_that_did_not_fail_shows_no_failure(root, store):
    job = store.defer("demo.op", submission(key="fine"))
    store.complete(store.claim(job.pk), {"ok": 1})
    assert "durable-jobs-failure" not in story(page(root, job.pk))


# -- the timeline ------------------------------------------------------------------------------------


def test_the_timeline_shows_the_running_attempt_and_a_released_one(root, store):
    job = store.defer("demo.op", submission(key="released"))
    store.release([store.claim(job.pk)])  # epoch 1 handed back unstarted
    taker = DurableJobStore(actor="taker", lease_seconds=600, clock=store.clock)
    taker.claim(job.pk)
    response = root.get(f"{JOBS}{job.pk}/change/")
    steps = [(s.epoch, s.outcome, s.claimed_by) for s in response.context["job_timeline"]]
    assert steps == [(2, "running", "taker"), (1, "released", "worker@host:7")]
    top = story(response.content.decode())
    assert "(still running)" in top
    assert "handed back unstarted by a stopping worker" in top


# -- payloads and the row defect -------------------------------------------------------------------


def test_large_payloads_are_collapsed_and_small_ones_open(root, store):
    big = store.defer("demo.op", submission({"rows": list(range(600))}, key="big"))
    small = store.defer("demo.op", submission({"n": 1}, key="small"))
    big_html, small_html = page(root, big.pk), page(root, small.pk)
    assert re.search(r'<details class="durable-jobs-payload"><summary>[\d,]+ bytes: show', big_html)
    assert '<pre class="durable-jobs-json">' in big_html
    assert "durable-jobs-payload" not in small_html


def test_the_row_defect_is_shown_only_when_there_is_one(root, store):
    good = store.defer("demo.op", submission(key="good"))
    html = page(root, good.pk)
    assert "row defect" not in html.lower() and "diagnostic" not in html.lower()
    Job.objects.filter(pk=good.pk).update(proposal_hash="0" * 64)
    html = page(root, good.pk)
    assert "Row defect: Defective pending row" in html
    assert re.search(r"<label>Row defect:</label>", html)


# -- a pending job nobody can run ------------------------------------------------------------------


def _alive(operations: str, queues: str = "", *, name: str = "w") -> None:
    now = timezone.now()
    WorkerProcess.objects.create(
        owner_id=f"owner-{name}",
        actor=name,
        host="h",
        pid=1,
        started_at=now,
        heartbeat_at=now,
        lease_seconds=30,
        concurrency=1,
        operations=operations,
        queues=queues,
    )


def _notice(client, pk) -> str:
    found = re.search(r"durable-jobs-banner-waiting[^>]*>(.*?)</div>", page(client, pk), re.S)
    return html.unescape(found.group(1)) if found else ""


def test_a_pending_job_says_when_no_live_worker_has_registered_its_operation(root, store):
    job = store.defer("reports.nightly", submission(key="waits"))
    assert "No worker is running" in _notice(root, job.pk)
    now = timezone.now()
    _alive("reports.nightly", name="gone")
    WorkerProcess.objects.filter(actor="gone").update(heartbeat_at=now - timedelta(minutes=5))
    _alive("billing.charge,mail.send")
    notice = _notice(root, job.pk)
    assert "No running worker has registered the operation 'reports.nightly'" in notice
    assert 'imports the module that defines @operation("reports.nightly")' in notice
    _alive("reports.nightly", "slow", name="slow")
    assert "do not serve the queue 'default'" in _notice(root, job.pk)
    _alive("reports.nightly", name="serves")
    assert _notice(root, job.pk) == ""


def test_no_notice_for_a_job_that_is_not_pending(root, store):
    job = store.defer("reports.nightly", submission(key="ran"))
    store.claim(job.pk)
    assert _notice(root, job.pk) == ""


# -- the buttons -------------------------------------------------------------------------------------


def _request(client, pk, kind: str, **data):
    return client.post(f"{JOBS}{pk}/request/{kind}/", data)


def test_cancel_asks_for_a_confirmation_then_requests_through_the_action(root, store):
    lease = store.claim(store.defer("demo.op", submission(key="stop")).pk)
    html = page(root, lease.job_id)
    assert f'action="{JOBS}{lease.job_id}/request/cancel/"' in html
    assert "/request/retry/" not in html  # a running job with a live lease needs no retry
    before = db_state()
    asked = _request(root, lease.job_id, "cancel")
    assert asked.status_code == 200 and "Yes, request cancellation" in asked.content.decode()
    assert db_state() == before  # asking changed nothing
    done = _request(root, lease.job_id, "cancel", confirm="yes")
    assert done.status_code == 302 and done["Location"] == f"{JOBS}{lease.job_id}/change/"
    assert Job.objects.get(pk=lease.job_id).cancellation_requested_at is not None
    said = [str(m) for m in root.get(done["Location"]).context["messages"]]
    assert said == [
        f"1 cancellation request recorded; 1 running job will stop when the owner sees "
        f"the request ({lease.job_id})."
    ]


def test_retry_of_a_failed_job_through_its_page(root, store):
    job = store.defer("demo.op", submission(key="again"))
    store.fail(store.claim(job.pk), "boom")
    html = page(root, job.pk)
    assert "/request/retry/" in html and "/request/cancel/" not in html
    done = _request(root, job.pk, "retry", confirm="yes")
    assert done.status_code == 302
    assert Job.objects.get(pk=job.pk).retry_requested_at is not None
    said = [str(m) for m in root.get(done["Location"]).context["messages"]]
    assert said == [f"1 retry request recorded ({job.pk})."]


def test_a_refused_retry_is_worded_like_the_action_and_changes_nothing(root, store):
    job = store.defer("demo.op", submission(key="done"))
    store.complete(store.claim(job.pk), {"ok": 1})
    before = db_state()
    done = _request(root, job.pk, "retry", confirm="yes")
    assert db_state() == before
    said = [str(m) for m in root.get(done["Location"]).context["messages"]]
    assert said[0] == "0 retry requests recorded; 1 retry was refused."
    assert said[1].startswith(f"Retry refused for job {job.pk}: ")


def test_the_buttons_need_the_permissions_post_and_the_csrf_token(client, django_user_model, store):
    lease = store.claim(store.defer("demo.op", submission(key="guarded")).pk)
    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(viewer)
    assert "/request/" not in page(client, lease.job_id)
    before = db_state()
    for kind in ("cancel", "retry"):
        assert _request(client, lease.job_id, kind, confirm="yes").status_code == 403
        assert _request(client, lease.job_id, kind).status_code == 403
    assert db_state() == before
    viewer.user_permissions.add(Permission.objects.get(codename="cancel_job"))
    assert client.get(f"{JOBS}{lease.job_id}/request/cancel/").status_code == 405
    assert _request(client, lease.job_id, "nothing", confirm="yes").status_code == 404
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(viewer)
    assert _request(strict, lease.job_id, "cancel", confirm="yes").status_code == 403
    assert db_state() == before
    assert _request(client, lease.job_id, "cancel", confirm="yes").status_code == 302
    assert Job.objects.get(pk=lease.job_id).cancellation_requested_at is not None


# -- cost --------------------------------------------------------------------------------------------


def page_queries(client, pk) -> int:
    with CaptureQueriesContext(connection) as queries:
        page(client, pk)
    return len(queries)


def test_the_page_query_count_does_not_grow_with_the_attempts(root):
    clock = FakeClock(now=timezone.now() - timedelta(hours=1))
    store = DurableJobStore(actor="w", lease_seconds=600, clock=clock)
    job = store.defer("demo.op", submission(key="many"))
    store.fail(store.claim(job.pk), "1")
    page(root, job.pk)  # the session and content types, read once
    few = page_queries(root, job.pk)
    for n in range(12):
        store.request_retry(job.pk)
        store.fail(store.claim_next(operations=["demo.op"])[0], str(n))
    assert page_queries(root, job.pk) == few


def test_a_long_error_is_shown_cut_at_the_top_and_in_the_timeline(root, store):
    job = store.defer("demo.op", submission(key="long"))
    store.fail(store.claim(job.pk), "E" * 300_000)
    response = root.get(f"{JOBS}{job.pk}/change/")
    top = story(response.content.decode())
    assert "… truncated: showing 8,192 of 300,000 bytes" in top
    assert "… truncated: showing 1,024 of 300,000 bytes" in top
    assert len(response.content) < 200_000
