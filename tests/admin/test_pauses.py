"""Pauses in the admin: the dashboard's panels, pause and resume (confirmed, POST, CSRF,
``pause_work``), the job list's action, the paused badge, a held-back job's page, the history.

Proves: a pause and a resume each ask for a confirmation first and write nothing until it is
given; a user without ``durable_jobs.pause_work`` sees no button and is refused (403, or the
action is not offered) with nothing written; the dashboard lists what is paused with the jobs
it holds, and the limits in force with the jobs they hold back and the key at its limit; a
pending job's page says why it waits.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from django_durable_jobs.models import Job, JobPause, RateBucket
from django_durable_jobs.rules import flow, registry
from django_durable_jobs.store import DurableJobStore
from tests.flow.pause_support import pause_state
from tests.support import submission

pytestmark = pytest.mark.django_db(transaction=True)

DASHBOARD = "/admin/durable_jobs/dashboard/"
PAUSE = "/admin/durable_jobs/jobpause/pause/"
JOBS = "/admin/durable_jobs/job/"


def resume_url(pk: int) -> str:
    return f"/admin/durable_jobs/jobpause/{pk}/resume/"


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


@pytest.fixture
def viewer(django_user_model):
    """A staff user who may view jobs but not pause (every job permission but pause_work)."""
    user = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    for codename in ("view_job", "cancel_job", "retry_job", "view_jobpause"):
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client()
    client.force_login(user)
    return client


def test_pausing_from_the_dashboard_asks_first_then_pauses_and_the_panel_offers_resume(root):
    store = DurableJobStore()
    held = [store.defer("demo.op", submission({"n": n}), queue="mail") for n in range(3)]
    page = root.get(DASHBOARD).content.decode()
    assert "Nothing is paused" in page and 'action="/admin/durable_jobs/jobpause/pause/"' in page

    form = {"target": "queue", "name": "mail", "scope": "", "reason": "provider down"}
    asked = root.post(PAUSE, form)
    assert asked.status_code == 200 and "Pause queue mail in every scope?" in asked.content.decode()
    assert not JobPause.objects.exists()  # nothing until confirmed

    done = root.post(PAUSE, {**form, "confirm": "yes"}, follow=True)
    pause = JobPause.objects.get()
    assert (pause.paused_by, pause.reason, pause.active) == ("admin:root", "provider down", True)
    assert messages_of(done) == [
        "Paused queue mail in every scope: no worker claims its pending jobs until it is resumed."
    ]
    panel = root.get(DASHBOARD).content.decode()
    assert f'data-pause="{pause.pk}"' in panel and "provider down" in panel
    assert f'action="{resume_url(pause.pk)}"' in panel
    assert "3 pending jobs paused in all" in panel

    asked = root.post(resume_url(pause.pk))
    assert "Resume queue mail in every scope?" in asked.content.decode()
    assert JobPause.objects.get().active is True
    done = root.post(resume_url(pause.pk), {"confirm": "yes"}, follow=True)
    assert messages_of(done) == [
        "Resumed queue mail in every scope: its pending jobs are claimed again."
    ]
    row = JobPause.objects.get()
    assert (row.active, row.resumed_by) == (None, "admin:root")
    assert {j.pk for j in Job.objects.unpaused()} == {j.pk for j in held}


def test_a_bad_pause_is_refused_with_a_message_and_nothing_written(root):
    before = pause_state()
    done = root.post(PAUSE, {"target": "queue", "name": "", "confirm": "yes"}, follow=True)
    assert messages_of(done)[0].startswith("Not paused: A queue is 1-200 characters")
    done = root.post(PAUSE, {"target": "shelf", "name": "x", "confirm": "yes"}, follow=True)
    assert "a 'queue' or an 'operation'" in messages_of(done)[0]
    assert pause_state() == before
    assert root.get(PAUSE).status_code == 405


def test_without_pause_work_no_button_and_every_write_is_refused(viewer):
    pause = DurableJobStore().pause("queue", "mail", reason="r").pause
    job = DurableJobStore().defer("demo.op", submission({"n": 1}), queue="mail")
    page = viewer.get(DASHBOARD).content.decode()
    assert f'data-pause="{pause.pk}"' in page  # seen,
    assert resume_url(pause.pk) not in page and PAUSE not in page  # but no button, no form
    before = pause_state()
    form = {"target": "queue", "name": "sms", "reason": "r", "confirm": "yes"}
    assert viewer.post(PAUSE, form).status_code == 403
    assert viewer.post(resume_url(pause.pk), {"confirm": "yes"}).status_code == 403
    response = viewer.post(
        JOBS,
        {
            "action": "pause_operations_or_queues",
            "_selected_action": [str(job.pk)],
            "pause_target": "queue",
            "confirm": "yes",
        },
        follow=True,
    )
    assert response.status_code == 200
    assert pause_state() == before


def test_the_job_list_action_confirms_then_pauses_the_selected_jobs_queues(root):
    store = DurableJobStore()
    a = store.defer("demo.op", submission({"n": 1}), queue="mail")
    b = store.defer("demo.other", submission({"n": 2}), queue="sms")
    selected = {"action": "pause_operations_or_queues", "_selected_action": [str(a.pk), str(b.pk)]}
    asked = root.post(JOBS, selected)
    html = asked.content.decode()
    assert "Pause the 2 operations" in html and "Pause the 2 queues" in html
    assert not JobPause.objects.exists()
    done = root.post(
        JOBS, {**selected, "confirm": "yes", "pause_target": "queue", "reason": "bulk"}, follow=True
    )
    assert sorted(JobPause.objects.values_list("target", "name", "reason")) == [
        ("queue", "mail", "bulk"),
        ("queue", "sms", "bulk"),
    ]
    assert len(messages_of(done)) == 2
    listing = root.get(JOBS).content.decode()
    assert listing.count(">paused</span>") == 2


def test_a_held_back_jobs_page_says_why(root):
    store = DurableJobStore()
    job = store.defer("demo.op", submission({"n": 1}), queue="mail")
    free = store.defer("demo.op", submission({"n": 2}), queue="other")
    store.pause("queue", "mail", reason="provider down", by="alice")
    page = root.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert "Held back:" in page and "Paused: queue mail in every scope" in page
    assert "by alice" in page and "provider down" in page
    assert "Held back:" not in root.get(f"{JOBS}{free.pk}/change/").content.decode()


@pytest.fixture
def limited():
    """An operation limited to 2 starts a minute and 1 running job per customer."""

    @registry.operation(
        "tests.flow_limited",
        rate_limit="2/m",
        max_running_per_key=1,
        concurrency_key=lambda payload: payload["customer"],
    )
    def limited_op(ctx, payload):
        return None

    yield "tests.flow_limited"
    registry.unregister("tests.flow_limited")


def test_the_limits_panel_and_the_job_page_show_what_holds_jobs_back(root, limited):
    store = DurableJobStore()
    now = timezone.now()
    jobs = []
    for n, customer in enumerate(["acme", "acme", "globex"]):
        row = store.defer(limited, submission({"n": n, "customer": customer}))
        Job.objects.filter(pk=row.pk).update(concurrency_key=customer)
        jobs.append(row)
    # acme has a job running; the bucket took 2 starts in the last minute: no room.
    running = store.defer(limited, submission({"n": 9, "customer": "acme"}))
    Job.objects.filter(pk=running.pk).update(concurrency_key="acme", status="running")
    starts = [(now - timedelta(seconds=s)).timestamp() for s in (30, 10)]
    RateBucket.objects.create(
        id=flow.bucket_id("operation", limited),
        target="operation",
        name=limited,
        starts=json.dumps(starts),
    )
    panel = root.get(DASHBOARD).content.decode()
    assert f'data-limit="rate_limit:{limited}"' in panel and "at most 2/m" in panel
    assert "2 started in the last 60 s" in panel
    assert "key <code>acme</code>: 1 running of 1" in panel

    snap_flow = root.get(DASHBOARD).context["flow"]
    by_kind = {limit.kind: limit for limit in snap_flow.limits if limit.name == limited}
    assert by_kind["rate_limit"].held == 3
    assert by_kind["max_running_per_key"].held == 2
    assert snap_flow.limited_jobs == 5

    page = root.get(f"{JOBS}{jobs[0].pk}/change/").content.decode()
    assert f"Rate limit 2/m of operation {limited}: no room until" in page
    assert f"Key acme of operation {limited} is at its limit: 1 running of 1" in page


def test_the_history_of_pauses_is_read_only_evidence(root):
    store = DurableJobStore(actor="ops")
    first = store.pause("queue", "mail", reason="one").pause
    store.resume(pause_id=first.pk, by="bob")
    store.pause("operation", "demo.op", scope="acme", reason="two")
    html = root.get("/admin/durable_jobs/jobpause/").content.decode()
    assert "in force" in html and "resumed" in html and "bob" in html
    assert root.get("/admin/durable_jobs/jobpause/add/").status_code == 403
    page = root.get(f"/admin/durable_jobs/jobpause/{first.pk}/change/")
    assert page.status_code == 200 and "one" in page.content.decode()
    assert 'name="_save"' not in page.content.decode()
    assert root.post(f"/admin/durable_jobs/jobpause/{first.pk}/delete/").status_code == 403
    assert JobPause.objects.count() == 2
