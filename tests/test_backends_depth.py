"""Task arguments and results obey the 64-level JSON limit (Django 6, ``django.tasks``).

A task's arguments are stored as ``{"args": [...], "kwargs": {...}}``: arguments nested 62 levels
make a 64-level input and are enqueued; 63 levels are refused as ``InputInvalid`` with nothing
written, and so is a value nested 100,000 levels (never a ``RecursionError``). ``get_result`` of
a row written outside the app with JSON 10,000 levels deep answers without a crash.
"""

from __future__ import annotations

import django
import pytest
from django.utils import timezone

from django_durable_jobs.models import Job
from django_durable_jobs.rules.errors import InputInvalid
from tests.deep_json import nested_text, nested_value, outside_row
from tests.support import assert_refused

if django.VERSION < (6, 0):
    pytest.skip("django.tasks needs Django 6", allow_module_level=True)

from django.tasks import TaskResultStatus, default_task_backend  # noqa: E402

from tests.testapp import tasks  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)

ADD = "tests.testapp.tasks.add"


def test_arguments_that_make_a_64_level_input_are_enqueued():
    result = tasks.add.enqueue(nested_value(62), b=0)
    stored = Job.objects.get(pk=result.id)
    assert stored.proposal == '{"args":[' + nested_text(62) + '],"kwargs":{"b":0}}'
    assert stored.proposal_checked is True
    assert tasks.add.get_result(result.id).args == [nested_value(62)]


@pytest.mark.parametrize("depth", [63, 100_000])
def test_deeper_arguments_are_refused_with_nothing_written(depth):
    error = assert_refused(
        InputInvalid, "E_JOB_INPUT_INVALID", lambda: tasks.add.enqueue(nested_value(depth), 0)
    )
    assert "may nest at most 64 levels" in error.message


def test_keyword_arguments_count_the_same():
    assert tasks.add.enqueue(0, b=nested_value(62)).status == TaskResultStatus.READY
    assert_refused(
        InputInvalid, "E_JOB_INPUT_INVALID", lambda: tasks.add.enqueue(0, b=nested_value(63))
    )


def test_get_result_of_a_deep_row_written_outside_the_app_answers():
    now = timezone.now()
    deep = nested_text(10_000)
    row = outside_row(
        deep, key="deep", status="complete", checked=True, now=now, operation=ADD, result=deep
    )
    Job.objects.bulk_create([row])
    result = default_task_backend.get_result(str(row.pk))
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert (result.args, result.kwargs, result.return_value) == ([], {}, None)
