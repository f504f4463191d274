"""A row whose status this app does not know (written outside it) reads like other damaged rows.

It is listed and shown as ``legacy-unknown`` with its stored status and a diagnostic saying so,
on every surface that reads rows, never a 500; nothing can claim, retry or cancel it.
"""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone

from django_durable_jobs.models import Job
from django_durable_jobs.rules.vocabulary import proposal_sha256
from tests.api.support import refused
from tests.support import db_state

pytestmark = pytest.mark.django_db(transaction=True)


def unknown_status_row(scope: str = "red") -> Job:
    """Return a row as another program might write it: a status this app has no word for."""
    now = timezone.now()
    job = Job.objects.create(
        id=uuid.uuid4(),
        operation="tests.noop",
        scope=scope,
        status="zombie",
        idempotency_key="outside",
        proposal="{}",
        proposal_hash=proposal_sha256("{}"),
        proposal_checked=True,  # its input is sound: only the status is foreign
        created_at=now,
        run_after=now,
    )
    return job


def test_the_list_of_the_scope_shows_the_row_as_legacy_unknown(api, red):
    fine = red.defer("tests.noop", red_submission())
    odd = unknown_status_row()
    response = api.get("/jobs")
    assert response.status_code == 200, response.content
    items = {item["id"]: item for item in response.json()["items"]}
    assert set(items) == {str(fine.pk), str(odd.pk)}
    assert items[str(odd.pk)]["status"] == "zombie"
    assert items[str(odd.pk)]["ownership"] == "legacy-unknown"


def test_the_row_and_its_attempts_are_shown_with_a_diagnostic(api):
    odd = unknown_status_row()
    response = api.get(f"/jobs/{odd.pk}")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["status"], body["ownership"]) == ("zombie", "legacy-unknown")
    assert "zombie" in body["diagnostic"] and "not one this app" in body["diagnostic"]
    assert api.get(f"/jobs/{odd.pk}/attempts").status_code == 200


def test_filters_still_answer(api):
    unknown_status_row()
    for query in ({"ownership": "legacy-unknown"}, {"status": "pending"}):
        response = api.get("/jobs", **query)
        assert response.status_code == 200, response.content
    ids = [
        item["ownership"] for item in api.get("/jobs", ownership="legacy-unknown").json()["items"]
    ]
    assert ids == ["legacy-unknown"]


def test_a_retry_is_refused_and_changes_nothing(api):
    odd = unknown_status_row()
    before = db_state()
    body = refused(api.post(f"/jobs/{odd.pk}/retry"), 409, "E_JOB_NOT_RECLAIMABLE", before)
    assert "triage it by hand" in body["message"]


def test_a_cancellation_is_only_recorded_as_a_request(api):
    # As on a legacy running row: whoever runs it may honour the request; the status stays.
    odd = unknown_status_row()
    response = api.post(f"/jobs/{odd.pk}/cancel")
    assert response.status_code == 200, response.content
    assert response.json()["job"]["status"] == "zombie"
    row = Job.objects.get(pk=odd.pk)
    assert row.status == "zombie" and row.cancellation_requested_at is not None


def test_the_cli_lists_and_shows_it(capsys):
    from django.core.management import call_command

    odd = unknown_status_row()
    call_command("jobs", "list")
    assert str(odd.pk) in capsys.readouterr().out
    call_command("jobs", "show", str(odd.pk))
    out = capsys.readouterr().out
    assert "zombie" in out and "legacy-unknown" in out


def red_submission():
    from tests.support import submission

    return submission(key="fine", scope="red")
