"""DurableJobsBackend through Django's own Tasks API, in this process (no worker), every database.

Enqueue stores a pending job whose operation is the task's path and whose input is its
arguments; ``get_result`` and ``refresh()`` read the job back with Django's statuses; a
rolled-back enqueue leaves nothing; idempotency keys coalesce or conflict as ``submit()`` does;
building the backend touches no database. The worker side is tests/worker/test_tasks.py.
"""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import django
import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.models import Job
from django_durable_jobs.rules.errors import IdempotencyConflict, InputInvalid
from django_durable_jobs.store import DurableJobStore
from tests.support import db_state

if django.VERSION < (6, 0):
    pytest.skip("django.tasks needs Django 6", allow_module_level=True)

from django.tasks import TaskResultStatus, default_task_backend, task_backends  # noqa: E402
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist  # noqa: E402
from django.tasks.signals import task_enqueued  # noqa: E402

from django_durable_jobs.backends import DurableJobsBackend  # noqa: E402
from tests.testapp import tasks  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_backend_is_what_tasks_settings_name_and_says_what_it_supports():
    backend = task_backends["default"]
    assert isinstance(backend, DurableJobsBackend)
    assert backend.supports_defer and backend.supports_priority
    assert backend.supports_get_result and backend.supports_async_task


def test_enqueue_stores_a_pending_job_named_by_the_task_path():
    result = tasks.add.using(priority=7, queue_name="fast").enqueue(2, b=3)
    job = Job.objects.get(pk=result.id)
    assert job.operation == "tests.testapp.tasks.add"
    assert (job.status, job.queue, job.priority) == ("pending", "fast", 7)
    assert job.proposal == '{"args":[2],"kwargs":{"b":3}}'
    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs, result.worker_ids, result.errors) == ([2], {"b": 3}, [], [])
    assert result.enqueued_at == job.created_at
    assert result.task.module_path == "tests.testapp.tasks.add"


def test_get_result_and_refresh_follow_the_job():
    result = tasks.add.enqueue(1, 2)
    store = DurableJobStore(actor="worker@test")
    (lease,) = store.claim_next(operations=["tests.testapp.tasks.add"])
    result.refresh()
    assert (result.status, result.worker_ids) == (TaskResultStatus.RUNNING, ["worker@test"])
    assert result.started_at is not None and result.last_attempted_at is not None
    store.complete(lease, 3)
    fresh = tasks.add.get_result(result.id)
    assert (fresh.status, fresh.return_value, fresh.attempts) == (TaskResultStatus.SUCCESSFUL, 3, 1)
    assert fresh.finished_at == Job.objects.get(pk=result.id).completed_at


def test_a_failure_is_failed_unless_an_automatic_retry_is_still_to_come():
    result = tasks.third_time_lucky.enqueue()
    store = DurableJobStore(actor="worker@test")
    (lease,) = store.claim_next(operations=["tests.testapp.tasks.third_time_lucky"])
    store.fail(lease, RuntimeError("attempt 1 fails"))
    result.refresh()
    assert result.status == TaskResultStatus.READY  # Django treats FAILED as final
    assert [error.exception_class_path for error in result.errors] != []
    once = tasks.explode.enqueue("boom")
    (lease,) = store.claim_next(operations=["tests.testapp.tasks.explode"])
    store.fail(lease, ValueError("boom"))
    failed = default_task_backend.get_result(once.id)
    assert failed.status == TaskResultStatus.FAILED
    assert len(failed.errors) == 1 and "boom" in failed.errors[0].traceback
    with pytest.raises(ValueError, match="Task failed"):
        _ = failed.return_value


def test_a_cancelled_task_is_failed_and_its_error_says_so():
    result = tasks.add.enqueue(1, 1)
    DurableJobStore().request_cancel(result.id)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[-1].exception_class_path == "django_durable_jobs.errors.JobCancelled"
    assert "cancelled" in result.errors[-1].traceback


def test_run_after_may_be_a_datetime_or_a_timedelta():
    result = tasks.add.using(run_after=timedelta(hours=1)).enqueue(1, 1)
    job = Job.objects.get(pk=result.id)
    assert abs(job.run_after - job.created_at - timedelta(hours=1)) < timedelta(seconds=1)
    with pytest.raises(InvalidTask):
        tasks.add.using(run_after=timedelta(seconds=-1))


def test_an_enqueue_inside_a_rolled_back_transaction_never_exists():
    before = db_state()
    with pytest.raises(RuntimeError), transaction.atomic():
        result = tasks.add.enqueue(1, 2)
        assert Job.objects.filter(pk=result.id).exists()  # in the caller's transaction
        raise RuntimeError("roll back")
    assert db_state() == before


def test_the_same_idempotency_key_runs_once_and_other_arguments_conflict(tmp_path):
    first = tasks.keyed.enqueue(str(tmp_path), 1)
    again = tasks.keyed.enqueue(str(tmp_path), 1)
    assert again.id == first.id
    assert Job.objects.filter(operation="tests.testapp.tasks.keyed").count() == 1
    before = db_state()
    with pytest.raises(IdempotencyConflict):
        tasks.keyed.enqueue("elsewhere", 1)  # same key keyed-1, other arguments
    assert db_state() == before


def test_arguments_that_are_not_json_are_refused_and_nothing_is_written():
    before = db_state()
    with pytest.raises(InputInvalid, match="JSON"):
        tasks.add.enqueue(object(), 1)
    assert db_state() == before


def test_a_result_of_another_id_or_a_non_task_job_does_not_exist():
    for missing in ("not-a-uuid", str(uuid.uuid4())):
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(missing)
    store = DurableJobStore()
    lease = store.insert("tests.noop")
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(str(lease.job_id))


def test_enqueue_sends_task_enqueued():
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append((sender, task_result.id))

    task_enqueued.connect(receiver)
    try:
        result = tasks.add.enqueue(1, 1)
    finally:
        task_enqueued.disconnect(receiver)
    assert seen == [(DurableJobsBackend, result.id)]


def test_backend_options_are_checked():
    backend = DurableJobsBackend("x", {"OPTIONS": {"DATABASE": "nope", "COLOUR": "red"}})
    ids = {message.id for message in backend.check()}
    assert ids == {"durable_jobs.E011", "durable_jobs.E012"}
    assert DurableJobsBackend("y", {}).check() == []


def test_building_the_backend_and_tasks_runs_no_sql():
    with CaptureQueriesContext(connection) as queries:
        backend = DurableJobsBackend("z", {})
        backend.validate_task(tasks.add)
    assert len(queries) == 0


def test_bad_task_options_are_refused_when_the_task_is_built():
    from django.tasks import task

    from django_durable_jobs.rules import registry

    for options, words in (
        ({"on_expired": "never"}, "on_expired"),
        ({"timeout": 0}, "timeout"),
        ({"max_attempts": 2, "retry": 3}, "not both"),
    ):
        with pytest.raises(InvalidTask, match=words):
            task(tasks.add.func, **options)
    spec = registry.get("tests.testapp.tasks.add")
    assert (spec.on_expired, spec.timeout, spec.retry) == ("hold", None, None)


def test_the_worker_side_sends_task_started_and_task_finished_around_the_call():
    from django.tasks.signals import task_finished, task_started

    from django_durable_jobs.rules import registry
    from django_durable_jobs.rules.values import Claimed
    from django_durable_jobs.worker.attempt import context_of

    seen = []

    def started(sender, task_result, **kwargs):
        seen.append(("started", task_result.status, task_result.attempts))

    def finished(sender, task_result, **kwargs):
        seen.append(("finished", task_result.status, task_result._return_value))

    result = tasks.with_context.enqueue("signals")
    store = DurableJobStore(actor="worker@test")
    (claim,) = store.claim_batch(operations=["tests.testapp.tasks.with_context"])
    ctx = context_of(store, Claimed(claim.lease, claim.job), threading.Event())
    task_started.connect(started)
    task_finished.connect(finished)
    try:
        value = registry.get("tests.testapp.tasks.with_context").func(ctx, ctx.payload)
    finally:
        task_started.disconnect(started)
        task_finished.disconnect(finished)
    assert value == {"attempt": 1, "id": result.id, "note": "signals"}
    assert seen == [
        ("started", TaskResultStatus.RUNNING, 1),
        ("finished", TaskResultStatus.SUCCESSFUL, value),
    ]


def test_aenqueue_and_aget_result_work_like_their_sync_twins():
    from asgiref.sync import async_to_sync

    result = async_to_sync(tasks.async_double.aenqueue)(4)
    again = async_to_sync(tasks.async_double.aget_result)(result.id)
    assert (again.id, again.status, again.args) == (result.id, TaskResultStatus.READY, [4])


def test_task_jobs_are_found_by_their_task_path_in_the_cli_the_admin_and_the_api(
    client, django_user_model
):
    import json as jsonlib
    from io import StringIO

    from django.core.management import call_command

    shown = tasks.add.enqueue(2, b=3)
    tasks.explode.enqueue("other task")
    path = "tests.testapp.tasks.add"
    out = StringIO()
    call_command("jobs", "list", "--operation", path, "--json", stdout=out)
    assert [row["id"] for row in jsonlib.loads(out.getvalue())] == [shown.id]
    out = StringIO()
    call_command("jobs", "show", shown.id, stdout=out)
    assert path in out.getvalue() and '"kwargs"' in out.getvalue()

    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(admin)
    page = client.get("/admin/durable_jobs/job/", {"operation": path})
    assert page.status_code == 200
    assert shown.id in page.content.decode() and "other task" not in page.content.decode()
    detail = client.get(f"/admin/durable_jobs/job/{shown.id}/change/").content.decode()
    assert path in detail and "&quot;args&quot;" in detail

    listed = client.get("/jobs/api/jobs", {"operation": path})
    assert [item["id"] for item in listed.json()["items"]] == [shown.id]
    assert client.get(f"/jobs/api/jobs/{shown.id}").json()["proposal"] == {
        "args": [2],
        "kwargs": {"b": 3},
    }
