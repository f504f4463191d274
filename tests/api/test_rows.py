"""One place turns a job or an attempt into plain data; the REST API and ``manage.py jobs`` use it.

Proves, on rows built in memory (no database): ``rows.job_data`` speaks the domain's words and
keeps Python values; the API's summary and the CLI's list row are both built from it and agree
value for value (each writes times its own way); attempts are the same data on both surfaces;
the API's Literal types list exactly the vocabulary's values; and the API words every answer
the store can give to a cancellation or retry request that found the job.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from django_durable_jobs.api import routes, schemas
from django_durable_jobs.management.commands import _jobs_format as cli
from django_durable_jobs.models import Job, JobAttempt, rows
from django_durable_jobs.rules.values import RequestResult
from django_durable_jobs.rules.vocabulary import (
    AttemptOutcomeChoice,
    JobStatus,
    Ownership,
    RequestAnswer,
    proposal_sha256,
)

NOW = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def running_job() -> Job:
    proposal = '{"n":1}'
    job = Job(
        id=uuid.uuid4(),
        operation="demo.op",
        scope="tenant-a",
        status=JobStatus.RUNNING,
        idempotency_key="k",
        queue="slow",
        priority=3,
        created_at=NOW - timedelta(minutes=5),
        run_after=NOW - timedelta(minutes=5),
        fencing_epoch=2,
        attempts=2,
        progress=40.0,
        owner_id="owner-1",
        claimed_by="worker@host",
        claimed_at=NOW - timedelta(minutes=1),
        heartbeat_at=NOW - timedelta(seconds=10),
        lease_expires_at=NOW + timedelta(seconds=20),
        cancellation_requested_at=NOW,
        proposal=proposal,
        proposal_hash=proposal_sha256(proposal),
    )
    job.ownership = Ownership.CURRENT
    return job


def test_job_data_names_the_columns_in_the_domains_words_and_keeps_python_values():
    job = running_job()
    data = rows.job_data(job)
    assert data["id"] == job.pk and isinstance(data["id"], uuid.UUID)
    assert (data["epoch"], data["attempts"], data["ownership"]) == (2, 2, Ownership.CURRENT)
    assert data["lease_expires_at"] == NOW + timedelta(seconds=20)
    assert data["cancellation_requested_at"] == NOW and data["retry_requested_at"] is None
    assert not {"proposal", "checkpoint", "result", "fencing_epoch"} & set(data)


def test_job_columns_are_every_stored_column_with_the_exact_text():
    job = running_job()
    columns = rows.job_columns(job)
    assert set(columns) == {field.attname for field in Job._meta.concrete_fields}
    assert columns["proposal"] == '{"n":1}' and columns["fencing_epoch"] == 2


def test_the_api_summary_and_the_cli_list_row_are_the_same_data():
    job = running_job()
    data = rows.job_data(job)
    api = schemas.JobSummaryOut.model_validate(schemas.summary(job)).model_dump()
    row = cli.list_row(job, NOW)
    for key in ("operation", "scope", "status", "ownership", "epoch", "attempts", "progress"):
        assert api[key] == row[key] == data[key], key
    assert api["id"] == job.pk and row["id"] == str(job.pk)
    assert api["lease"]["claimed_by"] == row["claimed_by"] == "worker@host"
    assert api["lease"]["expires_at"] == data["lease_expires_at"]
    assert row["lease_expires_at"] == data["lease_expires_at"].isoformat()
    assert row["heartbeat_age_seconds"] == 10.0
    requested = api["requests"]["cancellation_requested_at"]
    assert requested.isoformat() == row["cancellation_requested_at"] == NOW.isoformat()


def test_an_attempt_is_the_same_data_on_both_surfaces():
    attempt = JobAttempt(
        epoch=1,
        outcome=AttemptOutcomeChoice.INTERRUPTED,
        owner_id="owner-0",
        claimed_by="old@host",
        started_at=NOW - timedelta(minutes=3),
        ended_at=NOW,
        error="lease expired",
    )
    data = rows.attempt_data(attempt)
    assert schemas.AttemptOut.model_validate(schemas.attempt(attempt)).model_dump() == data
    shown = cli.detail(running_job(), [attempt], NOW)["attempt_history"]
    assert shown == [
        {**data, "started_at": data["started_at"].isoformat(), "ended_at": NOW.isoformat()}
    ]


def test_the_api_literals_are_the_vocabularys_values():
    assert schemas.Status.__args__ == tuple(JobStatus.values)
    assert schemas.Ownership.__args__ == tuple(Ownership.values)
    assert schemas.Outcome.__args__ == tuple(AttemptOutcomeChoice.values)


def test_the_api_words_every_answer_to_a_request_that_found_the_job():
    found = set(RequestAnswer) - {RequestAnswer.NOT_FOUND}
    assert set(routes.CANCEL_SAYS) == found - {RequestAnswer.NOT_ENDED}
    assert set(routes.RETRY_SAYS) == found - {
        RequestAnswer.CANCELLED_NOW,
        RequestAnswer.ALREADY_ENDED,
    }


def test_the_api_answer_body_is_the_result_and_the_job_it_left():
    job = running_job()
    result = RequestResult(RequestAnswer.ALREADY_REQUESTED, job, NOW)
    body = schemas.action(result, "Cancellation requested.")
    assert body["accepted"] is True and body["job"] == schemas.summary(job)
    refused = schemas.action(RequestResult(RequestAnswer.NOT_ENDED, job), "no")
    assert refused["accepted"] is False
