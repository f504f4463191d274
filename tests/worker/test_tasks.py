"""Django tasks run by a real ``runjobs``, seen only through Django's own API, every database.

``@task`` functions (tests/testapp/tasks.py) are enqueued with ``.enqueue()`` / ``.using()`` and
read back with ``get_result`` / ``refresh()``; the worker is a ``manage.py runjobs`` child that
finds the tasks by itself (task discovery).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import django
import pytest
from django.db import transaction
from django.utils import timezone

from tests.support import wait_for

if django.VERSION < (6, 0):
    pytest.skip("django.tasks needs Django 6", allow_module_level=True)

from django.tasks import TaskResultStatus  # noqa: E402

from django_durable_jobs.models import Job  # noqa: E402
from tests.testapp import tasks  # noqa: E402

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_sync_async_and_context_tasks_run_and_return_their_values(workers):
    plain = tasks.add.enqueue(2, 3)
    coroutine = tasks.async_double.enqueue(21)
    with_context = tasks.with_context.enqueue("hello")
    code, _ = workers.run("--burst")
    assert code == 0
    for result in (plain, coroutine, with_context):
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
        assert result.attempts == 1 and result.finished_at is not None
    assert (plain.return_value, coroutine.return_value) == (5, 42)
    assert with_context.return_value == {"attempt": 1, "id": with_context.id, "note": "hello"}


@pytest.mark.parametrize(
    ("slots", "on_loop"), [("100", True), ("0", False)], ids=["event-loop", "threads"]
)
def test_an_async_task_runs_on_the_worker_s_event_loop_unless_async_slots_is_0(
    workers, slots, on_loop
):
    result = tasks.where_async.enqueue()
    code, _ = workers.run("--burst", "--async-slots", slots)
    assert code == 0
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    # With no slots it runs to its end in an event loop of its own, in another thread.
    assert (result.return_value == "durable-jobs-loop") is on_loop, result.return_value


def test_a_task_that_raises_fails_with_its_class_path_and_traceback(workers):
    result = tasks.explode.enqueue("boom")
    code, _ = workers.run("--burst")
    assert code == 0
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    (error,) = result.errors
    assert error.exception_class_path == "builtins.ValueError"
    assert error.exception_class is ValueError
    assert "raise ValueError(message)" in error.traceback and "ValueError: boom" in error.traceback


def test_a_task_that_succeeds_on_its_third_attempt(workers):
    result = tasks.third_time_lucky.enqueue()
    workers.start()
    wait_for(
        lambda: tasks.third_time_lucky.get_result(result.id).status == TaskResultStatus.SUCCESSFUL,
        "the third attempt to succeed",
    )
    result.refresh()
    assert result.return_value == {"attempt": 3}
    assert result.attempts == 3 and len(result.worker_ids) == 3
    assert [error.exception_class_path for error in result.errors] == ["builtins.RuntimeError"] * 2


def test_a_task_past_its_timeout_fails_with_a_timeout_message(workers):
    result = tasks.too_slow.enqueue(30)
    workers.start()
    wait_for(
        lambda: tasks.too_slow.get_result(result.id).status == TaskResultStatus.FAILED,
        "the attempt to time out",
    )
    result.refresh()
    assert "timed out" in result.errors[-1].traceback


def test_two_enqueues_with_one_idempotency_key_make_one_job_that_runs_once(workers, tmp_path):
    first = tasks.keyed.enqueue(str(tmp_path), 7)
    second = tasks.keyed.enqueue(str(tmp_path), 7)
    assert first.id == second.id
    code, _ = workers.run("--burst")
    assert code == 0
    assert _lines(tmp_path / "keyed-7") == ["ran"]
    assert Job.objects.filter(operation="tests.testapp.tasks.keyed").count() == 1


def test_tasks_run_in_priority_order_then_run_after_order(workers, tmp_path):
    now = timezone.now()
    folder = str(tmp_path)
    tasks.record.using(priority=0, run_after=now - timedelta(seconds=30)).enqueue(folder, "low")
    tasks.record.using(priority=5, run_after=now - timedelta(seconds=10)).enqueue(folder, "later")
    tasks.record.using(priority=5, run_after=now - timedelta(seconds=20)).enqueue(folder, "first")
    code, _ = workers.run("--burst", "--queue", "ordered", "--concurrency", "1")
    assert code == 0
    assert _lines(tmp_path / "order") == ["first", "later", "low"]


def test_a_task_due_later_is_left_pending_by_a_burst_worker(workers):
    result = tasks.add.using(run_after=timedelta(hours=1)).enqueue(1, 1)
    code, _ = workers.run("--burst")
    assert code == 0
    result.refresh()
    assert (result.status, result.worker_ids) == (TaskResultStatus.READY, [])


def test_a_task_enqueued_in_a_rolled_back_transaction_never_exists(workers, tmp_path):
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.keyed.enqueue(str(tmp_path), 99)
        raise RuntimeError("roll back")
    code, _ = workers.run("--burst")
    assert code == 0
    assert not Job.objects.filter(operation="tests.testapp.tasks.keyed").exists()
    assert _lines(tmp_path / "keyed-99") == []


def test_a_return_value_that_is_not_json_is_a_failure_that_says_so(workers):
    result = tasks.not_json.enqueue()
    code, _ = workers.run("--burst")
    assert code == 0
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert "cannot be stored as JSON" in result.errors[-1].traceback


def test_a_job_whose_task_cannot_be_imported_stays_pending(workers):
    from django_durable_jobs.store import DurableJobStore, Submission

    missing = DurableJobStore().defer(
        "tests.testapp.tasks.no_such_task", Submission.of(None, None, {"args": [], "kwargs": {}})
    )
    code, worker = workers.run("--burst")
    assert code == 0
    assert Job.objects.get(pk=missing.pk).status == "pending"
