"""A bad schedule's refusal says "use --no-schedules": following that advice starts a worker.

The system check of the declared schedules (``durable_jobs.E014``) still stops ``manage.py
check`` and a plain ``runjobs``; ``runjobs --no-schedules`` reads no schedule, so it skips that
one check and drains the queue.
"""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_durable_jobs import submit
from django_durable_jobs.checks import check_settings, schedules_unchecked
from django_durable_jobs.models import Job, Schedule
from tests.worker_support import WorkerPool

BAD = {"SCHEDULES": {"nightly-sales": {"operation": "tests.tick", "cron": "61 * * * *"}}}


def test_the_schedule_check_is_skipped_only_inside_the_block():
    with override_settings(DURABLE_JOBS=BAD):
        assert [e.id for e in check_settings()] == ["durable_jobs.E014"]
        assert "runjobs --no-schedules" in check_settings()[0].hint
        with schedules_unchecked():
            assert check_settings() == []
        assert [e.id for e in check_settings()] == ["durable_jobs.E014"]


def test_manage_py_check_still_reports_the_bad_schedule():
    with override_settings(DURABLE_JOBS=BAD), pytest.raises(SystemCheckError) as refused:
        call_command("check")
    assert "nightly-sales" in str(refused.value)


def test_following_the_refusals_advice_starts_a_worker_that_drains(
    transactional_db, db_settings_env, tmp_path
):
    env = {
        **db_settings_env,
        "DJANGO_SETTINGS_MODULE": "tests.settings_schedules",
        "DURABLE_JOBS_TEST_SETTINGS": json.dumps(BAD),
    }
    job = submit("tests.noop", {"n": 1})
    with WorkerPool(env, tmp_path) as pool:
        code, refused = pool.run("--burst")
        assert code != 0
        advice = refused.stderr()
        assert "nightly-sales" in advice and "--no-schedules" in advice, refused.logs()
        assert Job.objects.get(pk=job.pk).status == "pending"

        code, worker = pool.run("--burst", "--no-schedules")
        assert code == 0, worker.logs()
    assert Job.objects.get(pk=job.pk).status == "complete"
    assert Schedule.objects.count() == 0
