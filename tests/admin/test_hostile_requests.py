"""Requests no form of the admin would send answer 4xx or a page, never a 500, on every database.

A NUL byte in a filter, a search or an object id reaches PostgreSQL's driver as a string literal
it refuses (SQLite and MariaDB just find nothing): the admin refuses it first, the same way on
all three. A job whose stored proposal, checkpoint or result is not JSON (a row written outside
the app) is exactly the row triage opens: its page shows the stored text and says it is not JSON.
"""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone

from django_durable_jobs.models import Job
from django_durable_jobs.rules.vocabulary import proposal_sha256
from tests.support import db_state

pytestmark = pytest.mark.django_db(transaction=True)

ADMIN = "/admin/durable_jobs"
LISTS = ["job", "jobattempt", "workerprocess", "schedule", "apitoken"]


def broken_row(**fields) -> Job:
    now = timezone.now()
    values = {
        "id": uuid.uuid4(),
        "operation": "legacy.import",
        "scope": "default",
        "status": "failed",
        "idempotency_key": str(uuid.uuid4()),
        "proposal": "{}",
        "proposal_hash": proposal_sha256("{}"),
        "created_at": now,
        "run_after": now,
        "completed_at": now,
        "error": "imported",
        **fields,
    }
    return Job.objects.create(**values)


@pytest.mark.parametrize("model", LISTS)
@pytest.mark.parametrize(
    "query",
    ["q=%00", "q=a%00b", "scope__exact=%00", "operation=%00", "o=%00", "%00=1", "p=%00"],
)
def test_a_nul_byte_in_a_list_query_is_a_bad_request(root, model, query):
    before = db_state()
    response = root.get(f"{ADMIN}/{model}/?{query}")
    assert response.status_code in (200, 302, 400), response.content[:500]
    if response.status_code == 400:
        assert b"NUL" in response.content
    assert db_state() == before


@pytest.mark.parametrize("model", LISTS)
def test_a_nul_byte_in_an_object_id_finds_nothing(root, model):
    for suffix in ("change/", "history/"):
        response = root.get(f"{ADMIN}/{model}/a%00b/{suffix}")
        assert response.status_code in (302, 404), (suffix, response.status_code)


def test_a_nul_byte_in_a_selected_action_row_changes_nothing(root):
    job = broken_row()
    before = db_state()
    response = root.post(
        f"{ADMIN}/job/",
        {"action": "request_retry", "_selected_action": ["a\x00b", str(job.pk)]},
    )
    assert response.status_code in (200, 302, 400), response.content[:500]
    assert db_state() == before


@pytest.mark.parametrize(
    "fields",
    [
        {"proposal": "not json {", "proposal_hash": proposal_sha256("not json {")},
        {"checkpoint": "{'single': 'quotes'}"},
        {"result": "<html>oops</html>"},
        {"proposal": None, "proposal_hash": ""},
        {"status": "zombie", "completed_at": None},
    ],
    ids=["proposal", "checkpoint", "result", "no-proposal", "unknown-status"],
)
def test_a_job_page_shows_a_row_whose_payloads_are_not_json(root, fields):
    job = broken_row(**fields)
    response = root.get(f"{ADMIN}/job/{job.pk}/change/")
    assert response.status_code == 200
    page = response.content.decode()
    for name in ("proposal", "checkpoint", "result"):
        stored = fields.get(name)
        if stored:
            assert "not valid JSON (see stored text)" in page
    if fields.get("status") == "zombie":
        assert "not one this app knows" in page
    listed = root.get(f"{ADMIN}/job/")
    assert listed.status_code == 200 and str(job.pk) in listed.content.decode()
