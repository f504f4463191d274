"""The job admin lists, filters, searches and shows jobs read-only, cheaply, on every database.

Proves: every changelist column renders (ownership badge, progress bar, relative heartbeat and lease
times, owner worker liveness); the ownership filter selects exactly the rows the Python assessment
(§2) puts in each state; status/operation/scope/queue filters; search by exact id and key; the
detail page (pretty JSON and stored text, attempts newest first, banners); nobody can add, change
or delete; the changelist runs a constant number of queries whatever the page holds; and on
PostgreSQL an unfiltered changelist never counts the whole table.
"""

from __future__ import annotations

import itertools
import json
import re
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.html import escape

from django_durable_jobs.admin import EstimatedCountPaginator
from django_durable_jobs.models import Job, JobAttempt, WorkerProcess
from django_durable_jobs.rules.vocabulary import assess_ownership
from django_durable_jobs.rules.vocabulary import proposal_sha256 as sha
from django_durable_jobs.store import DurableJobStore
from tests.support import FakeClock, db_state, submission

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.admin.urls")]

CHANGELIST = "/admin/durable_jobs/job/"
GOOD = '{"n": 1}'
RECENT = ("operation", "scope", "queue")


def detail_url(job_id) -> str:
    return f"{CHANGELIST}{job_id}/change/"


def running_job(clock, *, lease: float, key: str, worker: bool = True, op: str = "demo.op"):
    store = DurableJobStore(actor="worker-a", lease_seconds=lease, clock=clock)
    job = store.defer(op, submission({"k": key}, key=key))
    if worker:
        store.register_worker(concurrency=1)
    return store, store.claim(job.pk), job.pk


def legacy_rows(now) -> list[Job]:
    """Rows of every kind the §2 assessment distinguishes, leases an hour from ``now``."""
    combos = itertools.product(
        [True, None],  # proposal_checked: written by the app, or some other way
        ["pending", "running", "complete", "failed", "cancelled", "orphaned"],
        [None, "", "owner-a"],
        [None, now - timedelta(hours=1), now + timedelta(hours=1)],
        [(0, 0), (1, 1)],
        [(GOOD, sha(GOOD)), (GOOD, "0" * 64), (None, "")],
    )
    return [
        Job(
            id=uuid.UUID(int=n + 1),
            operation=f"op.{n % 3}",
            status=status,
            scope=f"scope-{n % 2}",
            queue=f"q{n % 4}",
            idempotency_key=f"key-{n}",
            proposal=text,
            proposal_hash=digest,
            proposal_checked=checked,
            created_at=now - timedelta(days=1),
            run_after=now - timedelta(days=1),
            owner_id=owner,
            lease_expires_at=lease,
            fencing_epoch=epoch,
            attempts=attempts,
        )
        for n, (checked, status, owner, lease, (epoch, attempts), (text, digest)) in enumerate(
            combos
        )
    ]


def listed(response) -> set:
    assert response.status_code == 200, response.status_code
    return {job.pk for job in response.context["cl"].queryset}


# -- columns ----------------------------------------------------------------------------------------


def test_every_changelist_column_renders_for_a_running_job(root):
    clock = FakeClock(now=timezone.now() - timedelta(seconds=12))
    store, lease, pk = running_job(clock, lease=30, key="cols")
    store.progress(lease, 42)
    response = root.get(CHANGELIST)
    html = response.content.decode()
    row = re.search(rf"<tr>.*?{pk}.*?</tr>", html, re.S).group(0)
    assert "demo.op" in row and "default" in row
    assert re.search(r'class="durable-jobs-badge"[^>]*>running<', row)
    # A running job's ownership goes without saying while it is current.
    assert not re.search(r'class="durable-jobs-badge"[^>]*>current<', row)
    assert 'class="durable-jobs-progress"' in row and "width:42%" in row
    assert re.search(r"heartbeat 1[2-5] s ago", row), row
    assert re.search(r"expires in 1[5-8] s", row), row
    assert "worker-a" in row  # claimed_by
    assert re.search(r'class="durable-jobs-badge"[^>]*>alive<', row)
    assert "attempt 1 · epoch 1" in row


def test_owner_worker_column_tells_alive_stale_stopped_and_unknown(root, near_now):
    _, _, alive = running_job(near_now, lease=600, key="alive")
    stale_store, _, stale = running_job(near_now, lease=600, key="stale")
    WorkerProcess.objects.filter(owner_id=stale_store.owner_id).update(lease_seconds=10)
    stopped_store, _, stopped = running_job(near_now, lease=600, key="stopped")
    stopped_store.worker_stopped()
    _, _, unknown = running_job(near_now, lease=600, key="unknown", worker=False)
    html = root.get(CHANGELIST).content.decode()
    for pk, state in [
        (alive, "alive"),
        (stale, "stale"),
        (stopped, "stopped"),
        (unknown, "unknown"),
    ]:
        row = re.search(rf"<tr>.*?{pk}.*?</tr>", html, re.S).group(0)
        assert re.search(rf'<td class="field-lease"><span[^>]*>{state}<', row), state


def test_terminal_and_pending_rows_render_dashes_for_lease_columns(root, near_now):
    store = DurableJobStore(actor="a", clock=near_now)
    pk = store.defer("demo.op", submission(key="pending")).pk
    html = root.get(CHANGELIST).content.decode()
    row = re.search(rf"<tr>.*?{pk}.*?</tr>", html, re.S).group(0)
    assert '<td class="field-lease">-</td>' in row
    assert re.search(r'class="durable-jobs-badge"[^>]*>pending<', row)
    assert ">unclaimed<" not in row  # the ownership a pending job normally has


# -- filters and search -----------------------------------------------------------------------------


def test_ownership_filter_agrees_with_the_python_assessment_for_every_kind_of_row(root):
    now = timezone.now()
    Job.objects.bulk_create(legacy_rows(now), batch_size=500)
    expected = {}
    for job in Job.objects.all():
        expected.setdefault(assess_ownership(job, timezone.now()), set()).add(job.pk)
    assert set(expected) == {"terminal", "unclaimed", "legacy-unknown", "expired", "current"}
    for state, pks in expected.items():
        response = root.get(CHANGELIST, {"ownership": state})
        assert listed(response) == pks, state
        assert response.context["cl"].result_count == len(pks)


def test_unknown_ownership_value_is_reported_not_ignored(root):
    Job.objects.bulk_create(legacy_rows(timezone.now())[:5])
    response = root.get(CHANGELIST, {"ownership": "bogus"})
    assert response.status_code == 302 and response["Location"].endswith("?e=1")


@pytest.mark.parametrize(
    "param, value",
    [("status", "failed"), ("operation", "op.1"), ("scope", "scope-0"), ("queue", "q3")],
)
def test_field_filters_select_exactly_the_matching_rows(root, param, value):
    Job.objects.bulk_create(legacy_rows(timezone.now()), batch_size=500)
    wanted = set(Job.objects.filter(**{param: value}).values_list("pk", flat=True))
    assert 0 < len(wanted) < Job.objects.count()
    assert listed(root.get(CHANGELIST, {param + "__exact": value})) == wanted


def test_value_filters_offer_recent_and_registered_values_and_select_null(root):
    rows = legacy_rows(timezone.now())[:6]
    rows[0].scope = None
    Job.objects.bulk_create(rows)
    response = root.get(CHANGELIST)
    specs = {getattr(s, "parameter_name", None): s for s in response.context["cl"].filter_specs}
    offered = {name: [v for v, _ in specs[f"{name}__exact"].lookup_choices] for name in RECENT}
    assert offered["scope"] == ["scope-0", "scope-1", "(null)"]
    assert offered["queue"] == ["q0", "q1", "q2", "q3"]
    assert {"op.0", "op.1", "op.2", "tests.noop"} <= set(offered["operation"])  # + registered
    assert listed(root.get(CHANGELIST, {"scope__exact": "(null)"})) == {rows[0].pk}
    assert listed(root.get(CHANGELIST, {"queue__exact": "q-unseen"})) == set()


def test_filters_combine_with_each_other(root):
    Job.objects.bulk_create(legacy_rows(timezone.now()), batch_size=500)
    now = timezone.now()
    wanted = {
        j.pk
        for j in Job.objects.filter(operation="op.0")
        if assess_ownership(j, now) == "legacy-unknown"
    }
    assert wanted
    response = root.get(CHANGELIST, {"operation__exact": "op.0", "ownership": "legacy-unknown"})
    assert listed(response) == wanted


def test_search_by_exact_id_and_by_idempotency_key(root):
    Job.objects.bulk_create(legacy_rows(timezone.now())[:20])
    target = uuid.UUID(int=7)
    assert listed(root.get(CHANGELIST, {"q": str(target)})) == {target}
    assert listed(root.get(CHANGELIST, {"q": target.hex})) == {target}
    assert listed(root.get(CHANGELIST, {"q": "key-12"})) == {uuid.UUID(int=13)}
    assert listed(root.get(CHANGELIST, {"q": "key-1"})) == {uuid.UUID(int=2)}  # exact, no prefix
    assert listed(root.get(CHANGELIST, {"q": str(uuid.UUID(int=999))})) == set()
    assert listed(root.get(CHANGELIST, {"q": "no-such-key"})) == set()


# -- detail page ------------------------------------------------------------------------------------


def test_detail_page_pretty_prints_json_and_shows_the_stored_text(root, near_now):
    store = DurableJobStore(actor="a", lease_seconds=600, clock=near_now)
    payload = {"items": [1, 2], "name": "Zoë <b>"}
    job = store.defer("demo.op", submission(payload, key="detail"))
    lease = store.claim(job.pk)
    store.checkpoint(lease, '{"step":3}')
    store.complete(lease, {"ok": True, "rows": [1]})
    row = Job.objects.get(pk=job.pk)
    html = root.get(detail_url(job.pk)).content.decode()
    for text in (row.proposal, row.checkpoint, row.result):
        pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        assert f'<pre class="durable-jobs-json">{escape(pretty)}</pre>' in html
        assert f'<pre class="durable-jobs-raw">{escape(text)}</pre>' in html
    assert "<b>" not in html.split('class="durable-jobs-json"')[1].split("</pre>")[0]
    assert "durable-jobs-banner" not in html
    form = html.split('id="job_form"')[1].split("</form>")[0]
    inputs = re.findall(r"<input[^>]*>", form)
    assert inputs and all('type="hidden"' in tag for tag in inputs), inputs
    assert "<textarea" not in form and "<select" not in form and 'name="_save"' not in form


def test_detail_page_lists_attempts_newest_first(root, near_now):
    first = DurableJobStore(actor="first", lease_seconds=10, clock=near_now)
    second = DurableJobStore(actor="second", lease_seconds=600, clock=near_now)
    job = first.defer("demo.op", submission(key="attempts"))
    first.claim(job.pk)
    near_now.advance(11)
    lease = second.claim(job.pk)  # epoch 1 ends interrupted
    second.fail(lease, "boom")
    response = root.get(detail_url(job.pk))
    steps = response.context["job_timeline"]
    assert [(step.epoch, step.outcome) for step in steps] == [(2, "failed"), (1, "interrupted")]
    html = response.content.decode()
    assert "boom" in html
    assert "its lease expired before it ended" in html  # what "interrupted" means


def test_detail_banner_for_a_pending_cancellation_request(root, near_now):
    _, _, pk = running_job(near_now, lease=600, key="banner")
    DurableJobStore(actor="ops").request_cancel(pk)
    html = root.get(detail_url(pk)).content.decode()
    banner = re.search(r'<div class="durable-jobs-banner[^"]*"[^>]*>(.*?)</div>', html, re.S)
    assert banner and "Cancellation requested at" in banner.group(1)
    assert ">alive<" in html and ">current<" in html


def test_detail_banners_for_a_retry_request_and_a_diagnostic_error(root, near_now):
    store = DurableJobStore(actor="a", lease_seconds=600, clock=near_now)
    job = store.defer("demo.op", submission(key="retry-banner"))
    store.fail(store.claim(job.pk), "nope")
    store.request_retry(job.pk)
    html = root.get(detail_url(job.pk)).content.decode()
    assert re.search(r'class="durable-jobs-banner[^"]*"[^>]*>Retry requested at ', html)
    bad = legacy_rows(timezone.now())[1]  # pending with a wrong proposal hash
    assert bad.status == "pending" and bad.proposal_hash == "0" * 64
    bad.save()
    html = root.get(detail_url(bad.pk)).content.decode()
    assert re.search(r'class="durable-jobs-banner[^"]*"[^>]*>Row defect: Defective', html)


# -- no add, change or delete -----------------------------------------------------------------------


def test_nobody_can_add_change_or_delete_jobs_or_attempts(root, near_now):
    store = DurableJobStore(actor="a", lease_seconds=600, clock=near_now)
    job = store.defer("demo.op", submission(key="ro"))
    store.fail(store.claim(job.pk), "x")
    attempt = JobAttempt.objects.get()
    before = db_state()
    assert root.get(f"{CHANGELIST}add/").status_code == 403
    assert root.get(f"{CHANGELIST}{job.pk}/delete/").status_code == 403
    assert root.post(f"{CHANGELIST}{job.pk}/delete/", {"post": "yes"}).status_code == 403
    change = root.post(detail_url(job.pk), {"status": "complete", "operation": "x"})
    assert change.status_code == 403
    attempts = "/admin/durable_jobs/jobattempt/"
    assert root.get(f"{attempts}add/").status_code == 403
    assert root.get(f"{attempts}{attempt.pk}/delete/").status_code == 403
    assert root.post(f"{attempts}{attempt.pk}/change/", {"outcome": "complete"}).status_code == 403
    assert db_state() == before
    actions = root.get(CHANGELIST).context["action_form"].fields["action"].choices
    assert "delete_selected" not in [name for name, _ in actions]


def test_staff_with_view_permission_sees_the_read_only_list(client, django_user_model):
    user = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(user)
    Job.objects.bulk_create(legacy_rows(timezone.now())[:3])
    assert client.get(CHANGELIST).status_code == 200
    assert client.get(detail_url(uuid.UUID(int=1))).status_code == 200
    assert client.get(f"{CHANGELIST}add/").status_code == 403


# -- cost -------------------------------------------------------------------------------------------


def populate(count: int, now) -> None:
    """Add ``count`` rows of mixed states, half of them running with a worker row."""
    start = Job.objects.count()
    rows = []
    for n in range(start, start + count):
        running = n % 2 == 0
        rows.append(
            Job(
                operation=f"op.{n % 3}",
                status="running" if running else "failed",
                scope="default",
                idempotency_key=f"cost-{n}",
                proposal=GOOD,
                proposal_hash=sha(GOOD),
                created_at=now,
                run_after=now,
                heartbeat_at=now,
                owner_id=f"owner-{n}" if running else None,
                lease_expires_at=now + timedelta(seconds=(n % 4 - 1) * 600),
                fencing_epoch=1,
                attempts=1,
                progress=n % 100,
            )
        )
    Job.objects.bulk_create(rows)
    WorkerProcess.objects.bulk_create(
        WorkerProcess(
            owner_id=job.owner_id,
            actor="w",
            host="h",
            pid=1,
            started_at=now,
            heartbeat_at=now,
            lease_seconds=30,
            concurrency=1,
        )
        for job in rows
        if job.owner_id and int(job.owner_id.split("-")[1]) % 4 == 0
    )


def changelist_queries(client, url: str = CHANGELIST) -> list[str]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200
    return [q["sql"] for q in ctx.captured_queries]


@pytest.mark.parametrize(
    "url", [CHANGELIST, CHANGELIST + "?ownership=current&status__exact=running"]
)
def test_changelist_query_count_does_not_grow_with_the_rows_shown(root, url):
    now = timezone.now()
    populate(5, now)
    few = changelist_queries(root, url)
    populate(45, now)
    response = root.get(url)
    assert len(response.context["cl"].result_list) > 5
    many = changelist_queries(root, url)
    assert len(many) == len(few), "\n".join(many)


def test_attempt_and_worker_lists_run_constant_queries(root, near_now):
    store = DurableJobStore(actor="a", lease_seconds=600, clock=near_now)
    store.register_worker(concurrency=1)

    def add(n: int) -> None:
        for i in range(n):
            job = store.defer("demo.op", submission(key=f"a-{uuid.uuid4()}"))
            store.fail(store.claim(job.pk), f"e{i}")
            DurableJobStore(actor=f"w{i}").register_worker(concurrency=1)

    for url in ("/admin/durable_jobs/jobattempt/", "/admin/durable_jobs/workerprocess/"):
        add(2)
        few = changelist_queries(root, url)
        add(8)
        assert len(changelist_queries(root, url)) == len(few), url
    html = root.get("/admin/durable_jobs/workerprocess/").content.decode()
    assert ">alive<" in html and re.search(r"\d+ s ago", html)
    html = root.get("/admin/durable_jobs/jobattempt/", {"job__operation": "demo.op"}).content
    assert b"demo.op" in html
    attempt = JobAttempt.objects.first()
    page = root.get(f"/admin/durable_jobs/jobattempt/{attempt.pk}/change/")
    assert page.status_code == 200 and attempt.error in page.content.decode()
    worker = WorkerProcess.objects.first()
    assert root.get(f"/admin/durable_jobs/workerprocess/{worker.pk}/change/").status_code == 200


def test_unfiltered_changelist_never_counts_the_whole_table(root, monkeypatch):
    now = timezone.now()
    populate(30, now)
    queries = changelist_queries(root)
    counts = [q for q in queries if "COUNT(" in q.upper()]
    assert counts, queries
    if connection.vendor == "postgresql":
        assert all("LIMIT" in q.upper() for q in counts), counts
    assert root.get(CHANGELIST).context["cl"].result_count == 30  # small tables: exact
    filtered = root.get(CHANGELIST, {"status__exact": "running"}).context["cl"]
    assert filtered.result_count == 15


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the estimate is a PostgreSQL catalogue read"
)
def test_postgresql_paginator_switches_to_the_planner_estimate_past_the_threshold(
    root, monkeypatch
):
    populate(40, timezone.now())
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Job._meta.db_table}")
    monkeypatch.setattr(EstimatedCountPaginator, "exact_below", 10)
    every_job = f"{CHANGELIST}?scheduled=all"  # no condition at all: the catalogue's estimate
    queries = changelist_queries(root, every_job)
    assert any("reltuples" in q for q in queries)
    assert all("LIMIT" in q.upper() for q in queries if "COUNT(" in q.upper())
    assert root.get(every_job).context["cl"].result_count == 40  # ANALYZE made it exact
    # A filtered list (the default one hides completed scheduled jobs) gets its plan's estimate.
    queries = changelist_queries(root, f"{CHANGELIST}?status__exact=failed")
    assert any(q.startswith("EXPLAIN") for q in queries)
    assert all("LIMIT" in q.upper() for q in queries if "COUNT(" in q.upper())
    cl = root.get(CHANGELIST, {"status__exact": "failed"}).context["cl"]
    assert 11 <= cl.result_count <= 40  # the plan's estimate, at least the bounded count


def test_changelist_reads_no_payload_columns(root):
    populate(3, timezone.now())
    queries = changelist_queries(root)
    for column in ("result", "checkpoint"):
        assert not any(re.search(rf'[`"]{column}[`"]', q) for q in queries), column
    # Of the error, only its first characters, for the error column of failed jobs.
    reading = [q for q in queries if re.search(r'[`"]error[`"]', q)]
    assert reading and all(re.search(r'SUBSTR(ING)?\([^)]*[`"]error[`"]', q) for q in reading)
    select = [q for q in queries if "ownership_sql" in q and "COUNT(" not in q.upper()]
    assert select and re.search(r', [`"]durable_jobs_job[`"]\.[`"]operation[`"],', select[-1])
    assert not re.search(r', [`"]durable_jobs_job[`"]\.[`"]proposal[`"],', select[-1])
