"""``manage.py jobs cancel|retry`` word the store's typed answer and nothing else.

Proves, without a database: each ``RequestAnswer`` gives its report (``ok``, ``outcome``, message,
the job's id and status after the request); the job's status fills the words but never decides
them; an unknown id keeps the argument as given; a refusal and a malformed id have their own
reports; and both word tables cover every answer the store can give.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from django_durable_jobs.management.commands import _jobs_format as fmt
from django_durable_jobs.models import Job
from django_durable_jobs.rules.values import RequestResult
from django_durable_jobs.rules.vocabulary import JobStatus, Ownership, RequestAnswer

AT = datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
RAW = "3F2504E0-4F89-11D3-9A0C-0305E82C3301"  # upper case: the report says the id as stored


def job(status: str, ownership: Ownership) -> Job:
    row = Job(id=uuid.UUID(RAW), status=status)
    row.ownership = ownership
    return row


@pytest.mark.parametrize(
    ("answer", "status", "ownership", "ok", "outcome", "message"),
    [
        (
            RequestAnswer.CANCELLED_NOW,
            JobStatus.CANCELLED,
            Ownership.TERMINAL,
            True,
            "requested",
            "cancelled (it had not started)",
        ),
        (
            RequestAnswer.REQUESTED,
            JobStatus.RUNNING,
            Ownership.CURRENT,
            True,
            "requested",
            "cancellation requested; its owner stops at the next check",
        ),
        (
            RequestAnswer.ALREADY_REQUESTED,
            JobStatus.RUNNING,
            Ownership.EXPIRED,
            True,
            "requested",
            f"cancellation was already requested at {AT.isoformat()}",
        ),
        (
            RequestAnswer.ALREADY_ENDED,
            JobStatus.FAILED,
            Ownership.TERMINAL,
            False,
            "finished",
            "already failed; nothing to cancel (its result is kept)",
        ),
    ],
)
def test_each_cancellation_answer_has_its_report(answer, status, ownership, ok, outcome, message):
    report = fmt.request_report(
        RAW, RequestResult(answer, job(status, ownership), AT), fmt.CANCEL_SAYS
    )
    assert report == {
        "id": RAW.lower(),
        "ok": ok,
        "outcome": outcome,
        "status": status,
        "message": message,
    }


def test_retry_answers_have_their_reports():
    accepted = RequestResult(RequestAnswer.REQUESTED, job(JobStatus.FAILED, Ownership.TERMINAL), AT)
    report = fmt.request_report(RAW, accepted, fmt.RETRY_SAYS)
    assert (report["ok"], report["outcome"]) == (True, "requested")
    assert report["message"] == "retry requested; a worker will claim it"
    not_ended = RequestResult(RequestAnswer.NOT_ENDED, job(JobStatus.PENDING, Ownership.UNCLAIMED))
    report = fmt.request_report(RAW, not_ended, fmt.RETRY_SAYS)
    assert (report["ok"], report["outcome"], report["status"]) == (False, "refused", "pending")
    assert report["message"] == "pending (unclaimed) has not ended; there is nothing to retry"


def test_the_status_fills_the_words_but_the_answer_decides():
    """A request recorded on a row that reads pending is still ``requested``, not cancelled."""
    result = RequestResult(RequestAnswer.REQUESTED, job(JobStatus.PENDING, Ownership.UNCLAIMED), AT)
    report = fmt.request_report(RAW, result, fmt.CANCEL_SAYS)
    assert report["message"] == "cancellation requested; its owner stops at the next check"


@pytest.mark.parametrize("says", [fmt.CANCEL_SAYS, fmt.RETRY_SAYS])
def test_an_unknown_job_keeps_the_argument_as_given(says):
    report = fmt.request_report(RAW, RequestResult(RequestAnswer.NOT_FOUND, None), says)
    assert report == {
        "id": RAW,
        "ok": False,
        "outcome": "unknown",
        "status": None,
        "message": "no such job",
    }


def test_refusals_and_malformed_ids_have_their_own_reports():
    refused = fmt.refusal_report(RAW, job(JobStatus.COMPLETE, Ownership.TERMINAL), "never reopened")
    assert refused == {
        "id": RAW.lower(),
        "ok": False,
        "outcome": "refused",
        "status": "complete",
        "message": "never reopened",
    }
    assert fmt.malformed_report("12") == {
        "id": "12",
        "ok": False,
        "outcome": "malformed",
        "status": None,
        "message": "not a job id (job ids are UUIDs)",
    }


def test_the_word_tables_cover_every_answer_the_store_gives():
    assert set(fmt.OUTCOMES) == set(RequestAnswer)
    assert set(fmt.CANCEL_SAYS) == set(RequestAnswer) - {RequestAnswer.NOT_ENDED}
    retry = set(RequestAnswer) - {RequestAnswer.CANCELLED_NOW, RequestAnswer.ALREADY_ENDED}
    assert set(fmt.RETRY_SAYS) == retry
    assert all(fmt.OUTCOMES[a] == "requested" for a in RequestAnswer if a.accepted)
