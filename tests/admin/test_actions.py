"""The admin's two actions go through the store, report per row, and are gated by permissions.

Proves: *Request cancellation* records requests for running jobs, cancels pending ones at once and
leaves finished jobs (and their results) alone, saying so per row; *Request retry* records retries
for failed/cancelled/expired jobs, refuses complete ones without changing anything, and says which
jobs have not ended; the custom permissions ``durable_jobs.cancel_job`` / ``retry_job`` decide who
sees and may run each action (a POST without the permission changes nothing).
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from django_durable_jobs.models import Job
from django_durable_jobs.store import DurableJobStore
from tests.support import db_state, submission

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.admin.urls")]

CHANGELIST = "/admin/durable_jobs/job/"


@pytest.fixture
def jobs(near_now):
    """One job in each state an action distinguishes, created a second apart (list order)."""
    short = DurableJobStore(actor="short", lease_seconds=30, clock=near_now)  # expired by now
    long = DurableJobStore(actor="long", lease_seconds=3600, clock=near_now)  # still current
    made = {}
    for name in ("pending", "running", "expired", "complete", "failed", "cancelled"):
        made[name] = long.defer("demo.op", submission({"j": name}, key=name)).pk
        near_now.advance(1)
    long.claim(made["running"])
    short.claim(made["expired"])
    long.complete(long.claim(made["complete"]), {"kept": True})
    long.fail(long.claim(made["failed"]), "boom")
    long.request_cancel(made["cancelled"])  # pending: cancelled at once
    return made


def make_client(client, django_user_model, *perms: str):
    user = django_user_model.objects.create_user("ops", password="pw", is_staff=True)
    for codename in ("view_job", *perms):
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client.force_login(user)
    return client


def run_action(client, action: str, *pks):
    response = client.post(
        CHANGELIST,
        {"action": action, "index": "0", "_selected_action": [str(pk) for pk in pks]},
        follow=True,
    )
    assert response.status_code == 200
    return [(m.level_tag, str(m)) for m in response.context["messages"]]


def row(pk) -> Job:
    return Job.objects.get(pk=pk)


def offered_actions(client) -> set[str]:
    response = client.get(CHANGELIST)
    assert response.status_code == 200
    form = response.context["action_form"]
    return set() if form is None else {name for name, _ in form.fields["action"].choices if name}


# -- cancellation -----------------------------------------------------------------------------------


def test_cancellation_action_reports_each_row_and_goes_through_the_store(root, jobs):
    selected = ["pending", "running", "expired", "complete", "failed"]
    before = {name: row(jobs[name]) for name in selected}
    started = timezone.now()
    messages = run_action(root, "request_cancellation", *(jobs[n] for n in selected))
    assert messages == [
        (
            "success",
            "3 cancellation requests recorded; "
            f"1 pending job was cancelled at once ({jobs['pending']}); "
            f"2 running jobs will stop when the owner sees the request "
            f"({jobs['running']}, {jobs['expired']}); "
            f"2 jobs were already finished and kept their results "
            f"({jobs['complete']}, {jobs['failed']}).",
        )
    ]
    pending = row(jobs["pending"])
    assert pending.status == "cancelled" and pending.cancellation_requested_at >= started
    for name in ("running", "expired"):
        job = row(jobs[name])
        assert job.status == "running" and job.cancellation_requested_at >= started
        assert job.owner_id == before[name].owner_id
        assert job.fencing_epoch == before[name].fencing_epoch
    for name in ("complete", "failed"):
        job = row(jobs[name])
        assert job.status == before[name].status and job.result == before[name].result
        assert job.cancellation_requested_at is None


def test_cancelling_only_finished_jobs_warns_and_changes_nothing(root, jobs):
    before = db_state()
    messages = run_action(root, "request_cancellation", jobs["complete"], jobs["cancelled"])
    assert messages == [
        (
            "warning",
            "0 cancellation requests recorded; 2 jobs were already finished and kept their "
            f"results ({jobs['complete']}, {jobs['cancelled']}).",
        )
    ]
    assert db_state() == before


def test_a_second_cancellation_request_keeps_the_first_timestamp(root, jobs):
    run_action(root, "request_cancellation", jobs["running"])
    first = row(jobs["running"]).cancellation_requested_at
    assert first is not None
    messages = run_action(root, "request_cancellation", jobs["running"])
    assert messages[0][1].startswith("1 cancellation request recorded; 1 running job")
    assert row(jobs["running"]).cancellation_requested_at == first
    html = root.get(f"{CHANGELIST}{jobs['running']}/change/").content.decode()
    assert 'class="durable-jobs-banner' in html and "Cancellation requested at" in html


# -- retry ------------------------------------------------------------------------------------------


def test_retry_action_records_refuses_and_explains_per_row(root, jobs):
    started = timezone.now()
    selected = ["pending", "running", "expired", "complete", "failed", "cancelled"]
    messages = run_action(root, "request_retry", *(jobs[n] for n in selected))
    refusal = f"Job {jobs['complete']} is complete and is never reopened; submit a new job instead."
    assert messages == [
        (
            "success",
            "3 retry requests recorded "
            f"({jobs['expired']}, {jobs['failed']}, {jobs['cancelled']}); "
            f"2 jobs have not ended yet and need no retry ({jobs['pending']}, {jobs['running']}); "
            "1 retry was refused.",
        ),
        ("warning", f"Retry refused for job {jobs['complete']}: {refusal}"),
    ]
    for name in ("expired", "failed", "cancelled"):
        assert row(jobs[name]).retry_requested_at >= started
    for name in ("pending", "running", "complete"):
        assert row(jobs[name]).retry_requested_at is None
    complete = row(jobs["complete"])
    assert complete.status == "complete" and complete.result == '{"kept":true}'


def test_a_refused_retry_changes_nothing(root, jobs):
    before = db_state()
    messages = run_action(root, "request_retry", jobs["complete"])
    assert messages[0] == ("warning", "0 retry requests recorded; 1 retry was refused.")
    assert messages[1][0] == "warning" and "never reopened" in messages[1][1]
    assert db_state() == before


def test_the_retry_banner_appears_after_the_action(root, jobs):
    run_action(root, "request_retry", jobs["failed"])
    html = root.get(f"{CHANGELIST}{jobs['failed']}/change/").content.decode()
    assert "Retry requested at" in html


# -- permissions ------------------------------------------------------------------------------------


def test_superuser_is_offered_both_actions_and_no_delete(root, jobs):
    offered = {"request_cancellation", "request_retry", "pause_operations_or_queues"}
    assert offered_actions(root) == offered


def test_staff_without_cancel_permission_can_neither_see_nor_run_cancellation(
    client, django_user_model, jobs
):
    ops = make_client(client, django_user_model, "retry_job")
    assert offered_actions(ops) == {"request_retry"}
    before = db_state()
    messages = run_action(ops, "request_cancellation", jobs["running"], jobs["pending"])
    assert not any("cancellation request" in text for _, text in messages)
    assert db_state() == before


def test_staff_without_retry_permission_can_neither_see_nor_run_retry(
    client, django_user_model, jobs
):
    ops = make_client(client, django_user_model, "cancel_job")
    assert offered_actions(ops) == {"request_cancellation"}
    before = db_state()
    messages = run_action(ops, "request_retry", jobs["failed"])
    assert not any("retry request" in text for _, text in messages)
    assert db_state() == before


def test_staff_with_view_permission_only_gets_no_actions(client, django_user_model, jobs):
    ops = make_client(client, django_user_model)
    assert offered_actions(ops) == set()
    before = db_state()
    run_action(ops, "request_cancellation", jobs["running"])
    run_action(ops, "request_retry", jobs["failed"])
    assert db_state() == before


def test_staff_with_cancel_permission_cancels_through_the_store(client, django_user_model, jobs):
    ops = make_client(client, django_user_model, "cancel_job")
    messages = run_action(ops, "request_cancellation", jobs["running"])
    assert messages[0][0] == "success" and "1 cancellation request recorded" in messages[0][1]
    assert row(jobs["running"]).cancellation_requested_at is not None
