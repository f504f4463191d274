"""The admin of workflows: the list, the page with its SVG graph, Cancel and Retry, and what a
job's page says of its workflow, its sleep and its recorded steps.

Proves: the list's progress and state for a workflow of each state, and every page a 200; the
graph has one link per node (one per collapsed group in a layer of over 30 jobs) and the colours
of the statuses it shows; Cancel and Retry need their permissions (a refusal writes nothing),
ask for a confirmation, then go through ``store.workflows`` with the user's name and say what
happened; a workflow job's page links its workflow, parents and children and says how many
parents it waits for; a sleeping job's page says until when, and its slept attempt and recorded
steps are shown; the job list filters by workflow and shows the new statuses. A real browser
takes screenshots at 1,280 px (test-output/screenshots/workflows/).
"""

from __future__ import annotations

import html
import json
import os
import re
from collections import Counter

import pytest
from django.contrib.auth.models import Permission
from django.core.serializers.json import DjangoJSONEncoder
from django.test import Client

from django_durable_jobs import Workflow
from django_durable_jobs.admin import graph
from django_durable_jobs.admin.format import STATUS_COLOURS
from django_durable_jobs.models import Job, JobStep
from django_durable_jobs.models import Workflow as WorkflowRow
from django_durable_jobs.store import DurableJobStore
from tests.support import REPO_ROOT, db_state, submission

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.admin.urls")]

WORKFLOWS = "/admin/durable_jobs/workflow/"
JOBS = "/admin/durable_jobs/job/"
ECHO, FAIL = "tests.wf.echo", "tests.wf.fail"
SHOTS = REPO_ROOT / "test-output" / "screenshots" / "workflows"


@pytest.fixture
def store() -> DurableJobStore:
    return DurableJobStore(actor="worker@host:1", lease_seconds=600)


def jobs_of(handle) -> dict[str, Job]:
    return {job.node: job for job in Job.objects.filter(workflow_id=handle.id)}


def complete(store, job: Job, value=None) -> None:
    store.complete(store.claim(job.pk), value if value is not None else {"ok": job.node})


def fail(store, job: Job) -> None:
    store.fail(store.claim(job.pk), RuntimeError(f"{job.node} broke: the upstream API said 503"))


def fan(name: str = "reports.nightly", width: int = 12, key: str | None = None):
    """Submit fetch → ``width`` parsers → merge (which runs even when a parser fails)."""
    wf = Workflow(name, idempotency_key=key)
    fetch = wf.job(ECHO, {"tag": "fetch"}, name="fetch")
    parts = [
        wf.job(ECHO, {"tag": f"p{i}"}, after=[fetch], name=f"parse-{i:02d}") for i in range(width)
    ]
    wf.job(ECHO, {"tag": "merge"}, after=parts, name="merge", on_upstream_failure="run")
    return wf.submit()


def mid_run(store):
    """Return a fan-out of 12 mid-run: 7 parsers complete, 2 running, 1 failed, 2 pending."""
    handle = fan()
    jobs = jobs_of(handle)
    complete(store, jobs["fetch"])
    for i in range(7):
        complete(store, jobs[f"parse-{i:02d}"])
    fail(store, jobs["parse-07"])
    for i in (8, 9):
        store.claim(jobs[f"parse-{i:02d}"].pk)
    return handle


def page(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def svg_of(text: str) -> str:
    found = re.search(r'<svg class="dj-wf-graph".*?</svg>', text, re.S)
    assert found, "the page has no workflow graph"
    return found[0]


def everything() -> str:
    """Return the jobs, attempts and gates (``db_state``) and the workflow rows, canonically."""
    rows = list(WorkflowRow.objects.order_by("id").values())
    steps = list(JobStep.objects.order_by("id").values())
    return db_state() + json.dumps([rows, steps], cls=DjangoJSONEncoder, sort_keys=True)


# -- the graph, pure -------------------------------------------------------------------------------


def test_a_jobs_layer_is_one_more_than_its_deepest_parents():
    jobs = [
        graph.GraphJob("a", "a", "op", "complete", 1, ()),
        graph.GraphJob("b", "b", "op", "complete", 1, ("a",)),
        graph.GraphJob("c", "c", "op", "running", 1, ("b",)),
        graph.GraphJob("d", "d", "op", "waiting", 0, ("a", "c")),
    ]
    assert graph.layers(jobs) == {"a": 0, "b": 1, "c": 2, "d": 3}
    drawing = graph.layout(jobs, lambda pk: f"/job/{pk}", lambda op: f"/ops/{op}")
    x = {box.key: box.x for box in drawing.boxes}
    assert x["a"] < x["b"] < x["c"] < x["d"]
    assert len(drawing.edges) == 4


@pytest.mark.parametrize("width, boxes", [(graph.COLLAPSE_OVER, 32), (graph.COLLAPSE_OVER + 1, 3)])
def test_a_layer_of_over_30_jobs_of_one_operation_is_one_node(width, boxes):
    root = graph.GraphJob("root", "root", "fetch", "complete", 1, ())
    parts = [
        graph.GraphJob(f"p{i}", f"p{i}", "parse", "failed" if i < 3 else "complete", 1, ("root",))
        for i in range(width)
    ]
    merge = graph.GraphJob("m", "merge", "merge", "waiting", 0, tuple(p.id for p in parts))
    drawing = graph.layout([root, *parts, merge], lambda pk: f"/job/{pk}", lambda op: f"/ops/{op}")
    assert len(drawing.boxes) == boxes
    drawn = graph.svg(drawing)
    assert drawn.count("<a ") == boxes
    if boxes == 3:
        assert f"parse × {width}" in drawn
        assert f"{width - 3} complete" in drawn and "3 failed" in drawn
        assert 'href="/ops/parse"' in drawn
        assert len(drawing.edges) == 2  # root → group → merge, each drawn once


# -- the list and the pages ------------------------------------------------------------------------


def test_the_list_shows_progress_and_state_and_every_page_renders(root, store):
    running = mid_run(store)
    done = Workflow("done.chain")
    done.job(ECHO, {}, name="a")
    done.job(ECHO, {}, name="b", after=["a"])
    done = done.submit()
    complete(store, jobs_of(done)["a"])
    complete(store, jobs_of(done)["b"])
    broken = Workflow("broken.chain")
    broken.job(ECHO, {}, name="a")
    broken.job(FAIL, {}, name="b", after=["a"])
    broken.job(ECHO, {}, name="c", after=["b"])
    broken = broken.submit()
    complete(store, jobs_of(broken)["a"])
    fail(store, jobs_of(broken)["b"])
    stopped = fan("stopped.fan", width=2)
    store.workflows.cancel(stopped.id, by="alice")

    listed = page(root, WORKFLOWS)
    rows = {
        name: row
        for row in re.findall(r"<tr>.*?</tr>", listed, re.S)
        for name in ("reports.nightly", "done.chain", "broken.chain", "stopped.fan")
        if f">{name}<" in row
    }
    assert "8 / 14 complete" in rows["reports.nightly"]
    assert re.search(r">running</span>", rows["reports.nightly"])
    assert "2 / 2 complete" in rows["done.chain"] and ">complete</span>" in rows["done.chain"]
    assert (
        ">failed</span>" in rows["broken.chain"] and "1 failed, 1 cancelled" in rows["broken.chain"]
    )
    assert ">cancelled</span>" in rows["stopped.fan"]
    for handle in (running, done, broken, stopped):
        shown = page(root, f"{WORKFLOWS}{handle.id}/change/")
        assert svg_of(shown)
    shown = page(root, f"{WORKFLOWS}{stopped.id}/change/")
    assert "Cancellation of the workflow was requested at" in shown and "by alice." in shown
    # Found by a part of its name, by its id, by its key; not by another's.
    assert "stopped.fan" in page(root, f"{WORKFLOWS}?q=stopped")
    assert "done.chain" not in page(root, f"{WORKFLOWS}?q=stopped")
    assert "stopped.fan" in page(root, f"{WORKFLOWS}?q={stopped.id}")
    keyed = fan("keyed", width=1, key="nightly-2026-12-04")
    assert "keyed" in page(root, f"{WORKFLOWS}?q=nightly-2026-12-04")
    assert keyed.id
    assert page(root, f"{WORKFLOWS}?scope__exact=default")


def test_the_graph_links_every_node_to_its_job_coloured_by_status(root, store):
    handle = mid_run(store)
    shown = page(root, f"{WORKFLOWS}{handle.id}/change/")
    drawn = svg_of(shown)
    links = re.findall(r'<a href="([^"]+)" class="dj-wf-node dj-wf-(\w+)"', drawn)
    assert len(links) == 14
    jobs = jobs_of(handle)
    assert sorted(url for url, _ in links) == sorted(
        f"{JOBS}{job.pk}/change/" for job in jobs.values()
    )
    assert Counter(status for _, status in links) == {
        "complete": 8,
        "running": 2,
        "failed": 1,
        "pending": 2,
        "waiting": 1,
    }
    for status in ("complete", "running", "failed", "pending", "waiting"):
        assert STATUS_COLOURS[status] in drawn
    assert drawn.count('<path class="dj-wf-edge"') == 24
    assert ">merge</text>" in drawn and ">waiting for 4</text>" in drawn  # its parents left
    # The legend counts them and links to the job list of each status in this workflow.
    legend = re.findall(r'status__exact=(\w+)"[^>]*>.*?<strong>(\d+)</strong>', shown, re.S)
    assert dict(legend) == {
        "failed": "1",
        "running": "2",
        "pending": "2",
        "waiting": "1",
        "complete": "8",
    }
    assert "8 / 14 complete" in shown
    # The table lists each job, linked: the failed first, then running, pending and waiting,
    # the complete last; in the order they were declared within a status.
    table = shown.split('<table class="dj-wf-jobs">')[1].split("</table>")[0]
    names = re.findall(r'<td><a href="[^"]+">([\w-]+)</a></td>', table)
    assert names == [
        *(f"parse-{i:02d}" for i in (7, 8, 9, 10, 11)),
        "merge",
        "fetch",
        *(f"parse-{i:02d}" for i in range(7)),
    ]


def test_a_layer_of_198_jobs_is_drawn_as_one_node_linking_to_their_list(root, store):
    handle = fan("big.fan", width=198)
    jobs = jobs_of(handle)
    complete(store, jobs["fetch"])
    for i in range(5):
        complete(store, jobs[f"parse-{i:02d}"])
    fail(store, jobs["parse-05"])
    drawn = svg_of(page(root, f"{WORKFLOWS}{handle.id}/change/"))
    assert drawn.count("<a ") == 3
    assert f"{ECHO} × 198" in drawn
    assert "1 failed, 192 pending, 5 complete" in drawn
    group = re.search(r'<a href="([^"]+)" class="dj-wf-node dj-wf-group"', drawn)[1]
    # The group links to the job list of its operation in this workflow (a status narrows it).
    assert f"workflow={handle.id}" in group and f"operation__exact={ECHO}" in group
    listed = page(root, html.unescape(group) + "&status__exact=failed")
    assert re.findall(rf"{JOBS}([0-9a-f-]+)/change/", listed) == [str(jobs["parse-05"].pk)]
    # The table under the graph lists the first 200 jobs; here all of them.
    table = page(root, f"{WORKFLOWS}{handle.id}/change/").split('<table class="dj-wf-jobs">')[1]
    assert table.count("<tr>") == 201


def test_the_job_list_filters_by_workflow_and_shows_the_new_statuses(root, store):
    one, other = fan("one", width=2), fan("other", width=2)
    listed = page(root, f"{JOBS}?workflow={one.id}")
    for job in jobs_of(one).values():
        assert f"{JOBS}{job.pk}/change/" in listed
    for job in jobs_of(other).values():
        assert f"{JOBS}{job.pk}/change/" not in listed
    assert re.search(rf"background:{STATUS_COLOURS['waiting']}[^>]*>waiting<", listed)
    assert f'href="{WORKFLOWS}{one.id}/change/"' in listed  # each row links its workflow
    assert "?status__exact=sleeping" in page(root, JOBS)
    assert "?status__exact=waiting" in page(root, JOBS)
    unclaimed = page(root, f"{JOBS}?ownership=unclaimed")
    assert f"{JOBS}{jobs_of(one)['merge'].pk}/change/" in unclaimed
    assert root.get(f"{JOBS}?workflow=not-a-uuid").status_code in (200, 302)


# -- cancel and retry ------------------------------------------------------------------------------


def staff(django_user_model, *codenames: str) -> Client:
    user = django_user_model.objects.create_user("viewer", "v@example.com", "pw", is_staff=True)
    for codename in ("view_workflow", "view_job", *codenames):
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client()
    client.force_login(user)
    return client


def test_cancel_and_retry_are_refused_without_their_permissions(django_user_model, store):
    handle = mid_run(store)
    viewer = staff(django_user_model)
    shown = page(viewer, f"{WORKFLOWS}{handle.id}/change/")
    assert "Cancel workflow…" not in shown and "Retry workflow…" not in shown
    before = everything()
    for kind in ("cancel", "retry"):
        url = f"{WORKFLOWS}{handle.id}/request/{kind}/"
        assert viewer.post(url, {"confirm": "yes"}).status_code == 403
        assert viewer.post(url).status_code == 403
    action = viewer.post(
        WORKFLOWS, {"action": "cancel_workflows", "_selected_action": [str(handle.id)]}
    )
    assert action.status_code == 200  # "no action selected": the action is not offered
    assert everything() == before


def test_cancel_asks_first_then_cancels_through_the_store_and_says_what_it_did(
    django_user_model, store
):
    handle = mid_run(store)
    operator = staff(django_user_model, "cancel_workflow")
    shown = page(operator, f"{WORKFLOWS}{handle.id}/change/")
    assert "Cancel workflow…" in shown and "Retry workflow…" not in shown
    url = f"{WORKFLOWS}{handle.id}/request/cancel/"
    before = everything()
    assert operator.get(url).status_code == 405
    asked = operator.post(url)
    assert asked.status_code == 200 and "Yes, cancel the workflow" in asked.content.decode()
    assert everything() == before
    done = operator.post(url, {"confirm": "yes"}, follow=True)
    said = [str(m) for m in done.context["messages"]]
    assert said == [
        f"Workflow reports.nightly ({handle.id}): 3 jobs cancelled at once; 2 running jobs "
        "asked to stop (they stop when their owners see the request)."
    ]
    statuses = Counter(job.status for job in jobs_of(handle).values())
    assert statuses == {"complete": 8, "cancelled": 3, "running": 2, "failed": 1}
    row = WorkflowRow.objects.get(pk=handle.id)
    assert row.requested_by == "viewer" and row.cancel_requested_at is not None
    assert "Cancelled with its workflow by viewer." in jobs_of(handle)["merge"].error


def test_retry_runs_the_failed_and_cancelled_jobs_again(root, store):
    broken = Workflow("broken.chain")
    broken.job(ECHO, {}, name="a")
    broken.job(FAIL, {}, name="b", after=["a"])
    broken.job(ECHO, {}, name="c", after=["b"])
    broken = broken.submit()
    complete(store, jobs_of(broken)["a"])
    fail(store, jobs_of(broken)["b"])
    shown = page(root, f"{WORKFLOWS}{broken.id}/change/")
    assert "Retry workflow…" in shown and "Cancel workflow…" not in shown
    done = root.post(f"{WORKFLOWS}{broken.id}/request/retry/", {"confirm": "yes"}, follow=True)
    said = [str(m) for m in done.context["messages"]]
    assert said == [
        f"Workflow broken.chain ({broken.id}): 2 jobs will run again (1 by a retry request, "
        "1 waiting for its parents)."
    ]
    jobs = jobs_of(broken)
    assert jobs["b"].retry_requested_at is not None and jobs["c"].status == "waiting"
    again = root.post(f"{WORKFLOWS}{broken.id}/request/retry/", {"confirm": "yes"}, follow=True)
    # b has not run again yet: still failed, its retry request is made again.
    assert [str(m) for m in again.context["messages"]] == [
        f"Workflow broken.chain ({broken.id}): 1 job will run again (1 by a retry request)."
    ]
    for _ in range(2):  # b by its retry request, then c, released by b's completion
        (lease,) = store.claim_next()
        store.complete(lease, {})
    done = root.post(f"{WORKFLOWS}{broken.id}/request/retry/", {"confirm": "yes"}, follow=True)
    assert [str(m) for m in done.context["messages"]] == [
        f"Workflow broken.chain ({broken.id}): nothing to retry; no job failed or was cancelled."
    ]


# -- a workflow job's page, a sleeping job's page --------------------------------------------------


def test_a_workflow_jobs_page_links_its_workflow_parents_and_children(root, store):
    handle = mid_run(store)
    jobs = jobs_of(handle)
    shown = page(root, f"{JOBS}{jobs['parse-03'].pk}/change/")
    assert f'href="{WORKFLOWS}{handle.id}/change/"' in shown
    assert "as <strong>parse-03</strong>" in shown
    assert re.search(rf'href="{JOBS}{jobs["fetch"].pk}/change/" class="dj-wf-parent"', shown)
    assert re.search(rf'href="{JOBS}{jobs["merge"].pk}/change/" class="dj-wf-child"', shown)
    merge = page(root, f"{JOBS}{jobs['merge'].pk}/change/")
    banner = re.search(r'durable-jobs-banner-parents" role="status">([^<]+)<', merge)[1]
    # parse-07 failed: merge runs anyway (on_upstream_failure="run"), so it waits for 4.
    assert banner == (
        "Waiting for 4 of its 12 parents to complete (parse-08, parse-09, parse-10, "
        "parse-11); it becomes pending when the last one does."
    )
    assert merge.count('class="dj-wf-parent"') == 12
    assert "none: the workflow ends here" in merge
    assert "Nobody yet: it waits for its parents in its workflow to complete." in merge
    assert "Workflow and sleep</h2>" in merge and re.search(
        r"(?i)waiting on:</label>\s*<div[^>]*>4</div>", merge
    )
    plain = store.defer(ECHO, submission(key="plain"))
    assert "Workflow and sleep</h2>" not in page(root, f"{JOBS}{plain.pk}/change/")


def test_a_sleeping_jobs_page_says_until_when_and_shows_its_steps(root, store):
    job = store.defer("tests.wf.sleeper", submission({"seconds": 3600}, key="nap"))
    lease = store.claim(job.pk)
    store.record_step(lease, 0, "before", {"rows": 41, "note": "x" * 5000})
    until = store.sleep(lease, 3600)
    shown = page(root, f"{JOBS}{job.pk}/change/")
    from django.utils import timezone

    when = timezone.localtime(until).strftime("%Y-%m-%d %H:%M:%S")
    banner = re.search(r'durable-jobs-banner-sleeping" role="status">([^<]+)<', shown)[1]
    assert banner.startswith(f"Sleeping until {when} (in ")
    assert re.search(rf"background:{STATUS_COLOURS['sleeping']}[^>]*>sleeping<", shown)
    assert re.search(r'class="durable-jobs-badge"[^>]*>slept<', shown)  # the attempt
    steps = shown.split('<table class="dj-steps-table">')[1].split("</table>")[0]
    assert "<strong>before</strong>" in steps and "&quot;note&quot;: &quot;xxx" in steps
    assert "xxxx" in steps and "x" * 2100 not in steps  # pretty-printed and cut
    assert re.search(rf"(?i)sleep until:</label>\s*<div[^>]*>{when}</div>", shown)


# -- screenshots -----------------------------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"


@pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason=f"{CHROMIUM} is missing")
def test_screenshots_at_1280_px(live_server, store, django_user_model, monkeypatch):
    from tests.admin.test_browser import CHROMIUM_ARGS, PASSWORD

    sync_api = pytest.importorskip("playwright.sync_api")
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    handle = mid_run(store)
    big = fan("ingest.big", width=198)
    jobs = jobs_of(big)
    complete(store, jobs["fetch"])
    for i in range(120):
        complete(store, jobs[f"parse-{i:02d}"])
    for i in range(120, 123):
        fail(store, jobs[f"parse-{i:02d}"])
    for i in range(123, 131):
        store.claim(jobs[f"parse-{i:02d}"].pk)
    sleeper = store.defer("tests.wf.sleeper", submission({"seconds": 5400}, key="nap"))
    lease = store.claim(sleeper.pk)
    store.record_step(lease, 0, "before", {"rows": 41, "source": "s3://bucket/2026-12-04.csv"})
    store.sleep(lease, 5400)
    child = jobs_of(handle)["parse-03"]
    django_user_model.objects.create_superuser("oncall", "oncall@example.com", PASSWORD)
    SHOTS.mkdir(parents=True, exist_ok=True)
    shots = {
        "workflow-fan-out-mid-run.png": f"{WORKFLOWS}{handle.id}/change/",
        "workflow-200-jobs-collapsed.png": f"{WORKFLOWS}{big.id}/change/",
        "job-workflow-child.png": f"{JOBS}{child.pk}/change/",
        "job-sleeping.png": f"{JOBS}{sleeper.pk}/change/",
        "workflow-list.png": WORKFLOWS,
    }
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page(viewport={"width": 1280, "height": 900})
            tab.goto(f"{live_server.url}/admin/login/?next=/admin/")
            tab.fill("#id_username", "oncall")
            tab.fill("#id_password", PASSWORD)
            tab.click("input[type=submit], button[type=submit]")
            tab.wait_for_url(f"{live_server.url}/admin/")
            for name, url in shots.items():
                tab.goto(f"{live_server.url}{url}")
                tab.screenshot(path=str(SHOTS / name), full_page=False)
                width = tab.evaluate("document.documentElement.scrollWidth")
                assert width <= 1280, (name, width)
        finally:
            browser.close()


def test_the_list_actions_cancel_each_selected_workflow_and_unknown_requests_are_404(root, store):
    first, second = fan("first", width=2), fan("second", width=2)
    complete(store, jobs_of(second)["fetch"])
    done = root.post(
        WORKFLOWS,
        {"action": "cancel_workflows", "_selected_action": [str(first.id), str(second.id)]},
        follow=True,
    )
    assert [str(m) for m in done.context["messages"]] == [
        f"Workflow first ({first.id}): 4 jobs cancelled at once.",
        f"Workflow second ({second.id}): 3 jobs cancelled at once.",
    ]
    assert {job.status for job in jobs_of(first).values()} == {"cancelled"}
    before = everything()
    missing = "00000000-0000-0000-0000-000000000000"
    assert root.post(f"{WORKFLOWS}{missing}/request/cancel/", {"confirm": "yes"}).status_code == 404
    assert (
        root.post(f"{WORKFLOWS}{first.id}/request/delete/", {"confirm": "yes"}).status_code == 404
    )
    assert root.get(f"{WORKFLOWS}add/").status_code == 403
    assert root.post(f"{WORKFLOWS}{first.id}/delete/", {"post": "yes"}).status_code == 403
    assert everything() == before


def test_the_lists_state_is_the_stores_rule_for_every_mix_of_statuses():
    from itertools import combinations

    from django_durable_jobs.admin.workflows import workflow_state
    from django_durable_jobs.rules.graph import state_of
    from django_durable_jobs.rules.vocabulary import JobStatus

    class Row:
        def __init__(self, status, again):
            self.status = status
            self.retry_requested_at = "now" if again else None

    statuses = list(JobStatus.values)
    for size in range(1, len(statuses) + 1):
        for mix in combinations(statuses, size):
            for again in (False, True):  # a failed or cancelled job with a retry to come
                rows = [Row(s, again and s in ("failed", "cancelled")) for s in mix]
                retrying = sum(row.retry_requested_at is not None for row in rows)
                assert workflow_state(Counter({s: 2 for s in mix}), retrying) == state_of(rows), (
                    mix,
                    again,
                )
