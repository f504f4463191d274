"""The admin words the store's typed answers; it works nothing out again from a job's status.

Proves: every ``RequestAnswer`` lands in its clause of the cancellation and retry messages, a
refusal and a failure each get their own message, long id lists are cut; the row's status is
never consulted (an answer wins over it); the owner worker's state is the vocabulary's rule, or
``unknown`` without a worker row; the ``django_durable_jobs.admin`` package registers its three
pages; and the actions' store works on ``DURABLE_JOBS["DATABASE"]``.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.contrib import admin, messages
from django.db.utils import ConnectionDoesNotExist
from django.test import override_settings
from django.utils import timezone

import django_durable_jobs.admin as durable_admin
from django_durable_jobs.admin.actions import cancellation_messages, retry_messages
from django_durable_jobs.admin.format import WORKER_UNKNOWN, owner_worker_state
from django_durable_jobs.models import Job, JobAttempt, WorkerProcess
from django_durable_jobs.rules.errors import InputInvalid, JobError, NotReclaimable
from django_durable_jobs.rules.values import RequestResult
from django_durable_jobs.rules.vocabulary import RequestAnswer, WorkerState, worker_state
from django_durable_jobs.store import DurableJobStore
from tests.support import db_state, submission

IDS = [uuid.UUID(int=n) for n in range(1, 30)]


def answered(*answers, job=None):
    """Pair each answer (a RequestAnswer or a JobError) with a job id, in order."""
    return [
        (IDS[n], RequestResult(a, job) if isinstance(a, RequestAnswer) else a)
        for n, a in enumerate(answers)
    ]


# -- cancellation ---------------------------------------------------------------------------------


def test_each_cancellation_answer_has_its_clause_and_a_failure_its_own_message():
    said = cancellation_messages(
        answered(
            RequestAnswer.CANCELLED_NOW,
            RequestAnswer.REQUESTED,
            RequestAnswer.ALREADY_REQUESTED,
            RequestAnswer.ALREADY_ENDED,
            JobError("boom"),
        )
    )
    assert said == [
        (
            messages.SUCCESS,
            f"3 cancellation requests recorded; 1 pending job was cancelled at once ({IDS[0]}); "
            f"2 running jobs will stop when the owner sees the request ({IDS[1]}, {IDS[2]}); "
            f"1 job was already finished and kept its result ({IDS[3]}).",
        ),
        (messages.ERROR, f"Job {IDS[4]}: E_JOB: boom"),
    ]


def test_no_accepted_cancellation_is_a_warning():
    said = cancellation_messages(answered(RequestAnswer.ALREADY_ENDED))
    assert said == [
        (
            messages.WARNING,
            "0 cancellation requests recorded; "
            f"1 job was already finished and kept its result ({IDS[0]}).",
        )
    ]


def test_the_answer_decides_not_the_status_of_the_row():
    """A job read as pending whose request was recorded (it was claimed meanwhile) is running."""
    said = cancellation_messages(
        answered(RequestAnswer.REQUESTED, job=SimpleNamespace(status="pending"))
    )
    assert said[0][1] == (
        f"1 cancellation request recorded; 1 running job will stop when the owner sees the "
        f"request ({IDS[0]})."
    )


def test_long_id_lists_are_cut_after_ten():
    said = cancellation_messages(answered(*[RequestAnswer.REQUESTED] * 12))
    listed = ", ".join(str(pk) for pk in IDS[:10])
    assert said[0][1].endswith(f"the request ({listed} and 2 more).")


# -- retry ----------------------------------------------------------------------------------------


def test_each_retry_answer_has_its_clause_and_refusals_and_failures_their_own_messages():
    said = retry_messages(
        answered(
            RequestAnswer.REQUESTED,
            RequestAnswer.ALREADY_REQUESTED,
            RequestAnswer.NOT_ENDED,
            NotReclaimable("it is complete"),
            JobError("lost"),
        )
    )
    assert said == [
        (
            messages.SUCCESS,
            f"2 retry requests recorded ({IDS[0]}, {IDS[1]}); "
            f"1 job has not ended yet and needs no retry ({IDS[2]}); 1 retry was refused.",
        ),
        (messages.WARNING, f"Retry refused for job {IDS[3]}: it is complete"),
        (messages.ERROR, f"Job {IDS[4]}: E_JOB: lost"),
    ]


def test_no_accepted_retry_is_a_warning_and_refusals_are_counted():
    said = retry_messages(answered(NotReclaimable("a"), NotReclaimable("b")))
    assert said[0] == (messages.WARNING, "0 retry requests recorded; 2 retries were refused.")
    assert [level for level, _ in said[1:]] == [messages.WARNING, messages.WARNING]


# -- the owner's worker ---------------------------------------------------------------------------


def test_owner_worker_state_is_the_vocabulary_rule_or_unknown_without_a_row():
    now = timezone.now()
    assert owner_worker_state(None, None, None, now) == WORKER_UNKNOWN
    cases = [
        (now - timedelta(seconds=5), None, 30.0, WorkerState.ALIVE),
        (now - timedelta(seconds=60), None, 30.0, WorkerState.STALE),
        (now - timedelta(seconds=60), now, 30.0, WorkerState.STOPPED),
    ]
    for heartbeat_at, stopped_at, lease_seconds, expected in cases:
        state = owner_worker_state(heartbeat_at, stopped_at, lease_seconds, now)
        assert state == expected == worker_state(stopped_at, heartbeat_at, lease_seconds, now)


# -- the package ----------------------------------------------------------------------------------


def test_the_admin_package_registers_its_three_pages():
    registered = {model: type(page) for model, page in admin.site._registry.items()}
    assert registered[Job] is durable_admin.JobAdmin
    assert registered[JobAttempt] is durable_admin.JobAttemptAdmin
    assert registered[WorkerProcess] is durable_admin.WorkerProcessAdmin


@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.urls")
def test_the_actions_store_works_on_the_database_setting(client, django_user_model):
    """An alias that does not exist is refused (by the list, before the store): proof that the
    admin asked for it. ``test_database_alias.py`` follows every query to a second alias."""
    job = DurableJobStore(actor="t").defer("demo.op", submission({"n": 1}, key="db"))
    client.force_login(django_user_model.objects.create_superuser("root", "r@example.com", "pw"))
    before = db_state()
    body = {"action": "request_cancellation", "index": "0", "_selected_action": [str(job.pk)]}
    with override_settings(DURABLE_JOBS={"DATABASE": "elsewhere"}):
        with pytest.raises((InputInvalid, ConnectionDoesNotExist), match="'elsewhere'"):
            client.post("/admin/durable_jobs/job/", body)
    assert db_state() == before
