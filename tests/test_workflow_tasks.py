"""``django.tasks`` results of workflow jobs: ``get_result`` of any job of a workflow, the handle's
``task_result()`` and the backend's ``workflow_result()`` for the final job, and the waiting and
sleeping statuses mapped to READY. Jobs are run by a store in this process (no worker).
"""

from __future__ import annotations

import uuid

import django
import pytest

from django_durable_jobs import Workflow
from django_durable_jobs.models import Job
from django_durable_jobs.store import DurableJobStore

if django.VERSION < (6, 0):
    pytest.skip("django.tasks needs Django 6", allow_module_level=True)

from django.tasks import TaskResultStatus, default_task_backend  # noqa: E402
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist  # noqa: E402

from django_durable_jobs.backends import OperationTask  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)

ECHO = "tests.wf.echo"


def two_steps(key: str = "k") -> object:
    wf = Workflow("tasks.pair", idempotency_key=key)
    first = wf.job(ECHO, {"tag": "first"}, name="first")
    wf.job(ECHO, {"tag": "last"}, after=[first], name="last")
    return wf.submit()


def run_one(store: DurableJobStore, value: object) -> Job:
    (lease,) = store.claim_next(operations=[ECHO])
    store.complete(lease, value)
    return Job.objects.get(pk=lease.job_id)


def test_the_final_job_of_a_workflow_is_a_task_result_that_follows_it():
    handle = two_steps()
    final = handle.job("last")
    result = handle.task_result()
    assert result.id == str(final.pk)
    assert result.status == TaskResultStatus.READY  # waiting for its parent
    assert isinstance(result.task, OperationTask)
    assert result.task.module_path == ECHO
    assert (result.args, result.kwargs) == ([{"tag": "last"}], {})
    assert not result.is_finished

    store = DurableJobStore(actor="worker@test")
    run_one(store, {"n": 1})
    result.refresh()
    assert result.status == TaskResultStatus.READY  # released: pending now
    assert Job.objects.get(pk=final.pk).status == "pending"
    run_one(store, {"n": 2})
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"n": 2}
    assert result.worker_ids == ["worker@test"]


def test_the_backend_finds_the_final_job_from_the_workflow_id():
    handle = two_steps()
    result = default_task_backend.workflow_result(handle.id)
    assert result.id == str(handle.job("last").pk)
    assert default_task_backend.workflow_result(str(handle.id)).id == result.id
    for missing in (uuid.uuid4(), "not-a-uuid"):
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.workflow_result(missing)


def test_any_job_of_a_workflow_has_a_result_and_a_failed_parent_fails_its_child():
    wf = Workflow("tasks.failing")
    bad = wf.job("tests.wf.fail", {"tag": "bad"}, name="bad")
    wf.job(ECHO, {"tag": "after"}, after=[bad], name="after")
    handle = wf.submit()
    first = default_task_backend.get_result(str(handle.job("bad").pk))
    assert first.task.module_path == "tests.wf.fail" and first.status == TaskResultStatus.READY
    store = DurableJobStore(actor="worker@test")
    (lease,) = store.claim_next(operations=["tests.wf.fail"])
    store.fail(lease, RuntimeError("bad failed"))
    first.refresh()
    assert first.status == TaskResultStatus.FAILED
    child = handle.task_result()
    assert child.status == TaskResultStatus.FAILED  # cancelled by its upstream job
    assert [e.exception_class_path for e in child.errors] == [
        "django_durable_jobs.errors.JobCancelled"
    ]
    assert "'bad'" in child.errors[0].traceback


def test_a_sleeping_job_is_ready():
    handle = two_steps()
    store = DurableJobStore(actor="worker@test")
    (lease,) = store.claim_next(operations=[ECHO])
    store.sleep(lease, 60)
    assert Job.objects.get(pk=lease.job_id).status == "sleeping"
    result = default_task_backend.get_result(str(handle.job("first").pk))
    assert result.status == TaskResultStatus.READY and not result.is_finished


def test_an_operation_task_cannot_be_enqueued():
    result = two_steps().task_result()
    before = Job.objects.count()
    with pytest.raises(InvalidTask, match="@operation, not a @task"):
        result.task.enqueue({"tag": "again"})
    assert Job.objects.count() == before


def test_a_job_outside_any_workflow_is_still_no_task_result():
    lease = DurableJobStore().insert(ECHO)
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(str(lease.job_id))
